"""The owner's side of the commands: run each on the one store, answer on its channel.

A command is answered ``OK`` only once what it stored is durable (``QueueManager.send`` and
SRMP delivery return after the store's commit), so a front that dies loses no acknowledged
message: the client of a request in flight sees its connection close and sends again.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import Awaitable

from aiohttp import web

from gateway.errors import ProblemError
from gateway.fronts import wire
from gateway.fronts.channel import Channel
from gateway.inbound.parse_pool import parsed_of
from gateway.queues.errors import QueueError
from gateway.srmp.parsed import ParsedRequest
from gateway.web.appkeys import AUTHENTICATOR_KEY, STATE_KEY
from gateway.web.auth_middleware import throttle
from gateway.web.problem import as_problem
from gateway.web.rest_queues import (
    browse_page,
    receive_messages,
    send_in_transaction,
    send_one,
)
from gateway.web.rest_tx import store_batch, transaction_action
from gateway.web.srmp_routes import Sender, deliver_srmp

__all__ = ["Commands"]

log = logging.getLogger("gateway.fronts")


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

    def on_request(self, channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
        if kind == wire.Kind.THROTTLE:
            try:
                throttle(self._authenticator, wire.decode(payload))
            except ProblemError as exc:
                channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(exc))
            else:
                channel.send(request_id, wire.Kind.OK, None)
            return
        if kind == wire.Kind.CANCEL:
            if (channel, request_id) in self._receiving:
                self._gone.add((channel, request_id))
            return
        if kind == wire.Kind.SEND:
            work: Awaitable[object] = self._send(payload)
        elif kind == wire.Kind.SRMP:
            work = self._srmp(payload)
        elif kind == wire.Kind.RECEIVE:
            work = self._receive(channel, request_id, payload)
        elif kind == wire.Kind.BROWSE:
            work = self._browse(payload)
        elif kind == wire.Kind.TX_SEND:
            work = self._tx_send(payload)
        elif kind == wire.Kind.TX:
            work = self._tx(payload)
        elif kind == wire.Kind.BATCH:
            work = self._batch(payload)
        else:
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer(
                500, f"unknown command kind {kind}", "about:blank", None, {}, {}))
            return
        task = asyncio.get_running_loop().create_task(self._answer(channel, request_id, work))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _answer(self, channel: Channel, request_id: int, work: Awaitable[object]) -> None:
        try:
            answer = await work
        except QueueError as refused:
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(
                as_problem(refused)))
        except ProblemError as exc:
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(exc))
        except Exception:
            log.exception("command failed")
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer(
                500, "internal error; see the gateway log", "about:blank", None, {}, {}))
        else:
            channel.send(request_id, wire.Kind.OK, answer)

    async def _send(self, payload: bytes) -> object:
        command = wire.send_command(payload)
        qm = self._state.serving().queue_manager
        return await send_one(qm, command.queue, command.body, command.properties,
                              transaction=command.transaction, key=command.dedup_key)

    async def _srmp(self, payload: bytes) -> object:
        command = wire.srmp_command(payload)

        async def parsed() -> ParsedRequest:
            # The pickle is the front's own (our child process's), as a parse worker's is.
            return parsed_of(command.parse_kind, pickle.loads(command.parse),
                             command.content_type, command.raw)

        return await deliver_srmp(self._app, Sender(command.remote, command.principal,
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
        return send_in_transaction(services.queue_manager, services.transactions,
                                   command.principal, command.transaction, command.queue,
                                   command.body, command.properties)

    async def _batch(self, payload: bytes) -> object:
        command = wire.batch_command(payload)
        return await store_batch(self._state.serving().queue_manager, command.items,
                                 command.key, command.raw)

    async def _tx(self, payload: bytes) -> object:
        command = wire.tx_command(payload)
        return await transaction_action(self._state.serving().transactions, command.principal,
                                        command.action, command.transaction)

    async def _browse(self, payload: bytes) -> object:
        queue, asked = wire.decode(payload)
        return browse_page(self._state.serving().queue_manager, queue, asked)

    async def drain(self) -> None:
        """Wait for the commands being run (before the store closes)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
