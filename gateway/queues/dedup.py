"""Duplicate detection: the same ``Idempotency-Key`` (REST) or message id (SRMP) within a window
(default 10,000 keys or 30 minutes, like MSMQ) is not stored twice.

An ``Idempotency-Key`` entry is a small record in an internal queue, written in the same atomic
store commit as the message it guards, so the window survives a restart at no extra sync.

A recoverable SRMP message carries its id itself, so its entry is first *held* by the message:
the message is stored alone (flagged ``KEYED``: one record, no transaction) and its entry goes
to disk shortly after, many entries in one record (``flush``). Why: one record per message
instead of two keeps a second record out of every SRMP commit. What keeps it exact across a
crash:
- while the message is queued, a restart finds its id in the message (``keyed_records``);
- before the message is removed (received, expired, purged, moved), the store awaits
  ``before_removal`` (one of its ``removal_hooks``), which flushes its entry first; a crash
  between the two finds both.

At start the entries are read back; old ones are removed in batches as they leave the window.

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
from collections.abc import Callable
from dataclasses import dataclass

from gateway import jsonio
from gateway.logs import server_log
from gateway.msmq.message import MessageFormatError, decode_payload
from gateway.queues import sending
from gateway.queues.errors import Unprocessable
from gateway.queues.internal import DEDUP_QUEUE
from gateway.queues.state_records import Quarantine, StateQueue, read_state
from store.errors import MessageTooLarge, StoreError
from store.message_store import MessageStore
from store.records import StoredRecord

__all__ = ["DedupWindow", "DEDUP_QUEUE", "KeyedEntry", "srmp_keyed_entry", "destination_key",
           "SRMP_KEYED_BY_BODY"]

# A message property: its duplicate-window key holds its body (``DedupWindow.srmp_entry``).
SRMP_KEYED_BY_BODY = "srmp_keyed_by_body"

# What a KEYED message says of its own entry: (key, digest, answer, arrived at ms), or None.
KeyedEntry = Callable[[StoredRecord], "tuple[str, str, dict[str, object], int] | None"]
# Bytes of entries per flushed record, at most: well inside the smallest segment (64 KiB).
_FLUSH_BYTES_MAX = 32 * 1024
# Held entries beyond which the flusher writes at once instead of gathering for an interval.
_HELD_SOON = 2048


@dataclass(slots=True)
class _Entry:
    digest: str
    answer: dict[str, object]
    at_ms: int
    record: StoredRecord | None
    message: tuple[int, int] | None = None  # (queue, sequence) of the message holding it


class DedupWindow:
    """Keys seen within the window, oldest first."""

    def __init__(self, store: MessageStore, queue_id: int, *, entries_max: int = 10_000,
                 window_s: float = 1800.0, flush_interval_s: float = 0.02,
                 keyed_entry: KeyedEntry | None = None,
                 quarantine: Quarantine | None = None) -> None:
        self.store = store
        self.queue_id = queue_id
        self.entries_max = entries_max
        self.window_s = window_s
        self.flush_interval_s = flush_interval_s
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # Keys being stored now -> the future a duplicate of one waits on; None until a
        # duplicate comes (most never get one, so no future is made for them).
        self._pending: dict[str, asyncio.Future[dict[str, object]] | None] = {}
        # Records holding several entries (flushed ones, and older versions' groups) are
        # removed with the last of their entries.
        self._sharing: dict[int, int] = {}
        # Entries held by their message alone: (queue, sequence) -> key; and those being
        # flushed now.
        self._held: dict[tuple[int, int], str] = {}
        self._flushing: dict[tuple[int, int], str] = {}
        self._flush_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        loaded: list[tuple[str, _Entry]] = []
        flushed: set[tuple[int, int]] = set()
        readable = (quarantine.read(DEDUP_STATE, queue_id) if quarantine is not None
                    else read_state(store, DEDUP_STATE, queue_id)[0])
        for record, items in readable:
            for key, digest, answer, at_ms, message in items:
                loaded.append((_current_key(key, digest, answer),
                               _Entry(digest, answer, at_ms, record, message)))
                self._sharing[record.seq] = self._sharing.get(record.seq, 0) + 1
                if message is not None:
                    flushed.add(message)
        if keyed_entry is not None:
            loaded += self._held_at_start(keyed_entry, flushed, {k for k, _ in loaded})
        loaded.sort(key=lambda item: item[1].at_ms)
        self._entries.update(loaded)

    def _held_at_start(self, keyed_entry: KeyedEntry, flushed: set[tuple[int, int]],
                       known: set[str]) -> list[tuple[str, _Entry]]:
        """Entries of queued KEYED messages that a crash kept from being flushed."""
        found = []
        for record in self.store.keyed_records(self.entries_max):
            message = (record.queue_id, record.seq)
            if message in flushed:
                continue
            entry = keyed_entry(record)
            if entry is None or entry[0] in known:
                continue
            key, digest, answer, at_ms = entry
            found.append((key, _Entry(digest, answer, at_ms, None, message)))
            self._held[message] = key
        if found:
            self._wake.set()
        return found

    @staticmethod
    def srmp_entry(message_id: str, destination: str, body: bytes | None = None
                   ) -> tuple[str, str, dict[str, object]]:
        """Key, digest and answer of an SRMP message id sent to ``destination`` (a canonical
        queue path): the id and the destination decide, as in MSMQ, where one message for
        several queues (``DestinationMqf``) arrives once per queue with the same id.

        ``body``: given for a sender nobody vouches for (no certificate, outside
        ``srmp.allow_networks``, to an anonymous queue). An id is a queue manager's GUID and
        a counter, easy to learn: with the body in its key, such a sender that writes
        another's id first cannot make the other's message a duplicate (a resend carries the
        same body). ``SRMP_KEYED_BY_BODY`` in the message's properties says so at a start."""
        digest = _id_digest(destination) if body is None else DedupWindow.digest(body,
                                                                                   destination)
        return destination_key(f"srmp:{message_id}", digest), digest, {"id": message_id}

    @staticmethod
    def digest(body: bytes, destination: str) -> str:
        if not body:
            return _id_digest(destination)
        return hashlib.sha256(destination.lower().encode() + b"\0" + body).hexdigest()

    async def seen(self, key: str, digest: str) -> dict[str, object] | None:
        """The first answer for ``key`` when it is a duplicate of the same body, else None.

        Raises:
            QueueError: 422 when the key was used with another body.
        """
        if key in self._pending:
            pending = self._pending[key]
            if pending is None:
                pending = self._pending[key] = asyncio.get_running_loop().create_future()
            await asyncio.shield(pending)
        return self.known(key, digest)

    def busy(self, key: str) -> bool:
        """Whether a send of ``key`` is being stored now (``seen`` would wait for it)."""
        return key in self._pending

    def known(self, key: str, digest: str) -> dict[str, object] | None:
        """``seen`` without the wait: for a key that is not ``busy``.

        Raises:
            QueueError: 422 when the key was used with another body.
        """
        entry = self._entries.get(key)
        if entry is None or entry.at_ms < self._horizon_ms():
            return None
        if entry.digest != digest:
            raise Unprocessable(f"Idempotency-Key {client_key(key)!r} was used for another "
                                "request within the duplicate-detection window",
                                type_slug="idempotency-key-reused")
        return entry.answer

    def begin(self, key: str) -> None:
        self._pending[key] = None

    def spec(self, key: str, digest: str, answer: dict[str, object]) -> sending.Send:
        """The record that remembers ``key``; commit it together with the message and give
        it to ``done``."""
        doc = {"key": key, "digest": digest, "answer": answer, "at_ms": _now_ms()}
        return None, sending.state(self.queue_id, jsonio.dumps(doc))

    def done(self, key: str, digest: str, answer: dict[str, object],
             record: StoredRecord | None) -> None:
        if record is not None:
            self._sharing[record.seq] = 1
        self._known(key, _Entry(digest, answer, _now_ms(), record))

    def held(self, key: str, digest: str, answer: dict[str, object],
             where: tuple[int, int]) -> None:
        """``key`` is stored in the message at ``where`` (queue, sequence) itself (a ``KEYED``
        record): known at once, on disk with the next flush (see the module docstring)."""
        self._held[where] = key
        if len(self._held) == 1 or len(self._held) >= _HELD_SOON:
            self._wake.set()
        self._known(key, _Entry(digest, answer, _now_ms(), None, where))

    async def before_removal(self, records: list[StoredRecord]) -> None:
        """A store removal hook: the entries these messages hold are flushed first.

        Raises:
            StoreError: the flush failed (the removal is then not made).
        """
        for record in records:
            where = (record.queue_id, record.seq)
            if where in self._held or where in self._flushing:
                await self.flush()
                return

    async def flush(self) -> int:
        """Write the held entries to disk (after the flush in progress, if any); returns how
        many. On failure they stay held and the error is raised."""
        async with self._flush_lock:
            if not self._held:
                return 0
            self._flushing, self._held = self._held, {}
            taken = list(self._flushing.items())
            try:
                batch: list[tuple[tuple[int, int], str, _Entry, bytes]] = []
                size = 0
                for where, key in taken:
                    entry = self._entries.get(key)
                    if entry is None:  # already left the window
                        self._flushing.pop(where, None)
                        continue
                    # Each entry's JSON is made once: the record joins them (``_write``).
                    doc = jsonio.dumps({"key": key, "digest": entry.digest,
                                        "answer": entry.answer, "at_ms": entry.at_ms,
                                        "msg": list(where)})
                    if batch and size + len(doc) + 1 > _FLUSH_BYTES_MAX:
                        await self._write(batch)
                        batch, size = [], 0
                    batch.append((where, key, entry, doc))
                    size += len(doc) + 1
                if batch:
                    await self._write(batch)
            except BaseException:
                self._held.update(self._flushing)  # what was not written yet
                raise
            finally:
                self._flushing = {}
            return len(taken)

    async def _write(self, batch: list[tuple[tuple[int, int], str, _Entry, bytes]]) -> None:
        """One record of entries: ``{"entries": [...]}``, each entry's JSON as made."""
        payload = b'{"entries":[' + b",".join(doc for _, _, _, doc in batch) + b"]}"
        try:
            record = await self.store.append(sending.state(self.queue_id, payload))
        except MessageTooLarge:
            # Only an absurd sender id makes one entry larger than a segment: it stays known
            # in memory, but must not keep every later removal waiting for a write that fails.
            if len(batch) > 1:
                raise
            server_log.warning("duplicate-window entry of %d bytes not written (larger than "
                               "a segment holds)", len(payload))
            self._flushing.pop(batch[0][0], None)
            return
        kept = 0
        for where, key, entry, _ in batch:
            if self._entries.get(key) is entry:
                entry.record = record
                kept += 1
            self._flushing.pop(where, None)
        if kept:
            self._sharing[record.seq] = kept
        else:  # trimmed while it was written
            await self.store.remove([record])

    async def run_flusher(self) -> None:
        """Flush held entries ``flush_interval_s`` after the first of them (runs until
        cancelled); a failed flush is tried again at the next interval."""
        while True:
            await self._wake.wait()
            if len(self._held) < _HELD_SOON:
                await asyncio.sleep(self.flush_interval_s)
            self._wake.clear()
            try:
                await self.flush()
            except StoreError as exc:
                server_log.warning("duplicate-window flush failed: %s", exc)
                await asyncio.sleep(1.0)
            if self._held:
                self._wake.set()

    def remember(self, key: str, digest: str, answer: dict[str, object]) -> None:
        """Remember ``key`` in memory only: for express messages, which do not survive a
        restart either (a resend after one must be taken again)."""
        self._known(key, _Entry(digest, answer, _now_ms(), None))

    def _known(self, key: str, entry: _Entry) -> None:
        """``key`` joins the window as its newest entry; a duplicate waiting for it is let go."""
        self._entries[key] = entry
        self._entries.move_to_end(key)
        future = self._pending.pop(key, None)
        if future is not None and not future.done():
            future.set_result(entry.answer)

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
            if entry.message is not None:
                self._held.pop(entry.message, None)
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


