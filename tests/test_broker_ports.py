"""A port taken by another process between the moment it is found free and the moment a
child binds it: the embedded broker and its TLS proxy never take that process's listener
for their own. Asked for any port they end up on one their own process listens on; asked
for a port another process holds, they fail on one line. Real children throughout (small
Python servers, Tansu, stunnel), against real foreign listeners."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO

import pytest

from kvldp.broker import tansu
from kvldp.broker.child_process import (
    HOST,
    BrokerError,
    PortTaken,
    file_tail,
    free_port,
    listening_ports,
    stop_child,
    wait_listening,
)
from kvldp.broker.stunnel import TlsProxy
from kvldp.broker.tansu import EmbeddedBroker

from support.tls import TlsFiles

#: a child that listens on each port of its arguments (0: one the system chooses), says
#: so, and waits to be stopped; a port it cannot bind ends it with Python's error
SERVER = """
import signal, socket, sys
held = []
for port in sys.argv[1:]:
    s = socket.socket()
    s.bind(("127.0.0.1", int(port)))
    s.listen()
    held.append(s)
print("listening", flush=True)
signal.pause()
"""


@pytest.fixture
def foreign() -> Iterator[socket.socket]:
    """Another process's listener, as far as the children can tell: a listening socket of
    the test's own, which records any connection made to it."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen()
        listener.setblocking(False)
        yield listener


def port_of(listener: socket.socket) -> int:
    return int(listener.getsockname()[1])


def untouched(listener: socket.socket) -> bool:
    """Whether nobody connected to the listener (nobody probed it)."""
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def choose_first(port: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the broker's free-port choice fall on ``port`` first, then on really free
    ones; returns the ports chosen, as they are chosen."""
    chosen: list[int] = []

    def choose(host: str = HOST) -> int:
        chosen.append(port if not chosen else free_port(host))
        return chosen[-1]

    monkeypatch.setattr(tansu, "free_port", choose)
    return chosen


def the_check_saw_it_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's early check of a requested port finds it free: another process takes
    it only afterwards, before the broker binds it."""
    monkeypatch.setattr(tansu, "port_in_use", lambda port, host=HOST: False)


#: a child process and the file its output goes to
Child = tuple[subprocess.Popen[bytes], IO[bytes]]


@pytest.fixture
def child() -> Iterator[Callable[..., Child]]:
    """Starts :data:`SERVER` children (with these ports) and stops them at the end."""
    started: list[Child] = []

    def start(*ports: int) -> Child:
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop_child)
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, *map(str, ports)], stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
        started.append((proc, log))
        return proc, log

    yield start
    for proc, log in started:
        stop_child(proc, log)


# ------------------------------------------------------------ waiting for a child's port
def test_a_child_on_port_0_is_found_on_the_port_it_chose(child: Callable[..., Child]) -> None:
    proc, log = child(0)
    port = wait_listening(proc, log, 0, 20, "the server", lambda: file_tail(log))
    assert port != 0 and listening_ports(proc.pid) == {port}


def test_a_child_on_a_given_port_is_waited_for_on_it(child: Callable[..., Child]) -> None:
    port = free_port()
    proc, log = child(port)
    assert wait_listening(proc, log, port, 20, "the server", lambda: file_tail(log)) == port


def test_a_child_that_could_not_bind_its_port_is_told_from_the_listener_there(
    child: Callable[..., Child], foreign: socket.socket
) -> None:
    """Something accepts connections on the port, but not the child: it exited."""
    proc, log = child(port_of(foreign))
    with pytest.raises(PortTaken) as caught:
        wait_listening(proc, log, port_of(foreign), 20, "the server", lambda: file_tail(log))
    assert str(caught.value) == f"port {port_of(foreign)} on 127.0.0.1 is already in use"
    assert caught.value.port == port_of(foreign)
    assert untouched(foreign)


def test_a_child_that_exits_for_another_reason_says_why() -> None:
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.exit('no configuration')"], stdout=log, stderr=log
        )
        with pytest.raises(BrokerError) as caught:
            wait_listening(proc, log, free_port(), 20, "the server", lambda: file_tail(log).strip())
    assert not isinstance(caught.value, PortTaken)
    assert str(caught.value) == "the server exited at start (status 1): no configuration"


def test_a_child_on_port_0_with_several_listeners_is_refused(child: Callable[..., Child]) -> None:
    proc, log = child(0, 0)
    deadline = time.monotonic() + 20
    while "listening" not in file_tail(log):  # both listeners open
        assert proc.poll() is None and time.monotonic() < deadline, file_tail(log)
        time.sleep(0.05)
    with pytest.raises(BrokerError, match=r"^the server listens on several ports \(\d+, \d+\)$"):
        wait_listening(proc, log, 0, 20, "the server", lambda: file_tail(log))


def test_a_child_that_never_listens_is_given_up_on_time() -> None:
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"], stdout=log)
        try:
            with pytest.raises(BrokerError, match=r"^the server did not listen on any port within 0.5s$"):
                wait_listening(proc, log, 0, 0.5, "the server", lambda: "")
        finally:
            stop_child(proc, None)


