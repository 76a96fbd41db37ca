"""The baseline of ``kvldp bench gateway``: an aiohttp endpoint that only forwards bodies.

``POST /`` hands the request body to an ``AIOKafkaProducer`` with the gateway's producer
settings (``acks=all``, no idempotence, ``linger_ms=0``, the same request size and
timeout), waits for the acknowledgement and answers 202; it checks nothing. It runs as
a child process, as the gateway does, so that both are measured the same way:
``python -m kvldp.bench.bare_endpoint BOOTSTRAP TOPIC MAX_REQUEST_BYTES`` prints
``bare=http://127.0.0.1:PORT`` once it serves, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys

from aiohttp import web
from aiokafka import AIOKafkaProducer

#: the gateway's produce timeout (``GatewaySettings.produce_timeout``)
TIMEOUT_S = 10.0


async def serve(bootstrap: str, topic: str, max_request_size: int) -> None:
    """Serve until SIGTERM (see the module docstring)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="kvldp-bench-bare-endpoint",
        acks="all",
        enable_idempotence=False,
        linger_ms=0,
        max_request_size=max_request_size,
        request_timeout_ms=int(TIMEOUT_S * 1000),
    )
    await producer.start()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        delivery = await producer.send(topic, value=body)
        await delivery
        return web.json_response({"accepted": 1}, status=202)

    app = web.Application(client_max_size=max_request_size)
    app.router.add_post("/", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    await web.SockSite(runner, listener, backlog=1024).start()
    port = listener.getsockname()[1]
    print(f"bare=http://127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2], int(sys.argv[3])))
