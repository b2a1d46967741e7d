"""One client connection of a front's send lane (gateway.fronts.send_lane): its bytes, the
request at the owner, the answers in order, and its passing on to aiohttp's server."""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

from gateway.fronts.lane_http import INCOMPLETE, Incomplete, Pass, Read

__all__ = ["Lane", "LaneConnection"]


class Lane(Protocol):
    """What a connection asks of its lane (gateway.fronts.send_lane.SendLane)."""

    @property
    def connections(self) -> set[LaneConnection]: ...

    @property
    def stopping(self) -> bool: ...

    def read(self, buffer: bytes) -> Read | Pass | Incomplete: ...

    def start(self, read: Read, connection: LaneConnection) -> bool: ...

    def pass_on(self, connection: LaneConnection) -> asyncio.Protocol: ...


# Bytes a connection holds unread while its request is at the owner; beyond, it stops
# reading until the answer is written.
_BUFFER_MAX = 1 << 20


class LaneConnection(asyncio.Protocol):
    """One client connection while it is in the lane: one request at the owner at a time,
    answered in order; the bytes after it wait in ``_buffer``."""

    def __init__(self, lane: Lane) -> None:
        self._lane = lane
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._busy = False
        self._reading = True
        self._writing = True
        self._stop_when_answered = False
        self.closed = False
        self.transport: asyncio.BaseTransport | None = None  # (a TLS one's certificate)
        self._ticks = 0  # ticks since the last bytes came

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.transport = transport
        self._lane.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._ticks = 0  # ticks since the last bytes came
        self._buffer = self._buffer + data if self._buffer else data
        if self._busy or not self._writing:
            if len(self._buffer) > _BUFFER_MAX and self._reading and self._transport:
                self._reading = False
                self._transport.pause_reading()
            return
        self._next()

    def eof_received(self) -> bool | None:
        """As aiohttp's connections: the connection closes (an answer not written yet is
        not written), aiohttp's having had the bytes read so far."""
        if self._buffer and not self._busy:
            return self._pass_on().eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lane.connections.discard(self)

    def pause_writing(self) -> None:
        self._writing = False

    def resume_writing(self) -> None:
        self._writing = True
        if not self._busy and self._buffer:
            self._next()

    def _next(self) -> None:
        """Start the request at the head of the buffer, or leave the connection to aiohttp
        if the lane does not take it (one not all there waits: ``tick``)."""
        if self.closed or self._transport is None:
            return
        if self._lane.stopping:  # a request that came as the front stops: not begun
            self._transport.close()
            return
        buffer = self._buffer
        read = self._lane.read(buffer)
        if read is INCOMPLETE:  # the rest may come: ``tick`` passes it on if it does not
            return
        # Bytes after the request (pipelined) are aiohttp's too: its parser reads them all
        # before it answers the first, and one it refuses leaves the first unanswered.
        if (not isinstance(read, Read) or read.end < len(buffer)
                or not self._lane.start(read, self)):
            self._pass_on()
            return
        self._busy = True
        self._buffer = buffer[read.end:]

    def answered(self, data: bytes | None) -> None:
        """The answer's bytes, or None: the answer is in doubt, the connection is cut (the
        client cannot take a missing answer for a refusal)."""
        self._busy = False
        if self.closed or self._transport is None:
            return
        if data is None:
            self._transport.abort()
            return
        self._transport.write(data)
        if self._stop_when_answered:
            self._transport.close()
            return
        if not self._reading and len(self._buffer) <= _BUFFER_MAX:
            self._reading = True
            self._transport.resume_reading()
        if self._buffer and self._writing:
            self._next()

    def tick(self, keepalive_ticks: int) -> None:
        """Once a second: a request not all there goes to aiohttp (its body time-out then
        counts); an idle connection closes after ``server.keepalive_timeout``."""
        self._ticks += 1
        if self._busy or self.closed or self._transport is None:
            return
        if self._buffer:  # a request not all there at a tick, however slowly it comes
            self._pass_on()
        elif self._ticks >= keepalive_ticks:
            self._transport.close()

    def stop(self) -> None:
        if self._busy:
            self._stop_when_answered = True
        elif self._transport is not None:
            self._transport.close()

    def _pass_on(self) -> asyncio.Protocol:
        """The connection and the bytes read so far, to aiohttp's server."""
        assert self._transport is not None
        transport, buffer = self._transport, self._buffer
        self._transport, self._buffer = None, b""
        protocol = self._lane.pass_on(self)
        transport.set_protocol(protocol)
        if not self._reading:
            transport.resume_reading()
        protocol.connection_made(transport)
        if buffer:
            protocol.data_received(buffer)
        return protocol
