"""Offline commands on a data directory: ``entrepot check`` (backup and restore to come)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gateway.errors import StartupError
from store.check import check_data_dir
from store.errors import StoreError

__all__ = ["run_check"]


def _progress(done: int, total: int, name: str) -> None:
    if sys.stderr.isatty():
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\\rchecking [{'#' * filled}{'.' * (width - filled)}] "
                         f"{done}/{total} {name}")
        if done == total:
            sys.stderr.write("\\n")
        sys.stderr.flush()


def run_check(data_dir: Path, *, as_json: bool) -> int:
    """Verify ``data_dir``; print the report; 0 when whole, 1 when anything is damaged.

    Raises:
        StartupError: the directory does not exist, is in use or cannot be read (exit 2).
    """
    if not (data_dir / "storage").is_dir():
        raise StartupError(f"{data_dir}: not an entrepot data directory (no storage/)")
    try:
        report = check_data_dir(data_dir, progress=_progress)
    except StoreError as exc:
        raise StartupError(f"{data_dir}: {exc}") from exc
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0 if report.ok else 1
    print(f"data dir     {data_dir}")
    epoch = report.checkpoint_epoch
    print(f"checkpoint   {epoch if epoch is not None else 'none'}")
    print(f"segments     {report.segments} ({report.bytes_checked} bytes, "
          f"{report.full_scans} full scans)")
    print(f"records      {report.records} verified")
    for damage in report.damaged:
        print(f"DAMAGED      {damage.file} offset={damage.offset} length={damage.length}: "
              f"{damage.reason}")
    for problem in report.problems:
        print(f"PROBLEM      {problem}")
    print("result       " + ("ok" if report.ok else
                             f"{len(report.damaged)} damaged, {len(report.problems)} problems"))
    return 0 if report.ok else 1
