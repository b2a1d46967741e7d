"""A gateway of two front processes around the store owner (``server.workers = 2``), from
outside: what must hold across processes that one process got for free."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gateway.auth.hmac_sig import sign
from gateway.auth.tls import create_self_signed
from gateway.range_wire import decode_records
from gateway.srmp.eod import VERDICT_HEADER
from gateway.web.srmp_routes import PARSE_INLINE_BYTES_MAX
from tests.helpers import GatewayProcess, front_pids
from tests.srmp_client import stream_message, user_message

SLOW_SECRET = b"the slow partner's HMAC secret"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, Path]]:
    root = tmp_path_factory.mktemp("workers")
    cert, _ = create_self_signed(root / "client", common_name="acme.example.com",
                                 names=["localhost"], days=2)
    config = root / "entrepot.toml"
    secret = root / "slow.secret"
    secret.write_bytes(SLOW_SECRET)
    config.write_text(f"""[server]
names = ["gw"]
[auth]
admin_key_sha256 = "{_sha('root-key')}"
[[partners]]
name = "slow"
api_key_sha256 = "{_sha('slow-key')}"
hmac_secret_file = "{secret}"
send = ["w_*"]
rate = 1
burst = 2
[[partners]]
name = "acme"
cert_subject = "CN=acme.example.com,O=entrepot development"
send = ["w_*"]
[[queues]]
path = "w_in"
""")
    proc = GatewayProcess(root / "data", extra_args=["--config", str(config),
                                                     "--workers", "2"])
    try:
        proc.wait_ready()
        yield proc, cert
    finally:
        proc.stop()


def _fresh(gateway: GatewayProcess, method: str, path: str, body: bytes = b"",
           headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One request on a new connection (the kernel picks the front for each)."""
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_two_fronts_serve(gateway: tuple[GatewayProcess, Path]) -> None:
    assert len(front_pids(gateway[0].proc.pid)) == 2


def test_a_partners_rate_limit_holds_across_the_fronts(
        gateway: tuple[GatewayProcess, Path]) -> None:
    started = time.monotonic()
    statuses = [_fresh(gateway[0], "POST", "/v1/queues/w_in/messages", b"m%d" % n,
                       {"Authorization": "Bearer slow-key"})[0] for n in range(12)]
    took = time.monotonic() - started
    # One bucket (burst 2, 1 a second) lets through at most 2 + 1 a second of the run,
    # whichever front each send reaches; a bucket in each front would let twice that.
    assert statuses[:2] == [201, 201], statuses
    assert statuses.count(201) <= 2 + math.ceil(took), (statuses, took)
    assert set(statuses) == {201, 429}, statuses


def test_a_client_cannot_claim_its_token_was_taken(
        gateway: tuple[GatewayProcess, Path]) -> None:
    # Whether a request's token is taken is the front's own knowledge; a client saying so
    # itself (here on signed requests, whose token the owner takes when it uses up their
    # nonce) is not believed.
    started = time.monotonic()
    statuses = []
    for n in range(12):
        body, path = b"c%d" % n, "/v1/queues/w_in/messages"
        claim = [("Entrepot-Front-Throttled", "1")]
        auth = sign(SLOW_SECRET, "POST", path, int(time.time()), f"claim-{n}-{time.time_ns()}",
                    body, "slow", headers=claim)
        statuses.append(_fresh(gateway[0], "POST", path, body,
                               {"Authorization": auth, **dict(claim)})[0])
    took = time.monotonic() - started
    assert statuses.count(201) <= 2 + math.ceil(took), (statuses, took)
    assert set(statuses) <= {201, 429}, statuses


