"""Progress on stderr: a bar on a terminal; in a log, one line every LOG_EVERY_S seconds of
a long run and its total at the end, nothing for a short run."""

from __future__ import annotations

import io

import pytest

from kvldp.progress import LOG_EVERY_S, Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_long_run_logs_a_line_every_period_and_its_total() -> None:
    clock, log = Clock(), io.StringIO()
    with Progress(40, "produce c", stream=log, clock=clock) as bar:
        for _ in range(40):
            clock.now += 1.0  # 40 s in all
            bar.advance()
    assert log.getvalue().splitlines() == [
        "produce c: 10/40 (25%) after 10 s, about 30 s left",
        "produce c: 20/40 (50%) after 20 s, about 20 s left",
        "produce c: 30/40 (75%) after 30 s, about 10 s left",
        "produce c: 40/40 (100%) after 40 s, about 0 s left",
        "produce c: 40/40 in 40 s",
    ]
    assert LOG_EVERY_S == 10.0


def test_a_short_run_logs_nothing_and_a_failed_one_no_total() -> None:
    clock, log = Clock(), io.StringIO()
    with Progress(5, "quick", stream=log, clock=clock) as bar:
        clock.now += 9.0
        bar.advance(5)
    assert log.getvalue() == ""
    with pytest.raises(RuntimeError), Progress(5, "failing", stream=log, clock=clock) as bar:
        clock.now += 12.0
        bar.advance()
        raise RuntimeError("bad row")
    assert log.getvalue() == "failing: 1/5 (20%) after 12 s, about 48 s left\n"
