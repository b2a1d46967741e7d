"""How the command line shows things: aligned tables, JSON for scripts, a progress bar on a
terminal (nothing on a pipe, so scripts read clean output)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["print_table", "print_json", "Progress"]


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]],
                out: TextIO | None = None, empty: str = "(none)") -> None:
    """``columns``: (key, heading). Numbers right-aligned, text left-aligned."""
    out = out or sys.stdout
    if not rows:
        print(empty, file=out)
        return
    cells = [[_text(row.get(key)) for key, _ in columns] for row in rows]
    numeric = [all(isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool)
                   for row in rows) for key, _ in columns]
    widths = [max(len(heading), *(len(line[i]) for line in cells))
              for i, (_, heading) in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w)
                 for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    print(line([heading for _, heading in columns]), file=out)
    for values in cells:
        print(line(values), file=out)


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)


def print_json(doc: Any, out: TextIO | None = None) -> None:
    print(json.dumps(doc, indent=2, ensure_ascii=False), file=out or sys.stdout)


class Progress:
    """``[#####.....]  50%  500/1000 label`` redrawn on stderr when it is a terminal."""

    def __init__(self, total: int | None, label: str, out: TextIO | None = None) -> None:
        self.total, self.label, self.out = total, label, out or sys.stderr
        self.done = 0
        self._shown = 0.0
        self._live = self.out.isatty()

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self._live and now - self._shown >= 0.1:
            self._shown = now
            self._draw()

    def _draw(self) -> None:
        if self.total:
            share = min(1.0, self.done / self.total)
            bar = "#" * int(share * 30)
            self.out.write(f"\r[{bar:<30}] {share:4.0%} {self.done}/{self.total} {self.label}")
        else:
            self.out.write(f"\r{self.done} {self.label}")
        self.out.flush()

    def finish(self) -> None:
        if self._live:
            self._draw()
            self.out.write("\n")
            self.out.flush()
