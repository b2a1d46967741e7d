"""The frames fronts and the owner exchange (pure: no I/O).

A frame is a header ``(payload length, request id, kind)`` and a payload. Requests go from a
front to the owner; every request is answered once, with the same id, by an answer frame
(``OK`` or ``PROBLEM``). Payloads are ``marshal`` data (tuples of plain values: the fastest
encoding CPython has): both ends are the same program, connected by a socket pair the owner
made and handed to its own child, so no other process writes to it.
"""

from __future__ import annotations

import dataclasses
import marshal
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.auth.principal import NOBODY, Principal
from gateway.errors import ProblemError
from gateway.inbound.parse_pool import FrameReader
from gateway.msmq.message import MessageProperties, properties_of, property_values
from gateway.web.calls import Call

__all__ = ["HEAD", "Kind", "BatchCommand", "LogCommand", "NonceCommand", "ProblemAnswer",
           "PutCommand", "ReceiveCommand", "SendCommand", "SrmpCommand", "TxCommand",
           "TxSendCommand", "batch_command", "call_command", "decode", "encode", "log_command",
           "nonce_command", "principal_of", "principal_values", "problem_answer",
           "put_command", "reader", "receive_command", "send_command", "srmp_command",
           "tx_command", "tx_send_command"]

HEAD = struct.Struct("<IIB")


class Kind:
    """Frame kinds: requests below 100, answers from 100."""

    HELLO = 1  # front -> owner: serving, with its pid
    SEND = 2  # front -> owner: store one message (SendCommand)
    STATS = 3  # owner -> front: its HTTP counts and requests in flight, answered OK
    THROTTLE = 4  # front -> owner: take a token of this partner's rate limit (OK or 429)
    SRMP = 5  # front -> owner: an SRMP request the front parsed (SrmpCommand)
    RECEIVE = 6  # front -> owner: take messages (ReceiveCommand)
    CANCEL = 7  # front -> owner: the client of this request id went away (no answer)
    COUNTS = 8  # front -> owner: its HTTP counts and requests in flight, unasked (no answer)
    BROWSE = 9  # front -> owner: (queue, (after, limit)), checked by the front
    TX_SEND = 10  # front -> owner: a send held in a transaction (TxSendCommand)
    TX = 11  # front -> owner: begin, show, prepare, commit or abort (TxCommand)
    BATCH = 12  # front -> owner: an atomic batch, checked by the front (BatchCommand)
    TX_LIST = 13  # front -> owner: the transactions a principal may see
    LOG = 14  # front -> owner: a queue's head, range or consumers request (LogCommand)
    MORE = 15  # front -> owner: the next piece of a range answer (its cursor)
    DROP = 16  # front -> owner: a range answer's client went away (its cursor; no answer)
    IDENTITY = 17  # front -> owner: the queue manager's GUID (once the store is open)
    PUT = 18  # front -> owner: a send the front stamped and encoded (PutCommand)
    NONCE = 19  # front -> owner: use up a verified signature's nonce (NonceCommand; OK or
    # 401, 429, 503), taking the partner's rate token unless it is taken
    CALL = 20  # front -> owner: a management operation, checked by the front
    # (gateway.web.calls.Call)
    OK = 100  # SEND, PUT: (the 201's JSON answer, whether it replays an earlier send); SRMP: the
    # 200's headers (or None); RECEIVE: the messages as JSON objects; BROWSE: the page;
    # TX_SEND: the 202's answer; TX: (status, answer); BATCH: (answer, replayed); TX_LIST:
    # the answer; LOG: (status, JSON body or None, headers, first piece, cursor), the piece
    # None but for a range's records; MORE: the next piece, b"" after the last, None: cut;
    # CALL: the Reply's (status, body, headers)
    PROBLEM = 101  # the answer is an error the front turns into problem+json


@dataclass(frozen=True, slots=True)
class SendCommand:
    """A REST send, already authenticated and validated by the front."""

    queue: str
    body: bytes
    properties: MessageProperties
    transaction: str | None  # None, "single" or "none"
    dedup_key: str | None  # the Idempotency-Key in its principal's space
    # The sender, whose reply addresses the owner checks against its state; None: none
    # named (gateway.web.reply_addresses).
    replies_of: Principal | None = None


