"""deploy/'s scripts, run for real against stand-ins: the certificate script makes PEM
files that Kafka reads and kvldp's own TLS settings trust (checked with a TLS handshake),
and the broker's start script gives the client file's user its SCRAM password, serves
the health check and refuses a client file the broker cannot serve. On every file of the
table of the properties format's rules, the start script either gives the broker the
password Java reads from the file (checked with real Java on both the client file and
the credential file the script hands to kafka-configs.sh) or refuses the file in one
line naming the line. It grants each role's principal its ACLs, and its health check
passes only once every one of them is listed. The device-keys one-shot makes the gateway's key once and hands it
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
    CLIENT_FILES,
    DEPLOY,
    SERVICES,
    START_SCRIPT,
    broker_env,
    broker_properties,
    client_properties,
    collections_with_acls,
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
    client_ca = client_properties("aggregator")["ssl.ca.location"]
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
    """Each whole file, checked as kvldp checks it, with its CA path moved here."""
    for role in CLIENT_FILES:
        config = kafka_config({**client_properties(role), "ssl.ca.location": str(certs["ca"])})
        assert config.uses_tls and config.uses_sasl and config.ssl_check_hostname, role
        assert config.sasl_mechanism == "SCRAM-SHA-512" and config.sasl_username == role


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
    """kvldp's own TLS context from a client file (CA path moved here; both files have
    the same TLS settings) accepts the broker as `kafka` and `localhost`, and refuses it
    under any other name."""
    assert len({client_properties(role)["ssl.ca.location"] for role in CLIENT_FILES}) == 1
    config: KafkaConfig = kafka_config({**client_properties("ingest"), "ssl.ca.location": str(certs["ca"])})
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


STUB_TOOL = """#!/usr/bin/env bash
# kafka-configs.sh and kafka-acls.sh stand-in: logs its arguments and the
# --add-config-file it is given; prints the users or the ACLs asked for
{ printf 'ARGS %s' "${0##*/}"; printf ' %s' "$@"; echo; } >> "$STUB_LOG"
previous= user=
for arg in "$@"; do
    [[ $previous == --entity-name ]] && user=$arg
    if [[ $previous == --add-config-file ]]; then
        cp "$arg" "$STUB_CREDENTIALS/$user"
        echo "MODE $(stat -c %a "$arg")" >> "$STUB_LOG"
        echo "FILE $(cat "$arg")" >> "$STUB_LOG"
    fi
    previous=$arg
done
[[ " $* " == *" --describe "* ]] && cat "$STUB_DESCRIBE"
[[ " $* " == *" --list "* ]] && cat "$STUB_LIST"
exit 0
"""

#: the ACLs the stack's start script grants, one kafka-acls.sh run each: principal,
#: operations, resources (docs/untrusted-devices.md)
COLLECTIONS = collections_with_acls()
GRANTS = [
    ("User:ingest", ["Write", "Describe"], [("topic", f"kvldp.{c}.reports") for c in COLLECTIONS]),
    (
        "User:aggregator",
        ["Read", "Describe", "Create"],
        [("topic", f"kvldp.{c}.reports") for c in COLLECTIONS],
    ),
    (
        "User:aggregator",
        ["Read", "Write", "Describe", "Create"],
        [("topic", f"kvldp.{c}.{own}") for c in COLLECTIONS for own in ("dlq", "state", "control")],
    ),
    ("User:aggregator", ["Read"], [("group", f"kvldp.{c}.aggregator") for c in COLLECTIONS]),
]


def acl_listing(grants: list[tuple[str, list[str], list[tuple[str, str]]]]) -> str:
    """What ``kafka-acls.sh --list`` prints when ``grants`` are the cluster's ACLs."""
    by_resource: dict[tuple[str, str], list[str]] = {}
    for principal, operations, resources in grants:
        for resource in resources:
            by_resource.setdefault(resource, []).extend(
                f"\t(principal={principal}, host=*, operation={op.upper()}, permissionType=ALLOW)"
                for op in operations
            )
    return "".join(
        f"Current ACLs for resource `ResourcePattern(resourceType={kind.upper()}, name={name}, "
        f"patternType=LITERAL)`: \n" + "\n".join(lines) + "\n\n"
        for (kind, name), lines in by_resource.items()
    )


def described(*users: str, mechanism: str = "SCRAM-SHA-512") -> str:
    """What ``kafka-configs.sh --describe --entity-type users`` prints for ``users``."""
    return "".join(
        f"SCRAM credential configs for user-principal '{user}' are {mechanism}=iterations=8192\n"
        for user in users
    )


