"""A dependency-free progress bar on stderr, drawn only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO


class Progress:
    """``with Progress(total, "label") as bar: bar.advance()`` — silent when not a TTY."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.done = 0
        self.enabled = self.stream.isatty()
        self.started = time.perf_counter()

    def __enter__(self) -> Progress:
        self._draw()
        return self

    def advance(self, steps: int = 1) -> None:
        self.done = min(self.total, self.done + steps)
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        frac = self.done / self.total
        filled = round(frac * self.width)
        elapsed = time.perf_counter() - self.started
        eta = elapsed / frac - elapsed if frac > 0 else float("nan")
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s eta {eta:5.1f}s")
        self.stream.flush()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
