"""The Kafka cluster goes away under running services: each says so once, keeps serving,
resumes when the cluster returns, and stops within its grace period without a traceback.

One Apache Kafka node of this test's own (it is killed twice, which would break every
other test's cluster) serves five real ``kvldp`` processes: an aggregator with
``--state-dir``, one without, a worker with its exporter, and the gateway. Reports are
folded; the node is SIGKILLed; every service logs exactly one line saying Kafka is
unreachable (within :data:`~kvldp.kafka.reachability.DOWN_AFTER_S` plus a probe) and
``kvldp_kafka_reachable`` drops to 0 while ``/metrics`` still answers with the estimates
of before. The node comes back on its ports and storage: every service says so, and the
aggregators fold reports published after the outage. The node is killed again, and
SIGTERM or SIGINT ends every service within :data:`~kvldp.kafka.shutdown.STOP_GRACE_S`
plus the exit of a Python process, with status 0, no traceback, and (``--state-dir``) a
checkpoint holding every report folded.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvldp.aggregator.state import CheckpointStore
from kvldp.broker.apache_kafka import ApacheKafka
from kvldp.common.config.collection import Collection
from kvldp.kafka.reachability import DOWN_AFTER_S, PROBE_INTERVAL_S, PROBE_TIMEOUT_S
from kvldp.kafka.shutdown import STOP_GRACE_S
from kvldp.reliability.processes import AggregatorProcess, Samples, scrape, total
from kvldp.reliability.scenarios.fresh_collection import make_collection
from kvldp.reliability.traffic import publish, report_batches

from support import run_kvldp
from support.gateway_process import GatewayProcess
from support.pipeline import eventually

pytestmark = pytest.mark.asyncio

#: the longest a service may take to say the cluster is gone: the silence it waits for,
#: a probe that times out and the pause between probes, with a second for a busy machine
NOTICE_S = DOWN_AFTER_S + PROBE_TIMEOUT_S + PROBE_INTERVAL_S + 1.0
#: the longest a service may take to exit after SIGTERM/SIGINT: its grace for Kafka work,
#: then the interpreter's own exit (a loaded 2-core machine takes a second or two)
EXIT_S = STOP_GRACE_S + 3.0
#: reports published before the first outage, and after the cluster is back
BEFORE, AFTER = 2_000, 1_000
UNREACHABLE = "unreachable for"
BACK = "answers again"


@dataclass
class Service:
    """One child process: how to read its log and metrics, and which signal ends it."""

    name: str
    log_path: Path
    proc: subprocess.Popen[str]
    port: int
    sig: signal.Signals

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def samples(self) -> Samples:
        return scrape(self.port)

    def said(self, text: str) -> int:
        return sum(text in line for line in self.log().splitlines())


def of(process: AggregatorProcess, sig: signal.Signals) -> Service:
    assert process.proc is not None and process.port is not None
    return Service(process.name, process.log_path, process.proc, process.port, sig)


async def folded(service: Service, count: int) -> bool:
    return total(service.samples(), "kvldp_reports_total") >= count


async def says(service: Service, text: str, times: int) -> bool:
    return service.said(text) == times


async def test_services_outlive_the_cluster_and_stop_cleanly(tmp_path: Path) -> None:
    own: list[Collection] = []
    files: list[Path] = []
    for label, partitions in (("gone-state", 1), ("gone-memory", 1), ("gone-scale", 2)):
        collection, path = make_collection(tmp_path, label, "grr", 16, partitions=partitions)
        own.append(collection)
        files.append(path)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    keygen = run_kvldp("devices", "keygen", "--out", str(tmp_path / "keys"))
    assert keygen.returncode == 0, keygen.stderr
    with ApacheKafka(1) as kafka:
        bootstrap = kafka.bootstrap_servers
        processes = [
            AggregatorProcess(files[0], bootstrap, tmp_path, "aggregator-state", state_dir=state_dir),
            AggregatorProcess(files[1], bootstrap, tmp_path, "aggregator-memory"),
            AggregatorProcess(files[2], bootstrap, tmp_path, "worker", role="worker"),
            AggregatorProcess(files[2], bootstrap, tmp_path, "exporter", role="exporter"),
        ]
        gateway = GatewayProcess(
            [files[0]], tmp_path / "keys" / "jwks.json", "kvldp-gone", bootstrap, tmp_path
        )
        try:
            for process in processes:
                process.start()
            await asyncio.gather(*(process.ready() for process in processes))
            await gateway.start()
            assert gateway.proc is not None
            state, memory, worker, exporter = (
                of(processes[0], signal.SIGTERM),
                of(processes[1], signal.SIGINT),
                of(processes[2], signal.SIGTERM),
                of(processes[3], signal.SIGINT),
            )
            services = [
                state,
                memory,
                worker,
                exporter,
                Service("gateway", gateway.log_path, gateway.proc, gateway.port, signal.SIGTERM),
            ]
            for seed, collection in enumerate(own):
                traffic = report_batches(collection, BEFORE, 10, seed)
                await publish(bootstrap, collection.reports_topic, traffic.messages)
            for service in (state, memory, exporter):
                await eventually(lambda s=service: folded(s, BEFORE), 60, f"{service.name} to fold {BEFORE}")

            # the first outage: said once, metric 0, the estimates still served
            kafka.kill(1)
            killed = time.monotonic()
            for service in services:
                await eventually(
                    lambda s=service: says(s, UNREACHABLE, 1),
                    NOTICE_S + 10,
                    f"{service.name} to say Kafka is unreachable",
                )
            print(f"every service said so {time.monotonic() - killed:.1f} s after the kill")
            for service in services:
                samples = service.samples()
                assert total(samples, "kvldp_kafka_reachable") == 0, service.name
                assert total(samples, "kvldp_kafka_outages_total") == 1, service.name
            for service in (state, memory, exporter):
                samples = service.samples()
                assert total(samples, "kvldp_reports_total") == BEFORE, service.name
                assert total(samples, "kvldp_frequency") > 0, f"{service.name} lost its estimates"

            # the cluster returns: said once, and folding goes on
            kafka.restart(1)
            for service in services:
                await eventually(
                    lambda s=service: says(s, BACK, 1),
                    60,
                    f"{service.name} to say Kafka answers again",
                )
                assert total(service.samples(), "kvldp_kafka_reachable") == 1, service.name
            for seed, collection in enumerate(own):
                traffic = report_batches(collection, AFTER, 10, seed + 10)
                await publish(bootstrap, collection.reports_topic, traffic.messages)
            for service in (state, memory, exporter):
                await eventually(
                    lambda s=service: folded(s, BEFORE + AFTER),
                    90,
                    f"{service.name} to fold the reports sent after the outage",
                )

            # the second outage, then every service is asked to stop
            kafka.kill(1)
            for service in services:
                await eventually(
                    lambda s=service: says(s, UNREACHABLE, 2),
                    NOTICE_S + 10,
                    f"{service.name} to say Kafka is unreachable again",
                )
            asked = time.monotonic()
            for service in services:
                service.proc.send_signal(service.sig)
            codes = await asyncio.gather(
                *(asyncio.to_thread(service.proc.wait, EXIT_S + 30) for service in services)
            )
            took = time.monotonic() - asked
        finally:
            for process in processes:
                process.kill()
            gateway.kill()
    for service, code in zip(services, codes, strict=True):
        log = service.log()
        assert code == 0, (service.name, code, log[-2000:])
        assert "Traceback" not in log, (service.name, log[-3000:])
        assert service.said(UNREACHABLE) == 2 and service.said(BACK) == 1, (service.name, log)
    print(f"the services stopped {took:.1f} s after the signals")
    assert took <= EXIT_S, f"the services took {took:.1f} s to stop, more than {EXIT_S} s"
    loaded = CheckpointStore(state_dir, own[0]).load()
    assert loaded is not None and loaded.reports_total == BEFORE + AFTER
