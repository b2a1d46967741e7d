"""SRMP requests parsed in worker processes, not on the event loop.

Why: the gateway is bound by its one GIL, not by CPU: under SRMP load the event loop is the
busiest thread while the machine still has CPU to spare. Parsing — MIME split, lxml, the
envelope walk — is a large share of the loop's work per SRMP request; in a worker it runs in
parallel and the loop pays only for a pipe write and an unpickle (docs/performance.md). With few
requests in flight the loop has time to spare and the round trip would only add latency, so
those stay on the loop (``busy``). A parser crash on hostile input in a worker does not take
the gateway down: the worker dies, its requests get 503 (Windows senders retry 5xx), and the
next request starts a new one.

Wire format on the worker's stdin/stdout (both sides are this module, same version):
request ``<IIH`` (id, body length, content-type length) + content type + body; answer ``<IIB``
(id, length, kind) + a pickle: for a message, what ``ParsedRequest`` keeps at hand (kind, <to>,
id, stream, signed, the message properties the worker made, or the reason they could not be
made), the body's position, and the rest of the ``SrmpMessage`` as a pickle of its own that the
loop unpickles only when a request needs it — sent only for a signed message or a receipt;
the loop parses any other again if it ever needs more (the two large byte fields are never
sent: the parent slices them out of the body it still holds); for kind 0 ``(error class,
reason)``.
Unpickling is safe here because the only writer is our own child process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import functools
import io
import itertools
import operator
import pickle
import signal
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, cast

from gateway.errors import GatewayError
from gateway.logs import server_log as log
from gateway.msmq.message import MessageProperties, properties_of, property_values
from gateway.srmp import model
from gateway.srmp.codec import SrmpMessage, parse_request
from gateway.srmp.errors import EnvelopeError, MimeError, SrmpError
from gateway.srmp.parsed import ParsedRequest
from gateway.srmp.properties import add_mime_parts

__all__ = ["ParsePool", "WorkerLost", "encode_request", "request_reader", "FrameReader",
           "serve_worker", "INLINE_REQUESTS_MAX", "parse_answer", "parsed_of"]


_REQUEST = struct.Struct("<IIH")
_ANSWER = struct.Struct("<IIB")
_KIND_ERROR, _KIND_MESSAGE, _KIND_INTERNAL = 0, 1, 2
_ERRORS: dict[str, type[SrmpError]] = {c.__name__: c for c in (SrmpError, MimeError,
                                                                EnvelopeError)}
# Up to this many SRMP requests in flight, they are parsed on the loop: with few in flight a
# worker's process round trip costs more throughput than it saves; with many it gains.
INLINE_REQUESTS_MAX = 4
_PIPE_BYTES = 1 << 20
# Bytes written to one worker and not yet taken by it, at most; beyond it senders wait.
_WRITE_BUFFER_MAX = 8 << 20


class WorkerLost(GatewayError):
    """The worker exited before answering (answered 503: the sender tries again)."""


def encode_request(request_id: int, content_type: str, raw: bytes) -> bytes:
    return b"".join(_request_parts(request_id, content_type, raw))


def _request_parts(request_id: int, content_type: str, raw: bytes) -> tuple[bytes, ...]:
    ctype = content_type.encode("utf-8", "replace")[:0xFFFF]
    return _REQUEST.pack(request_id, len(raw), len(ctype)), ctype, raw


class FrameReader:
    """Splits a byte stream into ``(header values, payload)`` frames (pure); ``length`` says
    how many payload bytes follow a header."""

    def __init__(self, head: struct.Struct, length: Callable[[tuple[int, ...]], int]) -> None:
        self._head = head
        self._length = length
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[tuple[int, ...], bytes]]:
        self._buffer += data
        frames = []
        start = 0
        size = self._head.size
        while len(self._buffer) - start >= size:
            values = self._head.unpack_from(self._buffer, start)
            end = start + size + self._length(values)
            if end > len(self._buffer):
                break
            frames.append((values, bytes(self._buffer[start + size:end])))
            start = end
        del self._buffer[:start]
        return frames

def request_reader() -> FrameReader:
    """Frames of ``encode_request``: header ``(id, body length, content-type length)`` and
    the content type followed by the body."""
    return FrameReader(_REQUEST, lambda v: v[1] + v[2])


def parse_answer(content_type: str, raw: bytes) -> tuple[int, bytes]:
    """A parse of ``raw`` made to travel: ``(kind, pickle)`` as described above, which
    ``parsed_of`` turns back into a ``ParsedRequest`` in the process that holds ``raw``.
    Made by a parse worker, and by a front process (gateway.fronts) for its store owner."""
    try:
        message = parse_request(content_type, raw)
    except SrmpError as exc:
        return _KIND_ERROR, pickle.dumps((type(exc).__name__, exc.reason), 5)
    except Exception as exc:  # a parser bug: the parent answers 500, as inline parsing did
        log.exception("SRMP parse failed unexpectedly")
        return _KIND_INTERNAL, pickle.dumps(repr(exc)[:500], 5)
    # Without the MIME head and tail: the gateway has the request and adds them (they are
    # most of the properties' bytes, and answers small enough for the pipe's buffer keep the
    # worker from waiting on the loop).
    properties, error = ParsedRequest.properties_of(message, raw, now_ms=int(time.time() * 1000),
                                                    mime_parts=False)
    env = message.envelope
    signed = env.signature is not None
    # The rest goes along only when the loop will need it: to verify a signature, or to
    # act on a receipt. Anything else that asks for it (an authenticated queue refusing
    # an unsigned message) parses the request again on the loop.
    rest = (_pickle((env, message.body_content_type, message.extension,
                     message.envelope_start, message.envelope_end))
            if signed or env.kind != model.Kind.USER else None)
    return _KIND_MESSAGE, _pickle((env.kind, env.path.to, env.path.id, env.stream, signed,
                                   properties, error, message.body_start, message.body_end,
                                   rest))


def _pickle(value: object) -> bytes:
    out = io.BytesIO()
    pickler = pickle.Pickler(out, 5)
    pickler.dispatch_table = _BY_CONSTRUCTOR
    pickler.dump(value)
    return out.getvalue()


def _message(raw: bytes, body_start: int, body_end: int, rest: bytes) -> SrmpMessage:
    """The whole ``SrmpMessage`` of a worker's answer (on demand: see ParsedRequest)."""
    envelope, ctype, extension, env_start, env_end = pickle.loads(rest)
    return SrmpMessage(envelope, raw[env_start:env_end], raw[body_start:body_end], ctype,
                       extension, body_start, body_end, env_start, env_end)


