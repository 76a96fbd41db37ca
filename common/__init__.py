"""kvldp's pure library: LDP key-value mechanisms, their sufficient statistics and estimators.

Nothing in this package performs I/O; it imports only numpy and msgpack so that it
can run on a device. The one abstraction is :class:`kvldp.common.mechanisms.base.Mechanism`
(client perturbation + additive statistics + estimators + exact privacy model); every
mechanism of ``shared/spec/MECHANISMS.md`` is one module under ``common/mechanisms``.
"""
