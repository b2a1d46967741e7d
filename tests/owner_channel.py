"""A front's end of the channel as the store owner's ``Commands`` see it, for tests that run
the owner's commands in-process on a real application and store."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.fronts import wire
from gateway.fronts.commands import Commands


class OwnerChannel:
    """What the owner answered, by request id."""

    def __init__(self) -> None:
        self.lost = False
        self.answers: dict[int, asyncio.Future[tuple[int, Any]]] = {}

    def send(self, request_id: int, kind: int, value: object) -> None:
        payload = wire.encode(request_id, kind, value)[wire.HEAD.size:]  # as it would go
        self.answers.setdefault(request_id, asyncio.get_running_loop().create_future())
        self.answers[request_id].set_result((kind, wire.problem_answer(payload)
                                             if kind == wire.Kind.PROBLEM
                                             else wire.decode(payload)))

    def put(self, commands: Commands, request_id: int, kind: int, value: object) -> None:
        """Send a command without waiting: commands put in one pass reach the owner in one
        pass of its loop, as a front's do."""
        self.answers[request_id] = asyncio.get_running_loop().create_future()
        commands.on_request(self, request_id, kind,  # type: ignore[arg-type]
                            wire.encode(0, kind, value)[wire.HEAD.size:])

    async def answer(self, request_id: int) -> tuple[int, Any]:
        # Bounded only so that a command left unanswered fails here instead of hanging.
        return await asyncio.wait_for(self.answers[request_id], 60)

    async def call(self, commands: Commands, request_id: int, kind: int,
                   value: object) -> tuple[int, Any]:
        self.put(commands, request_id, kind, value)
        return await self.answer(request_id)
