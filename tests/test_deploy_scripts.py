"""deploy/'s scripts, run for real against stand-ins: the certificate script makes PEM
files that Kafka reads and kvldp's own TLS settings trust (checked with a TLS handshake),
and the broker's start script gives the client file's user its SCRAM password, serves
the health check and refuses a client file the broker cannot serve. On every file of the
table of the properties format's rules, the start script either gives the broker the
password Java reads from the file (checked with real Java on both the client file and
the credential file the script hands to kafka-configs.sh) or refuses the file in one
line naming the line. The device-keys one-shot makes the gateway's key once and hands it
only the public key set."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvldp.gateway.signing import load_private_key, sign_token
from kvldp.gateway.tokens import KeySource, TokenVerifier
from kvldp.kafka.client_config import KafkaConfig, kafka_config
from kvldp.kafka.properties_file import parse_properties

from support import run
from support.deploy import (
    CERTS_SCRIPT,
    CLIENT_FILE,
    DEPLOY,
    SERVICES,
    START_SCRIPT,
    broker_properties,
    client_properties,
    mounted_target,
    script_default,
    volume_at,
)
from support.java_properties import RULES, SCRAM_CREDENTIAL, java_reading


def _make_certs(where: Path) -> dict[str, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    broker, ca = where / "broker", where / "ca"
    run(["sh", str(CERTS_SCRIPT), str(broker), str(ca)], check=True)
    return {"pem": broker / "broker.pem", "broker-ca": broker / "ca.crt", "ca": ca / "ca.crt"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _make_certs(tmp_path_factory.mktemp("certs"))


def test_certs_service_runs_the_script_into_the_broker_and_client_volumes() -> None:
    service = SERVICES["certs"]
    script, broker_dir, ca_dir = service["entrypoint"][-3:]
    assert script == mounted_target(service, CERTS_SCRIPT)
    props = broker_properties()
    assert volume_at(service, broker_dir) == volume_at(SERVICES["kafka"], props["ssl.keystore.location"])
    assert Path(props["ssl.keystore.location"]).name == "broker.pem"
    client_ca = client_properties()["ssl.ca.location"]
    assert volume_at(service, ca_dir) == volume_at(SERVICES["aggregator"], client_ca)
    assert Path(client_ca).name == "ca.crt"
    # the kvldp image's own base: no further image to pull, and it has openssl
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"FROM {service['image']}\n" in dockerfile


def test_certs_are_pem_files_kafka_reads_and_clients_trust(certs: dict[str, Path]) -> None:
    pem = certs["pem"].read_text()
    # Kafka's PEM keystore: one PKCS#8 key ("PRIVATE KEY", not "RSA PRIVATE KEY"), then the chain
    assert pem.startswith("-----BEGIN PRIVATE KEY-----")
    assert pem.count("PRIVATE KEY-----") == 2 and "ENCRYPTED" not in pem
    assert pem.count("-----BEGIN CERTIFICATE-----") == 2
    assert certs["ca"].read_text() == certs["broker-ca"].read_text()
    assert pem.rstrip().endswith(certs["ca"].read_text().rstrip())
    for path in certs.values():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path  # the broker and uid 10001 read them
    made = {p: p.read_bytes() for p in certs.values()}
    run(["sh", str(CERTS_SCRIPT), str(certs["pem"].parent), str(certs["ca"].parent)], check=True)
    assert {p: p.read_bytes() for p in certs.values()} == made, "a restart keeps the CA clients trust"


def test_client_properties_are_valid_once_the_ca_exists(certs: dict[str, Path]) -> None:
    """The whole file, checked as kvldp checks it, with its CA path moved here."""
    config = kafka_config({**client_properties(), "ssl.ca.location": str(certs["ca"])})
    assert config.uses_tls and config.uses_sasl and config.ssl_check_hostname
    assert config.sasl_mechanism == "SCRAM-SHA-512" and config.sasl_username


@pytest.fixture
def tls_server(certs: dict[str, Path]) -> Iterator[int]:
    """A TLS server on 127.0.0.1 with the broker's certificate (handshakes only)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["pem"])
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        with socket.create_connection(listener.getsockname(), timeout=10):
            pass  # wakes the accept() so that the thread sees `done`
        thread.join(timeout=10)
        listener.close()