def srmp_keyed_entry(store: MessageStore, destination: Callable[[int], str | None]
                     ) -> KeyedEntry:
    """What a queued SRMP message says of its entry (its queue's canonical path from
    ``destination``): the same key, digest and answer ``srmp_deliver`` gave it when stored."""
    def entry(record: StoredRecord) -> tuple[str, str, dict[str, object], int] | None:
        path = destination(record.queue_id)
        if path is None:
            return None
        try:
            decoded = decode_payload(store.read(record))
        except (MessageFormatError, StoreError):
            return None
        props = decoded.properties
        if not props.message_id:
            return None
        body = decoded.body if props.extra.get(SRMP_KEYED_BY_BODY) else None
        return (*DedupWindow.srmp_entry(props.message_id, path, body), props.arrived_at_ms)
    return entry


_ParsedEntry = tuple[str, str, dict[str, object], int, "tuple[int, int] | None"]


def _parse_entries(raw: bytes) -> list[_ParsedEntry]:
    """The entries of one record (one entry, or a flushed group), every field checked.

    Raises:
        ValueError, KeyError, TypeError: not a record this module wrote.
    """
    doc = jsonio.loads(raw)
    if not isinstance(doc, dict):
        raise TypeError(f"a dedup record is a JSON object, not {type(doc).__name__}")
    items = doc["entries"] if "entries" in doc else [doc]
    if not isinstance(items, list):
        raise TypeError("entries is not a list")
    parsed: list[_ParsedEntry] = []
    for item in items:
        key, digest, answer = item["key"], item["digest"], item["answer"]
        if not (isinstance(key, str) and isinstance(digest, str) and isinstance(answer, dict)):
            raise TypeError("a dedup entry needs a string key and digest and an object answer")
        message = (int(item["msg"][0]), int(item["msg"][1])) if "msg" in item else None
        parsed.append((key, digest, answer, int(item["at_ms"]), message))
    return parsed


