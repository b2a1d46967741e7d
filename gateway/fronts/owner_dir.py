"""Where the store owner's socket for forwarded requests lives: a directory of its own
(mode 0700), named with its process id, so that one killed with SIGKILL leaves nothing the
next start does not clear.

Under the data directory's ``run/`` when the socket's path fits the 107 bytes a Unix socket
address holds, else under the temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

__all__ = ["make_owner_dir", "SOCKET_NAME"]

SOCKET_NAME = "owner.sock"
_PREFIX = "entrepot-owner-"
_NAME = re.compile(rf"^{_PREFIX}(\d+)-")
_ADDRESS_MAX = 107  # sun_path, less its final NUL
_LONGEST = len(f"/{_PREFIX}4194304-abcdefgh/{SOCKET_NAME}")


def make_owner_dir(data_dir: str) -> Path:
    """A new directory for this owner's socket, after removing those of owners that are
    no longer running (same user: another user's cannot be ours)."""
    run = Path(data_dir).resolve() / "run"
    if len(os.fsencode(run)) + _LONGEST <= _ADDRESS_MAX:
        run.mkdir(mode=0o700, exist_ok=True)
        base = run
    else:
        base = Path(tempfile.gettempdir())
    _clear_stale(base)
    return Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=base))


def _clear_stale(base: Path) -> None:
    uid = os.getuid()
    for entry in base.iterdir():
        found = _NAME.match(entry.name)
        if found is None or _running(int(found.group(1))):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir() and entry.stat().st_uid == uid:
                shutil.rmtree(entry)


def _running(pid: int) -> bool:
    """A live process (a zombie, dead and not yet reaped by its parent, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