@dataclass(frozen=True, slots=True)
class PutCommand:
    """A REST send outside any transaction that needs nothing but its own record, stamped
    and encoded by the front (gateway.queues.plain_sends): the owner stores ``payload`` as
    it comes, unless the queue makes the send transactional (``transaction`` None)."""

    queue: str
    payload: bytes
    priority: int
    receive_by_ms: int
    transaction: str | None  # None or "none"


@dataclass(frozen=True, slots=True)
class SrmpCommand:
    """An SRMP request: who sent it (authenticated by the front) and the front's parse of
    it, ``parse_kind`` and ``parse`` as gateway.inbound.parse_pool's ``parse_answer`` makes
    them; ``raw`` the request body, which the parse points into."""

    remote: str
    principal: Principal
    content_type: str
    raw: bytes
    parse_kind: int
    parse: bytes


@dataclass(frozen=True, slots=True)
class TxSendCommand:
    """A REST send in a transaction, validated by the front (no reply addresses)."""

    transaction: str
    queue: str
    body: bytes
    properties: MessageProperties
    principal: Principal


@dataclass(frozen=True, slots=True)
class BatchCommand:
    """A batch's messages ``(queue, body, properties)``, its scoped Idempotency-Key, and
    with a key the request's body (what the key's digest covers; else empty)."""

    items: list[tuple[str, bytes, MessageProperties]]
    key: str | None
    raw: bytes
    replies_of: Principal | None = None  # as SendCommand's


@dataclass(frozen=True, slots=True)
class TxCommand:
    """A transaction's ``action`` (begin, show, prepare, commit, abort) for ``principal``;
    ``transaction`` is "" to begin one."""

    action: str
    transaction: str
    principal: Principal


@dataclass(frozen=True, slots=True)
class ReceiveCommand:
    """A REST receive, authenticated and validated by the front: ``asked`` is
    ``(max, wait, Mq-Transaction)``."""

    queue: str
    asked: tuple[int, float, str | None]
    principal: Principal


@dataclass(frozen=True, slots=True)
class LogCommand:
    """A request under a queue's ``head``, ``range`` or ``consumers``, authorized by the
    front: the owner checks and answers the rest as one process does (gateway.web.rest_range).
    ``body`` is a PUT's or a POST's, else empty."""

    queue: str
    rest: list[str]
    method: str
    query: list[tuple[str, str]]
    body: bytes
    owner: str | None  # whose consumers the caller sees (Principal.consumer_owner)


@dataclass(frozen=True, slots=True)
class NonceCommand:
    """A signed request the front verified: the owner, which holds every partner's nonces,
    checks and uses up ``nonce`` (gateway.auth.authenticator's ``take_nonce``)."""

    partner: str
    ts: int
    nonce: str
    throttled: bool


@dataclass(frozen=True, slots=True)
class ProblemAnswer:
    """The fields of a ``ProblemError``."""

    status: int
    detail: str
    type_slug: str
    title: str | None
    headers: dict[str, str]
    extra: dict[str, object]

    @classmethod
    def of(cls, exc: ProblemError) -> ProblemAnswer:
        return cls(exc.status_hint, exc.detail, exc.type_slug, exc.title, exc.headers,
                   exc.extra)

    def error(self) -> ProblemError:
        return ProblemError(self.status, self.detail, type_slug=self.type_slug,
                            title=self.title, headers=self.headers, extra=self.extra)


_principal_values = operator.attrgetter(*(f.name for f in dataclasses.fields(Principal)))


def encode(request_id: int, kind: int, value: Any) -> bytes:
    """A frame; ``value`` is plain data or one of the commands (or a ``ProblemAnswer``)."""
    flatten = _FLATTEN.get(type(value))
    payload = marshal.dumps(value if flatten is None else flatten(value))
    return HEAD.pack(len(payload), request_id, kind) + payload


def principal_values(principal: Principal) -> tuple[object, ...] | None:
    """A principal as a command carries it: NOBODY goes as None (the owner tells it apart
    by identity)."""
    return None if principal is NOBODY else _principal_values(principal)


