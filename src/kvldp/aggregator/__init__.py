"""The service side of kvldp: consume a collection's reports from Kafka, fold them into
additive statistics, checkpoint, refit estimates on a timer and export them.

:class:`~kvldp.aggregator.service.Aggregator` is the service (``kvldp aggregate``);
:mod:`~kvldp.aggregator.offline` folds a recording without Kafka. The package imports
only :mod:`kvldp.common` besides aiokafka and prometheus-client, never the device SDK.
"""
