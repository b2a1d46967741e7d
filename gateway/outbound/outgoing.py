"""Outgoing queues: one per remote destination, kept in the store like any queue (they count
towards the machine quota), each drained by a link (gateway.outbound.link).

A destination is the final queue URL, the SRMP ``<to>``. Outbound redirection (mapping files)
decides only where the link connects (the ``through`` gateway); it is looked up when the
link sends, so a mapping reload applies to messages already waiting. The outgoing queue's lqs
file records its destination, so links come back after a restart with their messages.

Streams (exactly-once in order) are per outgoing queue: their id and first sequence are small
records in an internal queue, written once per stream before its first send.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

from gateway.logs import server_log
from gateway.queues import sending
from gateway.queues.internal import LINKS_QUEUE, OUTGOING_PREFIX
from gateway.queues.manager import Queue, QueueManager, QueueSettings
from gateway.queues.state_records import StateQueue
from gateway.queues.store_errors import store_call
from gateway.srmp.eod_sender import SenderStream, stream_id_for
from mapping.names import parse_queue_path
from mapping.rules import normalise_address
from store.records import StoredRecord

__all__ = ["Outgoing"]


def outgoing_path(destination: str) -> str:
    digest = hashlib.sha256(normalise_address(destination).encode()).hexdigest()[:24]
    return OUTGOING_PREFIX + digest


def _parse_stream(raw: bytes) -> tuple[str, SenderStream]:
    """(outgoing queue path, its stream) of one record.

    Raises:
        ValueError, KeyError, TypeError: not a record this module wrote.
    """
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise TypeError("a link record is a JSON object")
    queue, stream_id, receipts_to = doc["queue"], doc["stream_id"], doc["receipts_to"]
    if not (isinstance(queue, str) and isinstance(stream_id, str)
            and isinstance(receipts_to, str)):
        raise TypeError("a link record's queue, stream_id and receipts_to are strings")
    return queue, SenderStream(stream_id, int(doc["base_seq"]), receipts_to)


LINKS_STATE = StateQueue(LINKS_QUEUE, _parse_stream)


class Outgoing:
    """The outgoing queues and their streams' persisted starts."""

    def __init__(self, qm: QueueManager) -> None:
        self.qm = qm
        self.store = qm.store
        self.links_queue = qm.internal(LINKS_QUEUE)
        self._creating: dict[str, asyncio.Lock] = {}
        self._ordinal = int.from_bytes(hashlib.sha256(str(time.time_ns()).encode()).digest()[:4],
                                       "big")
        # outgoing queue canonical path -> (stream, its record)
        self.streams: dict[str, tuple[SenderStream, StoredRecord]] = {}
        self._stale: list[StoredRecord] = []
        for record, (queue, stream) in qm.quarantine.read(LINKS_STATE,
                                                          self.links_queue.queue_id):
            older = self.streams.get(queue)
            if older is not None:
                self._stale.append(older[1])
            self.streams[queue] = (stream, record)

    def queues(self) -> list[Queue]:
        return [q for q in self.qm.all_queues() if q.path.canonical.startswith(OUTGOING_PREFIX)]

    @staticmethod
    def destination_of(queue: Queue) -> str:
        return queue.info.properties.get("destination", "")

    async def queue_for(self, destination: str) -> Queue:
        """The outgoing queue for ``destination`` (a queue URL), created durably if new."""
        path = outgoing_path(destination)
        found = self.qm.lookup(path)
        if found is not None:
            return found
        lock = self._creating.setdefault(path, asyncio.Lock())
        async with lock:
            found = self.qm.lookup(path)
            if found is None:
                found = await self.qm.register(parse_queue_path(path),
                                               QueueSettings(transactional=True),
                                               extra={"destination": destination})
                server_log.info("outgoing queue for %s created", destination)
        self._creating.pop(path, None)
        return found

    async def new_stream(self, queue: Queue, base_seq: int, receipts_to: str) -> SenderStream:
        """Start a stream at ``base_seq``: its record is durable before this returns."""
        self._ordinal = (self._ordinal + 1) & 0xFFFFFFFF
        stream = SenderStream(stream_id_for(self.qm.qm_guid, int(time.time()), self._ordinal),
                              base_seq, receipts_to)
        doc = {"queue": queue.path.canonical, "stream_id": stream.stream_id,
               "base_seq": base_seq, "receipts_to": receipts_to}
        old = self.streams.get(queue.path.canonical)
        removes = [old[1]] if old is not None else []
        [record] = await store_call(self.store.commit(
            [sending.state(self.links_queue.queue_id, json.dumps(doc).encode())],
            removes=removes))
        self.streams[queue.path.canonical] = (stream, record)
        return stream

    async def drop_stale(self) -> None:
        if self._stale:
            stale, self._stale = self._stale, []
            await self.store.remove(stale)
