"""What one client may ask of a kvldp HTTP endpoint: sizes, times and connections.

The defaults fit a metrics endpoint scraped by a few Prometheus servers; an endpoint that
takes request bodies raises ``max_body``. Every limit is enforced on the socket, against
clients that send too much, too slowly, or too many connections:

* sizes — the request line (method, path and query) and each header line are at most
  ``max_line_size`` and ``max_field_size`` bytes, a request has at most ``max_headers``
  headers (aiohttp's parser answers 400 and closes), and a body is at most ``max_body``
  bytes (413 and closed; 0 refuses every body);
* times — a client delivers its complete request head (after the TLS handshake, if any)
  within ``head_timeout`` seconds of connecting, or of the first byte of a later request
  on a kept-alive connection; from a complete head to the response handed to the socket
  (reading a body, answering, writing to a slow reader) takes at most
  ``response_timeout``; an idle kept-alive connection is closed after
  ``keepalive_timeout``. A connection past any of these is cut, whatever it sends;
* connections — at most ``max_connections`` are open at once. A connection beyond that
  is closed as soon as it is accepted, unless an idle kept-alive one can make room;
* shutdown — closing the server gives answers in flight ``shutdown_grace`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Limits:
    """The limits of one endpoint (see the module docstring for what each one bounds)."""

    max_line_size: int = 8190
    max_field_size: int = 8190
    max_headers: int = 32
    max_body: int = 0
    head_timeout: float = 10.0
    response_timeout: float = 30.0
    keepalive_timeout: float = 75.0
    max_connections: int = 100
    shutdown_grace: float = 2.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if value < 0 or (value == 0 and field.name != "max_body"):
                raise ValueError(f"limit {field.name} must be positive, not {value}")
