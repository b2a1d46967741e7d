"""Reading the gateway's own state records at start-up, so that no content can stop a start.

The internal queues hold small records the gateway wrote itself: JSON documents and message
payloads. Should one be unreadable — damaged, written by an incompatible version, or put there
by a sender through a bug — the start goes on without it: the record is logged at ERROR,
copied to ``<data dir>/quarantine/<queue>-<sequence>.bin`` and removed from its queue before
the gateway reports ready. Each queue's reader is declared once, as a ``StateQueue`` (the
table of them all is ``gateway.cli.state_queues.STATE_QUEUES``): the gateway reads through it,
and ``entrepot check`` reads the same records with it (``why_unreadable``) to report what a
start would quarantine.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from gateway.logs import server_log
from gateway.msmq.message import MessageFormatError
from store.errors import StoreError
from store.message_store import MessageStore
from store.records import StoredRecord

__all__ = ["Quarantine", "StateQueue", "Unreadable", "UNREADABLE", "read_state",
           "unreadable_reason", "why_unreadable"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

# What a reader of untrusted bytes may raise: a malformed document is any of these, never a
# reason to stop (RecursionError: JSON nested deeper than the decoder recurses).
UNREADABLE: tuple[type[BaseException], ...] = (
    ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError,
    MessageFormatError)


@dataclass(frozen=True, slots=True)
class StateQueue(Generic[T_co]):
    """An internal queue and the one reader of its records (raising one of ``UNREADABLE``
    for a record it cannot read)."""

    queue: str
    parse: Callable[[bytes], T_co]


def unreadable_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def why_unreadable(state: StateQueue[object], raw: bytes) -> str | None:
    """Why a start would set ``raw`` aside, or None when ``state`` reads it."""
    try:
        state.parse(raw)
    except UNREADABLE as exc:
        return unreadable_reason(exc)
    return None


@dataclass(frozen=True, slots=True)
class Unreadable:
    queue: str
    record: StoredRecord
    raw: bytes
    reason: str

    @property
    def file_name(self) -> str:
        return f"{re.sub(r'[^a-z0-9_]+', '_', self.queue.lower())}-{self.record.seq}.bin"


def read_state(store: MessageStore, state: StateQueue[T], queue_id: int
               ) -> tuple[list[tuple[StoredRecord, T]], list[Unreadable]]:
    """Every record of ``state.queue`` through its reader: (the readable ones with their
    value, the unreadable ones)."""
    good: list[tuple[StoredRecord, T]] = []
    bad: list[Unreadable] = []
    for record in store.records(queue_id):
        try:
            raw = store.read(record)
        except StoreError as exc:  # a damaged record: the store has quarantined it already
            server_log.error("state record %s:%d unreadable: %s", state.queue, record.seq, exc)
            continue
        try:
            good.append((record, state.parse(raw)))
        except UNREADABLE as exc:
            bad.append(Unreadable(state.queue, record, raw, unreadable_reason(exc)))
    return good, bad


class Quarantine:
    """Unreadable state records found while the gateway opens; ``flush`` sets them aside."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.held: list[Unreadable] = []

    def read(self, state: StateQueue[T], queue_id: int) -> list[tuple[StoredRecord, T]]:
        good, bad = read_state(self.store, state, queue_id)
        for item in bad:
            server_log.error("state record %s:%d cannot be read (%s): quarantined, the start "
                             "goes on without it", item.queue, item.record.seq, item.reason)
        self.held.extend(bad)
        return good

    async def flush(self) -> int:
        """Write each held record to the quarantine directory, then remove it from its queue;
        returns how many."""
        if not self.held:
            return 0
        held, self.held = self.held, []
        directory = self.store.data_dir.root / "quarantine"
        await asyncio.get_running_loop().run_in_executor(None, _write, directory, held)
        await self.store.remove([item.record for item in held])
        server_log.warning("%d unreadable state record(s) moved to %s", len(held), directory)
        return len(held)


def _write(directory: Path, held: list[Unreadable]) -> None:
    directory.mkdir(mode=0o700, exist_ok=True)
    for item in held:
        (directory / item.file_name).write_bytes(item.raw)
