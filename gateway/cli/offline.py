"""Commands on a data directory: ``entrepot check``, ``backup`` and ``restore``."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path

from gateway.cli.admin_client import AdminError, ca_context
from gateway.cli.state_queues import STATE_QUEUES
from gateway.errors import StartupError
from gateway.queues.identity import BACKED_UP, QM_FILE, guid_in
from gateway.queues.state_records import why_unreadable
from store.backup import backup_offline
from store.check import RecordReader, check_data_dir
from store.errors import StoreError, StoreLocked
from store.options import StoreOptions
from store.restore import restore
from store.space import RESERVE_BYTES

__all__ = ["run_check", "run_backup", "run_restore"]


def _bar(verb: str, done: int, total: int, name: str) -> None:
    """A one-line progress bar on a terminal (nothing when stderr is not one)."""
    if sys.stderr.isatty():
        width = 30
        filled = width * done // max(total, 1)
        sys.stderr.write(f"\r{verb} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{done * 100 // max(total, 1):3d}% {name[:30]:<30}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _progress(done: int, total: int, name: str) -> None:
    _bar("checking", done, total, name)


class _Refused(Exception):
    """The running gateway refused the backup (exit 1), or cannot be reached (exit 3)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def run_backup(data_dir: Path, dest: Path, *, token: str = "") -> int:
    """Back up ``data_dir`` into ``dest``: directly when no gateway holds it, else through the
    gateway that does (named in ``<data dir>/gateway.json``, asked with the admin ``token``).
    Returns 1 when that gateway refuses or the copy fails (DEST is left as it was), 3 when
    it cannot be reached (the reason on stderr).

    Raises:
        StartupError: not a data directory, or the target not empty.
    """
    if not (data_dir / "storage").is_dir():
        raise StartupError(f"{data_dir}: not an entrepot data directory (no storage/)")
    try:
        report = backup_offline(data_dir, dest,
                                lambda d, t, n: _bar("backing up", d, t, n), BACKED_UP)
        files, size, seconds = report.files, report.bytes, report.seconds
    except StoreLocked:
        try:
            files, size, seconds = _backup_online(data_dir, dest, token)
        except _Refused as exc:
            print(f"entrepot: {exc}", file=sys.stderr)
            return exc.code
    except StoreError as exc:
        raise StartupError(str(exc)) from exc
    except OSError as exc:  # DEST is left as it was (store.backup removes what it wrote)
        print(f"entrepot: backup of {data_dir} to {dest} failed: {exc}; nothing was kept "
              f"in {dest}", file=sys.stderr)
        return 1
    print(f"backup of {data_dir} written to {dest}: {files} files, {size} bytes, "
          f"{seconds:.1f}s (manifest: {dest / 'MANIFEST.json'})")
    return 0


def _backup_online(data_dir: Path, dest: Path, token: str) -> tuple[int, int, float]:
    try:
        url = json.loads((data_dir / "gateway.json").read_text())["url"]
    except (OSError, ValueError, KeyError) as exc:
        raise StartupError(f"{data_dir} is in use, but no gateway.json says by which "
                           "gateway") from exc
    body = json.dumps({"dest": str(dest.resolve())}).encode()
    headers = {"Content-Type": "application/json"}
    if token:  # a gateway with credentials wants the admin's
        headers["Authorization"] = "Bearer " + token
    try:  # a gateway with a self-signed certificate
        context = ca_context(os.environ.get("ENTREPOT_CAFILE", ""), "$ENTREPOT_CAFILE")
    except AdminError as exc:
        raise _Refused(str(exc), 1) from None
    request = urllib.request.Request(url + "/v1/admin/backup", data=body, method="POST",
                                     headers=headers)
    print(f"{data_dir} is held by the gateway at {url}: asking it for the backup",
          file=sys.stderr)
    try:
        with urllib.request.urlopen(request, timeout=3600, context=context) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read() or b"{}").get("detail", exc.reason)
        except ValueError:
            detail = exc.reason
        if exc.code == 409:  # DEST not empty: as the offline backup says it
            raise StartupError(f"the gateway refused the backup: {detail}") from exc
        hint = (" (give the admin key: --token, --token-file or $ENTREPOT_TOKEN)"
                if exc.code in (401, 403) else "")
        raise _Refused(f"the gateway refused the backup: {detail}{hint}", 1) from exc
    except OSError as exc:
        raise _Refused(f"cannot reach the gateway at {url}: {exc}", 3) from exc
    return int(answer["files"]), int(answer["bytes"]), float(answer["seconds"])


def run_restore(src: Path, data_dir: Path) -> int:
    """Restore ``src`` into the empty ``data_dir`` and verify it. Returns 1 when the copy
    fails (``data_dir`` is left as it was) or records are damaged.

    Raises:
        StartupError: a bad or damaged backup, or a target that is not empty.
    """
    identity = src / QM_FILE
    if identity.is_file() and guid_in(identity.read_text(errors="replace")) is None:
        raise StartupError(f"{identity}: holds no queue manager GUID (a damaged backup)")
    try:
        report = restore(src, data_dir, StoreOptions(),
                         lambda d, t, n: _bar("restoring", d, t, n), BACKED_UP)
    except StoreError as exc:
        raise StartupError(str(exc)) from exc
    except OSError as exc:  # DATA_DIR is left as it was (store.restore removes what it wrote)
        print(f"entrepot: restore of {src} into {data_dir} failed: {exc}; nothing was kept "
              f"in {data_dir}", file=sys.stderr)
        return 1
    if not (data_dir / QM_FILE).exists():
        print(f"entrepot: {src} holds no {QM_FILE} (a backup of an older version): the restored "
              "gateway makes a new GUID at its start, so it is another queue manager to its "
              "peers", file=sys.stderr)
    print(f"restored {report.files} files ({report.bytes} bytes) into {data_dir}; "
          f"{report.live_records} messages recovered, {report.damaged} damaged, "
          f"{report.seconds:.1f}s")
    if not report.reserve_whole:  # restored whole, but a start would refuse new messages
        print(f"entrepot: {data_dir}'s disk has no room left for the store's space reserve "
              f"({RESERVE_BYTES} bytes): a gateway started on it refuses new messages (507) "
              "until room is made", file=sys.stderr)
    if report.damaged:  # the exit code alone would leave a script to think nothing is there
        print(f"entrepot: damaged records of {src} set aside in {data_dir}/storage/quarantine/: "
              f"{report.damaged}; the rest is restored and kept in {data_dir} (see "
              f"`entrepot check {data_dir}`)", file=sys.stderr)
    return 0 if report.damaged == 0 else 1


def run_check(data_dir: Path, *, as_json: bool) -> int:
    """Verify ``data_dir`` and read its internal queues' records as a start would; print the
    report; 0 when whole, 1 when anything is damaged or a start would set a record aside.

    Raises:
        StartupError: the directory does not exist, is in use or cannot be read (exit 2).
    """
    if not (data_dir / "storage").is_dir():
        raise StartupError(f"{data_dir}: not an entrepot data directory (no storage/)")
    try:
        readers: dict[str, RecordReader] = {
            queue: partial(why_unreadable, state) for queue, state in STATE_QUEUES.items()}
        report = check_data_dir(data_dir, progress=_progress, readers=readers)
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
    for refused in report.refused:
        print(f"QUARANTINE   {refused.queue}:{refused.seq}: {refused.reason}")
    print("result       " + ("ok" if report.ok else
                             f"{len(report.damaged)} damaged, {len(report.problems)} problems, "
                             f"{len(report.refused)} to quarantine"))
    return 0 if report.ok else 1
