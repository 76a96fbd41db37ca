"""``kvldp bench gateway``: reports per second through ``kvldp gateway`` into Kafka.

Everything runs on an embedded broker. The gateway runs as a child process
(``kvldp gateway``), and so does the baseline, an aiohttp endpoint of the same framework
that only forwards each body to an aiokafka producer with the gateway's producer
settings (:mod:`kvldp.bench.bare_endpoint`). This process is the load: ``clients``
concurrent keep-alive HTTP clients (one connection each) post single-report messages,
encoded beforehand as the SDK encodes them, each client as its own device with its own
token, until ``requests`` have been answered. Four measurements:

* throughput — bare and gateway runs alternate ``repeats`` times; the row gives the
  median rate of each side and their ratio, the median CPU time the server process
  spent per request (from ``/proc/<pid>/task/*/schedstat`` around each run) and
  the ratio of the two (``capacity_ratio``: the rates each server reaches when it has a
  core to itself, the figure the target is judged on), and p50 / p99 latency over every
  request of that side. The wall-clock rate depends on how much of the machine the
  load, the broker and the server get (on a shared machine, whether another process
  holds a core); the CPU time per request depends on it much less;
* connections — the gateway's resident memory (``VmRSS`` in ``/proc/<pid>/status``)
  after a warm-up, and again with ``connections`` more keep-alive connections open, each
  having made one request (``GET /healthz``);
* hostile — well-behaved clients (each cycling through devices that stay within the
  per-device rate) run once alone and once while attackers send malformed bodies,
  oversized bodies, bad and expired tokens, one device floods past its rate limit and
  slow clients trickle their request heads; the rows give the well-behaved clients'
  rate and non-202 answers in both runs, and how fast and with what the attackers
  were answered.

The attackers share this process's event loop with the well-behaved clients, so part
of a slowdown under attack is the load generator's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from kvldp.aggregator.topics import ensure_topics
from kvldp.bench.kafka_throughput import bench_collection
from kvldp.broker.tansu import EmbeddedBroker
from kvldp.common.config.collection import Collection
from kvldp.common.config.collection_file import collection_toml
from kvldp.common.errors import KvldpError
from kvldp.common.messages.wire import WireFormat
from kvldp.gateway.signing import PrivateKey, generate, load_private_key, sign_token
from kvldp.kafka.client_config import KafkaConfig
from kvldp.sim import simulate

#: kvldp's gateway throughput target (gateway rate / bare endpoint rate)
GATEWAY_RATIO_TARGET = 0.8
AUDIENCE = "kvldp-bench"
MSGPACK = "application/msgpack"
#: seconds a child process has to print its address
START_S = 60.0
#: per-device rate and burst of the hostile run, and devices per well-behaved client
#: (each client cycles through its devices, so none of them exceeds the rate)
HOSTILE_RATE = 100
DEVICES_PER_CLIENT = 16
#: attackers of each kind, and the slow clients holding connections
ATTACKERS = 2
SLOW_CLIENTS = 50
#: seconds between two bytes of a slow client's request head
SLOW_BYTE_S = 0.5

GATEWAY_COLUMNS = [
    "case",
    "clients",
    "requests_per_s",
    "ratio",
    "cpu_us_per_request",
    "capacity_ratio",
    "p50_ms",
    "p99_ms",
    "target",
    "met",
]
MEMORY_COLUMNS = ["case", "connections", "rss_mib", "per_connection_kib"]
HOSTILE_COLUMNS = ["case", "requests_per_s", "ratio", "errors", "answers"]


@dataclass
class Child:
    """A server process that prints ``NAME=URL`` once it serves."""

    argv: list[str]
    proc: subprocess.Popen[str] | None = None
    url: str = ""

    def start(self) -> Child:
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if "=" not in line:
            self.stop()
            raise RuntimeError(f"{self.argv[3]} did not start: {line or 'no address printed'}")
        self.url = line.split("=", 1)[1]
        return self

    def cpu_seconds(self) -> float:
        """CPU time the process's threads have run, in nanoseconds' resolution (the first
        field of each ``/proc/<pid>/task/<tid>/schedstat``)."""
        assert self.proc is not None
        total = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that has just ended
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9

    def rss_bytes(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@contextlib.contextmanager
def running(child: Child) -> Iterator[Child]:
    child.start()
    try:
        yield child
    finally:
        child.stop()


@dataclass
class Setup:
    """The collection, its files, the signing key and the pre-encoded bodies."""

    collection: Collection
    bootstrap: str
    workdir: Path
    key: PrivateKey
    kid: str
    jwks: Path
    toml: Path
    bodies: list[bytes]
    tokens: dict[str, str] = field(default_factory=dict)

    def token(self, device: str) -> str:
        if device not in self.tokens:
            self.tokens[device] = sign_token(self.key, self.kid, device, AUDIENCE, 3600)
        return self.tokens[device]

    def gateway(self, *flags: str) -> Child:
        argv = [sys.executable, "-P", "-m", "kvldp", "gateway", "--collection", str(self.toml)]
        argv += ["--jwks", str(self.jwks), "--audience", AUDIENCE, "--port", "0"]
        return Child([*argv, "--bootstrap-servers", self.bootstrap, *flags])

    def bare(self) -> Child:
        size = max(self.collection.aggregate.max_message_bytes * 2, 1 << 20)
        module = "kvldp.bench.bare_endpoint"
        topic = self.collection.reports_topic
        return Child([sys.executable, "-P", "-m", module, self.bootstrap, topic, str(size)])

    @property
    def path(self) -> str:
        return f"/v1/collections/{self.collection.name}/reports"


def _bodies(collection: Collection, count: int, seed: int) -> list[bytes]:
    """``count`` single-report messages as the SDK encodes them."""
    users = simulate.simulate(collection, "gaussian", count, seed)
    batch = collection.mechanism.perturb_many(users, np.random.default_rng(seed))
    rids = np.random.default_rng([seed, 1]).integers(1, 2**64, size=count, dtype=np.uint64)
    return WireFormat(collection).encode_many(batch, int(time.time() * 1000), rids)


@dataclass
class Load:
    """What one load run measured."""

    rate: float
    latencies: list[float]
    answers: Counter[int]
    #: CPU seconds the server process spent per request (0 when not measured)
    server_cpu: float = 0.0


async def load(
    url: str, bodies: list[bytes], clients: int, requests: int, auth: Callable[[int, int], dict[str, str]]
) -> Load:
    """``clients`` keep-alive clients post ``requests`` bodies; ``auth(client, n)`` gives
    the headers of a client's ``n``-th request."""
    latencies: list[float] = []
    answers: Counter[int] = Counter()
    left = [requests]

    async def client(session: aiohttp.ClientSession, index: int) -> None:
        n = 0
        while left[0] > 0:
            left[0] -= 1
            body = bodies[(index + n * clients) % len(bodies)]
            headers = {"Content-Type": MSGPACK, **auth(index, n)}
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
            latencies.append(time.perf_counter() - started)
            answers[response.status] += 1
            n += 1

    connector = aiohttp.TCPConnector(limit=clients, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(session, i) for i in range(clients)))
        elapsed = time.perf_counter() - start
    return Load(requests / elapsed, latencies, answers)


