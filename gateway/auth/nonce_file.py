"""The signature nonces used within the replay window, across a restart.

A nonce is accepted once per partner within twice the replay window, but the caches live in
memory: a request captured before a restart could be sent again after it. So a clean stop
saves them (``<data dir>/nonces.json``) and the next start takes them back. When there is
nothing to take back after a crash, a signature made before this start is refused: its
nonce cannot be checked against those used before. A data directory whose store never
opened has nothing to replay.

That leaves signatures made by a clock ahead of the gateway's: one taken just before a crash
may carry a time after the next start. Before such a signature is taken, the partner's mark
(``<data dir>/signature_marks.json``: a time a little beyond it, ``MARK_AHEAD_S``) is
written, and after a crash that partner's signatures up to its mark are refused. A partner
whose clock is right never has one written.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from gateway.auth.authenticator import Authenticator

__all__ = ["load_nonces", "save_nonces", "MARKS_FILE", "NONCES_FILE"]

NONCES_FILE = "nonces.json"
MARKS_FILE = "signature_marks.json"
log = logging.getLogger("entrepot.auth")


def load_nonces(authenticator: Authenticator, data_dir: Path) -> None:
    """Take back the nonces a clean stop saved (then the file is removed: a crash after this
    start must not find them), or refuse signatures made before now and those up to each
    partner's mark; from now on, write the marks."""
    marks = _read_marks(data_dir / MARKS_FILE)
    authenticator.marked = dict(marks)
    authenticator.mark = lambda marked: _write_marks(data_dir / MARKS_FILE, marked)
    authenticator.signed_after_by_partner = marks  # until the saved nonces are taken back
    path = data_dir / NONCES_FILE
    # A data directory whose store never opened (no qm.json yet) has had no traffic to
    # replay. A signature's ts is whole seconds: one of the start's own second is taken (a
    # restart takes longer than the rest of the second it began in).
    authenticator.signed_after = (float(int(time.time())) if (data_dir / "qm.json").exists()
                                  else 0.0)
    try:
        saved = json.loads(path.read_text())
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        log.warning("%s unreadable (%s): signatures made before this start are refused", path,
                    exc)
        return
    finally:
        path.unlink(missing_ok=True)
    now = time.time()
    for partner, entries in (saved.get("partners", {}) if isinstance(saved, dict) else {}
                             ).items():
        cache = authenticator.nonces.get(partner)
        if cache is None or not isinstance(entries, list):
            continue
        for entry in entries:
            if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                    and isinstance(entry[1], (int, float)) and cache.check(entry[0], now)):
                cache.add(entry[0], float(entry[1]))
    authenticator.signed_after = 0.0
    authenticator.signed_after_by_partner = {}


def save_nonces(authenticator: Authenticator, data_dir: Path) -> None:
    """At a clean stop: the nonces still inside the window, for the next start (written
    even when there are none: the file says the stop was clean)."""
    path = data_dir / NONCES_FILE
    building = path.with_name(NONCES_FILE + ".tmp")
    doc = {"partners": {name: cache.entries() for name, cache in authenticator.nonces.items()}}
    try:
        building.write_text(json.dumps(doc))
        os.replace(building, path)
    except OSError as exc:  # then the next start refuses signatures made before it
        building.unlink(missing_ok=True)
        log.warning("signature nonces not saved (%s): signatures made before the next "
                    "start will be refused", exc)


def _read_marks(path: Path) -> dict[str, int]:
    """Each partner's mark; none when the file is missing or unreadable (then a crash
    before it was written is covered only by the start's own time)."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s unreadable (%s): signatures made ahead of the clock before a crash "
                    "are not told apart", path, exc)
        return {}
    partners = doc.get("partners") if isinstance(doc, dict) else None
    if not isinstance(partners, dict):
        return {}
    return {name: mark for name, mark in partners.items()
            if isinstance(name, str) and isinstance(mark, int)}


def _write_marks(path: Path, marks: Mapping[str, int]) -> None:
    """The marks, replacing the file whole (a few bytes a partner; written rarely)."""
    building = path.with_name(MARKS_FILE + ".tmp")
    try:
        building.write_text(json.dumps({"partners": dict(marks)}))
        os.replace(building, path)
    except OSError as exc:
        building.unlink(missing_ok=True)
        log.warning("signature marks not written (%s): after a crash, signatures made ahead "
                    "of the clock before it could be taken again", exc)
