"""Fake devices seen in the statistics: could a snapshot come from a genuine population?

* :mod:`~kvldp.common.untrusted.poisoning_states` — unbiased per-key state shares of every
  key-value mechanism, with their standard errors;
* :mod:`~kvldp.common.untrusted.poisoning` — the population-level poisoning tests run
  after every refit.

The per-report defences a mechanism applies itself lie below the mechanisms: the
plausibility rule (:mod:`kvldp.common.channel.plausibility`) and the robust estimator
(:mod:`kvldp.common.estimation.robust`). May import :mod:`kvldp.common.mechanisms` and
every room below it, never :mod:`kvldp.common.config`, which shares its row
(``pyproject.toml``, ``[tool.importlinter]``, holds the order of the rooms).
"""
