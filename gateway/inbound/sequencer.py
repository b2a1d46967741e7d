"""Stream messages in, in order, many per store commit.

A sender with several stream messages in flight (gateway.outbound.link keeps a window of them) makes
them arrive in any order and faster than one commit each. Here a message that is not next
yet waits (up to ``reorder_wait_s``, within ``window`` numbers) for the ones before it; a
message that is next is accepted at once. With nothing of its stream on the way it is
committed by its own request (a stream with one message in flight, as a Windows sender
has: no task, no future); otherwise it joins the stream's batch, and one task per stream
commits the batch — its messages, holding the stream's new position, in one atomic
commit — while the next batch gathers. If a batch cannot be stored (a full queue), none of
it counted: the stream's position stays where the last stored batch left it and messages
decided on top of the failed batch are answered as out of order, so the sender resends
them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from gateway.inbound.streams import IncomingStreams
from gateway.logs import server_log
from gateway.msmq.classes import MessageClass
from gateway.msmq.message import MessageProperties, compose_id
from gateway.queues import sending
from gateway.queues.acks import wants_ack
from gateway.queues.copies import ack_specs
from gateway.queues.errors import QueueFull
from gateway.queues.manager import Queue, QueueManager, ReceivedMessage
from gateway.srmp.eod import StreamKey, Verdict
from gateway.srmp.model import Stream
from store.framing import RecordFlags

__all__ = ["StreamSequencer", "Outcome"]


class Outcome:
    STORED = "stored"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    QUOTA_DROPPED = "quota_dropped"


@dataclass(slots=True)
class _Item:
    stream: Stream
    props: MessageProperties
    body: bytes
    future: asyncio.Future[str] | None  # None: its own request commits it (one in flight)


@dataclass(slots=True)
class _Line:
    tail: int
    queue: Queue
    queue_url: str
    waiting: list[_Item] = field(default_factory=list)
    committing: bool = False
    users: int = 0
    advanced: asyncio.Event | None = None  # made by the first message that waits


class StreamSequencer:
    def __init__(self, qm: QueueManager, streams: IncomingStreams, *, reorder_wait_s: float,
                 window: int) -> None:
        self.qm = qm
        self.streams = streams
        self.reorder_wait_s = reorder_wait_s
        self.window = window
        self._lines: dict[StreamKey, _Line] = {}

    async def deliver(self, queue: Queue, props: MessageProperties, body: bytes,
                      stream: Stream, queue_url: str) -> str:
        """``props``: made for this message alone (they are completed in place).

        Raises: QueueError when the store refuses the batch (503/507)."""
        key = (stream.stream_id, queue.path.canonical)
        line = self._lines.get(key)
        if line is None:
            state = self.streams.table.get(key)
            line = _Line(state.incoming_seq if state else 0, queue, queue_url)
            self._lines[key] = line
        line.users += 1
        try:
            return await self._deliver(key, line, props, body, stream)
        finally:
            line.users -= 1
            if not line.users and not line.committing and not line.waiting:
                self._lines.pop(key, None)

    async def _deliver(self, key: StreamKey, line: _Line, props: MessageProperties,
                       body: bytes, stream: Stream) -> str:
        deadline = time.monotonic() + self.reorder_wait_s
        while True:
            verdict = self.streams.table.decide(key, stream, last=line.tail or None)
            if verdict is Verdict.ACCEPT:
                break
            remaining = deadline - time.monotonic()
            if (verdict is Verdict.DUPLICATE or remaining <= 0
                    or stream.current - line.tail > self.window):
                self.streams.rejected(key)
                return Outcome.DUPLICATE if verdict is Verdict.DUPLICATE \
                    else Outcome.OUT_OF_ORDER
            if line.advanced is None:
                line.advanced = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(line.advanced.wait(), remaining)
        line.tail = stream.current
        self._advance(line)
        if not line.committing:
            # Nothing of this stream on its way: this request commits its message itself
            # (no task, no future); what arrives meanwhile gathers for the commit loop.
            line.committing = True
            try:
                return await self._commit_batch(key, line, [_Item(stream, props, body, None)])
            finally:
                if line.waiting:
                    asyncio.create_task(self._commit_loop(key, line), name="stream-commit")
                else:
                    line.committing = False
        item = _Item(stream, props, body, asyncio.get_running_loop().create_future())
        line.waiting.append(item)
        assert item.future is not None
        return await item.future

    @staticmethod
    def _advance(line: _Line) -> None:
        if line.advanced is not None:
            line.advanced.set()
            line.advanced = None

    async def _commit_loop(self, key: StreamKey, line: _Line) -> None:
        try:
            while line.waiting:
                batch, line.waiting = line.waiting, []
                try:
                    await self._commit_batch(key, line, batch)
                except Exception:
                    return  # the batch's futures carry it
        finally:
            line.committing = False
            if not line.users and not line.waiting:
                self._lines.pop(key, None)

    async def _commit_batch(self, key: StreamKey, line: _Line, batch: list[_Item]) -> str:
        """Commit ``batch`` and answer its futures; returns the batch's outcome. A failed or
        quota-dropped batch sends back what gathered on top of it and rewinds the line.

        Raises: what the commit raised (also set on the batch's futures)."""
        try:
            stored = await self._commit(key, line, batch)
        except BaseException as exc:
            for item in [*batch, *line.waiting]:
                if item.future is not None and not item.future.done():
                    item.future.set_exception(exc)
            line.waiting = []
            state = self.streams.table.get(key)
            line.tail = state.incoming_seq if state else 0
            raise
        outcome = Outcome.STORED if stored else Outcome.QUOTA_DROPPED
        for item in batch:
            if item.future is not None:
                item.future.set_result(outcome)
        if not stored:
            state = self.streams.table.get(key)
            line.tail = state.incoming_seq if state else 0
            for item in line.waiting:
                assert item.future is not None
                item.future.set_result(Outcome.OUT_OF_ORDER)
            line.waiting = []
            self._advance(line)
        return outcome

    async def _commit(self, key: StreamKey, line: _Line, batch: list[_Item]) -> bool:
        """One atomic commit: the batch's messages, their delivery acknowledgements and the
        stream's new position. False when the queue is over its quota."""
        state = self.streams.table.get(key)
        receipts_to = (state.send_receipts_to if state else
                       batch[0].stream.send_receipts_to or "")
        specs: list[sending.Send] = []
        try:
            return await self._store(key, line, batch, receipts_to, specs)
        except BaseException:
            sending.release(self.qm.store, specs)
            raise

    async def _store(self, key: StreamKey, line: _Line, batch: list[_Item], receipts_to: str,
                     specs: list[sending.Send]) -> bool:
        qm, queue = self.qm, line.queue
        now_ms = int(time.time() * 1000)
        acks: list[sending.Send] = []
        for item in batch:
            # The message holds its stream's position (gateway.inbound.held): id and ordinal are
            # in extra already; the receipt URL and the queue URL complete it. The properties
            # were made for this message alone (``deliver``): completed in place, not copied.
            props = item.props
            props.transactional = True  # a stream message is (message_properties says so too)
            props.arrive(now_ms)
            props.extra["stream_receipts_to"] = receipts_to
            props.extra["stream_via"] = line.queue_url
            seq = sending.reserve(qm.store, queue)
            # In arrival order (priority 0) and durable, as a transactional message is.
            specs.append(sending.message(queue, props, item.body, seq=seq,
                                         flags=RecordFlags.STREAM, priority=0, express=False))
            if wants_ack(props, MessageClass.ACK_REACH_QUEUE):  # as QueueManager's sends
                message = ReceivedMessage(props.message_id or compose_id(
                    qm.qm_guid, queue.queue_id, seq), queue.path.display, seq, props,
                    item.body)
                acks.extend(ack_specs(qm, queue, message, MessageClass.ACK_REACH_QUEUE,
                                      now_ms))
        held = self.streams.held
        async with self.streams.hold(key):
            token = held.begin(qm.store.lsn_floor())
            try:
                made = await sending.commit(qm.store, [*specs, *acks], arrived=qm.arrived)
                self.streams.accepted(key, [(item.stream, record) for item, record
                                            in zip(batch, made)], line.queue_url)
            except QueueFull:
                server_log.warning("queue %s over its quota: %d stream message(s) of %s "
                                   "not accepted (the sender resends them)",
                                   queue.path.display, len(batch), key[0])
                return False
            finally:
                held.end(token)
        return True
