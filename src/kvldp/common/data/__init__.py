"""The forms data takes through a mechanism: users' input, reports and statistics.

* :mod:`~kvldp.common.data.kvdata` — users' key-value pairs in compressed sparse rows, the
  input of every client perturbation;
* :mod:`~kvldp.common.data.schema` — the fields of a mechanism's report payload and
  columnar report batches, validated row by row;
* :mod:`~kvldp.common.data.stats` — additive sufficient statistics, what the aggregator
  keeps per partition and window.

May import only the modules beneath every room (:mod:`kvldp.common.errors`,
:mod:`kvldp.common.typed_fields`, :mod:`kvldp.common.primitives`); every room above may
import it (``pyproject.toml``, ``[tool.importlinter]``, holds the order of the rooms).
"""
