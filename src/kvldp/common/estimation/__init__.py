"""From statistics to estimates: what every estimator shares, whatever the mechanism.

* :mod:`~kvldp.common.estimation.estimate` — an estimator's result: per-key frequency and
  mean, each with a standard error;
* :mod:`~kvldp.common.estimation.variance` — variance algebra: quadratic forms and the
  delta method;
* :mod:`~kvldp.common.estimation.intervals` — 95% intervals that keep their coverage where
  a point estimate is clipped;
* :mod:`~kvldp.common.estimation.clipped_normal` — the error of a normal estimate clipped
  into its parameter's range;
* :mod:`~kvldp.common.estimation.simplex` — Norm-Sub, the projection onto the simplex;
* :mod:`~kvldp.common.estimation.shrinkage` — empirical-Bayes shrinkage across keys;
* :mod:`~kvldp.common.estimation.robust` — the arithmetic of the ``robust`` estimator of
  key-sampled mechanisms;
* :mod:`~kvldp.common.estimation.em` — count-based maximum likelihood;
* :mod:`~kvldp.common.estimation.conditional` — conditional key-value queries, parsed,
  answered from cell-set counts and computed exactly on a population.

A mechanism supplies the statistics, likelihoods and counts; nothing here knows one. May
import :mod:`kvldp.common.data`, :mod:`kvldp.common.files` and the modules beneath every
room (:mod:`kvldp.common.errors`, :mod:`kvldp.common.typed_fields`,
:mod:`kvldp.common.primitives`), never :mod:`kvldp.common.channel` or
:mod:`kvldp.common.spec`, which share its row (``pyproject.toml``,
``[tool.importlinter]``, holds the order of the rooms).
"""
