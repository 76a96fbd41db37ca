"""The HTTP(S) ingestion gateway: devices post reports, the gateway produces them to Kafka.

A device that cannot be given Kafka credentials (a phone, a browser, an IoT device) posts
the bytes the SDK would publish as one Kafka record to ``POST
/v1/collections/{name}/reports`` with a bearer JWT. The gateway verifies the token
(:mod:`kvldp.gateway.tokens`), rate-limits the device (:mod:`kvldp.gateway.rate_limit`),
validates the body with the aggregator's own decoder (:mod:`kvldp.gateway.validation`),
produces it keyed by the token's subject (:mod:`kvldp.gateway.forwarder`) and answers
once Kafka has acknowledged it (:mod:`kvldp.gateway.routes`, :mod:`kvldp.gateway.endpoint`).
It holds no state but a bounded rate table, so any number of gateways run side by side.
This package imports :mod:`kvldp.common`, :mod:`kvldp.kafka` and :mod:`kvldp.web`.
"""