def _by_constructor(cls: type) -> Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]]:
    names = [f.name for f in dataclasses.fields(cls)]
    fields = operator.attrgetter(*names)
    if len(names) == 1:
        return lambda obj: (cls, (fields(obj),))
    return lambda obj: (cls, fields(obj))


# The model's frozen dataclasses rebuilt by their constructors, not by the default
# __setstate__ (a Python loop of object.__setattr__), which is slower to unpickle.
# Their fields are read by one attrgetter a class, cheaper than the generic field walk.
_BY_CONSTRUCTOR: dict[type, Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    cls: _by_constructor(cls) for cls in vars(model).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls)}
# Message properties as a tuple of their values: half the pickling work of the default.
_BY_CONSTRUCTOR[MessageProperties] = lambda p: (properties_of, (property_values(p),))


def parsed_of(kind: int, value: Any, content_type: str, raw: bytes) -> ParsedRequest:
    """The ``ParsedRequest`` of a ``parse_answer`` (its pickle loaded), for ``raw``.

    Raises:
        SrmpError: as ``parse_request`` (the parse found the request malformed).
        RuntimeError: the parser failed unexpectedly (a bug: answered 500).
    """
    if kind == _KIND_MESSAGE:
        (kind_name, to, message_id, stream, signed, properties, error, body_start, body_end,
         rest) = value
        if properties is not None:
            add_mime_parts(properties.extra, raw, body_start, body_end)
        load = (functools.partial(parse_request, content_type, raw) if rest is None
                else functools.partial(_message, raw, body_start, body_end, rest))
        return ParsedRequest(kind=kind_name, to=to, message_id=message_id, stream=stream,
                             signed=signed, body=raw[body_start:body_end],
                             properties=properties, error=error, load=load)
    if kind == _KIND_ERROR:
        name, reason = value
        raise _ERRORS.get(name, SrmpError)(reason)
    raise RuntimeError(f"SRMP parse worker: {value}")


