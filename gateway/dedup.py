"""Duplicate detection: the same ``Idempotency-Key`` (REST) or message id (SRMP) within a window
(default 10,000 keys or 30 minutes, like MSMQ) is not stored twice.

Each entry is a small record in an internal queue, written in the same atomic store commit as
the message it guards, so the window survives a restart at no extra sync. At start the entries
are read back; old ones are removed in batches as they leave the window.

Same key and same body: the first answer is returned and nothing is stored. Same key and
another body: refused (422). A duplicate that arrives while the first is still being stored
waits for the first's answer.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass

from gateway import jsonio
from gateway.errors import ProblemError
from gateway.internal_queues import DEDUP_QUEUE
from gateway.logs import server_log
from store.errors import StoreError
from store.message_store import MessageStore
from store.records import SendSpec, StoredRecord

__all__ = ["DedupWindow", "DEDUP_QUEUE"]


@dataclass(slots=True)
class _Entry:
    digest: str
    answer: dict[str, object]
    at_ms: int
    record: StoredRecord | None


class DedupWindow:
    """Keys seen within the window, oldest first."""

    def __init__(self, store: MessageStore, queue_id: int, *, entries_max: int = 10_000,
                 window_s: float = 1800.0) -> None:
        self.store = store
        self.queue_id = queue_id
        self.entries_max = entries_max
        self.window_s = window_s
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._pending: dict[str, asyncio.Future[dict[str, object]]] = {}
        # Records holding several entries (older versions flushed SRMP ids in groups) are
        # removed with the last of their entries.
        self._sharing: dict[int, int] = {}
        for record in store.records(queue_id):
            doc = jsonio.loads(store.read(record))
            for item in doc["entries"] if "entries" in doc else [doc]:
                self._entries[item["key"]] = _Entry(item["digest"], item["answer"],
                                                    item["at_ms"], record)
                self._sharing[record.seq] = self._sharing.get(record.seq, 0) + 1

    @staticmethod
    def digest(body: bytes, destination: str) -> str:
        if not body:
            return _id_digest(destination)
        return hashlib.sha256(destination.lower().encode() + b"\0" + body).hexdigest()

    async def seen(self, key: str, digest: str) -> dict[str, object] | None:
        """The first answer for ``key`` when it is a duplicate of the same body, else None.

        Raises:
            ProblemError: 422 when the key was used with another body.
        """
        pending = self._pending.get(key)
        if pending is not None:
            await asyncio.shield(pending)
        entry = self._entries.get(key)
        if entry is None or entry.at_ms < self._horizon_ms():
            return None
        if entry.digest != digest:
            raise ProblemError(422, f"Idempotency-Key {key!r} was used for another request "
                               "within the duplicate-detection window",
                               type_slug="idempotency-key-reused")
        return entry.answer

    def begin(self, key: str) -> None:
        self._pending[key] = asyncio.get_running_loop().create_future()

    def spec(self, key: str, digest: str, answer: dict[str, object]) -> SendSpec:
        """The record that remembers ``key``; commit it together with the message."""
        doc = {"key": key, "digest": digest, "answer": answer, "at_ms": _now_ms()}
        return SendSpec(self.queue_id, jsonio.dumps(doc))

    def done(self, key: str, digest: str, answer: dict[str, object],
             record: StoredRecord | None) -> None:
        self._entries[key] = _Entry(digest, answer, _now_ms(), record)
        if record is not None:
            self._sharing[record.seq] = 1
        self._entries.move_to_end(key)
        future = self._pending.pop(key, None)
        if future is not None and not future.done():
            future.set_result(answer)

    def remember(self, key: str, digest: str, answer: dict[str, object]) -> None:
        """Remember ``key`` in memory only: for express messages, which do not survive a
        restart either (a resend after one must be taken again)."""
        entry = _Entry(digest, answer, _now_ms(), None)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        future = self._pending.pop(key, None)
        if future is not None and not future.done():
            future.set_result(answer)

    def failed(self, key: str) -> None:
        future = self._pending.pop(key, None)
        if future is not None and not future.done():
            future.set_result({})

    async def trim(self) -> int:
        """Forget keys beyond the window (count or age); returns how many keys."""
        horizon = self._horizon_ms()
        gone: list[StoredRecord] = []
        forgotten = 0
        while self._entries and (len(self._entries) > self.entries_max
                                 or next(iter(self._entries.values())).at_ms < horizon):
            _, entry = self._entries.popitem(last=False)
            forgotten += 1
            if entry.record is not None:
                left = self._sharing.get(entry.record.seq, 1) - 1
                if left <= 0:
                    self._sharing.pop(entry.record.seq, None)
                    gone.append(entry.record)
                else:
                    self._sharing[entry.record.seq] = left
        for start in range(0, len(gone), 1000):
            await self.store.remove(gone[start: start + 1000])
        return forgotten

    async def run(self, trim_interval_s: float = 10.0) -> None:
        """Forget what left the window, every ``trim_interval_s`` (runs until cancelled)."""
        while True:
            await asyncio.sleep(min(trim_interval_s, self.window_s / 10))
            try:
                await self.trim()
            except StoreError as exc:  # tried again next time; the store logs the cause
                server_log.warning("duplicate-window trim failed: %s", exc)

    def _horizon_ms(self) -> int:
        return _now_ms() - int(self.window_s * 1000)


def _now_ms() -> int:
    return int(time.time() * 1000)


@functools.lru_cache(maxsize=4096)
def _id_digest(destination: str) -> str:
    """The digest of keys that stand for themselves (SRMP ids): one per destination."""
    return hashlib.sha256(destination.lower().encode() + b"\0").hexdigest()
