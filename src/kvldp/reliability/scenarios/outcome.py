"""What a reliability scenario hands back: the figures it measured and the checks that
failed.

Every scenario module builds one :class:`Outcome`; the runner and the tests read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """What a scenario measured, and which of its checks failed."""

    name: str
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    @property
    def passed(self) -> bool:
        return not self.failures
