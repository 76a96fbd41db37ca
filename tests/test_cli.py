"""The ``kvldp`` command line: JSON contracts, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvldp.cli import main
from kvldp.common.mechanisms import create, get, names

from support import run_kvldp
from support.package import REPO


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", names())
def test_audit_prints_the_contract_json(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, _ = run(capsys, "audit", "--mechanism", name, "--epsilon", "1", "--keys", "5", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["ok"] is True
    assert payload["mechanism"] == name and payload["epsilon"] == 1.0
    assert payload["notion"] == ("fldp" if name == "fhr" else "ldp")
    assert payload["max_log_ratio"] <= 1.0 + 1e-9


def test_audit_params_and_exhaustive(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "audit",
        "--mechanism",
        "pckv_grr",
        "--epsilon",
        "1",
        "--keys",
        "10",
        "--param",
        "ell=2",
        "--json",
    )
    payload = json.loads(out)
    assert code == 0 and payload["tight"] and abs(payload["max_log_ratio"] - 1.0) < 1e-9
    code, out, _ = run(
        capsys, "audit", "--mechanism", "kvue", "--epsilon", "2", "--keys", "3", "--exhaustive"
    )
    assert code == 0 and "ok" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["audit", "--mechanism", "nope", "--epsilon", "1", "--keys", "3"], "unknown mechanism 'nope'"),
        (
            ["audit", "--mechanism", "grr", "--epsilon", "1", "--keys", "3", "--param", "x=1"],
            "no parameter 'x'",
        ),
        (["audit", "--mechanism", "ioh", "--epsilon", "1", "--keys", "11"], "at most 10 keys"),
        (
            ["audit", "--mechanism", "pckv_ue", "--epsilon", "1", "--keys", "50", "--param", "ell=40"],
            "too large",
        ),
        (
            ["evaluate", "--mechanism", "kvue", "--epsilon", "1", "--keys", "3", "--dataset", "nope"],
            "unknown dataset",
        ),
        (
            ["evaluate", "--mechanism", "kvue", "--epsilon", "1", "--keys", "3", "--estimator", "em4"],
            "no estimator",
        ),
    ],
)
def test_input_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("kvldp: error:") and message in err and err.count("\n") == 1


def test_bad_numbers_are_rejected_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["audit", "--mechanism", "grr", "--epsilon", "-1", "--keys", "3"])
    assert info.value.code == 2
    assert "positive" in capsys.readouterr().err


EVALUATE = [
    "evaluate",
    "--mechanism",
    "privkv",
    "--estimator",
    "em",
    "--dataset",
    "gaussian",
    "--users",
    "20000",
    "--keys",
    "10",
    "--epsilon",
    "1",
    "--repeats",
    "2",
    "--seed",
    "3",
    "--json",
]


def test_evaluate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *EVALUATE)
    payload = json.loads(out)
    assert code == 0
    for key in ("mse_frequency", "mse_mean", "mae_frequency", "mae_mean", "repeats", "seconds"):
        assert key in payload
    assert payload["repeats"] == 2 and payload["users"] == 20000
    again = json.loads(run(capsys, *EVALUATE)[1])
    assert again["mse_frequency"] == payload["mse_frequency"]  # fixed seed, same result


def test_mechanisms_and_bench(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "mechanisms", "--json")
    assert code == 0 and [r["mechanism"] for r in json.loads(out)] == names()
    code, out, _ = run(
        capsys, "bench", "fold", "--reports", "2000", "--keys", "5", "--mechanism", "kvue", "--json"
    )
    rows = json.loads(out)
    assert code == 0 and rows[0]["mechanism"] == "kvue" and rows[0]["reports_per_second"] > 0
    code, out, _ = run(capsys, "bench", "estimate", "--keys", "4,12", "--users", "2000", "--mechanism", "ioh")
    assert code == 0 and "ioh" in out and "at most 10 keys" in out


def test_mechanisms_lists_estimators_and_every_parameter_with_its_default_and_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # read from the mechanism classes: every parameter of every mechanism, none made up
    code, text, _ = run(capsys, "mechanisms")
    assert code == 0 and "§" not in text and "spec" not in text
    for name in names():
        assert f"estimators: {', '.join(get(name)(3, 2.0).estimator_names)}" in text
        for param in get(name).params_spec:
            line = f"{param.name} = {json.dumps(param.default)} ({param.allowed}): {param.doc}"
            assert line in text, line
    code, out, _ = run(capsys, "mechanisms", "--json")
    pckv = next(row for row in json.loads(out) if row["mechanism"] == "pckv_ue")
    ell = next(p for p in pckv["params"] if p["name"] == "ell")
    assert (ell["default"], ell["allowed"]) == (1, "an integer between 1 and 1000000")
    allocation = next(p for p in pckv["params"] if p["name"] == "allocation")
    assert allocation["allowed"] == "one of optimized, naive, nonoptimized"


def test_console_entry_point_reports_errors_without_traceback() -> None:
    proc = run_kvldp("audit", "--mechanism", "grr", "--epsilon", "1", "--keys", "3", "--param", "ell=x")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "kvldp: error: parameter ell must be an integer, got 'x'\n"


@pytest.fixture
def taken_port() -> Iterator[str]:
    """A port a listening socket holds for the test: the flags of a command that binds or
    probes a port must be refused before it finds the port taken."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield str(listener.getsockname()[1])


