"""A mechanism seen as a channel Pr[z | x]: what is computed from its output distribution.

* :mod:`~kvldp.common.channel.output_model` — the exact output model a mechanism declares
  for the privacy audit;
* :mod:`~kvldp.common.channel.plausibility` — the exact one-report plausibility rule, from
  the largest likelihood of each report;
* :mod:`~kvldp.common.channel.instantaneous` — instantaneous randomization: a second
  channel applied to every send of a memoized report.

A mechanism declares its channel with these; nothing here knows one. May import
:mod:`kvldp.common.data`, :mod:`kvldp.common.files` and the modules beneath every room
(:mod:`kvldp.common.errors`, :mod:`kvldp.common.typed_fields`,
:mod:`kvldp.common.primitives`), never :mod:`kvldp.common.estimation` or
:mod:`kvldp.common.spec`, which share its row (``pyproject.toml``,
``[tool.importlinter]``, holds the order of the rooms).
"""
