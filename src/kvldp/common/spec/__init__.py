"""The declared settings of a collection: every field its file may hold, and their readers.

* :mod:`~kvldp.common.spec.collection_spec` — every field of a collection file besides the
  mechanism parameters, declared once;
* :mod:`~kvldp.common.spec.params` — the parameters each mechanism declares;
* :mod:`~kvldp.common.spec.privacy` — the ``[privacy]`` table and the spending rule;
* :mod:`~kvldp.common.spec.collection_fields` — the error an invalid collection file
  raises and the readers of its typed fields.

They sit below the mechanisms, which declare their parameters with
:mod:`~kvldp.common.spec.params` and read durations with the ``[privacy]`` table's rule;
the collection itself takes a mechanism and is :mod:`kvldp.common.config`'s. May import
:mod:`kvldp.common.data`, :mod:`kvldp.common.files` and the modules beneath every room
(:mod:`kvldp.common.errors`, :mod:`kvldp.common.typed_fields`,
:mod:`kvldp.common.primitives`), never :mod:`kvldp.common.estimation` or
:mod:`kvldp.common.channel`, which share its row (``pyproject.toml``,
``[tool.importlinter]``, holds the order of the rooms).
"""