def test_requests_a_front_refuses_spend_the_partners_rate_too(
        gateway: tuple[GatewayProcess, Path]) -> None:
    # As in one process, the rate limit comes before the checks of the request: bad headers
    # and queues the partner may not use spend tokens too, so they cannot flood the fronts.
    started = time.monotonic()
    key = {"Authorization": "Bearer slow-key"}
    statuses = [_fresh(gateway[0], "POST", path, b"x", {**key, **headers})[0]
                for path, headers in [("/v1/queues/w_in/messages", {"Mq-Priority": "9"})] * 4
                + [("/v1/queues/not_w/messages", {})] * 4
                + [("/v1/queues/w_in/messages", {})] * 4]
    took = time.monotonic() - started
    passed = [s for s in statuses if s != 429]
    assert len(passed) <= 2 + math.ceil(took), (statuses, took)
    assert set(passed) <= {400, 403, 201}, statuses


def test_a_client_cannot_claim_an_address_or_certificate_a_front_passes_on(
        gateway: tuple[GatewayProcess, Path]) -> None:
    proc, cert = gateway
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(
        serialization.Encoding.DER)
    claims = {"Entrepot-Front-Cert": base64.b64encode(der).decode(),
              "Entrepot-Front-Remote": "127.0.0.1", "Entrepot-Front-Scheme": "https"}
    for path in ("/v1/queues", "/v1/queues/w_in/messages"):
        method = "GET" if path == "/v1/queues" else "POST"
        status, body = _fresh(proc, method, path, b"x" if method == "POST" else b"", claims)
        assert status == 401, (path, status, body)
        assert json.loads(body)["type"].endswith("/unauthorized")


def _requests_total(text: str, route: str, method: str, status: int) -> float:
    """``entrepot_http_requests_total`` for one label set (0 when absent)."""
    for line in text.splitlines():
        if (line.startswith("entrepot_http_requests_total{")
                and f'route="{route}"' in line and f'method="{method}"' in line
                and f'status="{status}"' in line):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_count_every_front_once(gateway: tuple[GatewayProcess, Path]) -> None:
    proc = gateway[0]
    admin = {"Authorization": "Bearer root-key"}

    def scrape() -> str:
        status, body = _fresh(proc, "GET", "/metrics", headers=admin)
        assert status == 200, body
        return body.decode()

    before = scrape()
    for n in range(10):  # new connections: both fronts take some
        assert _fresh(proc, "POST", "/v1/queues/w_in/messages", b"c%d" % n, admin)[0] == 201
        assert _fresh(proc, "GET", "/v1/queues/w_in", headers=admin)[0] == 200
        assert _fresh(proc, "GET", "/v1/nowhere", headers=admin)[0] == 404
    after = scrape()
    for route, method, status in (("/v1/queues/{path}/messages", "POST", 201),
                                  ("/v1/queues/{path}", "GET", 200),
                                  ("unmatched", "GET", 404)):
        counted = (_requests_total(after, route, method, status)
                   - _requests_total(before, route, method, status))
        assert counted == 10, (route, method, status, counted)
    assert "entrepot_http_requests_in_flight " in after
    # Each front's own CPU time and memory, as ps reads them (process_* is the owner's).
    pids = front_pids(proc.proc.pid)
    ps = subprocess.run(["ps", "-o", "rss=", "-p", ",".join(map(str, pids))],
                        capture_output=True, text=True, check=True)
    rss = sum(_sample(after, f'entrepot_front_resident_memory_bytes{{front="{index}"}}')
              for index in range(len(pids)))
    assert 0.5 < rss / (sum(map(int, ps.stdout.split())) * 1024) < 2, (rss, ps.stdout)
    assert all(_sample(after, f'entrepot_front_cpu_seconds_total{{front="{index}"}}') > 0
               for index in range(len(pids)))


def _sample(text: str, series: str) -> float:
    [value] = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(series + " ")]
    return value


