"""Progress of a long command on stderr: a bar redrawn in place on a terminal, and on
anything else (a CI log, a log collector, a file) one line every :data:`LOG_EVERY_S`
seconds, so that a long run does not look dead until its end. A run shorter than that
prints nothing but on a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

#: seconds between two progress lines when stderr is not a terminal
LOG_EVERY_S = 10.0


class Progress:
    """``with Progress(total, "label") as bar: bar.advance()``."""

    def __init__(
        self,
        total: int,
        label: str,
        stream: TextIO | None = None,
        width: int = 30,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.clock = clock
        self.done = 0
        #: False silences it (a command printing JSON, a caller that shows no progress)
        self.enabled = True
        #: whether it draws a bar in place (else lines, in a log)
        self.terminal = self.stream.isatty()
        self.started = clock()
        self._next_line = self.started + LOG_EVERY_S
        self._lines = 0

    def __enter__(self) -> Progress:
        self._draw()
        return self

    def advance(self, steps: int = 1) -> None:
        self.done = min(self.total, self.done + steps)
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        now = self.clock()
        frac = self.done / self.total
        elapsed = now - self.started
        eta = elapsed / frac - elapsed if frac > 0 else float("nan")
        if self.terminal:
            filled = round(frac * self.width)
            bar = "#" * filled + "-" * (self.width - filled)
            self.stream.write(
                f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s eta {eta:5.1f}s"
            )
        elif now >= self._next_line:
            self._next_line = now + LOG_EVERY_S
            self._lines += 1
            left = f", about {eta:.0f} s left" if frac > 0 else ""
            self.stream.write(
                f"{self.label}: {self.done}/{self.total} ({frac:.0%}) after {elapsed:.0f} s{left}\n"
            )
        else:
            return
        self.stream.flush()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.enabled:
            return
        if self.terminal:
            self.stream.write("\n")
        elif self._lines and exc_type is None:  # a long run's log ends with its total
            self.stream.write(
                f"{self.label}: {self.done}/{self.total} in {self.clock() - self.started:.0f} s\n"
            )
        self.stream.flush()