def test_the_client_file_trusts_the_broker_by_name(certs: dict[str, Path], tls_server: int) -> None:
    """kvldp's own TLS context from kafka-client.properties (CA path moved here) accepts
    the broker as `kafka` and `localhost`, and refuses it under any other name."""
    config: KafkaConfig = kafka_config({**client_properties(), "ssl.ca.location": str(certs["ca"])})
    context = config.ssl_context
    assert context is not None
    context.verify_flags |= ssl.VERIFY_X509_STRICT

    def connect(name: str) -> bytes:
        with (
            socket.create_connection(("127.0.0.1", tls_server), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=name) as tls,
        ):
            return tls.recv(2)

    assert connect("kafka") == b"ok"
    assert connect("localhost") == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|not valid"):
        connect("broker.example.com")
    stranger = ssl.create_default_context()  # the system CAs: the development CA is not among them
    with (
        socket.create_connection(("127.0.0.1", tls_server), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        stranger.wrap_socket(raw, server_hostname="kafka")


STUB_CONFIGS = """#!/usr/bin/env bash
# kafka-configs.sh stand-in: logs its arguments and the --add-config-file it is given
{ printf 'ARGS'; printf ' %s' "$@"; echo; } >> "$STUB_LOG"
previous=
for arg in "$@"; do
    if [[ $previous == --add-config-file ]]; then
        cp "$arg" "$STUB_CREDENTIAL"
        echo "MODE $(stat -c %a "$arg")" >> "$STUB_LOG"
        echo "FILE $(cat "$arg")" >> "$STUB_LOG"
    fi
    previous=$arg
done
[[ " $* " == *" --describe "* ]] && cat "$STUB_DESCRIBE"
exit 0
"""


def _run_start(
    tmp_path: Path, client: str | bytes, *args: str, describe: str = ""
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    configs = bin_dir / "kafka-configs.sh"
    configs.write_text(STUB_CONFIGS)
    configs.chmod(0o755)
    entrypoint = tmp_path / "run"
    entrypoint.write_text('#!/usr/bin/env bash\necho "image entrypoint started"\n')
    entrypoint.chmod(0o755)
    (tmp_path / "client.properties").write_bytes(client if isinstance(client, bytes) else client.encode())
    (tmp_path / "describe").write_text(describe)
    env = {
        "KVLDP_CLIENT_CONFIG": str(tmp_path / "client.properties"),
        "KVLDP_KAFKA_BIN": str(bin_dir),
        "KVLDP_KAFKA_RUN": str(entrypoint),
        "STUB_LOG": str(tmp_path / "log"),
        "STUB_DESCRIBE": str(tmp_path / "describe"),
        "STUB_CREDENTIAL": str(tmp_path / "credential.properties"),
    }
    return run(["bash", str(START_SCRIPT), *args], env=env, timeout=60)


def _wait_for_log(path: Path, text: str) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never logged")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_start_script_gives_the_client_files_user_its_password(tmp_path: Path) -> None:
    password = "p=a:s s#w!o\"r'd$(x)`y`;&|<>*?[]{}~%,"  # every shell metacharacter, no backslash
    client = CLIENT_FILE.read_text().replace("sasl.password=change-me", f"sasl.password={password}")
    assert parse_properties(client.encode(), "x")["sasl.password"] == password  # as kvldp reads it
    result = _run_start(tmp_path, client)
    assert result.returncode == 0, result.stderr
    assert "image entrypoint started" in result.stdout  # the image's own entrypoint runs
    log = _wait_for_log(tmp_path / "log", "FILE ")
    admin = script_default("KVLDP_KAFKA_ADMIN")
    user = client_properties()["sasl.username"]
    assert (
        f"ARGS --bootstrap-server {admin} --alter --entity-type users --entity-name {user} --add-config-file"
        in log
    )
    assert password not in log.split("FILE ")[0], "the password went on a command line"
    assert "MODE 600" in log
    # a Java properties line, which Java reads verbatim: the password has no backslash
    assert "FILE SCRAM-SHA-512=iterations=8192,password=" + password + "\n" in log
    (credential,) = java_reading([(tmp_path / "credential.properties").read_bytes()], tmp_path / "java")
    assert isinstance(credential, dict)
    scram = SCRAM_CREDENTIAL.fullmatch(credential["SCRAM-SHA-512"])
    assert scram is not None and scram.group(1) == "8192" and scram.group(2) == password


#: the lines each file of the rules table is put after, so that the broker can serve it
SCRAM_USER = b"sasl.mechanism=SCRAM-SHA-512\nsasl.username=kvldp\n"
SCRAM_USER_LINES = 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_start_script_gives_javas_password_or_refuses_the_line(tmp_path: Path) -> None:
    """Each file of the rules table, after the SCRAM user's lines: the script reads it and
    kafka-configs.sh gets, as Java reads the credential file, the password Java reads from
    the client file; or the script refuses it in one line, naming the line."""
    files = [SCRAM_USER + rule.text for rule in RULES]
    java = java_reading(files, tmp_path / "java")
    read = []
    for index, (rule, data, entries) in enumerate(zip(RULES, files, java, strict=True)):
        where = tmp_path / str(index)
        where.mkdir()
        result = _run_start(where, data)
        if rule.script_refuses is None:
            assert result.returncode == 0, (rule.name, result.stderr)
            assert isinstance(entries, dict), rule.name
            log = _wait_for_log(where / "log", "FILE ")
            assert f"--entity-name {entries['sasl.username']} --add-config-file" in log, rule.name
            read.append((rule, entries, (where / "credential.properties").read_bytes()))
            continue
        line, reason = rule.script_refuses
        message = f"kafka-start: {where / 'client.properties'}: line {line + SCRAM_USER_LINES}: "
        assert result.returncode == 1, (rule.name, result.returncode)
        assert result.stderr.startswith(message) and reason in result.stderr, (rule.name, result.stderr)
        assert result.stderr.count("\n") == 1, (rule.name, result.stderr)
        assert "image entrypoint started" not in result.stdout
        if isinstance(entries, dict) and entries.get("sasl.password"):
            assert entries["sasl.password"] not in result.stderr, rule.name
    assert len(read) >= 6, [rule.name for rule, _, _ in read]
    credentials = java_reading([credential for _, _, credential in read], tmp_path / "credentials")
    for (rule, entries, _), credential in zip(read, credentials, strict=True):
        assert isinstance(credential, dict) and list(credential) == ["SCRAM-SHA-512"], rule.name
        scram = SCRAM_CREDENTIAL.fullmatch(credential["SCRAM-SHA-512"])
        assert scram is not None and scram.group(2) == entries["sasl.password"], rule.name


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_start_script_health_check(tmp_path: Path) -> None:
    client = CLIENT_FILE.read_text()
    present = "SCRAM credential configs for user-principal 'kvldp' are SCRAM-SHA-512=iterations=8192\n"
    assert _run_start(tmp_path, client, "--check", describe=present).returncode == 0
    absent = "SCRAM credential configs for user-principal 'kvldp' are \n"
    assert _run_start(tmp_path, client, "--check", describe=absent).returncode == 1
    other = "SCRAM credential configs for user-principal 'kvldp' are SCRAM-SHA-256=iterations=8192\n"
    assert _run_start(tmp_path, client, "--check", describe=other).returncode == 1


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("sasl.password=change-me\n", ""), "needs sasl.username and sasl.password"),
        (("sasl.username=kvldp\n", "#sasl.username=kvldp\n"), "needs sasl.username and sasl.password"),
        (("sasl.mechanism=SCRAM-SHA-512", "sasl.mechanism=PLAIN"), "offers SCRAM-SHA-512 only"),
    ],
)
def test_start_script_refuses_a_client_file_the_broker_cannot_serve(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    client = CLIENT_FILE.read_text()
    assert change[0] in client
    result = _run_start(tmp_path, client.replace(*change))
    assert result.returncode == 1 and result.stderr.startswith("kafka-start: ") and message in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "image entrypoint started" not in result.stdout


def test_device_keys_one_shot_makes_a_key_once_and_gives_the_gateway_its_public_set(tmp_path: Path) -> None:
    """The device-keys entrypoint, run twice (a restart of the stack) with its volumes as
    directories and the kvldp command of this environment: the first run writes the key,
    the second keeps it; the gateway's volume holds only the public set, which verifies a
    token signed with the kept key. A key directory it cannot write fails the one-shot
    (the gateway then never starts) and copies nothing."""
    script = SERVICES["device-keys"]["entrypoint"][-1]
    keys, jwks = tmp_path / "keys", tmp_path / "jwks"
    keys.mkdir()
    jwks.mkdir()

    def one_shot(keys_dir: Path, jwks_dir: Path) -> subprocess.CompletedProcess[str]:
        """The entrypoint with the volumes' mount points replaced by these directories."""
        where = {"keys": str(keys_dir), "jwks": str(jwks_dir)}
        command = re.sub(r"(?<= )/(keys|jwks)\b", lambda m: where[m.group(1)], script)
        assert " /keys" not in command and " /jwks" not in command, command
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # kvldp of this environment
        return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env)

    local = (keys, jwks)
    first = one_shot(*local)
    assert first.returncode == 0, first.stderr
    private = (keys / "private.pem").read_bytes()
    again = one_shot(*local)
    assert again.returncode == 0, again.stderr
    assert (keys / "private.pem").read_bytes() == private
    assert sorted(p.name for p in jwks.iterdir()) == ["jwks.json"]
    assert (jwks / "jwks.json").read_bytes() == (keys / "jwks.json").read_bytes()
    key, kid = load_private_key(keys / "private.pem")
    verifier = TokenVerifier(KeySource.open(str(jwks / "jwks.json")), "kvldp-gateway")
    token = sign_token(key, kid, "till-7", "kvldp-gateway", 60)
    assert asyncio.run(verifier.device(f"Bearer {token}")) == "till-7"

    blocked, empty = tmp_path / "blocked", tmp_path / "empty"
    blocked.write_text("not a directory")
    empty.mkdir()
    failed = one_shot(blocked, empty)
    assert failed.returncode != 0 and not list(empty.iterdir())
