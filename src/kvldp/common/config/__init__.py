"""A collection: what devices and aggregator share, and the TOML file it is read from.

* :mod:`~kvldp.common.config.collection` — the ``Collection`` devices and aggregator
  share: its digest, its topics, its conditional queries and the normalisation of values;
* :mod:`~kvldp.common.config.collection_file` — a collection file validated into a
  collection, and back;
* :mod:`~kvldp.common.config.aggregate_config` — the ``[aggregate]`` table: how the
  aggregator serves a collection;
* :mod:`~kvldp.common.config.collection_reference` — ``docs/collection.md``, rendered from
  the declarations of :mod:`kvldp.common.spec` and of every mechanism.

May import :mod:`kvldp.common.mechanisms` and every room below it, never
:mod:`kvldp.common.untrusted`, which shares its row (``pyproject.toml``,
``[tool.importlinter]``, holds the order of the rooms).
"""
