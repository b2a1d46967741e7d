"""One end of the socket pair between a front and the owner.

Frames written in one pass of the event loop leave in one ``write`` (many requests, or many
answers, per system call); answers are matched to their requests by id. A front has at most
``in_flight_max`` requests waiting (its own cap on concurrent requests bounds it first).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import cast

from gateway.errors import AnswerInDoubt, GatewayError
from gateway.fronts import wire

__all__ = ["AnswerLost", "Channel", "ChannelLost", "Overloaded"]

log = logging.getLogger("gateway.fronts")

# What the other end sends: (request id, kind, payload).
OnRequest = Callable[["Channel", int, int, bytes], None]


class ChannelLost(GatewayError):
    """The other process is gone: requests waiting on it get no answer."""


class AnswerLost(ChannelLost, AnswerInDoubt):
    """The other process went away after the request was sent: it may have been carried
    out (a message stored or taken), so nobody can say it was not."""


class Overloaded(GatewayError):
    """More requests wait on the owner than the channel allows."""


class Channel(asyncio.Protocol):
    def __init__(self, *, on_request: OnRequest | None = None,
                 on_lost: Callable[[], None] | None = None,
                 in_flight_max: int = 65_536) -> None:
        self._on_request = on_request
        self._on_lost = on_lost
        self.in_flight_max = in_flight_max
        self._reader = wire.reader()
        self._waiting: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._ids = itertools.count(1)
        self._out: list[bytes] = []
        self._transport: asyncio.Transport | None = None
        self.lost = False
        self.writes = 0  # system calls made to send frames, however many frames each

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        for (_, request_id, kind), payload in self._reader.feed(data):
            if kind >= wire.Kind.OK:
                waiter = self._waiting.pop(request_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result((kind, payload))
            elif self._on_request is not None:
                self._on_request(self, request_id, kind, payload)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            if not waiter.done():
                waiter.set_exception(AnswerLost("the owner process went away before "
                                                "answering"))
        if self._on_lost is not None:
            self._on_lost()

    async def call(self, kind: int, value: object) -> tuple[int, bytes]:
        """Send a request and wait for its answer ``(kind, payload)``.

        Raises:
            ChannelLost: the other end is gone: the request was not sent.
            AnswerLost: it went away while the request waited (it may have been done).
            Overloaded: ``in_flight_max`` requests are waiting already.
        """
        request_id, waiter = self.start(kind, value)
        try:
            return await waiter
        except asyncio.CancelledError:
            # The caller gave up (its client hung up): a receive waiting at the other end
            # takes nothing more for it.
            self.send(request_id, wire.Kind.CANCEL, None)
            raise
        finally:
            self._waiting.pop(request_id, None)

    def start(self, kind: int, value: object
              ) -> tuple[int, asyncio.Future[tuple[int, bytes]]]:
        """Send a request: its id, and the future of its answer (``call`` without a task:
        the send lane's). The future fails with AnswerLost if the other end goes away first.

        Raises:
            ChannelLost, Overloaded: as ``call``; nothing was sent.
        """
        if self.lost:
            raise ChannelLost("the owner process is gone")
        if len(self._waiting) >= self.in_flight_max:
            raise Overloaded(f"{self.in_flight_max} requests wait on the owner")
        request_id = next(self._ids)
        waiter: asyncio.Future[tuple[int, bytes]] = (
            asyncio.get_running_loop().create_future())
        self._waiting[request_id] = waiter
        self.send(request_id, kind, value)
        return request_id, waiter

    def send(self, request_id: int, kind: int, value: object) -> None:
        """Queue one frame; the frames of this loop pass leave together."""
        if self.lost:
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(wire.encode(request_id, kind, value))

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self._transport is not None and not self._transport.is_closing():
            self.writes += 1
            self._transport.write(b"".join(out))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
