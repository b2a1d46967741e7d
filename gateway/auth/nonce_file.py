"""The signature nonces used within the replay window, across a restart.

A nonce is accepted once per partner within twice the replay window, but the caches live in
memory: a request captured before a restart could be sent again after it. So a clean stop
saves them (``<data dir>/nonces.json``) and the next start takes them back. When there is
nothing to take back after a crash, a signature made before this start, or in its own
second, is refused: its nonce cannot be checked against those used before. A data directory
whose store never opened has nothing to replay.

That leaves signatures made by a clock ahead of the gateway's: one taken just before a crash
may carry a time after the next start. Before such a signature is taken, the partner's mark
(``<data dir>/signature_marks.json``: a time a little beyond it, ``MARK_AHEAD_S``) is
written, and after a crash that partner's signatures up to its mark are refused. A partner
whose clock is right never has one written. When the marks cannot be read after a crash,
every partner's signatures up to the start plus the replay window are refused.

Each start writes a new run id into the marks file, and a clean stop writes it into
``nonces.json`` with the limits a crash before it set (they hold until the window has passed
them): a ``nonces.json`` of another run (a stale copy) is not taken back.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path

from gateway.auth.authenticator import MARK_AHEAD_S, Authenticator

__all__ = ["load_nonces", "save_nonces", "MARKS_FILE", "NONCES_FILE"]

NONCES_FILE = "nonces.json"
MARKS_FILE = "signature_marks.json"
log = logging.getLogger("entrepot.auth")


def load_nonces(authenticator: Authenticator, data_dir: Path) -> None:
    """Take back the nonces and limits the last run's clean stop saved (then the file is
    removed: a crash after this start must not find it), or refuse signatures made up to
    this start's second and those up to each partner's mark; then start a run whose marks
    are written as signatures ahead of the clock come."""
    now = time.time()
    marks_path = data_dir / MARKS_FILE
    run, marks = _read_marks(marks_path)
    saved = _take_saved(data_dir / NONCES_FILE)
    if saved is not None and run is not None and saved.get("run") == run:
        _take_back(authenticator, saved, now)
    elif (data_dir / "qm.json").exists():  # a crash, or a store that never opened
        authenticator.signed_after = float(int(now) + 1)
        ceiling = int(now + authenticator.window_s) + MARK_AHEAD_S  # no mark can be later
        if run is None:
            log.warning("%s missing or unreadable (after a crash, or in a restored data "
                        "directory): every partner's signatures made up to %d are refused, "
                        "since replays of them cannot be told apart", marks_path, ceiling)
            marks = {name: ceiling for name in authenticator.nonces}
        authenticator.signed_after_by_partner = {
            name: min(mark, ceiling) for name, mark in marks.items()}
    authenticator.run = secrets.token_hex(8)
    authenticator.marked = dict(marks)
    authenticator.mark = lambda marked: _write_marks(marks_path, authenticator.run, marked)
    if not _write_marks(marks_path, authenticator.run, marks):
        log.warning("signatures ahead of the gateway's clock are refused until %s can be "
                    "written", marks_path)


def save_nonces(authenticator: Authenticator, data_dir: Path) -> None:
    """At a clean stop: the run, the nonces still inside the window and the limits a crash
    set, for the next start (written even when there are none: the file says the stop was
    clean)."""
    path = data_dir / NONCES_FILE
    building = path.with_name(NONCES_FILE + ".tmp")
    doc = {"run": authenticator.run, "signed_after": authenticator.signed_after,
           "signed_after_by_partner": authenticator.signed_after_by_partner,
           "partners": {name: cache.entries() for name, cache in authenticator.nonces.items()}}
    try:
        building.write_text(json.dumps(doc))
        os.replace(building, path)
    except OSError as exc:  # then the next start refuses signatures made before it
        building.unlink(missing_ok=True)
        log.warning("signature nonces not saved (%s): signatures made before the next "
                    "start will be refused", exc)


def _take_saved(path: Path) -> dict[str, object] | None:
    """The saved document, removed; None when there is none or it cannot be read."""
    try:
        saved = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s unreadable (%s): signatures made before this start are refused", path,
                    exc)
        return None
    finally:
        path.unlink(missing_ok=True)
    return saved if isinstance(saved, dict) else None


def _take_back(authenticator: Authenticator, saved: Mapping[str, object], now: float) -> None:
    partners = saved.get("partners")
    for partner, entries in (partners.items() if isinstance(partners, dict) else ()):
        cache = authenticator.nonces.get(partner)
        if cache is None or not isinstance(entries, list):
            continue
        for entry in entries:
            if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                    and isinstance(entry[1], (int, float)) and cache.check(entry[0], now)):
                cache.add(entry[0], float(entry[1]))
    after = saved.get("signed_after")
    authenticator.signed_after = float(after) if isinstance(after, (int, float)) else 0.0
    limits = saved.get("signed_after_by_partner")
    authenticator.signed_after_by_partner = {
        name: limit for name, limit in (limits.items() if isinstance(limits, dict) else ())
        if isinstance(name, str) and type(limit) is int}


def _read_marks(path: Path) -> tuple[str | None, dict[str, int]]:
    """(the run that wrote the marks, each partner's mark); (None, {}) when the file is
    missing or is not one this module wrote."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None, {}
    except (OSError, ValueError) as exc:
        log.warning("%s unreadable (%s)", path, exc)
        return None, {}
    run = doc.get("run") if isinstance(doc, dict) else None
    partners = doc.get("partners") if isinstance(doc, dict) else None
    if (not isinstance(run, str) or not isinstance(partners, dict)
            or not all(isinstance(k, str) and type(v) is int for k, v in partners.items())):
        log.warning("%s is not a file of signature marks", path)
        return None, {}
    return run, dict(partners)


def _write_marks(path: Path, run: str, marks: Mapping[str, int]) -> bool:
    """The run and the marks, replacing the file whole (a few bytes a partner; written
    rarely); False when it could not be written."""
    building = path.with_name(MARKS_FILE + ".tmp")
    try:
        building.write_text(json.dumps({"run": run, "partners": dict(marks)}))
        os.replace(building, path)
    except OSError as exc:
        building.unlink(missing_ok=True)
        log.warning("signature marks not written (%s)", exc)
        return False
    return True