DEMO_COLLECTIONS = REPO / "deploy" / "collections"


def aggregate_argv(port: str, *flags: str) -> list[str]:
    return [
        *("aggregate", "--collection", str(DEMO_COLLECTIONS / "demo.toml")),
        *("--bootstrap-servers", "127.0.0.1:1", "--metrics-port", port, *flags),
    ]


def test_scale_out_roles_keep_no_state_dir(capsys: pytest.CaptureFixture[str], taken_port: str) -> None:
    for role in ("worker", "exporter"):
        code, _, err = run(capsys, *aggregate_argv(taken_port, "--role", role, "--state-dir", "somewhere"))
        assert code == 2 and err == (
            f"kvldp: error: --state-dir is for --role all; a {role} keeps its state in kvldp.demo.state\n"
        )
    # the port is taken indeed: the same command line without --state-dir meets it
    code, _, err = run(capsys, *aggregate_argv(taken_port, "--role", "worker"))
    assert (code, err) == (2, f"kvldp: error: metrics port {taken_port} on 127.0.0.1 is already in use\n")


def test_aggregate_checks_its_metrics_security_flags_before_the_port(
    capsys: pytest.CaptureFixture[str], taken_port: str, tmp_path: Path
) -> None:
    no_password = tmp_path / "auth"
    no_password.write_text("telemetry\n")
    pem = str(DEMO_COLLECTIONS / "demo.toml")  # any readable file: the pair is refused unread
    for flags, error in (
        (["--metrics-tls-cert", pem], "--metrics-tls-cert and --metrics-tls-key go together"),
        (["--metrics-tls-key", pem], "--metrics-tls-cert and --metrics-tls-key go together"),
        (["--metrics-basic-auth-file", str(no_password)], str(no_password)),
    ):
        code, _, err = run(capsys, *aggregate_argv(taken_port, *flags))
        assert code == 2 and error in err and "in use" not in err, (flags, err)


def test_demo_checks_its_flags_before_the_port(
    capsys: pytest.CaptureFixture[str], taken_port: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KVLDP_BOOTSTRAP_SERVERS", raising=False)  # the embedded broker's demo
    demo = ["demo", "--users", "10", "--metrics-port", taken_port]
    code, _, err = run(capsys, *demo, "--dataset", "nope")
    assert code == 2 and err.startswith("kvldp: error: unknown dataset 'nope'"), err
    rounds = str(DEMO_COLLECTIONS / "privkvm.toml")
    code, _, err = run(capsys, *demo, "--collection", rounds)
    assert code == 2 and "--users 10 would never close one" in err, err
    code, _, err = run(capsys, *demo)
    assert (code, err) == (
        2,
        f"kvldp: error: metrics port {taken_port} on 127.0.0.1 is in use (pass --metrics-port)\n",
    )


def test_broker_checks_its_flags_before_the_port(capsys: pytest.CaptureFixture[str], taken_port: str) -> None:
    pem = str(DEMO_COLLECTIONS / "demo.toml")
    code, _, err = run(capsys, "broker", "--port", taken_port, "--tls-cert", pem)
    assert code == 2 and "needs both a certificate and its private key" in err, err
    code, _, err = run(capsys, "broker", "--port", taken_port)
    assert (code, err) == (2, f"kvldp: error: port {taken_port} on 127.0.0.1 is already in use\n")


@pytest.mark.parametrize("command", ["aggregate", "demo", "broker", "gateway"])
def test_a_port_out_of_range_is_a_flag_error(capsys: pytest.CaptureFixture[str], command: str) -> None:
    flag = "--port" if command in ("broker", "gateway") else "--metrics-port"
    with pytest.raises(SystemExit) as info:
        main([command, flag, "65536"])
    assert info.value.code == 2
    assert f"argument {flag}: expected 0 to 65535, got 65536" in capsys.readouterr().err


def test_bench_reliability_names_its_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "reliability", "--scenario", "nope"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --scenario: invalid choice: 'nope' (choose from 'crash_recovery', " in err


def test_a_reader_that_leaves_the_pipe_ends_the_command_quietly() -> None:
    """``kvldp mechanisms | head -1``: standard output's reader has gone before the command
    writes; the command stops with SIGPIPE's status and no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-m", "kvldp", "mechanisms"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (128 + signal.SIGPIPE, "")


def test_evaluate_help_names_every_estimator(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    offered = sorted({e for n in names() for e in create(n, 4, 1.0).estimator_names})
    assert {"eb", "robust"} <= set(offered)
    assert f"one of: unbiased, {', '.join(e for e in offered if e != 'unbiased')};" in text
