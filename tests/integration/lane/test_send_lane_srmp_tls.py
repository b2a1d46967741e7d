"""The send lane over TLS (client certificates and keys as credentials) and for SRMP
requests (as a Windows peer sends them): the same bytes as aiohttp's handlers answer."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from gateway.auth.principal import NOBODY
from gateway.fronts import wire
from tests.lane_harness import (
    ACME,
    Start,
    exchange,
    read_answer,
    send,
    unstamped,
)
from tests.srmp_vectors import wire as wire_vector


async def _one_by_one(port: int, requests: list[bytes], tls: ssl.SSLContext) -> list[bytes]:
    """Each request's answer, the next request sent once it came, on one connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    answers = []
    for request in requests:
        writer.write(request)
        answers.append(await read_answer(reader))
    writer.close()
    return answers


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A server certificate for 127.0.0.1 and a client certificate CN=certy it takes."""
    from gateway.auth.tls import create_self_signed

    cert, key = create_self_signed(tmp_path / "server", common_name="localhost",
                                   names=["127.0.0.1"], days=2)
    client, client_key = create_self_signed(tmp_path / "client", common_name="certy",
                                            names=[], days=2)
    return {"cert": cert, "key": key, "client": client, "client_key": client_key}


@pytest.mark.parametrize("with_certificate, headers, taken, status", [
    (True, "", True, 201),  # the partner of the client certificate
    (False, ACME, True, 201),
    (False, "", False, 401),
    (True, "Authorization: Bearer nope\r\n", False, 401),
])
async def test_over_tls_the_lane_answers_as_aiohttps_handlers_do(
        start: Start, tls_files: dict[str, Path], with_certificate: bool, headers: str,
        taken: bool, status: int) -> None:
    server = {"tls_cert": str(tls_files["cert"]), "tls_key": str(tls_files["key"]),
              "tls_client_ca": str(tls_files["client"])}
    laned, plain = await start(**server), await start(lane=False, **server)
    client = ssl.create_default_context(cafile=str(tls_files["cert"]))
    if with_certificate:
        client.load_cert_chain(tls_files["client"], tls_files["client_key"])
    for front in (laned, plain):  # one send first: the front knows the GUID then
        await exchange(front.port, send("primer", headers="Authorization: Bearer admin-key"
                                          "\r\n"), tls=client)
        front.owner.commands.clear()
    assert laned.lane is not None
    laned.lane.passed = 0
    requests = [send(headers=headers), send(body=b"next", headers=headers)]
    answers = await _one_by_one(laned.port, requests, client)
    assert answers == await _one_by_one(plain.port, requests, client)
    assert all(a.startswith(b"HTTP/1.1 %d " % status) for a in answers), answers
    assert laned.lane.passed == (0 if taken else 1)
    assert [unstamped(c) for _, c in laned.owner.commands] == [
        unstamped(c) for _, c in plain.owner.commands]


def _srmp(path: str = "/msmq/private$/orders", vector: str = "V02", extra: str = "",
          body: bytes | None = None) -> bytes:
    """An SRMP request as Windows sends it (one of the captured vectors' bodies)."""
    request = wire_vector(vector)
    data = request.body if body is None else body
    head = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items()
                   if k != "Content-Length")
    return (f"POST {path} HTTP/1.1\r\n{head}{extra}Content-Length: {len(data)}\r\n"
            "\r\n").encode() + data


@pytest.mark.parametrize("request_bytes, taken, status", [
    (_srmp(), True, 200),
    (_srmp("/MSMQ/private$/orders"), True, 200),  # the directory in any case, as aiohttp's
    (_srmp("/msmq"), True, 200),
    (_srmp(vector="V05"), True, 200),  # a receipt
    (_srmp(extra="Authorization: Bearer acme-key\r\n"), True, 200),  # not read on SRMP
    (_srmp(body=b"not a MIME body"), True, 200),  # the owner answers the parse's refusal
    (_srmp(body=wire_vector("V02").body.replace(b"private$/", b"private$/denied")),
     True, 403),
    (_srmp(extra="Content-Type: text/xml\r\n"), False, 400),  # twice: aiohttp's parser
    (_srmp("/msmq/private$/orders?x=1"), False, 200),
    (_srmp("/msmqx/private$/orders"), False, 401),  # no route: after authentication
    (_srmp(body=b"x" * (65 << 10)), False, 200),
])
async def test_srmp_requests_are_answered_as_aiohttps_handlers_do(
        start: Start, request_bytes: bytes, taken: bool, status: int) -> None:
    laned, plain = await start(), await start(lane=False)
    [answer] = await exchange(laned.port, request_bytes)
    [expected] = await exchange(plain.port, request_bytes)
    assert answer == expected
    assert answer.split(b" ")[1] == b"%d" % status, answer
    assert laned.lane is not None and laned.lane.passed == (0 if taken else 1)
    assert laned.owner.commands == plain.owner.commands
    if taken:
        [(kind, command)] = laned.owner.commands
        assert kind == wire.Kind.SRMP and command.remote == "127.0.0.1"
        assert command.principal.name == NOBODY.name
        requests, _ = laned.metrics.http.snapshot()
        assert requests == {("/msmq/{path}", "POST", status): 1}




async def test_strangers_holding_their_share_leave_a_trusted_sender_to_the_lane(
        start: Start) -> None:
    """concurrent_requests_max 4: one request of SRMP senders nobody vouches for in flight
    (here from 127.0.0.2, outside srmp.allow_networks); a sender inside them has a share of
    its own, and the lane takes its request."""
    front = await start(concurrent_requests_max=4, srmp={"allow_networks": ["127.0.0.1/32"]})
    assert front.lane is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port,
                                                   local_addr=("127.0.0.2", 0))
    writer.write(_srmp()[:-10])  # its body never ends: aiohttp's gate holds its place
    while front.lane.passed == 0:  # passed on at the lane's next tick
        await asyncio.sleep(0.05)
    [refused] = await exchange(front.port, _srmp(), local="127.0.0.2")
    assert refused.startswith(b"HTTP/1.1 503 ") and b"nobody vouches for" in refused
    assert front.lane.passed == 2
    [answer] = await exchange(front.port, _srmp())
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert front.lane.passed == 2  # taken by the lane
    [(kind, command)] = front.owner.commands
    assert kind == wire.Kind.SRMP and command.remote == "127.0.0.1"
    writer.close()
