"""Landing links: a queue written out as immutable files that Spark's file source reads, for
clusters that cannot reach the gateway (``[[landings]]``).

Each file holds one contiguous sequence range of the queue and is named by it,
``<first>-<last>.parquet`` (or ``.jsonl``), 20 digits each: written under ``_staging/`` (Spark
skips names starting with ``_``), fsynced, renamed into the directory, and the directory
fsynced — only then does the landing's registered range consumer commit past the range, which
lets retention drop the messages. After a crash the files are the truth: the landing resumes
after the highest range already in the directory, so a range is never written twice and a
name never reused. Writing happens off the event loop; a file holds at most
``file_messages`` messages or ``file_bytes`` of bodies, and waits at most ``file_delay``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.logs import server_log
from gateway.msmq.message import compose_id, split_payload
from gateway.queues.errors import QueueError
from gateway.queues.manager import Queue, QueueManager
from gateway.queues.range_consumers import RangeConsumers
from gateway.range_wire import RangeRecord, columns_of
from mapping.names import parse_queue_path

__all__ = ["Landing", "LandingSpec", "landed_end"]

_NAME = re.compile(r"^(\d{20})-(\d{20})\.(parquet|jsonl)\Z")
_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class LandingSpec:
    queue: str
    directory: Path
    fmt: str  # parquet | jsonl
    consumer: str
    file_messages: int
    file_bytes: int
    file_delay_s: float


def landed_end(directory: Path) -> int:
    """One past the highest sequence already landed (0 when none); clears ``_staging``.
    Blocking: run it off the loop."""
    staging = directory / "_staging"
    staging.mkdir(parents=True, exist_ok=True)
    for leftover in staging.iterdir():
        leftover.unlink()
    end = 0
    for entry in directory.iterdir():
        match = _NAME.match(entry.name)
        if match:
            end = max(end, int(match.group(2)) + 1)
    return end


def write_file(spec: LandingSpec, queue_name: str, first: int, last: int,
               records: list[RangeRecord]) -> Path:
    """Write, fsync, rename into place, fsync the directory. Blocking."""
    suffix = "parquet" if spec.fmt == "parquet" else "jsonl"
    name = f"{first:020d}-{last:020d}.{suffix}"
    final = spec.directory / name
    if final.exists():  # landed before a crash, committed after it: never rewrite
        return final
    temporary = spec.directory / "_staging" / name
    if spec.fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        from gateway.spark.arrow import record_batch

        pq.write_table(pa.Table.from_batches([record_batch(queue_name, records)]),
                       temporary, compression="snappy")
    else:
        with temporary.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(_json_row(queue_name, record)) + "\n")
    with temporary.open("rb") as handle:
        os.fsync(handle.fileno())
    os.rename(temporary, final)
    descriptor = os.open(spec.directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return final


def _json_row(queue: str, record: RangeRecord) -> dict[str, Any]:
    label, priority, cls, correlation, sent_ms, arrived_ms, ctype, others = columns_of(
        record.meta)
    return {"queue": queue, "seq": record.seq, "id": record.message_id, "label": label,
            "priority": priority, "class": cls, "correlation_id": correlation,
            "sent_at_ms": sent_ms, "arrived_at_ms": arrived_ms, "content_type": ctype,
            "properties": others, "body_base64": base64.b64encode(record.body).decode()}


class Landing:
    """One ``[[landings]]`` entry: a task that lands its queue's messages as files."""

    def __init__(self, qm: QueueManager, consumers: RangeConsumers, spec: LandingSpec) -> None:
        self.qm = qm
        self.consumers = consumers
        self.spec = spec
        self.files = 0
        self.landed = 0
        self.last_error = ""

    async def run(self) -> None:
        """Until cancelled; waits for the queue to exist."""
        loop = asyncio.get_running_loop()
        queue = await self._queue()
        position, _ = await self.consumers.register(queue, self.spec.consumer, "earliest")
        already = await loop.run_in_executor(None, landed_end, self.spec.directory)
        if already > position:  # files landed, commit lost in a crash: the files win
            position = await self.consumers.commit(queue, self.spec.consumer, already)
        server_log.info("landing %s -> %s from sequence %d", queue.path.display,
                        self.spec.directory, position)
        waiting_since: float | None = None
        while True:
            end = self.qm.store.readable_end(queue.queue_id)
            if end <= position:
                waiting_since = None
                await asyncio.sleep(_POLL_S)
                continue
            now = loop.time()
            waiting_since = waiting_since if waiting_since is not None else now
            if (end - position < self.spec.file_messages
                    and now - waiting_since < self.spec.file_delay_s):
                await asyncio.sleep(_POLL_S)
                continue
            position = await self._land(queue, position, end)
            waiting_since = None

    async def _queue(self) -> Queue:
        while True:
            found = self.qm.lookup(parse_queue_path(self.spec.queue).canonical)
            if found is not None:
                return found
            self.last_error = f"queue {self.spec.queue} does not exist"
            server_log.warning("landing: %s; waiting for it", self.last_error)
            await asyncio.sleep(5)

    async def _land(self, queue: Queue, position: int, end: int) -> int:
        """Land ``[position, stop)`` for the largest stop the file limits allow."""
        floor = self.consumers.floor(queue)
        if position < floor:  # a purge took what was not landed yet
            server_log.error("landing %s: sequences [%d, %d) were purged before landing",
                             queue.path.display, position, floor)
            return await self.consumers.commit(queue, self.spec.consumer, floor)
        records: list[RangeRecord] = []
        size, stop = 0, position
        while stop < end and len(records) < self.spec.file_messages:
            record = self.qm.store.record(queue.queue_id, stop)
            if record is not None:
                if records and size + record.payload_len > self.spec.file_bytes:
                    break
                meta, body = split_payload(self.qm.store.read(record))
                message_id = (self.qm.message_id(queue, record,
                                                 self.qm.decode(queue, record).properties)
                              if b'"message_id"' in meta.tobytes()
                              else compose_id(self.qm.qm_guid, queue.queue_id, record.seq))
                records.append(RangeRecord(record.seq, message_id, meta.tobytes(),
                                           body.tobytes()))
                size += record.payload_len
            stop += 1
        if records:
            try:
                await asyncio.get_running_loop().run_in_executor(
                    None, write_file, self.spec, queue.path.display, position, stop - 1,
                    records)
            except OSError as exc:
                self.last_error = f"{self.spec.directory}: {exc}"
                server_log.error("landing %s: %s; retrying in 5 s", queue.path.display,
                                 self.last_error)
                await asyncio.sleep(5)
                return position
            self.files += 1
            self.landed += len(records)
        try:
            return await self.consumers.commit(queue, self.spec.consumer, stop)
        except QueueError as exc:
            self.last_error = exc.detail
            raise
