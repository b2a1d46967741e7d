"""The signature nonces used within the replay window, across a restart.

A nonce is accepted once per partner within twice the replay window, but the caches live in
memory: a request captured before a restart could be sent again after it. So a clean stop
saves them (``<data dir>/nonces.json``) and the next start takes them back. When there is
nothing to take back after a crash, a signature made before this start is refused: its
nonce cannot be checked against those used before. A data directory whose store never
opened has nothing to replay.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from gateway.auth.authenticator import Authenticator

__all__ = ["load_nonces", "save_nonces", "NONCES_FILE"]

NONCES_FILE = "nonces.json"
log = logging.getLogger("entrepot.auth")


def load_nonces(authenticator: Authenticator, data_dir: Path) -> None:
    """Take back the nonces a clean stop saved (then the file is removed: a crash after this
    start must not find them), or refuse signatures made before now."""
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
