"""The id, owner and time of preparation of each prepared transaction, kept beside the store
in ``<data dir>/transactions.json`` so that they survive a restart (the store knows a prepared
transaction by its internal number only).

An entry is written, synced and renamed into place before the store prepares, so every
prepared transaction has one; an entry whose transaction the store no longer holds (a crash
between the store's commit or abort and the entry's removal) is dropped at the next start.
Store transaction numbers are never reused, so such an entry cannot name another transaction.

A backup of the running store copies the file right after the store's log (QMLog): while it
runs (``holding``), an ended transaction's entry stays in the file, so that every
transaction the copied log has prepared has its entry in the copied file, whenever it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import AsyncIterator
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
        self._holds = 0
        self._ended: dict[int, Named] = {}  # dropped while held: still written

    @contextlib.asynccontextmanager
    async def holding(self) -> AsyncIterator[None]:
        """While a backup copies the store and this file: entries dropped stay written."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1
            if not self._holds and self._ended:
                self._ended.clear()
                try:
                    await self._save()
                except OSError as exc:  # the next start drops them anyway
                    server_log.warning("%s not rewritten: %s", self.path, exc)

    def load(self) -> dict[int, Named]:
        """The entries on disk, kept as the current ones. Blocking.

        What cannot be read is logged and left out (an unreadable file counts as none; an
        entry with a bad owner keeps its id, for the admin to resolve), and the file as it
        was found is copied aside first (``transactions.json.damaged-<seconds>``): the start
        rewrites it, and the ids the coordinators hold must not be lost with it."""
        entries, damaged = self._read()
        if damaged:
            self._set_aside()
        self._entries = entries
        return dict(entries)

    def _read(self) -> tuple[dict[int, Named], bool]:
        """(The entries, whether anything was left out or changed.)"""
        try:
            doc = json.loads(self.path.read_bytes(), object_pairs_hook=_Pairs)
        except FileNotFoundError:
            return {}, False
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: deep nesting
            server_log.warning("%s unreadable, prepared transactions get new ids: %s",
                               self.path, _short(exc))
            return {}, True
        prepared = doc.get("prepared") if isinstance(doc, dict) else None
        if not isinstance(prepared, _Pairs):
            server_log.warning("%s has no \"prepared\" object: prepared transactions get new "
                               "ids", self.path)
            return {}, True
        damaged = False
        entries: dict[int, Named] = {}
        for key, value in prepared.items():
            why = _fault(key, value, prepared.duplicates)
            if why:
                server_log.warning("%s: entry %s ignored: %s", self.path, _shown(key), why)
                damaged = True
                continue
            assert isinstance(value, dict)
            owner = value.get("owner")
            if not isinstance(owner, str) and owner is not None:
                server_log.warning("%s: entry %r: owner %s is not text: %s is the admin's to "
                                   "resolve", self.path, key, _shown(owner), value["id"])
                owner, damaged = None, True
            at, bad_time = _time_of(value.get("prepared_at"))
            if bad_time:
                server_log.warning("%s: entry %r: prepared_at %s is not a time: its age counts "
                                   "from this start", self.path, key, _shown(value["prepared_at"]))
                damaged = True
            entries[int(key)] = Named(value["id"], owner, at)
        return entries, damaged

    def _set_aside(self) -> None:
        aside = self.path.with_name(f"{FILE_NAME}.damaged-{int(time.time())}")
        try:
            shutil.copyfile(self.path, aside)
        except OSError as exc:
            server_log.warning("%s not copied aside: %s", self.path, exc)
        else:
            server_log.warning("%s copied to %s as it was found", self.path, aside.name)

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
        named = self._entries.pop(tx_id, None)
        if named is None:
            return
        if self._holds:
            self._ended[tx_id] = named
            return
        try:
            await self._save()
        except OSError as exc:
            server_log.warning("%s not rewritten: %s", self.path, exc)

    async def _save(self) -> None:
        async with self._lock:  # the snapshot taken under the lock: the last write wins
            doc = {"prepared": {str(k): {"id": v.id, "owner": v.owner,
                                         "prepared_at": v.prepared_at}
                                for k, v in sorted({**self._ended, **self._entries}.items())}}
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


class _Pairs(dict[str, object]):
    """A JSON object that remembers the keys it was given more than once (``json`` keeps the
    last silently: which entry a damaged file meant is not known)."""

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        super().__init__(pairs)
        seen: set[str] = set()
        twice: set[str] = set()
        for key, _ in pairs:
            (twice if key in seen else seen).add(key)
        self.duplicates = frozenset(twice)


def _fault(key: str, value: object, duplicates: frozenset[str]) -> str:
    """Why an entry cannot be used ("" when it can)."""
    if not re.fullmatch(r"[0-9]{1,20}", key):
        return "the key is not a transaction number"
    if key in duplicates:
        return "the number is given more than once"
    if not isinstance(value, dict):
        return "not an object"
    if not (isinstance(value.get("id"), str) and TX_ID_PATTERN.fullmatch(value["id"])):
        return f"id {_shown(value.get('id'))} is not a transaction id"
    return ""


def _time_of(value: object) -> tuple[float | None, bool]:
    """An entry's ``prepared_at`` and whether it was given but is not a time. A time is Unix
    seconds up to the end of year 9999 (what a date-time shows); it is compared, not
    converted: an integer too large for a float is refused, not raised."""
    if value is None:
        return None, False
    if (isinstance(value, (int, float)) and not isinstance(value, bool)
            and 0 <= value <= _LAST_SECOND):  # NaN compares false
        return float(value), False
    return None, True


def _short(exc: BaseException) -> str:
    return str(exc)[:200]


def _shown(value: object) -> str:
    """A value of the file for a log line, cut short: the file may hold anything."""
    return repr(value)[:80]