DEDUP_STATE = StateQueue(DEDUP_QUEUE, _parse_entries)


def destination_key(key: str, digest: str) -> str:
    """A key of an SRMP id (``srmp:ID``, ``forward:ID``) joined with its destination's digest
    (``_id_digest``): the same id for another queue is another message."""
    return f"{key}|{digest}"


def _current_key(key: str, digest: str, answer: dict[str, object]) -> str:
    """An entry's key as this version makes it. An SRMP entry written before keys named their
    destination (``srmp:ID`` or ``forward:ID``, answer ``{"id": ID}``) still holds that
    destination's digest, which completes the key, so a window written by an earlier version
    is read with every entry in force. Other keys (a client's ``Idempotency-Key``) are kept
    as they are."""
    kind, _, message_id = key.partition(":")
    if kind in ("srmp", "forward") and answer == {"id": message_id}:
        return destination_key(key, digest)
    return key


def client_key(key: str) -> str:
    """An ``Idempotency-Key`` as its client sent it: without the principal's scope that
    keeps one partner's keys apart from another's (``scope\0key``)."""
    return key.partition("\0")[2] if "\0" in key else key


def _now_ms() -> int:
    return int(time.time() * 1000)


@functools.lru_cache(maxsize=4096)
def _id_digest(destination: str) -> str:
    """The digest of keys that stand for themselves (SRMP ids): one per destination."""
    return hashlib.sha256(destination.lower().encode() + b"\0").hexdigest()