def _ms(latencies: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(latencies), q) * 1000)


async def _throughput(setup: Setup, clients: int, requests: int, repeats: int) -> list[dict[str, Any]]:
    with running(setup.bare()) as bare, running(setup.gateway("--device-rate", "1e9")) as gateway:
        bare_url, gateway_url = bare.url + "/", gateway.url + setup.path
        tokens = [{"Authorization": f"Bearer {setup.token(f'dev-{i}')}"} for i in range(clients)]

        def auth(index: int, n: int) -> dict[str, str]:
            return tokens[index]

        async def measured(server: Child, url: str, count: int) -> Load:
            before = server.cpu_seconds()
            run = await load(url, setup.bodies, clients, count, auth)
            run.server_cpu = (server.cpu_seconds() - before) / count
            return run

        warm = max(clients * 4, requests // 10)
        await measured(bare, bare_url, warm)
        await measured(gateway, gateway_url, warm)
        runs: dict[str, list[Load]] = {"bare endpoint": [], "gateway": []}
        for _ in range(repeats):
            runs["bare endpoint"].append(await measured(bare, bare_url, requests))
            runs["gateway"].append(await measured(gateway, gateway_url, requests))
    rows = []
    bare_rate = statistics.median(r.rate for r in runs["bare endpoint"])
    bare_cpu = statistics.median(r.server_cpu for r in runs["bare endpoint"])
    for case, side in runs.items():
        rate = statistics.median(r.rate for r in side)
        cpu = statistics.median(r.server_cpu for r in side)
        latencies = [x for r in side for x in r.latencies]
        answers: Counter[int] = sum((r.answers for r in side), Counter())
        if set(answers) != {202}:
            raise RuntimeError(f"the {case} answered {dict(answers)}: every request should be accepted")
        ratio = rate / bare_rate
        capacity = bare_cpu / cpu
        rows.append(
            {
                "case": case,
                "clients": clients,
                "requests_per_s": rate,
                "ratio": ratio,
                "cpu_us_per_request": cpu * 1e6,
                "capacity_ratio": capacity,
                "p50_ms": _ms(latencies, 0.5),
                "p99_ms": _ms(latencies, 0.99),
                "target": f"capacity_ratio >= {GATEWAY_RATIO_TARGET}" if case == "gateway" else "",
                "met": capacity >= GATEWAY_RATIO_TARGET if case == "gateway" else "",
                "runs": [r.rate for r in side],
                "cpu_us_runs": [r.server_cpu * 1e6 for r in side],
            }
        )
    return rows


async def _exchange(port: int) -> asyncio.StreamWriter:
    """A keep-alive connection that has made one request (its writer keeps it open)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)
    return writer


def allow_descriptors(connections: int) -> None:
    """Raise this process's open-file limit for ``connections`` client sockets (one line
    naming the hard limit when it is too low)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + 256
    if hard != resource.RLIM_INFINITY and hard < wanted:
        raise KvldpError(
            f"--connections {connections} needs an open-file limit of {wanted}; the hard limit is {hard}"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))


