"""What crosses Kafka: report messages, the control record and recordings of both.

* :mod:`~kvldp.common.messages.wire` — the wire format: versioned msgpack, one report per
  message or a columnar batch;
* :mod:`~kvldp.common.messages.layout` — the canonical byte layout of a single-report
  message, for vectorised encoding and decoding;
* :mod:`~kvldp.common.messages.message_rules` — which collections take one report per
  message;
* :mod:`~kvldp.common.messages.control_record` — the control record of an interactive
  collection: the open round and its published means;
* :mod:`~kvldp.common.messages.recording` — the recording file: raw report messages with
  their Kafka metadata, for replay.

May import :mod:`kvldp.common.config`, :mod:`kvldp.common.untrusted` and every room below
them, never :mod:`kvldp.common.guarantees`, which shares its row (``pyproject.toml``,
``[tool.importlinter]``, holds the order of the rooms).
"""