def serve_worker(stdin: io.BufferedIOBase, stdout: io.BufferedIOBase) -> None:
    """The worker's loop: parse each request, answer in order, until stdin closes."""
    reader = request_reader()
    while chunk := stdin.read1(_PIPE_BYTES):
        for (request_id, _, ctype_len), data in reader.feed(chunk):
            kind, payload = parse_answer(data[:ctype_len].decode("utf-8", "replace"),
                                    data[ctype_len:])
            stdout.write(_ANSWER.pack(request_id, len(payload), kind) + payload)
        # One write for what one read brought: fewer wake-ups of the gateway's loop.
        stdout.flush()


class _Worker(asyncio.SubprocessProtocol):
    """One worker process. Requests are written once per loop iteration (one pipe write for
    all that one iteration sent: a write per request would cost the loop one system call
    each), and one watchdog timer for all of them kills a worker whose oldest request has
    waited ``timeout_s`` (rather than one timer a request)."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        # request id -> (its future, when it was sent); oldest first (dicts keep order).
        self.pending: dict[int, tuple[asyncio.Future[tuple[int, Any]], float]] = {}
        self.reader = FrameReader(_ANSWER, lambda v: v[1])
        self.transport: asyncio.SubprocessTransport | None = None
        self.alive = True
        self.timeout_s = timeout_s
        self._out: list[bytes] = []
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's process transport does not derive from asyncio's classes: no isinstance.
        self.transport = cast(asyncio.SubprocessTransport, transport)

    def pipe(self) -> asyncio.WriteTransport:
        assert self.transport is not None
        return cast(asyncio.WriteTransport, self.transport.get_pipe_transport(0))

    def send(self, request_id: int, content_type: str, raw: bytes
             ) -> asyncio.Future[tuple[int, Any]]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, Any]] = loop.create_future()
        self.pending[request_id] = (future, loop.time())
        if not self._out:
            loop.call_soon(self._flush)
        self._out += _request_parts(request_id, content_type, raw)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self.timeout_s, self._watch)
        return future

    def _flush(self) -> None:
        out, self._out = self._out, []
        pipe = self.transport.get_pipe_transport(0) if self.transport is not None else None
        if self.alive and pipe is not None and not pipe.is_closing():
            cast(asyncio.WriteTransport, pipe).write(b"".join(out))
        # else: the pool is closing or the worker is gone; its requests fail (process_exited
        # or the watchdog), none is left waiting for ever.

    def _watch(self) -> None:
        self._watchdog = None
        if not self.pending or not self.alive:
            return
        loop = asyncio.get_running_loop()
        _, sent = next(iter(self.pending.values()))
        waited = loop.time() - sent
        if waited < self.timeout_s:
            self._watchdog = loop.call_later(self.timeout_s - waited, self._watch)
            return
        log.error("SRMP parse worker gave no answer within %s s: killed", self.timeout_s)
        self.alive = False  # no new requests for it
        self._fail(WorkerLost(f"no answer from the SRMP parse worker within {self.timeout_s} s"))
        if self.transport is not None:
            self.transport.kill()

    def _fail(self, exc: Exception) -> None:
        for future, _ in self.pending.values():
            if not future.done():
                future.set_exception(exc)
        self.pending.clear()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        for (request_id, _, kind), payload in self.reader.feed(data):
            waiting = self.pending.pop(request_id, None)
            if waiting is None or waiting[0].done():
                continue
            try:
                waiting[0].set_result((kind, pickle.loads(payload)))
            except Exception as exc:  # a bug between the two sides: fail this request now
                log.exception("SRMP parse worker's answer not readable")
                waiting[0].set_exception(WorkerLost(f"the parse worker's answer is not "
                                                    f"readable: {exc!r}"[:300]))

    def process_exited(self) -> None:
        self.alive = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        code = self.transport.get_returncode() if self.transport else None
        if self.pending:
            log.error("SRMP parse worker exited (code %s) with %d requests in flight",
                      code, len(self.pending))
        self._fail(WorkerLost(f"the SRMP parse worker exited (code {code})"))
        if self.transport is not None:  # after this callback: the transport is still in use
            asyncio.get_running_loop().call_soon(self.transport.close)


class ParsePool:
    """``workers`` processes, started on first use, each request to the least busy one."""

    def __init__(self, workers: int, on_start: Callable[[], object] = lambda: None, *,
                 timeout_s: float = 10.0) -> None:
        self.size = workers
        # A worker that has not answered within this is taken for hung and killed.
        self.timeout_s = timeout_s
        self._on_start = on_start
        self._workers: list[_Worker] = []
        self._ids = itertools.count(1)
        self._starting = asyncio.Lock()
        self.started = 0  # worker processes started so far (restarts included)
        self.requests = 0  # SRMP requests being handled now (kept by the request handler)
        self.parsed = 0  # requests sent to a worker

    def busy(self) -> bool:
        """Whether a request should go to a worker: with few in flight the loop has time to
        spare, and a worker's round trip would only add latency."""
        return self.requests > INLINE_REQUESTS_MAX

    async def parse(self, content_type: str, raw: bytes) -> ParsedRequest:
        """Raises: SrmpError as ``parse_request``; WorkerLost when the worker died."""
        worker = self._ready()
        if worker is None:
            worker = await self._pick()
        self.parsed += 1
        while worker.alive and worker.pipe().get_write_buffer_size() > _WRITE_BUFFER_MAX:
            await asyncio.sleep(0.001)
        if not worker.alive:
            raise WorkerLost("the SRMP parse worker exited")
        kind, value = await worker.send(next(self._ids) & 0xFFFFFFFF, content_type, raw)
        return parsed_of(kind, value, content_type, raw)

    def _ready(self) -> _Worker | None:
        """The usual case without a coroutine: one worker, running (spares every SRMP
        request a coroutine and the scan of ``_pick``)."""
        if self.size == 1 and len(self._workers) == 1 and self._workers[0].alive:
            return self._workers[0]
        return None

    async def _pick(self) -> _Worker:
        if len(self._workers) < self.size or not all(w.alive for w in self._workers):
            async with self._starting:  # one start at a time; the others then find it
                alive = [w for w in self._workers if w.alive]
                while len(alive) < self.size:
                    alive.append(await self._start())
                self._workers = alive
        return min(self._workers, key=lambda w: len(w.pending))

    async def _start(self) -> _Worker:
        loop = asyncio.get_running_loop()
        _, worker = await loop.subprocess_exec(
            lambda: _Worker(self.timeout_s), sys.executable, "-m", "gateway.inbound.parse_pool",
            stderr=None)
        self.started += 1
        self._on_start()
        log.info("SRMP parse worker started (%d so far)", self.started)
        return worker

    def pids(self) -> list[int]:
        return [w.transport.get_pid() for w in self._workers if w.alive and w.transport]

    async def close(self) -> None:
        """Close the workers' stdin (they exit when it ends); kill any still there after 5 s."""
        workers, self._workers = self._workers, []
        for worker in workers:
            if worker.alive and worker.transport is not None:
                pipe = worker.transport.get_pipe_transport(0)
                if pipe is not None:
                    pipe.close()
        for worker in workers:
            for _ in range(500):
                if not worker.alive:
                    break
                await asyncio.sleep(0.01)
            if worker.alive and worker.transport is not None:
                worker.transport.kill()
            if worker.transport is not None:
                worker.transport.close()


def _main() -> None:
    # The gateway ends a worker by closing its stdin (or by dying: the same EOF). Ctrl-C in a
    # terminal and systemd's SIGTERM reach the whole process group: the gateway's own
    # shutdown decides, and no KeyboardInterrupt trace is printed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Both pipes hold what one loop iteration sends at C = 64 (~150 KiB of 2 KiB requests):
    # with Linux's default 64 KiB the gateway's write and the worker's read came in pieces.
    for fd in (0, 1):
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError as exc:  # not a pipe, or over /proc/sys/fs/pipe-max-size
            log.info("SRMP parse worker keeps the default pipe size on fd %d: %s", fd, exc)
    serve_worker(sys.stdin.buffer, sys.stdout.buffer)  # type: ignore[arg-type]


if __name__ == "__main__":
    # Run as the imported module, not as __main__: the worker's pickles name functions of
    # this module (``_properties``), which the gateway finds under its real name only.
    from gateway.inbound import parse_pool as srmp_parse_pool

    srmp_parse_pool._main()
