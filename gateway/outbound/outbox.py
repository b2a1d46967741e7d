"""The outbox: acknowledgements for admin queues on other hosts, posted as SRMP receipts
(delivery receipts, commitment receipts: docs/srmp.md, "Commitment receipts").

gateway.queues.copies puts each one in an internal queue in the same commit as what caused it, so
none is lost in a crash; this task posts them and removes each once the receiver answered
(2xx: delivered; 4xx: refused, which retrying cannot change). Connection errors, timeouts and
5xx are retried until the receipt's time-to-reach-queue (4 days, Windows' default) has passed;
then it is dropped with a warning. Each post goes through its destination's receipt lane
(gateway.outbound.receipt_lanes: outbound redirection, the links' back-off, shown in
``GET /v1/links``).
At most ``held_max`` are taken from the outbox at once, each waiting for its lane's turn: a
failing destination (its lane tries one at a time) holds back the others' receipts only once
that many of its own wait (the HTTP posts themselves are bounded by the receipt sender).
Receipts need no order, so they do not use the links' durable, ordered outgoing queues
(gateway.outbound.outgoing).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.msmq.classes import MessageClass
from gateway.msmq.message import decode_payload
from gateway.outbound.receipt_sender import ReceiptSender
from gateway.queues.errors import QueueError
from gateway.queues.internal import OUTBOX_QUEUE
from gateway.queues.manager import Queue, QueueManager
from gateway.queues.state_records import UNREADABLE, StateQueue, Unreadable, unreadable_reason
from gateway.queues.wire_ids import WireIds
from gateway.srmp.model import (
    NULL_GUID,
    CommitmentReceipt,
    Envelope,
    format_message_id,
    format_srmp_time,
    objectid_to_base64,
    parse_message_id,
)
from gateway.srmp.receipts import TTRQ_S, commitment_receipt, delivery_receipt, stream_receipt
from store.errors import StoreError
from store.records import StoredRecord

__all__ = ["Outbox"]

# Each record is a message payload: its properties say where and what to post.
OUTBOX_STATE = StateQueue(OUTBOX_QUEUE, decode_payload)
_OBJECTID = re.compile(r"^\{([0-9a-fA-F-]{36})\}\\(\d+)\Z")


def _original(local_id: str, srmp_id: str) -> tuple[str, str]:
    """(the original's id as the receipt's ``<id>`` names it, its OBJECTID in base64 for
    ``Correlation``), byte for byte what the sender holds. A message that came over SRMP
    without an id of its own (no ``<Msmq>``: its local id was made here, under this QM's
    GUID) is {NULL GUID, 1} to its sender, as in V05."""
    match = _OBJECTID.match(local_id)
    if srmp_id:
        try:
            ordinal, guid = parse_message_id(srmp_id)
        except ValueError:
            ordinal, guid = 0, ""
        if match is None or match.group(1).lower() != guid or int(match.group(2)) != ordinal:
            return format_message_id(1, NULL_GUID), objectid_to_base64(NULL_GUID, 1)
        return srmp_id, objectid_to_base64(guid, ordinal)
    if match is None:
        return "", ""
    guid, ordinal = match.group(1), int(match.group(2))
    return f"uuid:{ordinal}@{guid}", objectid_to_base64(guid, ordinal)


class Outbox:
    def __init__(self, qm: QueueManager, sender: ReceiptSender, ids: WireIds,
                 metrics: Metrics, *, held_max: int = 4096) -> None:
        self.qm = qm
        self.sender = sender
        self.ids = ids
        self.metrics = metrics
        self.held_max = held_max
        self.queue: Queue = qm.internal(OUTBOX_QUEUE)
        self._inflight: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        try:
            while True:
                if len(self._inflight) >= self.held_max:
                    await asyncio.wait(self._inflight, return_when=asyncio.FIRST_COMPLETED)
                    continue
                records = await self.qm.wait_and_take(
                    self.queue, self.held_max - len(self._inflight), 30.0)
                for record in records:
                    task = asyncio.create_task(self._post(record), name="outbox-receipt")
                    self._inflight.add(task)
                    task.add_done_callback(self._inflight.discard)
        finally:
            for task in list(self._inflight):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._inflight, return_exceptions=True)

    async def _post(self, record: StoredRecord) -> None:
        removed = False
        try:
            raw = self.qm.store.read(record)
            try:
                props = OUTBOX_STATE.parse(raw).properties
            except UNREADABLE as exc:
                quarantine = self.qm.quarantine
                quarantine.held.append(Unreadable(OUTBOX_QUEUE, record, raw,
                                                  unreadable_reason(exc)))
                server_log.error("outbox record %d unreadable (%s): quarantined", record.seq,
                                 exc)
                await quarantine.flush()
                removed = True
                return
            url = props.extra.get("receipt_to", "")
            kind = ("final-stream-receipt" if "final_stream_id" in props.extra
                    else "delivery-receipt" if props.message_class == MessageClass.ACK_REACH_QUEUE
                    else "commitment-receipt")
            if not self.sender.permit(url, kind):
                await self.qm.store.remove([record])
                removed = True
                return
            envelope = self._envelope(props.message_class, props.label, props.correlation_id,
                                      props.extra, url, await self.ids.next())
            deadline = props.sent_at_ms / 1000 + TTRQ_S
            status, problem, attempts = await self.sender.deliver(
                url, envelope, give_up=lambda _: time.time() > deadline)
            result = "sent" if 200 <= status < 300 else "failed"
            self.metrics.srmp_receipts.labels(kind, result).inc()
            if result == "failed":
                server_log.warning("%s to %s dropped after %d attempt(s): %s", kind, url,
                                   attempts, problem)
            await self.qm.store.remove([record])
            removed = True
        except StoreError as exc:
            server_log.error("outbox record not removed: %s", exc)
        except QueueError as exc:  # no id for the receipt: the store cannot write
            server_log.error("outbox receipt not sent: %s", exc.detail)
        finally:
            self.qm.release(self.queue, record, removed=removed)

    def _envelope(self, message_class: int, label: str, original_id: str,
                  extra: dict[str, str], url: str, ordinal: int) -> Envelope:
        """The receipt, with ``ordinal`` for its own id (the same on every attempt)."""
        srmp_id, correlation = _original(original_id, extra.get("original_srmp_id", ""))
        now_s = int(time.time())
        queue_url = extra.get("queue_url", "")
        if "final_stream_id" in extra:
            decision = "negative" if message_class & 0x8000 else "positive"
            return stream_receipt(
                stream_id=extra["final_stream_id"], last_ordinal=int(extra["final_ordinal"]),
                send_to=url, queue_url=queue_url, qm_guid=self.qm.qm_guid,
                ordinal=ordinal, now_s=now_s,
                final=CommitmentReceipt(format_srmp_time(now_s), decision, srmp_id),
                final_class=message_class, correlation=correlation)
        if message_class == MessageClass.ACK_REACH_QUEUE:
            received = int(extra.get("received_at_ms") or now_s * 1000) // 1000
            return delivery_receipt(original_id=srmp_id, label=label, send_to=url,
                                    queue_url=queue_url, received_at_s=received,
                                    qm_guid=self.qm.qm_guid, ordinal=ordinal,
                                    now_s=now_s, correlation=correlation)
        return commitment_receipt(original_id=srmp_id, label=label, send_to=url,
                                  queue_url=queue_url, message_class=message_class,
                                  qm_guid=self.qm.qm_guid, ordinal=ordinal,
                                  now_s=now_s, correlation=correlation)