async def _connections(setup: Setup, connections: int) -> list[dict[str, Any]]:
    flags = ("--device-rate", "1e9", "--max-connections", str(connections + 64))
    with running(setup.gateway(*flags)) as gateway:
        port = int(gateway.url.rsplit(":", 1)[1])
        token = {"Authorization": f"Bearer {setup.token('dev-0')}"}
        await load(gateway.url + setup.path, setup.bodies, 4, 2_000, lambda i, n: token)
        idle = gateway.rss_bytes()
        writers: list[asyncio.StreamWriter] = []
        try:
            for start in range(0, connections, 250):
                batch = range(start, min(connections, start + 250))
                writers += await asyncio.gather(*(_exchange(port) for _ in batch))
            loaded = gateway.rss_bytes()
        finally:
            for writer in writers:
                writer.close()
    return [
        {"case": "after warm-up", "connections": 0, "rss_mib": idle / 2**20, "per_connection_kib": ""},
        {
            "case": "keep-alive connections open",
            "connections": connections,
            "rss_mib": loaded / 2**20,
            "per_connection_kib": (loaded - idle) / connections / 1024,
        },
    ]


@dataclass
class Attack:
    """The attackers' answers, counted by kind and status."""

    answers: Counter[str] = field(default_factory=Counter)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    started: float = field(default_factory=time.perf_counter)
    seconds: float = 0.0

    async def repeat(self, kind: str, once: Callable[[], Awaitable[int]]) -> None:
        while not self.stop.is_set():
            try:
                status = await once()
            except (TimeoutError, aiohttp.ClientError, OSError):
                status = 0  # the gateway closed the connection
            self.answers[f"{kind} {status}"] += 1


async def _post_once(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]) -> int:
    async with session.post(url, data=body, headers={"Content-Type": MSGPACK, **headers}) as response:
        await response.read()
        return response.status


