"""A front in-process for the send lane's tests (tests/integration/lane/): a
front app on a real socket, with its send lane or with aiohttp's server alone, and a
scripted store owner at the other end of its channel."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.errors import ProblemError
from gateway.fronts import wire
from gateway.fronts.channel import Channel
from gateway.fronts.front import make_front_app, serve
from gateway.fronts.send_lane import SendLane
from gateway.fronts.shared_counts import SharedCounts
from gateway.metrics import Metrics
from gateway.settings import Settings, parse_settings
from gateway.web.http_server import app_runner
from gateway.web.listener import bind, tls_context

GUID = "5f41afcd-531b-4207-8d99-27576b656bc4"
ACME = "Authorization: Bearer acme-key\r\n"
HOLD = "held"  # a queue whose sends the scripted owner leaves unanswered


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def lane_settings(tmp_path: Path, srmp: dict[str, object] | None = None,
                  **server: object) -> Settings:
    return parse_settings({
        "store": {"data_dir": str(tmp_path / "data")},
        "server": {"workers": 2, **server},
        "srmp": srmp or {},
        "auth": {"admin_key_sha256": sha("admin-key")},
        "partners": [
            {"name": "acme", "api_key_sha256": sha("acme-key"), "send": ["acme_*", HOLD],
             "receive": ["acme_*"]},
            {"name": "slow", "api_key_sha256": sha("slow-key"), "send": ["*"], "rate": 100},
            {"name": "certy", "cert_subject": "CN=certy,O=entrepot development",
             "send": ["acme_*"]},
        ],
    })


@dataclass
class Owner:
    """The owner's end: records each command, answers sends as the owner would."""

    commands: list[tuple[int, Any]] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    seq: int = 0
    channel: Channel | None = None  # its end, once a command came
    keys: dict[str, object] = field(default_factory=dict)  # the first answer of each key

    def on_request(self, channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
        self.channel = channel
        if kind in (wire.Kind.PUT, wire.Kind.SEND):
            command: Any = (wire.put_command(payload) if kind == wire.Kind.PUT
                            else wire.send_command(payload))
            self.commands.append((kind, command))
            if command.queue == HOLD:
                self.held.append(request_id)
            elif command.queue == "nosuch":
                channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(ProblemError(
                    404, "no queue 'nosuch'", type_slug="MQ_ERROR_QUEUE_NOT_FOUND")))
            else:
                key = getattr(command, "dedup_key", None)
                if key in self.keys:
                    channel.send(request_id, wire.Kind.OK, (self.keys[key], True))
                    return
                self.seq += 1
                answer = {"id": f"{{{GUID}}}\\{self.seq}", "queue": command.queue,
                          "seq": self.seq}
                if key is not None:
                    self.keys[key] = answer
                channel.send(request_id, wire.Kind.OK, (answer, False))
            return
        if kind == wire.Kind.SRMP:
            srmp = wire.srmp_command(payload)
            self.commands.append((kind, srmp))
            if b"private$/denied" in srmp.raw:
                channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(ProblemError(
                    403, "not allowed", type_slug="MQ_ERROR_ACCESS_DENIED")))
            else:
                channel.send(request_id, wire.Kind.OK, None)
            return
        self.commands.append((kind, None))
        answers = {wire.Kind.IDENTITY: GUID, wire.Kind.BROWSE: {"messages": [], "next": 0},
                   wire.Kind.TX_SEND: {"transaction": "t", "queue": "acme_in", "index": 0}}
        channel.send(request_id, wire.Kind.OK, answers.get(kind))

    def kinds(self) -> list[int]:
        return [kind for kind, _ in self.commands]

    def sends(self) -> list[str]:
        """The commands but IDENTITY, a send (PUT or SEND) as "send"."""
        sends = (wire.Kind.PUT, wire.Kind.SEND)
        return ["send" if kind in sends else "browse" if kind == wire.Kind.BROWSE else str(kind)
                for kind, _ in self.commands if kind != wire.Kind.IDENTITY]


@dataclass
class Front:
    port: int
    owner: Owner
    lane: SendLane | None
    metrics: Metrics
    counts: SharedCounts
    channel: Channel


Start = Callable[..., Awaitable[Front]]


@contextlib.asynccontextmanager
async def fronts(tmp_path: Path) -> AsyncIterator[Start]:
    """What starts a front (with its lane, or with aiohttp's server alone) on a free port,
    over TLS when the server settings say so; every front started is stopped at the end."""
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def make(*, lane: bool = True, srmp: dict[str, object] | None = None,
                   **server: object) -> Front:
        settings = lane_settings(tmp_path, srmp, **server)
        owner = Owner()
        ours, theirs = socket.socketpair()
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(Channel, sock=ours)
        _, other = await loop.create_unix_connection(
            lambda: Channel(on_request=owner.on_request), sock=theirs)
        metrics, counts = Metrics(), SharedCounts.create(2)
        app = make_front_app(settings, metrics, channel, counts)
        runner = app_runner(app, settings, handler_cancellation=True, sharing=1)
        await runner.setup()
        sock = bind("127.0.0.1", 0, reuse_port=True)
        port = sock.getsockname()[1]
        found = None
        context = tls_context(settings)
        if lane:
            found = await serve(app, runner, sock, context)
            assert found is not None
        else:
            await web.SockSite(runner, sock, ssl_context=context).start()

        async def cleanup() -> None:
            if found is not None:
                found.stop()
            await runner.cleanup()
            channel.close()
            other.close()

        cleanups.append(cleanup)
        return Front(port, owner, found, metrics, counts, channel)

    yield make
    for cleanup in cleanups:
        await cleanup()


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    """One whole answer (its head and Content-Length bytes of body), Date left out."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    lines = []
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        if not line.startswith(b"Date: "):
            lines.append(line)
    return b"\r\n".join(lines) + await reader.readexactly(length)


async def exchange(port: int, data: bytes, answers: int = 1,
                    tls: ssl.SSLContext | None = None, local: str | None = None
                    ) -> list[bytes]:
    """``answers`` answers to ``data`` sent on a new connection (from the address
    ``local``, if given)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, local_addr=None if local is None else (local, 0))
    try:
        writer.write(data)
        return [await read_answer(reader) for _ in range(answers)]
    finally:
        writer.close()


def send(queue: str = "acme_in", headers: str = ACME, body: bytes = b"hi") -> bytes:
    return (f"POST /v1/queues/{queue}/messages HTTP/1.1\r\nHost: h\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def unstamped(command: Any) -> Any:
    """The command but when the message was sent (each front stamps its own arrival)."""
    if isinstance(command, wire.PutCommand):  # (the time is in the encoded payload)
        return dataclasses.replace(command, payload=len(command.payload))
    return dataclasses.replace(command, properties=dataclasses.replace(command.properties,
                                                                        sent_at_ms=0))


