"""kvldp's pure library: LDP key-value mechanisms, their sufficient statistics and estimators.

It opens no connection, starts no thread or process and keeps no file: the one file it
reads is the collection file a caller names (:func:`kvldp.common.collection_file.load_collection`),
and the recording format works on streams the caller opened. It imports only numpy and
msgpack besides the standard library, so that it runs on a device. The one abstraction is
:class:`kvldp.common.mechanisms.base.Mechanism` (client perturbation + additive statistics
+ estimators + exact privacy model); every mechanism of ``docs/mechanisms.md`` is one
module under ``kvldp/common/mechanisms``.
"""
