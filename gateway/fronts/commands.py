"""The owner's side of the commands: run each on the one store, answer on its channel.

A command is answered ``OK`` only once what it stored is durable (``QueueManager.send`` and
SRMP delivery return after the store's commit), so a front that dies loses no acknowledged
message: the client of a request in flight sees its connection close and sends again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TypeVar, cast

from aiohttp import web
from multidict import MultiDict

from gateway.auth.hmac_sig import SignedRequest
from gateway.errors import ProblemError
from gateway.fronts import wire
from gateway.fronts.channel import Channel
from gateway.inbound.parse_pool import parsed_of
from gateway.msmq.message import decode_payload
from gateway.queues.errors import QueueError
from gateway.queues.manager import QueueManager
from gateway.queues.plain_sends import PlainSend, Stored, encoded_send, plain_send, send_plain
from gateway.srmp.parsed import ParsedRequest
from gateway.web import rest_range
from gateway.web.appkeys import AUTHENTICATOR_KEY, SETTINGS_KEY, STATE_KEY
from gateway.web.auth_middleware import take_nonce, throttle
from gateway.web.calls import OPERATIONS
from gateway.web.problem import as_problem, http_problem
from gateway.web.reply_addresses import check_principal_replies
from gateway.web.rest_queues import (
    browse_page,
    receive_messages,
    send_in_transaction,
    send_one,
)
from gateway.web.rest_tx import store_batch, transaction_action, transaction_list
from gateway.web.srmp_routes import PlainSrmp, Sender, store_srmp_many, take_srmp

__all__ = ["Commands"]

log = logging.getLogger("gateway.fronts")


_P = TypeVar("_P")
_INTERNAL = wire.ProblemAnswer(500, "internal error; see the gateway log", "about:blank", None,
                              {}, {})


class Commands:
    """Runs the commands fronts send, on the owner's application ``app``."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._state = app[STATE_KEY]
        self._authenticator = app[AUTHENTICATOR_KEY]
        self._running: set[asyncio.Task[None]] = set()
        # Receives being run, and those of them whose front's client went away (CANCEL).
        self._receiving: set[tuple[Channel, int]] = set()
        self._gone: set[tuple[Channel, int]] = set()
        # Range answers being sent piece by piece, by (channel, cursor): each is a request in
        # flight at a front, which caps them (server.concurrent_requests_max).
        self._cursors: dict[tuple[Channel, int], Iterator[bytes | None]] = {}
        self._cursors_max = app[SETTINGS_KEY].server.concurrent_requests_max
        self._cursor_ids = itertools.count(1)
        # SEND and PUT commands of this pass of the loop, stored together once it ends; and
        # its SRMP commands, whose plain messages are stored together too.
        self._sends: list[tuple[Channel, int, int, bytes]] = []
        self._srmps: list[tuple[Channel, int, int, bytes]] = []

    def on_request(self, channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
        if kind == wire.Kind.THROTTLE:
            partner = wire.decode(payload)
            _at_once(channel, request_id, lambda: throttle(self._authenticator, partner))
            return
        if kind == wire.Kind.NONCE:
            signed = wire.nonce_command(payload)
            _at_once(channel, request_id, lambda: take_nonce(self._authenticator, SignedRequest(
                signed.partner, signed.ts, signed.nonce, b""), signed.throttled))
            return
        if kind == wire.Kind.CANCEL:
            if (channel, request_id) in self._receiving:
                self._gone.add((channel, request_id))
            return
        if kind == wire.Kind.DROP:
            self._cursors.pop((channel, wire.decode(payload)), None)
            return
        if kind == wire.Kind.PUT or kind == wire.Kind.SEND:
            if not self._sends:
                asyncio.get_running_loop().call_soon(self._start_sends)
            self._sends.append((channel, request_id, kind, payload))
            return
        if kind == wire.Kind.IDENTITY:
            try:
                guid = self._state.serving().queue_manager.qm_guid
            except ProblemError as exc:
                channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(exc))
            else:
                channel.send(request_id, wire.Kind.OK, guid)
            return
        if kind == wire.Kind.SRMP:
            if not self._srmps:
                asyncio.get_running_loop().call_soon(self._start_srmps)
            self._srmps.append((channel, request_id, kind, payload))
            return
        if kind == wire.Kind.RECEIVE:
            work: Awaitable[object] = self._receive(channel, request_id, payload)
        elif kind == wire.Kind.BROWSE:
            work = self._browse(payload)
        elif kind == wire.Kind.TX_SEND:
            work = self._tx_send(payload)
        elif kind == wire.Kind.TX:
            work = self._tx(payload)
        elif kind == wire.Kind.BATCH:
            work = self._batch(payload)
        elif kind == wire.Kind.TX_LIST:
            work = self._tx_list(payload)
        elif kind == wire.Kind.LOG:
            work = self._log(channel, payload)
        elif kind == wire.Kind.MORE:
            work = self._more(channel, payload)
        elif kind == wire.Kind.CALL:
            work = self._call(payload)
        else:
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer(
                500, f"unknown command kind {kind}", "about:blank", None, {}, {}))
            return
        self._run(self._answer(channel, request_id, work))

    def _run(self, work: Coroutine[object, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _answer(self, channel: Channel, request_id: int, work: Awaitable[object]) -> None:
        """Run a command and answer it: every command gets one answer, since a front's
        request waits for it."""
        try:
            answer = await work
        except Exception as exc:
            _reply(channel, request_id, *_refusal(exc))
        else:
            _reply(channel, request_id, wire.Kind.OK, answer)

    def _start_sends(self) -> None:
        sends, self._sends = self._sends, []
        self._run(self._send_many(sends))

    async def _send_many(self, sends: list[tuple[Channel, int, int, bytes]]) -> None:
        """The sends that came in one pass of the loop, from every front: those that need
        nothing but their own record are stored together (``send_plain``: one task and one
        wait for the lot, the owner's cost per message being what bounds the gateway); the
        others each take ``QueueManager.send``'s whole way."""
        plain = self._taken(sends, lambda kind, payload: self._plain(
            self._state.serving().queue_manager, kind, payload), PlainSend)
        if not plain:
            return
        try:
            qm = self._state.serving().queue_manager
            made = await send_plain(qm, [send for _, _, send in plain])
        except Exception as exc:  # the store takes no writes: none was stored
            refusal = _refusal(exc)
            for channel, request_id, _ in plain:
                _reply(channel, request_id, *refusal)
            return
        for (channel, request_id, _), stored in zip(plain, made):
            if isinstance(stored, Stored):
                _reply(channel, request_id, wire.Kind.OK, (
                    {"id": stored.message_id, "queue": stored.queue, "seq": stored.seq},
                    False))
            else:
                _reply(channel, request_id, *_refusal(stored))

    def _taken(self, commands: list[tuple[Channel, int, int, bytes]],
               take: Callable[[int, bytes], _P | Awaitable[object]], plain: type[_P]
               ) -> list[tuple[Channel, int, _P]]:
        """``take`` each of ``commands``: those it makes ``plain``, to be stored together; the
        others run their whole way, and a refusal is answered at once."""
        found: list[tuple[Channel, int, _P]] = []
        for channel, request_id, kind, payload in commands:
            try:
                taken = take(kind, payload)
            except Exception as exc:
                _reply(channel, request_id, *_refusal(exc))
                continue
            if isinstance(taken, plain):
                found.append((channel, request_id, taken))
            else:  # not narrowed by mypy: ``plain`` is a type variable's
                self._run(self._answer(channel, request_id, cast(Awaitable[object], taken)))
        return found

    def _plain(self, qm: QueueManager, kind: int, payload: bytes
               ) -> PlainSend | Coroutine[object, None, object]:
        """A send's record for ``send_plain``, or else the whole send to run."""
        if kind == wire.Kind.PUT:
            put = wire.put_command(payload)
            send = encoded_send(qm, put.queue, put.payload, put.priority, put.receive_by_ms,
                                put.transaction)
            if send is not None:
                return send
            # The queue makes it transactional: the message as the front stamped it.
            message = decode_payload(put.payload)
            return send_one(qm, put.queue, message.body, message.properties,
                            transaction=put.transaction, key=None)
        command = wire.send_command(payload)
        if command.replies_of is not None:
            check_principal_replies(self._state, command.replies_of, command.properties)
        send = None if command.dedup_key is not None else plain_send(
            qm, command.queue, command.body, command.properties, command.transaction)
        if send is not None:
            return send
        return send_one(qm, command.queue, command.body, command.properties,
                        transaction=command.transaction, key=command.dedup_key)

    def _start_srmps(self) -> None:
        srmps, self._srmps = self._srmps, []
        self._run(self._srmp_many(srmps))

    async def _srmp_many(self, srmps: list[tuple[Channel, int, int, bytes]]) -> None:
        """The SRMP requests of one pass of the loop: the messages that need nothing but
        their own record are stored together (``store_srmp_many``), as plain sends are;
        the others (streams, forwards, receipts) each take their whole way."""
        plain = self._taken(srmps, lambda _, payload: self._take_srmp(payload), PlainSrmp)
        if not plain:
            return
        answers = await store_srmp_many(self._app, [taken for _, _, taken in plain])
        for (channel, request_id, _), answer in zip(plain, answers):
            if isinstance(answer, Exception):
                _reply(channel, request_id, *_refusal(answer))
            else:
                _reply(channel, request_id, wire.Kind.OK, answer)

    def _take_srmp(self, payload: bytes) -> PlainSrmp | Awaitable[object]:
        command = wire.srmp_command(payload)

        def parsed() -> ParsedRequest:
            # The pickle is the front's own (our child process's), as a parse worker's is.
            return parsed_of(command.parse_kind, pickle.loads(command.parse),
                             command.content_type, command.raw)

        return take_srmp(self._app, Sender(command.remote, command.principal,
                                           command.content_type), parsed)

    async def _receive(self, channel: Channel, request_id: int, payload: bytes) -> object:
        command = wire.receive_command(payload)
        key = (channel, request_id)
        self._receiving.add(key)
        try:
            return await receive_messages(
                self._app, command.principal, command.queue, command.asked,
                gone=lambda: channel.lost or key in self._gone)
        finally:
            self._receiving.discard(key)
            self._gone.discard(key)

    async def _tx_send(self, payload: bytes) -> object:
        command = wire.tx_send_command(payload)
        services = self._state.serving()
        check_principal_replies(self._state, command.principal, command.properties)
        return send_in_transaction(services.queue_manager, services.transactions,
                                   command.principal, command.transaction, command.queue,
                                   command.body, command.properties)

    async def _batch(self, payload: bytes) -> object:
        command = wire.batch_command(payload)
        if command.replies_of is not None:
            for index, (_, _, props) in enumerate(command.items):
                check_principal_replies(self._state, command.replies_of, props,
                                        where=f"messages[{index}].properties.")
        return await store_batch(self._state.serving().queue_manager, command.items,
                                 command.key, command.raw)

    async def _tx(self, payload: bytes) -> object:
        command = wire.tx_command(payload)
        return await transaction_action(self._state.serving().transactions, command.principal,
                                        command.action, command.transaction)

    async def _call(self, payload: bytes) -> object:
        """A management operation, run as one process runs it (gateway.web.calls)."""
        call = wire.call_command(payload)
        run = OPERATIONS.get(call.op)
        if run is None:
            raise ProblemError(500, f"no operation {call.op!r}")
        try:
            reply = await run(self._app, call)
        except (QueueError, ProblemError, web.HTTPException):
            raise  # a refusal, answered as one process answers it
        except Exception:  # logged as one process logs it: which request failed
            log.exception("unhandled error in operation %s method=%s", call.op, call.method)
            raise ProblemError(500, _INTERNAL.detail) from None
        return (reply.status, reply.body, reply.headers)

    async def _browse(self, payload: bytes) -> object:
        queue, asked = wire.decode(payload)
        return browse_page(self._state.serving().queue_manager, queue, asked)

    async def _tx_list(self, payload: bytes) -> object:
        principal = wire.principal_of(wire.decode(payload))
        return transaction_list(self._state.serving().transactions, principal)

    async def _log(self, channel: Channel, payload: bytes) -> object:
        command = wire.log_command(payload)
        services = self._state.serving()
        found = await rest_range.answer(services.queue_manager, services.consumers,
                                        command.queue, command.rest, command.method,
                                        MultiDict(command.query), command.body,
                                        command.owner)
        if isinstance(found, rest_range.Reply):
            return (found.status, found.body, found.headers, None, 0)
        pieces = rest_range.record_pieces(services.queue_manager, found.queue, found.records)
        # There is always a piece (the last has the end marker), and not a cut: nothing is
        # removed between the records' lookup and the first piece, made in the same pass.
        first = next(pieces) or b""
        self._forget_lost()
        if len(self._cursors) >= self._cursors_max:
            raise ProblemError(503, f"{self._cursors_max} range answers are being sent",
                               type_slug="not-ready", headers={"Retry-After": "1"})
        cursor = next(self._cursor_ids)
        self._cursors[(channel, cursor)] = pieces
        return (200, None, found.headers, first, cursor)

    async def _more(self, channel: Channel, payload: bytes) -> object:
        key = (channel, wire.decode(payload))
        pieces = self._cursors.get(key)
        if pieces is None:
            raise ProblemError(404, "no range answer is being sent under this cursor",
                               type_slug="not-found")
        try:
            piece = next(pieces, b"")
        except BaseException:
            del self._cursors[key]
            raise
        if not piece:  # the end (b""), or cut (None)
            del self._cursors[key]
        return piece

    def _forget_lost(self) -> None:
        """Cursors of a front that went away are never asked for again."""
        for key in [k for k in self._cursors if k[0].lost]:
            del self._cursors[key]

    async def drain(self) -> None:
        """Wait for the commands being run (before the store closes)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)


def _refusal(exc: Exception) -> tuple[int, wire.ProblemAnswer]:
    """The answer to a command that raised ``exc``."""
    if isinstance(exc, QueueError):
        return wire.Kind.PROBLEM, wire.ProblemAnswer.of(as_problem(exc))
    if isinstance(exc, ProblemError):
        return wire.Kind.PROBLEM, wire.ProblemAnswer.of(exc)
    if isinstance(exc, web.HTTPException):  # 405: as one process's middleware answers it
        return wire.Kind.PROBLEM, wire.ProblemAnswer.of(http_problem(exc))
    log.error("command failed", exc_info=exc)
    return wire.Kind.PROBLEM, _INTERNAL


def _at_once(channel: Channel, request_id: int, check: Callable[[], None]) -> None:
    """Answer a command that is a check of the owner's state: OK, or its refusal."""
    try:
        check()
    except ProblemError as exc:
        channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(exc))
    else:
        channel.send(request_id, wire.Kind.OK, None)


def _reply(channel: Channel, request_id: int, kind: int, answer: object) -> None:
    try:
        channel.send(request_id, kind, answer)
    except ValueError:  # not plain data: marshal cannot carry it
        log.exception("the answer to a command cannot be sent")
        channel.send(request_id, wire.Kind.PROBLEM, _INTERNAL)