async def _slow_client(port: int, stop: asyncio.Event) -> None:
    """A client that trickles its request head a byte at a time until the gateway gives up."""
    head = b"POST /v1/collections/x/reports HTTP/1.1\r\nHost: bench\r\n" + b"X-Slow: " + b"a" * 4096
    with contextlib.suppress(OSError):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for byte in head:
                if stop.is_set():
                    return
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(SLOW_BYTE_S)
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def attacking(setup: Setup, url: str) -> AsyncIterator[Attack]:
    """Every kind of hostile client, until the block ends."""
    attack = Attack()
    port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    good = {"Authorization": f"Bearer {setup.token('attacker')}"}
    expired_token = sign_token(setup.key, setup.kid, "expired", AUDIENCE, 60, time.time() - 3600)
    expired = {"Authorization": f"Bearer {expired_token}"}
    flood = {"Authorization": f"Bearer {setup.token('flooder')}"}
    bad = {"Authorization": "Bearer not.a.token"}
    rng = np.random.default_rng(0)
    junk = [rng.bytes(64) for _ in range(16)]
    oversized = b"\0" * (setup.collection.aggregate.max_message_bytes * 4)
    body = setup.bodies[0]
    async with aiohttp.ClientSession() as session:
        kinds: list[tuple[str, Callable[[], Awaitable[int]]]] = [
            ("malformed", lambda: _post_once(session, url, junk[int(rng.integers(16))], good)),
            ("oversized", lambda: _post_once(session, url, oversized, good)),
            ("bad token", lambda: _post_once(session, url, body, bad)),
            ("expired token", lambda: _post_once(session, url, body, expired)),
            ("flood", lambda: _post_once(session, url, body, flood)),
        ]
        tasks = [asyncio.create_task(attack.repeat(k, f)) for k, f in kinds for _ in range(ATTACKERS)]
        tasks += [asyncio.create_task(_slow_client(port, attack.stop)) for _ in range(SLOW_CLIENTS)]
        try:
            yield attack
        finally:
            attack.stop.set()
            attack.seconds = time.perf_counter() - attack.started
            await asyncio.gather(*tasks)


async def _hostile(setup: Setup, clients: int, requests: int) -> list[dict[str, Any]]:
    flags = ("--device-rate", str(HOSTILE_RATE), "--device-burst", str(HOSTILE_RATE))
    with running(setup.gateway(*flags)) as gateway:
        url = gateway.url + setup.path
        tokens = [
            [{"Authorization": f"Bearer {setup.token(f'good-{c}-{d}')}"} for d in range(DEVICES_PER_CLIENT)]
            for c in range(clients)
        ]

        def auth(index: int, n: int) -> dict[str, str]:
            return tokens[index][n % DEVICES_PER_CLIENT]

        await load(url, setup.bodies, clients, clients * 4, auth)
        calm = await load(url, setup.bodies, clients, requests, auth)
        async with attacking(setup, url) as attack:
            hostile = await load(url, setup.bodies, clients, requests, auth)
    rows = []
    for case, run in (("well-behaved alone", calm), ("well-behaved under attack", hostile)):
        rows.append(
            {
                "case": case,
                "requests_per_s": run.rate,
                "ratio": run.rate / calm.rate,
                "errors": sum(n for status, n in run.answers.items() if status != 202),
                "answers": ", ".join(f"{s}: {n}" for s, n in sorted(run.answers.items())),
            }
        )
    rows.append(
        {
            "case": "attackers (slow clients not counted)",
            "requests_per_s": attack.answers.total() / attack.seconds,
            "ratio": "",
            "errors": "",
            "answers": ", ".join(f"{k}: {n}" for k, n in sorted(attack.answers.items())),
        }
    )
    return rows


async def _gateway_bench(
    setup: Setup, clients: int, requests: int, connections: int, repeats: int
) -> dict[str, list[dict[str, Any]]]:
    await ensure_topics(KafkaConfig.plaintext(setup.bootstrap), setup.collection)
    return {
        "throughput": await _throughput(setup, clients, requests, repeats),
        "memory": await _connections(setup, connections),
        "hostile": await _hostile(setup, clients, requests),
    }


def bench_gateway(
    clients: int = 16, requests: int = 10_000, connections: int = 10_000, repeats: int = 15, seed: int = 0
) -> dict[str, list[dict[str, Any]]]:
    """The three tables of ``kvldp bench gateway`` (see the module docstring)."""
    allow_descriptors(connections)
    collection = bench_collection("gateway")
    with EmbeddedBroker(0) as broker, tempfile.TemporaryDirectory(prefix="kvldp-bench-gateway-") as tmp:
        workdir = Path(tmp)
        generate(workdir)
        key, kid = load_private_key(workdir / "private.pem")
        toml = workdir / "collection.toml"
        toml.write_text(collection_toml(collection))
        setup = Setup(
            collection,
            broker.bootstrap_servers,
            workdir,
            key,
            kid,
            workdir / "jwks.json",
            toml,
            _bodies(collection, min(requests, 20_000), seed),
        )
        return asyncio.run(_gateway_bench(setup, clients, requests, connections, repeats))
