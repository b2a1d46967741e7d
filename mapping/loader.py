"""Loading mapping files from a directory, and reloading them (I/O shell).

Every ``*.xml`` file in the directory is read and parsed; the rule set is rebuilt from the
results and replaces the old one in one assignment, so a reader never sees half of a reload.
A file that fails (unreadable, malformed, a DTD...) is reported — like MSMQ's event 2156 — and,
on a reload, its previous good version keeps applying; the other files are unaffected.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from mapping.engine import combine
from mapping.logs import reload_log
from mapping.parse import FILE_BYTES_MAX, MappingFile, MappingSyntaxError, parse_mapping
from mapping.rules import RuleSet

__all__ = ["MappingLoader", "LoadReport"]


@dataclass(slots=True)
class LoadReport:
    loaded: list[str] = field(default_factory=list)
    rejected: list[MappingSyntaxError] = field(default_factory=list)
    kept_previous: list[str] = field(default_factory=list)


class MappingLoader:
    """The current rule set of one mapping directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.rules = RuleSet()
        self.reloads = 0
        self.rejected_total = 0
        self._good: dict[str, MappingFile] = {}
        self._seen: dict[str, tuple[int, int, int]] = {}

    def load(self) -> LoadReport:
        """(Re)read the directory. Blocking: call it off the event loop."""
        report = LoadReport()
        good: dict[str, MappingFile] = {}
        seen: dict[str, tuple[int, int, int]] = {}
        for path in sorted(self.directory.glob("*.xml")) if self.directory.is_dir() else []:
            try:
                stat = path.stat()
                seen[path.name] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
                if stat.st_size > FILE_BYTES_MAX:
                    raise MappingSyntaxError(path.name, 0, f"larger than {FILE_BYTES_MAX} bytes")
                good[path.name] = parse_mapping(path.read_bytes(), source=path.name)
                report.loaded.append(path.name)
            except OSError as exc:
                report.rejected.append(MappingSyntaxError(path.name, 0, f"cannot read: {exc}"))
            except MappingSyntaxError as exc:
                report.rejected.append(exc)
        for error in report.rejected:
            reload_log.error("mapping file %s ignored: line %d: %s", error.source, error.line,
                             error.reason)
            previous = self._good.get(error.source)
            if previous is not None:
                good[error.source] = previous
                report.kept_previous.append(error.source)
        self._good, self._seen = good, seen
        self.rules = combine(list(good.values()))  # one assignment: readers see old or new
        self.reloads += 1
        self.rejected_total += len(report.rejected)
        return report

    def changed(self) -> bool:
        """True when a file was added, removed or modified since the last load. Blocking."""
        now: dict[str, tuple[int, int, int]] = {}
        if self.directory.is_dir():
            for entry in os.scandir(self.directory):
                if entry.name.endswith(".xml") and entry.is_file():
                    stat = entry.stat()
                    now[entry.name] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        return now != self._seen
