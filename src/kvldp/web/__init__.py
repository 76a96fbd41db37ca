"""kvldp's HTTP(S) endpoints: one aiohttp server with limits, shared by every service.

An endpoint hands :class:`kvldp.web.server.WebServer` its routes, its
:class:`kvldp.web.limits.Limits` and its :class:`kvldp.web.security.HttpSecurity` (TLS,
basic auth). The server parses requests with aiohttp and enforces the limits on real
sockets: request line, header and body sizes, a deadline for every phase of a
connection (:mod:`kvldp.web.deadlines`) and a bound on open connections
(:mod:`kvldp.web.listener`). The aggregator's ``/metrics`` endpoint is one such endpoint.
This package imports only :mod:`kvldp.common`, aiohttp and the standard library.
"""
