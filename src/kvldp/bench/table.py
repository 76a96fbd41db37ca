"""Text tables every ``kvldp bench`` subcommand prints (``--json`` prints the rows instead)."""

from __future__ import annotations

from typing import Any


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """Fixed-width text table of ``rows`` (numbers with 4 significant digits)."""

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    body = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(lines)
