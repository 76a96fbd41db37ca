"""kvldp's pure library: LDP key-value mechanisms, their sufficient statistics and estimators.

It opens no connection and starts no thread or process, and it touches only the files a
caller names: it reads the collection file
(:func:`kvldp.common.config.collection_file.load_collection`), replaces a state file atomically
for the callers that keep state — the aggregator's checkpoint and a device's privacy
state (:func:`kvldp.common.files.atomic_file.write_atomically`) — and the recording format
works on streams the caller opened. It imports only numpy and msgpack besides the
standard library, so that it runs on a device. The one abstraction is
:class:`kvldp.common.mechanisms.base.Mechanism` (client perturbation + additive statistics
+ estimators + exact privacy model); every mechanism of ``docs/mechanisms.md`` is one
module under ``kvldp/common/mechanisms``.

Its other modules live in rooms by concern, one subpackage each, whose docstring says
what the room holds and which rooms it may import: a room imports only the rooms
below it (``docs/architecture.md``, *Inside kvldp.common*), which ``lint-imports``
checks. Beneath every room lie :mod:`kvldp.common.errors`,
:mod:`kvldp.common.typed_fields` and :mod:`kvldp.common.primitives`.
"""
