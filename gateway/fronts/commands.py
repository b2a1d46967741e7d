"""The owner's side of the commands: run each on the one store, answer on its channel.

A command is answered ``OK`` only once what it stored is durable (``QueueManager.send``
returns after the store's commit), so a front that dies loses no acknowledged message: the
client of a request in flight sees its connection close and sends again.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.auth.authenticator import Authenticator
from gateway.errors import ProblemError
from gateway.fronts import wire
from gateway.fronts.channel import Channel
from gateway.queues.errors import QueueError
from gateway.web.auth_middleware import throttle
from gateway.web.problem import as_problem
from gateway.web.rest_queues import send_one
from gateway.web.state import GatewayState

__all__ = ["Commands"]

log = logging.getLogger("gateway.fronts")


class Commands:
    """Runs the commands fronts send."""

    def __init__(self, state: GatewayState, authenticator: Authenticator) -> None:
        self._state = state
        self._authenticator = authenticator
        self._running: set[asyncio.Task[None]] = set()

    def on_request(self, channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
        if kind == wire.Kind.THROTTLE:
            try:
                throttle(self._authenticator, wire.decode(payload))
            except ProblemError as exc:
                channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(exc))
            else:
                channel.send(request_id, wire.Kind.OK, None)
            return
        if kind != wire.Kind.SEND:
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer(
                500, f"unknown command kind {kind}", "about:blank", None, {}, {}))
            return
        task = asyncio.get_running_loop().create_task(self._send(channel, request_id, payload))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _send(self, channel: Channel, request_id: int, payload: bytes) -> None:
        try:
            command = wire.send_command(payload)
            qm = self._state.serving().queue_manager
            answer = await send_one(qm, command.queue, command.body, command.properties,
                                    transaction=command.transaction, key=command.dedup_key)
        except QueueError as refused:
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(
                as_problem(refused)))
        except ProblemError as exc:
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(exc))
        except Exception:
            log.exception("send command failed")
            channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer(
                500, "internal error; see the gateway log", "about:blank", None, {}, {}))
        else:
            channel.send(request_id, wire.Kind.OK, answer)

    async def drain(self) -> None:
        """Wait for the commands being run (before the store closes)."""
        while self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