def _run_start(
    tmp_path: Path,
    clients: dict[str, str | bytes] | None = None,
    *args: str,
    describe: str = "",
    listing: str = "",
    collections: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """The start script with stand-in tools, the stack's client files but those of
    ``clients`` (by role), and the broker's KVLDP_COLLECTIONS unless ``collections``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for script in ("kafka-configs.sh", "kafka-acls.sh"):
        (bin_dir / script).write_text(STUB_TOOL)
        (bin_dir / script).chmod(0o755)
    entrypoint = tmp_path / "run"
    entrypoint.write_text('#!/usr/bin/env bash\necho "image entrypoint started"\n')
    entrypoint.chmod(0o755)
    client_dir = tmp_path / "clients"
    client_dir.mkdir(exist_ok=True)
    for role, path in CLIENT_FILES.items():
        text = (clients or {}).get(role, path.read_bytes())
        (client_dir / path.name).write_bytes(text if isinstance(text, bytes) else text.encode())
    (tmp_path / "credentials").mkdir(exist_ok=True)
    (tmp_path / "describe").write_text(describe)
    (tmp_path / "list").write_text(listing)
    env = {
        "KVLDP_CLIENT_DIR": str(client_dir),
        "KVLDP_COLLECTIONS": broker_env()["KVLDP_COLLECTIONS"] if collections is None else collections,
        "KVLDP_KAFKA_BIN": str(bin_dir),
        "KVLDP_KAFKA_RUN": str(entrypoint),
        "STUB_LOG": str(tmp_path / "log"),
        "STUB_DESCRIBE": str(tmp_path / "describe"),
        "STUB_LIST": str(tmp_path / "list"),
        "STUB_CREDENTIALS": str(tmp_path / "credentials"),
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
def test_start_script_gives_each_roles_user_its_password_and_grants_its_acls(tmp_path: Path) -> None:
    password = "p=a:s s#w!o\"r'd$(x)`y`;&|<>*?[]{}~%,"  # every shell metacharacter, no backslash
    ingest = CLIENT_FILES["ingest"].read_text()
    client = ingest.replace("sasl.password=change-me-ingest", f"sasl.password={password}")
    assert parse_properties(client.encode(), "x")["sasl.password"] == password  # as kvldp reads it
    result = _run_start(tmp_path, {"ingest": client})
    assert result.returncode == 0, result.stderr
    assert "image entrypoint started" in result.stdout  # the image's own entrypoint runs
    # the users-and-ACLs step shares the script's output, which is read to its end
    assert "kafka-start: SCRAM-SHA-512 users ingest and aggregator are set; ACLs granted" in result.stdout
    log = (tmp_path / "log").read_text()
    admin = script_default("KVLDP_KAFKA_ADMIN")
    passwords = {"ingest": password, "aggregator": client_properties("aggregator")["sasl.password"]}
    for user, secret in passwords.items():
        assert (
            f"ARGS kafka-configs.sh --bootstrap-server {admin} --alter --entity-type users --entity-name {user} "
            "--add-config-file" in log
        )
        assert secret not in "".join(line for line in log.splitlines() if line.startswith("ARGS")), (
            "a password went on a command line"
        )
        # a Java properties line, which Java reads verbatim: the password has no backslash
        assert "FILE SCRAM-SHA-512=iterations=8192,password=" + secret + "\n" in log
    assert log.count("MODE 600") == 2
    credentials = java_reading(
        [(tmp_path / "credentials" / user).read_bytes() for user in passwords], tmp_path / "java"
    )
    for credential, secret in zip(credentials, passwords.values(), strict=True):
        assert isinstance(credential, dict)
        scram = SCRAM_CREDENTIAL.fullmatch(credential["SCRAM-SHA-512"])
        assert scram is not None and scram.group(1) == "8192" and scram.group(2) == secret
    granted = [line for line in log.splitlines() if line.startswith("ARGS kafka-acls.sh")]
    assert granted == [
        f"ARGS kafka-acls.sh --bootstrap-server {admin} --add --allow-principal {principal} "
        + " ".join(f"--operation {op}" for op in operations)
        + " "
        + " ".join(f"--{kind} {name}" for kind, name in resources)
        for principal, operations, resources in GRANTS
    ]


#: the lines each file of the rules table is put after, so that the broker can serve it
SCRAM_USER = b"sasl.mechanism=SCRAM-SHA-512\nsasl.username=kvldp\n"
SCRAM_USER_LINES = 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_start_script_gives_javas_password_or_refuses_the_line(tmp_path: Path) -> None:
    """Each file of the rules table, after the SCRAM user's lines, as the ingestion
    principal's file: the script reads it and kafka-configs.sh gets, as Java reads the
    credential file, the password Java reads from the client file; or the script refuses
    it in one line, naming the line."""
    files = [SCRAM_USER + rule.text for rule in RULES]
    java = java_reading(files, tmp_path / "java")
    read = []
    for index, (rule, data, entries) in enumerate(zip(RULES, files, java, strict=True)):
        where = tmp_path / str(index)
        where.mkdir()
        result = _run_start(where, {"ingest": data})
        if rule.script_refuses is None:
            assert result.returncode == 0, (rule.name, result.stderr)
            assert isinstance(entries, dict), rule.name
            log = _wait_for_log(where / "log", "FILE ")
            assert f"--entity-name {entries['sasl.username']} --add-config-file" in log, rule.name
            read.append((rule, entries, (where / "credentials" / entries["sasl.username"]).read_bytes()))
            continue
        line, reason = rule.script_refuses
        message = f"kafka-start: {where / 'clients' / 'ingest.properties'}: line {line + SCRAM_USER_LINES}: "
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
    """It passes once both users have SCRAM-SHA-512 credentials and every ACL is listed,
    and otherwise says in one line what is missing."""
    users = described("aggregator", "ingest")
    everything = acl_listing(GRANTS)

    def check(describe: str = users, listing: str = everything) -> subprocess.CompletedProcess[str]:
        return _run_start(tmp_path, None, "--check", describe=describe, listing=listing)

    assert check().returncode == 0, check().stderr
    for describe, missing in [
        ("", "ingest"),
        (described("ingest"), "aggregator"),
        (described("aggregator", "ingest", mechanism="SCRAM-SHA-256"), "ingest"),
        (described("aggregator", "ingest", mechanism="SCRAM-SHA-256=iterations=4096,SCRAM-SHA-512"), ""),
    ]:
        result = check(describe=describe)
        if not missing:
            assert result.returncode == 0, result.stderr
            continue
        assert result.returncode == 1
        assert result.stderr == f"kafka-start: user {missing} ({missing}) has no SCRAM-SHA-512 credentials\n"
    for index, (principal, operations, resources) in enumerate(GRANTS):
        # one operation of one resource missing
        fewer = [*GRANTS[:index], (principal, operations[1:], resources), *GRANTS[index + 1 :]]
        kind, name = resources[0]
        result = check(listing=acl_listing(fewer))
        assert result.returncode == 1
        assert (
            result.stderr == f"kafka-start: ACL missing: {principal} may not {operations[0]} {kind} {name}\n"
        )
    # an ACL only on a prefix, or denied, is not the one asked for
    for changed in ("patternType=LITERAL", "permissionType=ALLOW"):
        swapped = {
            "patternType=LITERAL": "patternType=PREFIXED",
            "permissionType=ALLOW": "permissionType=DENY",
        }
        result = check(listing=everything.replace(changed, swapped[changed]))
        assert result.returncode == 1 and "kafka-start: ACL missing: " in result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize(
    ("role", "change", "message"),
    [
        ("ingest", ("sasl.password=change-me-ingest\n", ""), "needs sasl.username and sasl.password"),
        (
            "aggregator",
            ("sasl.username=aggregator\n", "#sasl.username=aggregator\n"),
            "needs sasl.username and sasl.password",
        ),
        ("ingest", ("sasl.mechanism=SCRAM-SHA-512", "sasl.mechanism=PLAIN"), "offers SCRAM-SHA-512 only"),
        ("ingest", ("sasl.username=ingest", "sasl.username=in gest"), "sasl.username takes letters, digits"),
        ("aggregator", ("sasl.username=aggregator", "sasl.username=ANONYMOUS"), "a super user"),
        ("aggregator", ("sasl.username=aggregator", "sasl.username=ingest"), "both log in as ingest"),
    ],
)
def test_start_script_refuses_a_client_file_the_broker_cannot_serve(
    tmp_path: Path, role: str, change: tuple[str, str], message: str
) -> None:
    client = CLIENT_FILES[role].read_text()
    assert change[0] in client
    result = _run_start(tmp_path, {role: client.replace(*change)})
    assert result.returncode == 1 and result.stderr.startswith("kafka-start: ") and message in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "image entrypoint started" not in result.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("collections", ["", "demo  checkout", "demo,checkout", "kvldp.demo"])
def test_start_script_refuses_collections_it_cannot_name_topics_after(
    tmp_path: Path, collections: str
) -> None:
    result = _run_start(tmp_path, None, collections=collections)
    assert result.returncode == 1
    assert result.stderr.startswith("kafka-start: KVLDP_COLLECTIONS must name the stack's collections")
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_start_script_needs_both_client_files(tmp_path: Path) -> None:
    clients = tmp_path / "clients"
    clients.mkdir()
    (clients / "ingest.properties").write_bytes(CLIENT_FILES["ingest"].read_bytes())
    result = run(
        ["bash", str(START_SCRIPT)],
        env={"KVLDP_CLIENT_DIR": str(clients), "KVLDP_COLLECTIONS": "demo"},
        timeout=60,
    )
    assert result.returncode == 1
    assert (
        result.stderr
        == f"kafka-start: cannot read the aggregator client file {clients / 'aggregator.properties'}\n"
    )


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
