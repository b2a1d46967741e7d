"""The id, owner and time of preparation of each prepared transaction, kept beside the store
in ``<data dir>/transactions.json`` so that they survive a restart (the store knows a prepared
transaction by its internal number only).

An entry is written, synced and renamed into place before the store prepares, so every
prepared transaction has one; an entry whose transaction the store no longer holds (a crash
between the store's commit or abort and the entry's removal) is dropped at the next start.
Store transaction numbers are never reused, so such an entry cannot name another transaction.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from gateway.logs import server_log

__all__ = ["PreparedNames", "Named", "FILE_NAME", "TX_ID_PATTERN"]

FILE_NAME = "transactions.json"
TX_ID_PATTERN = re.compile(r"tx-[A-Za-z0-9_-]{22}")
_LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z


@dataclass(frozen=True, slots=True)
class Named:
    id: str
    owner: str | None  # gateway.queues.transactions.owner_key; None: the admin resolves it
    # When it was prepared (Unix seconds); None in an entry written before times were kept.
    prepared_at: float | None = None


class PreparedNames:
    """The entries of prepared transactions, by store transaction number."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE_NAME
        self._entries: dict[int, Named] = {}
        self._lock = asyncio.Lock()

    def load(self) -> dict[int, Named]:
        """The entries on disk, kept as the current ones; an unreadable file counts as none
        (logged). Blocking."""
        self._entries = self._read()
        return dict(self._entries)

    def _read(self) -> dict[int, Named]:
        try:
            doc = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            server_log.warning("%s unreadable, prepared transactions get new ids: %s",
                               self.path, exc)
            return {}
        entries: dict[int, Named] = {}
        prepared = doc.get("prepared") if isinstance(doc, dict) else None
        for key, value in (prepared.items() if isinstance(prepared, dict) else ()):
            if (re.fullmatch(r"[0-9]{1,20}", key) and isinstance(value, dict)
                    and isinstance(value.get("id"), str) and TX_ID_PATTERN.fullmatch(value["id"])
                    and isinstance(value.get("owner"), (str, type(None)))):
                entries[int(key)] = Named(value["id"], value["owner"],
                                          _time_of(key, value.get("prepared_at")))
            else:
                server_log.warning("%s: entry %r ignored", self.path, key)
        return entries

    async def replace(self, entries: dict[int, Named]) -> None:
        """Raises: OSError when the file cannot be written."""
        self._entries = dict(entries)
        await self._save()

    async def put(self, tx_id: int, named: Named) -> None:
        """Raises: OSError when the entry cannot be made durable."""
        self._entries[tx_id] = named
        try:
            await self._save()
        except OSError:
            self._entries.pop(tx_id, None)
            raise

    async def drop(self, tx_id: int) -> None:
        """Forget an ended transaction's entry; a failed write is logged (the next start
        drops the entry anyway)."""
        if self._entries.pop(tx_id, None) is None:
            return
        try:
            await self._save()
        except OSError as exc:
            server_log.warning("%s not rewritten: %s", self.path, exc)

    async def _save(self) -> None:
        async with self._lock:  # the snapshot taken under the lock: the last write wins
            doc = {"prepared": {str(k): {"id": v.id, "owner": v.owner,
                                         "prepared_at": v.prepared_at}
                                for k, v in sorted(self._entries.items())}}
            await asyncio.get_running_loop().run_in_executor(
                None, self._write, json.dumps(doc, indent=1).encode())

    def _write(self, data: bytes) -> None:
        building = self.path.with_name(FILE_NAME + ".tmp")
        with open(building, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(building, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _time_of(key: str, value: object) -> float | None:
    """An entry's ``prepared_at``: Unix seconds up to the end of year 9999 (what a date-time
    shows), or None (absent, or not such a number: logged; the id and owner are kept all the
    same). Compared, not converted: an integer too large for a float is refused, not raised."""
    if value is None:
        return None
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
            and 0 <= value <= _LAST_SECOND):  # NaN compares false
        return float(value)
    server_log.warning("transaction entry %r: prepared_at %r ignored", key, value)
    return None
