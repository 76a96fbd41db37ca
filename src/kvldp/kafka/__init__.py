"""kvldp's Kafka clients: their settings, how they start, and the commands' Kafka flags.

:mod:`~kvldp.kafka.client_config` reads a client properties file (the format cluster
providers hand out) into the keyword arguments of every aiokafka client kvldp makes,
through :mod:`~kvldp.kafka.properties_file`, which reads the file by Java's rules;
:mod:`~kvldp.kafka.client_start` starts a client and says in one line why it could not;
:mod:`~kvldp.kafka.topic_partitions` asks the cluster how many partitions a topic has;
:mod:`~kvldp.kafka.main_loop` runs a command's Kafka work until Ctrl-C;
:mod:`~kvldp.kafka.command_line` holds ``--kafka-config``, ``-X`` and
``--bootstrap-servers``. A running service watches its cluster with
:mod:`~kvldp.kafka.reachability` and closes its clients within its grace period with
:mod:`~kvldp.kafka.shutdown`. The device SDK, the aggregator and the tools all reach Kafka
through this package; it imports only :mod:`kvldp.common` besides aiokafka,
javaproperties and (for the services' reachability metrics) prometheus-client.
"""
