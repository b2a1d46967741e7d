"""A link: the one sender that drains an outgoing queue to its remote queue manager over SRMP.

- Transactional messages travel in the outgoing queue's stream (gateway.srmp.eod_sender):
  kept after their 200 until a stream receipt covers them, all resent when the receipt wait
  runs out. Others are removed once answered 200 (the receiver deduplicates by id).
- Stream messages are sent in order with up to ``window`` in flight (the receiver waits for
  the ones before a message that overtook them); others a few at a time; on keep-alive
  connections that are closed after ``idle_timeout`` without traffic.
- Connection errors, time-outs and 5xx: retried with exponential back-off and jitter
  (gateway.outbound.backoff; state "waiting to connect", a WARNING when the link starts
  failing), the message keeps its place. 400: the receiver refuses it, so it
  leaves (dead-letter copy with MQMSG_CLASS_NACK_BAD_DST_Q when its journal level asks).
- A message whose time-to-reach-queue passed before delivery leaves the same way with
  MQMSG_CLASS_NACK_REACH_QUEUE_TIMEOUT and leaves its stream (the next ``previous`` skips it).
- Messages that arrived over SRMP for another host (store and forward) are sent as they came:
  the same envelope, body and framing, re-addressed only when a redirection changed ``<to>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import aiohttp

from gateway.logs import server_log
from gateway.msmq.classes import MessageClass
from gateway.outbound.backoff import Failures
from gateway.outbound.outgoing import Outgoing
from gateway.outbound.receipt_sender import SKIP_AUTO_HEADERS, USER_AGENT
from gateway.outbound.webhook_headers import safe_content_type, webhook_headers
from gateway.queues import sending
from gateway.queues.events import Tally
from gateway.queues.manager import Queue, QueueManager, ReceivedMessage
from gateway.queues.store_errors import store_call
from gateway.queues.wire_ids import ORDINAL_MAX
from gateway.srmp.build import build_request, envelope_bytes
from gateway.srmp.envelope import parse_envelope
from gateway.srmp.eod import VERDICT_HEADER
from gateway.srmp.eod_sender import SenderStream
from gateway.srmp.outbound import StreamPosition, outbound_envelope, url_of_format_name
from gateway.srmp.properties import compound_message, envelope_text
from mapping.names import MACHINE_JOURNAL
from store.records import StoredRecord

__all__ = ["Link", "LinkOptions"]

_OUR_ID = re.compile(r"^\{([0-9a-fA-F-]{36})\}\\(\d+)\Z")
_PULL = 256
_BUFFERED = 65_536  # records of messages outside the link's own stream held in order
_PLAIN_WINDOW = 8  # non-transactional messages in flight at once
_OVERTAKEN_S = 0.05  # before resending a stream message the receiver took as out of order
_LOST_STATE_REFUSALS = 3  # the first pending message refused in a row: the receiver forgot


@dataclass(frozen=True, slots=True)
class LinkOptions:
    request_timeout_s: float
    idle_timeout_s: float
    retry_max_s: float
    resend_s: tuple[float, ...]
    stream_element: str
    window: int  # stream messages in flight at once
    restart_after_rounds: int  # resend rounds without a receipt before a new stream
    public_url: str  # this gateway as senders reach it (receipt and admin URLs)


def _lower_scheme(url: str) -> str:
    """``HTTP://host/...`` -> ``http://host/...``: Windows writes URLs lower-case ``http://``."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.lower()}{sep}{rest}" if sep else url


def _plain_order(extra: dict[str, str], seq: int) -> tuple[str, int, int]:
    stream = extra.get("stream_id", "")
    return (stream, int(extra.get("stream_current", "0")) if stream else seq, seq)