def principal_of(values: tuple[Any, ...] | None) -> Principal:
    """A principal from its encoding in a command."""
    return NOBODY if values is None else Principal(*values)


# Each command as the plain tuple its reader below takes apart (found by type: a frame's
# value is plain data far more often than not, the owner's answers above all).
_FLATTEN: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    SendCommand: lambda v: (v.queue, v.body, property_values(v.properties), v.transaction,
                            v.dedup_key, _replies_values(v.replies_of)),
    PutCommand: lambda v: (v.queue, v.payload, v.priority, v.receive_by_ms, v.transaction),
    SrmpCommand: lambda v: (v.remote, principal_values(v.principal), v.content_type, v.raw,
                            v.parse_kind, v.parse),
    TxSendCommand: lambda v: (v.transaction, v.queue, v.body, property_values(v.properties),
                              principal_values(v.principal)),
    BatchCommand: lambda v: ([(q, b, property_values(p)) for q, b, p in v.items], v.key,
                             v.raw, _replies_values(v.replies_of)),
    Call: lambda v: (v.op, v.method, v.match, v.query, v.headers, v.body,
                     principal_values(v.principal), v.local),
    TxCommand: lambda v: (v.action, v.transaction, principal_values(v.principal)),
    ReceiveCommand: lambda v: (v.queue, v.asked, principal_values(v.principal)),
    LogCommand: lambda v: (v.queue, v.rest, v.method, v.query, v.body, v.owner),
    NonceCommand: dataclasses.astuple,
    ProblemAnswer: dataclasses.astuple,
}


def decode(payload: bytes) -> Any:
    return marshal.loads(payload)


def _replies_values(principal: Principal | None) -> tuple[object, ...] | None:
    """``replies_of`` as a command carries it (NOBODY itself is None: a 1-tuple then)."""
    return None if principal is None else (principal_values(principal),)


def _replies_of(values: tuple[Any, ...] | None) -> Principal | None:
    return None if values is None else principal_of(values[0])


def send_command(payload: bytes) -> SendCommand:
    queue, body, values, transaction, key, replies = marshal.loads(payload)
    return SendCommand(queue, body, properties_of(values), transaction, key,
                       _replies_of(replies))


def put_command(payload: bytes) -> PutCommand:
    return PutCommand(*marshal.loads(payload))


def srmp_command(payload: bytes) -> SrmpCommand:
    remote, principal, content_type, raw, parse_kind, parse = marshal.loads(payload)
    return SrmpCommand(remote, principal_of(principal), content_type, raw, parse_kind, parse)


def tx_send_command(payload: bytes) -> TxSendCommand:
    transaction, queue, body, values, principal = marshal.loads(payload)
    return TxSendCommand(transaction, queue, body, properties_of(values), principal_of(principal))


def batch_command(payload: bytes) -> BatchCommand:
    items, key, raw, replies = marshal.loads(payload)
    return BatchCommand([(q, b, properties_of(v)) for q, b, v in items], key, raw,
                        _replies_of(replies))


def call_command(payload: bytes) -> Call:
    op, method, match, query, headers, body, principal, local = marshal.loads(payload)
    return Call(op, method, match, [tuple(q) for q in query], [tuple(h) for h in headers],
                body, principal_of(principal), local)


def tx_command(payload: bytes) -> TxCommand:
    action, transaction, principal = marshal.loads(payload)
    return TxCommand(action, transaction, principal_of(principal))


def receive_command(payload: bytes) -> ReceiveCommand:
    queue, asked, principal = marshal.loads(payload)
    return ReceiveCommand(queue, asked, principal_of(principal))


def log_command(payload: bytes) -> LogCommand:
    return LogCommand(*marshal.loads(payload))


def nonce_command(payload: bytes) -> NonceCommand:
    return NonceCommand(*marshal.loads(payload))


def problem_answer(payload: bytes) -> ProblemAnswer:
    return ProblemAnswer(*marshal.loads(payload))


def reader() -> FrameReader:
    """Splits a stream into ``((length, id, kind), payload)`` frames."""
    return FrameReader(HEAD, lambda v: v[0])