def _raw(gateway: GatewayProcess, request: bytes) -> tuple[int, bytes]:
    """One request as bytes on a new connection: (status, the head of the answer)."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1]), answer


def test_requests_are_answered_as_one_process_answers_them(
        gateway: tuple[GatewayProcess, Path]) -> None:
    proc = gateway[0]
    admin = "Authorization: Bearer root-key\r\n"
    cases = [
        # HEAD is served wherever GET is (load balancers probe with it).
        ("HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200),
        (f"HEAD /v1/queues HTTP/1.1\r\nHost: x\r\n{admin}\r\n", 200),
        # An absolute-form target (RFC 9112 3.2.2) names the path as any other.
        ("GET http://elsewhere/healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200),
        (f"GET http://elsewhere/v1/queues HTTP/1.1\r\nHost: x\r\n{admin}\r\n", 200),
        # Without a credential, an unknown path or a wrong method is 401 like any other:
        # a stranger cannot map the routes.
        ("GET /v1/nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 401),
        ("DELETE /v1/transactions HTTP/1.1\r\nHost: x\r\n\r\n", 401),
        (f"GET /v1/nowhere HTTP/1.1\r\nHost: x\r\n{admin}\r\n", 404),
        (f"DELETE /v1/transactions HTTP/1.1\r\nHost: x\r\n{admin}\r\n", 405),
        # As many header lines as server.header_count_max allows (100), forwarded.
        ("GET /v1/queues HTTP/1.1\r\nHost: x\r\n" + admin
         + "".join(f"X-Pad-{n}: {n}\r\n" for n in range(98)) + "\r\n", 200),
    ]
    for request, status in cases:
        got, head = _raw(proc, request.encode())
        assert got == status, (request[:60], head[:300])


def test_a_large_answer_is_passed_on_as_it_comes(gateway: tuple[GatewayProcess, Path]) -> None:
    proc = gateway[0]
    admin = {"Authorization": "Bearer root-key", "Content-Type": "application/json"}
    assert _fresh(proc, "PUT", "/v1/queues/w_big", b"{}", admin)[0] == 201
    bodies = [bytes([n]) * 8192 for n in range(256)]
    for start in range(0, 256, 64):
        batch = {"messages": [{"queue": "w_big", "body_base64": base64.b64encode(b).decode()}
                              for b in bodies[start:start + 64]]}
        assert _fresh(proc, "POST", "/v1/batch", json.dumps(batch).encode(), admin)[0] == 201
    connection = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=60)
    connection.request("GET", "/v1/queues/w_big/range?from=1&to=1000", headers=admin)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    # Over 2 MiB: the front passed it on piece by piece as the owner read it, not whole.
    assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
    assert [r.body for r in decode_records(data)] == bodies


def _srmp(gateway: GatewayProcess, body: bytes, headers: list[tuple[str, str]]
          ) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    try:
        connection.request("POST", "/msmq/w_srmp", body=body,
                           headers={k: v for k, v in headers if k != "Content-Length"})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_srmp_is_parsed_by_the_fronts_and_stored_by_the_owner(
        gateway: tuple[GatewayProcess, Path]) -> None:
    proc = gateway[0]
    admin = {"Authorization": "Bearer root-key", "Content-Type": "application/json"}
    assert _fresh(proc, "PUT", "/v1/queues/w_srmp", b"{}", admin)[0] == 201
    assert _fresh(proc, "PUT", "/v1/queues/w_srmp_tx", b'{"transactional": true}',
                  admin)[0] == 201
    to = "http://gw/msmq/w_srmp"
    bodies = [b"small", b"L" * (PARSE_INLINE_BYTES_MAX + 1)]  # the large one off the loop
    for ordinal, body in enumerate(bodies, 1):
        request = user_message(to, body, ordinal=ordinal)
        status, headers, answer = _srmp(proc, request.body, request.headers)
        assert (status, answer) == (200, b""), answer[:300]
        assert VERDICT_HEADER not in headers
    streamed = stream_message(to + "_tx", b"in a stream", 1, receipts_to="http://gw/msmq/w_in")
    status, headers, _ = _srmp(proc, streamed.body, streamed.headers)
    assert (status, headers.get(VERDICT_HEADER)) == (200, "stored"), _
    # A request the parse refuses: answered by the owner as SRMP refusals are, and counted.
    status, _, answer = _srmp(proc, b"<not srmp", [("Content-Type", "text/xml")])
    assert status == 400 and json.loads(answer)["type"].endswith("/MQ_ERROR_BAD_XML_FORMAT")
    got = []
    for queue in ("w_srmp", "w_srmp_tx"):
        status, body = _fresh(proc, "POST", f"/v1/queues/{queue}/receive?max=10", b"", admin)
        assert status == 200, body
        got += [base64.b64decode(m["body_base64"]) for m in json.loads(body)["messages"]]
    assert got == [*bodies, b"in a stream"]
    status, metrics = _fresh(proc, "GET", "/metrics", headers=admin)
    text = metrics.decode()
    # The owner started no parse worker: every request was parsed in a front.
    assert "entrepot_srmp_parse_workers_started_total 0.0" in text
    assert 'entrepot_srmp_messages_total{kind="unknown",outcome="rejected"} 1.0' in text


def test_a_front_that_stops_hands_its_last_counts_to_the_owner(
        gateway: tuple[GatewayProcess, Path]) -> None:
    proc = gateway[0]
    admin = {"Authorization": "Bearer root-key"}

    def queues_listed() -> float:
        status, body = _fresh(proc, "GET", "/metrics", headers=admin)
        assert status == 200, body
        return _requests_total(body.decode(), "/v1/queues", "GET", 200)

    before = queues_listed()
    for _ in range(10):  # new connections: both fronts take some
        assert _fresh(proc, "GET", "/v1/queues", headers=admin)[0] == 200
    old = front_pids(proc.proc.pid)
    for pid in old:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60  # an upper bound only: both fronts started again
    while time.monotonic() < deadline:
        new = front_pids(proc.proc.pid)
        if len(new) == 2 and not set(new) & set(old):
            break
        time.sleep(0.05)
    proc.wait_ready()
    # Nothing scraped them before they stopped: each front sent its counts on its way out.
    assert queues_listed() - before == 10


def test_range_readers_that_hang_up_give_their_places_back(tmp_path: Path) -> None:
    """The owner holds a cursor for each range answer a front is sending, at most
    ``server.concurrent_requests_max``; a reader that hangs up mid-answer makes its front
    drop it. Were it kept, two abandoned reads would leave every later range read 503."""
    config = tmp_path / "entrepot.toml"
    config.write_text("[server]\nconcurrent_requests_max = 2\n")
    proc = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config),
                                                         "--workers", "2"])
    proc.wait_ready()
    try:
        assert _fresh(proc, "PUT", "/v1/queues/w_hang", b"{}")[0] == 201
        body = base64.b64encode(os.urandom(200 * 1024)).decode()  # ~270 KiB stored
        for _ in range(16):  # a request body of at most 5 MiB (the default)
            batch = {"messages": [{"queue": "w_hang", "body_base64": body}] * 10}
            assert _fresh(proc, "POST", "/v1/batch", json.dumps(batch).encode(),
                          {"Content-Type": "application/json"})[0] == 201
        # ~43 MB: more than the sockets between reader and front can hold.
        target = "/v1/queues/w_hang/range?from=1&to=161"

        def abandoned() -> bool:
            """A range read begun (200) and hung up on; False: refused (503), no place."""
            with socket.create_connection(("127.0.0.1", proc.port), timeout=30) as reader:
                reader.sendall(f"GET {target} HTTP/1.1\r\nHost: gw\r\n\r\n".encode())
                head = b""
                while b"\r\n" not in head:  # the status line, then gone
                    got = reader.recv(100)
                    assert got, head
                    head += got
            assert head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 503")), head
            return head.startswith(b"HTTP/1.1 200")

        # A front notices a hang-up when its writes fail, then gives the place back: each
        # reader waits for one (an upper bound only). Two places held for ever would leave
        # the third reader, and the whole read after it, refused.
        for reader in range(3):
            for _ in range(300):
                if abandoned():
                    break
                time.sleep(0.2)
            else:
                pytest.fail(f"range reader {reader} found no place")
        for _ in range(300):
            status, data = _fresh(proc, "GET", target)
            if status != 503:
                break
            time.sleep(0.2)
        assert status == 200
        assert len(decode_records(data)) == 160
    finally:
        proc.stop()