# ---------------------------------------------------------------- the embedded broker
def test_asked_for_any_port_the_broker_skips_one_taken_meanwhile(
    foreign: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = choose_first(port_of(foreign), monkeypatch)
    with EmbeddedBroker(0) as broker:
        assert broker.process is not None
        assert chosen[0] == port_of(foreign) and broker.port == chosen[-1] != port_of(foreign)
        assert listening_ports(broker.process.pid) == {broker.port}
        assert broker.internal_port == broker.port
    assert untouched(foreign)


def test_asked_for_a_port_another_process_holds_the_broker_fails_on_one_line(
    foreign: socket.socket,
) -> None:
    broker = EmbeddedBroker(port_of(foreign))
    with pytest.raises(PortTaken) as caught:
        broker.start()
    assert str(caught.value) == f"port {port_of(foreign)} on 127.0.0.1 is already in use"
    assert broker.process is None and untouched(foreign)


def test_a_port_taken_after_the_check_fails_the_broker_too(
    foreign: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tansu itself finds the port taken and exits; its status (0) does not pass for a start."""
    the_check_saw_it_free(monkeypatch)
    broker = EmbeddedBroker(port_of(foreign))
    with pytest.raises(PortTaken, match=f"^port {port_of(foreign)} on 127.0.0.1 is already in use$"):
        broker.start()
    assert broker.process is None and broker.port == 0 and untouched(foreign)


def test_a_restart_on_a_port_taken_meanwhile_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the broker_restart scenario restarts its broker: on the port the clients know."""
    with EmbeddedBroker(0) as first:
        port = first.port
    with socket.socket() as taker:
        taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taker.bind((HOST, port))
        taker.listen()
        taker.setblocking(False)
        with pytest.raises(PortTaken, match=f"^port {port} on 127.0.0.1 is already in use$"):
            EmbeddedBroker(port).start()
        the_check_saw_it_free(monkeypatch)
        with pytest.raises(PortTaken, match=f"^port {port} on 127.0.0.1 is already in use$"):
            EmbeddedBroker(port).start()
        assert untouched(taker)


def test_a_broker_whose_every_port_is_taken_gives_up_on_one_line(
    foreign: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tansu, "free_port", lambda host=HOST: port_of(foreign))
    broker = EmbeddedBroker(0)
    with pytest.raises(BrokerError) as caught:
        broker.start()
    assert str(caught.value) == (
        "the broker found no free port on 127.0.0.1: other processes took each of 5 first"
    )
    assert broker.process is None and untouched(foreign)


# ------------------------------------------------------------------- behind TLS
def test_asked_for_any_port_the_tls_broker_skips_one_taken_meanwhile(
    tls_files: TlsFiles, foreign: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = choose_first(port_of(foreign), monkeypatch)
    with EmbeddedBroker(0, tls_cert=tls_files.server_cert_pem, tls_key=tls_files.server_key_pem) as broker:
        assert broker.process is not None and broker.proxy is not None and broker.proxy.process is not None
        assert chosen[0] == port_of(foreign) and broker.port == chosen[-1] != port_of(foreign)
        assert listening_ports(broker.proxy.process.pid) == {broker.port}
        assert listening_ports(broker.process.pid) == {broker.internal_port}
        assert broker.proxy.target_port == broker.internal_port != broker.port
    assert untouched(foreign)


def test_asked_for_a_port_another_process_holds_the_tls_broker_fails_on_one_line(
    tls_files: TlsFiles, foreign: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stunnel itself finds the port taken (the early check saw it free); Tansu, already
    running, is stopped again."""
    the_check_saw_it_free(monkeypatch)
    broker = EmbeddedBroker(
        port_of(foreign), tls_cert=tls_files.server_cert_pem, tls_key=tls_files.server_key_pem
    )
    with pytest.raises(PortTaken) as caught:
        broker.start()
    assert str(caught.value) == f"port {port_of(foreign)} on 127.0.0.1 is already in use"
    assert broker.process is None and broker.proxy is None and untouched(foreign)


def test_the_proxy_refuses_a_port_another_process_holds(tls_files: TlsFiles, foreign: socket.socket) -> None:
    proxy = TlsProxy(port_of(foreign), free_port(), tls_files.server_cert_pem, tls_files.server_key_pem)
    with pytest.raises(PortTaken, match=f"^port {port_of(foreign)} on 127.0.0.1 is already in use$"):
        proxy.start()
    assert proxy.process is None and untouched(foreign)


def test_the_proxy_on_port_0_reports_the_port_it_bound(tls_files: TlsFiles) -> None:
    proxy = TlsProxy(0, free_port(), tls_files.server_cert_pem, tls_files.server_key_pem).start()
    try:
        assert proxy.process is not None
        assert proxy.port != 0 and listening_ports(proxy.process.pid) == {proxy.port}
    finally:
        proxy.stop()