class Link:
    def __init__(self, qm: QueueManager, outgoing: Outgoing, queue: Queue,
                 options: LinkOptions, *, route: Callable[[str], str],
                 receipts_to: Callable[[str], str],
                 webhook: tuple[str, bytes] | None = None,
                 tls: ssl.SSLContext | None = None, counts: Tally | None = None) -> None:
        self.qm = qm
        self.outgoing = outgoing
        self.queue = queue
        self.options = options
        self.destination = Outgoing.destination_of(queue)
        self._route = route  # destination -> the URL to POST to (outbound redirection)
        self._receipts_to = receipts_to  # destination -> sendReceiptsTo of a new stream
        # A webhook (partner name, HMAC secret or b""): messages are POSTed as they are, one
        # at a time in order, done on 2xx; no SRMP, no stream.
        self.webhook = webhook
        self._tls = tls  # a [[peers]] TLS context (CA bundle, client certificate), else None
        self.state = "active"
        self.last_error = ""
        self.paused = False
        self._resume = asyncio.Event()
        self._cursor = 0
        # Messages outside this link's own stream, in sending order: forwarded stream
        # messages by their stream and number (so the receiver gets them nearly in order),
        # others by arrival.
        self._plain: list[tuple[tuple[str, int, int], StoredRecord]] = []
        self._in_stream: dict[int, StoredRecord] = {}
        self._seen_at: dict[int, float] = {}  # seq -> when this link first saw it
        # seq -> wire ordinal given at first send to a message queued without one; as many
        # as messages in the queue, each dropped when its message leaves
        self._assigned: dict[int, int] = {}
        found = outgoing.streams.get(queue.path.canonical)
        self.stream: SenderStream | None = found[0] if found is not None else None
        self._stream_ended = False
        # Messages already in the queue when the link starts may have been sent in the
        # restored stream before a crash (acknowledged or not): they never start a new one,
        # or the receiver would take them twice under the new stream's numbers.
        self._restored_below = qm.store.readable_end(queue.queue_id) if self.stream else 0
        self._first_refused = 0  # out-of-order answers in a row to the first pending one
        # (stream id, number) -> delivered stream messages waiting for their final receipt
        self._awaiting_final: dict[tuple[str, int], StoredRecord] = {}
        self._session: aiohttp.ClientSession | None = None
        self._inflight: dict[int, asyncio.Task[None]] = {}  # stream number -> its send
        self._plain_inflight: dict[int, asyncio.Task[None]] = {}  # sequence -> its send
        self._last_traffic = 0.0
        self._failures = Failures(f"link to {self.destination}", options.retry_max_s)
        self.sent = 0
        self.retries = 0
        # Retries and acknowledgements since start, by destination, for the metrics; the
        # destination's own label is taken now if there is room (gateway.queues.events).
        self._counts = counts if counts is not None else Tally()
        self._counts.label(self.destination)

    # ---- what /v1/links shows ------------------------------------------------------------

    def summary(self) -> dict[str, object]:
        oldest = min(self._seen_at.values(), default=None)
        # A send in flight when the link was paused may still set state when it ends.
        return {"kind": "messages", "destination": self.destination,
                "state": "paused" if self.paused else self.state,
                "backlog": self.qm.store.count(self.queue.queue_id),
                "unacked": len(self.stream.pending) if self.stream else 0,
                "oldest_age_s": round(time.monotonic() - oldest, 3) if oldest else 0.0,
                "last_error": self.last_error, "stream": self.stream.stream_id
                if self.stream else None, "sent": self.sent, "retries": self.retries}

    def pause(self) -> None:
        self.paused = True
        self.state = "paused"
        self._resume.clear()

    def resume(self) -> None:
        self.paused = False
        self.state = "active"
        self._resume.set()
        self.queue.arrived.set()

    # ---- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self._step()
                except (asyncio.CancelledError, GeneratorExit):
                    raise
                except Exception as exc:  # a bug must not kill the link for good
                    server_log.exception("link to %s: unexpected error", self.destination)
                    self.last_error = f"internal error: {exc!r}"
                    await asyncio.sleep(1.0)
        finally:
            tasks = [*self._inflight.values(), *self._plain_inflight.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._session is not None:
                await self._session.close()

    async def _step(self) -> None:
        if self.paused:
            await self._resume.wait()
            return
        await self._pull()
        now = time.monotonic()
        stream = self.stream
        again = 0 if stream is None or self._inflight else stream.resend_due(
            now, self.options.resend_s, self.options.window)
        if stream is not None and again:
            self.retries += again
            server_log.info("link to %s: no stream receipt, resending the oldest %d of %d "
                            "unacknowledged message(s)", self.destination, again,
                            len(stream.pending))
            if stream.round >= self.options.restart_after_rounds:
                await self._restart_stream("no stream receipt for "
                                           f"{stream.round} resend rounds")
                return
        # Stream messages go out in order with up to ``window`` in flight (the receiver puts
        # them back in order); others alongside, a few at a time.
        for current in stream.to_send() if stream is not None else []:
            if len(self._inflight) >= self.options.window:
                break
            if current not in self._inflight:
                self._inflight[current] = asyncio.create_task(self._send_stream(current))
        plain_window = 1 if self.webhook else _PLAIN_WINDOW  # a webhook gets them in order
        while self._plain and len(self._plain_inflight) < plain_window:
            _, record = heapq.heappop(self._plain)
            self._plain_inflight[record.seq] = asyncio.create_task(self._send_plain(record))
        tasks = [*self._inflight.values(), *self._plain_inflight.values()]
        if not tasks:
            await self._idle(stream)
            return
        self.queue.arrived.clear()
        arrival = asyncio.ensure_future(self.queue.arrived.wait())
        try:
            await asyncio.wait([*tasks, arrival], return_when=asyncio.FIRST_COMPLETED,
                               timeout=1.0)
        finally:
            arrival.cancel()
        for table in (self._inflight, self._plain_inflight):
            for key, task in list(table.items()):
                if task.done():
                    del table[key]
                    task.result()  # a bug in a send surfaces in run()

    async def _idle(self, stream: SenderStream | None) -> None:
        deadline = stream.next_deadline(self.options.resend_s) if stream else None
        wait = 30.0 if deadline is None else max(0.0, min(30.0, deadline - time.monotonic()))
        if (self._session is not None and time.monotonic() - self._last_traffic
                > self.options.idle_timeout_s):
            await self._session.close()  # MSMQ's session clean-up timer
            self._session = None
        self.queue.arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.queue.arrived.wait(), wait)

    async def _pull(self) -> None:
        """Take new messages of the outgoing queue into the stream or the plain line."""
        # Forwarded stream messages wait here for their turn, in stream order; the one a
        # receiver needs next may have arrived after many later ones, so the buffer is
        # deep (records are small: where a message is, not the message).
        if len(self._plain) >= _BUFFERED or (self.stream and len(
                self.stream.to_send()) >= _PULL):
            return
        acknowledged: list[StoredRecord] = []
        for record in self.qm.store.first_records(self.queue.queue_id, self._cursor, _PULL):
            self._cursor = record.seq
            self._seen_at.setdefault(record.seq, time.monotonic())
            props = self.qm.decode(self.queue, record).properties
            if not props.transactional or props.extra.get("forward") or self.webhook:
                heapq.heappush(self._plain, (_plain_order(props.extra, record.seq), record))
                continue
            stream = self.stream
            # A stream ends when everything in it was acknowledged during this run; one
            # restored from disk goes on until every message that was queued at the start has
            # been pulled into it (a receipt can cover all pulled so far while later ones,
            # sent before the crash, are still to be pulled).
            if stream is None or (self._stream_ended and not self._in_stream
                                  and record.seq >= self._restored_below):
                stream = await self.outgoing.new_stream(self.queue, record.seq,
                                                        self._receipts_to(self.destination))
                server_log.info("link to %s: stream %s starts at message %d",
                                self.destination, stream.stream_id, record.seq)
                self.stream = stream
                self._stream_ended = False
            if record.seq < stream.base_seq:
                server_log.error("link to %s: message %d precedes its stream; dropped",
                                 self.destination, record.seq)
                await self._leave(record, MessageClass.NACK_BAD_DST_Q)
                continue
            current = stream.add(record.seq)
            if current <= stream.last_acked:  # sent before a restart, and receipted since
                if self._settled(stream, current, record):
                    acknowledged.append(record)
                continue
            self._in_stream[current] = record
        if acknowledged:
            await self.delivered(acknowledged)

    # ---- sending -------------------------------------------------------------------------

    async def _send_stream(self, current: int) -> None:
        stream = self.stream
        record = self._in_stream.get(current)
        if stream is None or record is None:
            return  # acknowledged meanwhile
        message = self.qm.decode(self.queue, record)
        if self._expired(message):
            stream.left(current)
            del self._in_stream[current]
            await self._leave(record, MessageClass.NACK_REACH_QUEUE_TIMEOUT)
            return
        position = StreamPosition(stream.stream_id, current, stream.previous(current),
                                  stream.send_receipts_to, self.options.stream_element)
        status, verdict = await self._post(*await self._request(message, position))
        if 200 <= status < 300:
            self.sent += 1
            first = bool(stream.pending) and current == stream.pending[0]
            if verdict == "out_of_order" and not first:
                await asyncio.sleep(_OVERTAKEN_S)  # it overtook one still on its way
                return
            self._first_refused = self._first_refused + 1 if (
                first and verdict == "out_of_order") else 0
            if self._first_refused >= _LOST_STATE_REFUSALS and self.stream is stream:
                await self._restart_stream("the receiver does not know the stream")
                return
            stream.mark_sent(current, time.monotonic())
        elif 400 <= status < 500:
            stream.left(current)
            self._in_stream.pop(current, None)
            await self._leave(record, MessageClass.NACK_BAD_DST_Q)

    async def _send_plain(self, record: StoredRecord) -> None:
        message = self.qm.decode(self.queue, record)
        if self._expired(message):
            await self._leave(record, MessageClass.NACK_REACH_QUEUE_TIMEOUT)
            return
        if self.webhook is not None:
            status, verdict = await self._post(message.body,
                                               safe_content_type(message.properties.content_type),
                                               webhook_headers(message, *self.webhook,
                                                               self.destination))
        else:
            status, verdict = await self._post(*await self._request(message, None))
        order = (_plain_order(message.properties.extra, record.seq), record)
        if 200 <= status < 300 and verdict == "out_of_order":
            await asyncio.sleep(_OVERTAKEN_S)  # a forwarded stream message: its turn comes
            heapq.heappush(self._plain, order)
        elif 200 <= status < 300:
            self.sent += 1
            await self.delivered([record])
        elif 400 <= status < 500:
            await self._leave(record, MessageClass.NACK_BAD_DST_Q)
        else:
            heapq.heappush(self._plain, order)  # its turn again after the back-off

    def _expired(self, message: ReceivedMessage) -> bool:
        deadline = message.properties.reach_queue_by_ms
        return bool(deadline) and time.time() * 1000 > deadline

    async def _request(self, message: ReceivedMessage, position: StreamPosition | None
                       ) -> tuple[bytes, str]:
        """(body, Content-Type) of the SRMP request for ``message``."""
        props = message.properties
        to = props.extra.get("srmp_to", self.destination)
        if props.extra.get("forward"):
            raw = compound_message(props, message.body)
            if raw is not None and not props.extra.get("forward_readdressed"):
                return raw, props.extra.get("srmp_content_type", "text/xml")
            envelope = parse_envelope((envelope_text(props) or "").encode())
            envelope = replace(envelope, path=replace(envelope.path, to=to))
            if raw is None:  # a receipt: the envelope is the whole request
                return envelope_bytes(envelope), "text/xml"
            request = build_request(envelope, message.body, host="-", path="/",
                                    boundary_number=random.randrange(1 << 16))
            return request.body, dict(request.headers)["Content-Type"]
        ordinal = await self._ordinal(message)
        envelope = outbound_envelope(
            props, to=to, ordinal=ordinal, qm_guid=self.qm.qm_guid,
            admin_url=self._local_url(props.admin_queue),
            response_url=self._local_url(props.response_queue), stream=position)
        request = build_request(envelope, message.body, host="-", path="/",
                                boundary_number=ordinal & 0xFFFF)
        return request.body, dict(request.headers)["Content-Type"]

    async def _ordinal(self, message: ReceivedMessage) -> int:
        """N of the wire id ``uuid:N@QM GUID``: the one the message got when it was queued
        (gateway.queues.wire_ids). A message queued without one (by an earlier version, whose ids
        did not fit 32 bits) gets one from the counter on its first send, kept while it is
        in this link."""
        match = _OUR_ID.match(message.message_id)
        if (match is not None and match.group(1).lower() == self.qm.qm_guid.lower()
                and 1 <= int(match.group(2)) <= ORDINAL_MAX):
            return int(match.group(2))
        ordinal = self._assigned.get(message.seq)
        if ordinal is None:
            assert self.qm.wire_ids is not None
            ordinal = self._assigned[message.seq] = await self.qm.wire_ids.next()
        return ordinal

    def _local_url(self, name: str) -> str | None:
        """A local queue path as the URL the receiver can send receipts to; a format name as
        SRMP carries it."""
        if not name:
            return None
        if "=" in name:
            return url_of_format_name(name)
        return f"{_lower_scheme(self.options.public_url)}/msmq/{name}"

    async def _post(self, body: bytes, content_type: str,
                    extra_headers: dict[str, str] | None = None) -> tuple[int, str]:
        """One attempt: (status, the receiver's stream verdict or ""); status 0 when there
        was no answer. Failures back off here."""
        url = self._route(self.destination) if self.webhook is None else self.destination
        headers = {"Content-Type": content_type, "SOAPAction": '"MSMQMessage"',
                   "Proxy-Accept": "NonInteractiveClient", "User-Agent": USER_AGENT
                   } if extra_headers is None else {
            "Content-Type": content_type, **extra_headers}
        status, problem, verdict = 0, "", ""
        try:
            async with self._client().post(url, data=body, headers=headers,
                                           allow_redirects=False) as response:
                await response.read()
                status = response.status
                verdict = response.headers.get(VERDICT_HEADER, "")
                problem = f"HTTP {status} from {url}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            problem = f"{type(exc).__name__} posting to {url}: {exc}"
        self._last_traffic = time.monotonic()
        if 200 <= status < 500:
            self._failures.succeeded()
            self.state = "active"
            # Delivered: what went wrong before is no longer shown as current (the log
            # keeps it).
            self.last_error = problem if status >= 300 else ""
            return status, verdict
        self.retries += 1
        self._counts.count(self.destination, "retries")
        self.last_error = problem
        self.state = "waiting to connect" if status == 0 else "inactive"
        await asyncio.sleep(self._failures.failed(problem))
        return status, verdict

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.options.request_timeout_s),
                skip_auto_headers=SKIP_AUTO_HEADERS,
                connector=aiohttp.TCPConnector(
                    limit=self.options.window + _PLAIN_WINDOW,
                    keepalive_timeout=self.options.idle_timeout_s,
                    ssl=self._tls if self._tls is not None else True))
        return self._session

    # ---- leaving the outgoing queue ------------------------------------------------------

    async def delivered(self, records: list[StoredRecord]) -> None:
        """Delivered (a 200, or a stream receipt): removed, with a machine-journal copy for
        messages that asked for positive source journaling (``Journal/``)."""
        journal = self.qm.internal(MACHINE_JOURNAL)
        specs: list[sending.Send] = []
        for record in records:
            message = self.qm.decode(self.queue, record)
            if message.properties.journal == "journal":
                copy = replace(message.properties, message_id=message.message_id)
                specs.append(sending.copy(journal, copy, message.body))
            self.qm.hold(self.queue, record)
            self._seen_at.pop(record.seq, None)
            self._assigned.pop(record.seq, None)
        removed = False
        try:
            if specs:
                await sending.commit(self.qm.store, specs, removes=records,
                                     arrived=self.qm.arrived)
            else:
                await store_call(self.qm.store.remove(records))
            removed = True
        finally:
            for record in records:
                self.qm.release(self.queue, record, removed=removed)

    async def _leave(self, record: StoredRecord, reason: MessageClass) -> None:
        """Not delivered: dead-letter copy and negative acknowledgement as the message asks."""
        self.qm.hold(self.queue, record)
        self._seen_at.pop(record.seq, None)
        self._assigned.pop(record.seq, None)
        removed = False
        try:
            await self.qm.finish(self.queue, [record], ack=reason, dead_letter=reason)
            removed = True
            server_log.warning("link to %s: message %d left undelivered (%s)",
                               self.destination, record.seq, reason.msmq_name)
        finally:
            self.qm.release(self.queue, record, removed=removed)

    async def _restart_stream(self, why: str) -> None:
        """The receiver lost the stream's state (docs/architecture.md §Store and forward):
        the messages still waiting move to a new stream, numbered from 1 with a ``<start>``.
        A receiver that had kept its state would take them again, so this waits for clear
        signs."""
        old = self.stream
        if old is None or not self._in_stream:
            return
        records = sorted(self._in_stream.values(), key=lambda r: r.seq)
        stream = await self.outgoing.new_stream(self.queue, records[0].seq,
                                                self._receipts_to(self.destination))
        self._in_stream = {stream.add(r.seq): r for r in records}
        self.stream = stream
        self._first_refused = 0
        server_log.warning("link to %s: %s; %d message(s) moved from stream %s to a new "
                           "stream %s", self.destination, why, len(records), old.stream_id,
                           stream.stream_id)

    async def receipt(self, last_ordinal: int) -> int:
        """A stream receipt for this link's stream; returns how many it acknowledged."""
        stream = self.stream
        if stream is None:
            return 0
        done = stream.acknowledged(last_ordinal, time.monotonic())
        records = []
        for current in done:
            record = self._in_stream.pop(current, None)
            if record is not None and self._settled(stream, current, record):
                records.append(record)
        self._stream_ended = stream.finished and not self._in_stream
        if records:
            await self.delivered(records)
        self.queue.arrived.set()
        return len(done)

    def _settled(self, stream: SenderStream, current: int, record: StoredRecord) -> bool:
        """An acknowledged message: True when it can go; one with DeadLetter/ waits for its
        final stream receipt instead."""
        if self.qm.decode(self.queue, record).properties.journal == "deadletter":
            self._awaiting_final[(stream.stream_id, current)] = record
            return False
        return True

    async def final_receipt(self, stream_id: str, ordinal: int, positive: bool,
                            message_class: int) -> bool:
        """A final stream receipt (docs/srmp.md, "Final stream receipts"): the kept copy is
        removed when the message was read, moved to ``system$;deadxact`` with the receipt's
        class when it was not."""
        record = self._awaiting_final.pop((stream_id, ordinal), None)
        if record is None:
            return False
        if positive:
            await self.delivered([record])
        else:
            try:
                reason = MessageClass(message_class)
            except ValueError:
                reason = MessageClass.NACK_Q_PURGED
            await self._leave(record, reason)
        return True
