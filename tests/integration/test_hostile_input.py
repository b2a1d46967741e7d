"""A corpus of hostile requests sent as raw bytes to a real gateway: each gets a 4xx
problem+json naming what is wrong (the header, the JSON field, the nesting), never a 5xx,
and nothing is stored — no queue, message, consumer or transaction appears.

Covered: every request header the REST API reads holding bytes that are not UTF-8; lone
surrogates (``"\\ud800"``) in every JSON string field (and key) of every route that takes
JSON; nesting far beyond the limit on each of those routes, and exactly at it; lengths at
and over their limits; HTTP that aiohttp's parser refuses before any handler runs."""

from __future__ import annotations

import base64
import gzip
import json
import socket
import time
import urllib.request
import zlib
from collections.abc import Iterator, Sequence

import pytest

from gateway.msmq.message import LABEL_CHARS_MAX
from gateway.web.rest_body import JSON_DEPTH_MAX
from tests.helpers import GatewayProcess, exchange

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers

Q = "/v1/queues/private$/hostile"
NEW_Q = "/v1/queues/private$/made_by_hostile"  # must never come to exist
BATCH_MAX = 10_000


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    root = tmp_path_factory.mktemp("hostile")
    config = root / "entrepot.toml"
    config.write_text('[[queues]]\npath = "private$/hostile"\n'
                      '[[queues]]\npath = "private$/hostile_tx"\ntransactional = true\n')
    proc = GatewayProcess(root / "data", extra_args=["--config", str(config)])
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()
    log = proc.log()
    assert "unhandled error" not in log  # no 5xx from a handler
    assert "Error handling request" not in log  # nor from aiohttp: no traceback per request
    assert "Unhandled exception" not in log  # (nor from aiohttp reading what is left of a body)


Answer = tuple[int, dict[str, str], bytes]


def _raw(gateway: GatewayProcess, request: bytes) -> Answer:
    """Send ``request`` as it is, read the answer until the server closes."""
    head, _, body = exchange(gateway.port, request).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def _request(gateway: GatewayProcess, method: str, path: str, *,
             headers: Sequence[tuple[bytes, bytes]] = (), body: bytes = b"") -> Answer:
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1",
             b"Connection: close", b"Content-Length: %d" % len(body)]
    lines += [name + b": " + value for name, value in headers]
    return _raw(gateway, b"\r\n".join(lines) + b"\r\n\r\n" + body)


def _json(gateway: GatewayProcess, method: str, path: str, body: bytes) -> Answer:
    return _request(gateway, method, path, body=body,
                    headers=[(b"Content-Type", b"application/json")])


def _state(gateway: GatewayProcess) -> object:
    """What is stored: the queues with their counts, labels and consumers; transactions."""
    def get(path: str) -> object:
        with urllib.request.urlopen(gateway.url + path, timeout=30) as response:
            return json.loads(response.read())
    queues = get("/v1/queues")
    assert isinstance(queues, dict)
    return (sorted((q["path"], q["messages"], q["label"]) for q in queues["queues"]),
            get(f"{Q}/consumers"), get("/v1/transactions"))


@pytest.fixture
def unchanged(gateway: GatewayProcess) -> Iterator[None]:
    before = _state(gateway)
    yield
    assert _state(gateway) == before


def _problem(answer: Answer, *names: str) -> dict[str, object]:
    status, headers, body = answer
    assert 400 <= status < 500, (status, body[:300])
    assert headers["content-type"] == "application/problem+json", (headers, body[:300])
    problem = json.loads(body)
    assert problem["status"] == status
    for name in names:
        assert name in problem["detail"], (name, problem)
    return problem


# ---- request headers holding bytes that are not UTF-8 --------------------------------------

SEND_HEADERS = ["Mq-Label", "Mq-Priority", "Mq-Delivery", "Mq-Acknowledge", "Mq-Journal",
                "Mq-Transaction", "Mq-Time-To-Reach-Queue", "Mq-Time-To-Be-Received",
                "Mq-Correlation-Id", "Mq-Response-Queue", "Mq-Admin-Queue", "Mq-App-Specific",
                "Mq-Sent-Time", "Idempotency-Key", "Content-Type"]
NOT_UTF8 = [b"\xff\xfe", b"a\xff", b"\xed\xa0\x80", b"\xc3"]  # the third: a UTF-8 surrogate
TO_HOSTILE = (b"Mq-Destination", b"DIRECT=OS:.\\private$\\hostile")


@pytest.mark.parametrize("value", NOT_UTF8, ids=repr)
@pytest.mark.parametrize("header", SEND_HEADERS)
def test_send_headers_that_are_not_utf8(gateway: GatewayProcess, unchanged: None,
                                        header: str, value: bytes) -> None:
    for path, extra in ((f"{Q}/messages", []), ("/v1/messages", [TO_HOSTILE])):
        answer = _request(gateway, "POST", path, body=b"body",
                          headers=[*extra, (header.encode(), value)])
        assert answer[0] == 400 and _problem(answer, header), (path, answer)


@pytest.mark.parametrize("value", NOT_UTF8, ids=repr)
def test_other_headers_that_are_not_utf8(gateway: GatewayProcess, unchanged: None,
                                         value: bytes) -> None:
    answer = _request(gateway, "POST", "/v1/messages", body=b"body",
                      headers=[(b"Mq-Destination", b"DIRECT=OS:.\\private$\\hostile" + value)])
    assert answer[0] == 400 and _problem(answer, "Mq-Destination")
    for queue in ("hostile", "hostile_tx"):
        answer = _request(gateway, "POST", f"/v1/queues/private$/{queue}/receive?wait=0",
                          headers=[(b"Mq-Transaction", value)])
        assert answer[0] == 400 and _problem(answer, "Mq-Transaction")
    # SRMP reads the Content-Type (the multipart boundary) itself.
    for content_type in (value, b"multipart/related; boundary=" + value,
                         b'multipart/related; boundary="b' + value + b'"; type=text/xml'):
        _problem(_request(gateway, "POST", "/msmq/private$/hostile", body=b"--b\r\n\r\n<x/>",
                          headers=[(b"Content-Type", content_type)]))


@pytest.mark.parametrize("value", NOT_UTF8, ids=repr)
def test_any_header_that_is_not_utf8_is_refused_naming_it(gateway: GatewayProcess,
                                                          unchanged: None, value: bytes) -> None:
    # Refused before anything else, on every route (one process and several alike: bytes
    # that are not UTF-8 cannot be passed on from a front to the store owner).
    for method, path in (("GET", "/v1/queues"), ("POST", f"{Q}/messages"),
                         ("POST", f"{Q}/receive"), ("GET", "/v1/transactions")):
        answer = _request(gateway, method, path, body=b"x" if method == "POST" else b"",
                          headers=[(b"X-Trace", value)])
        assert answer[0] == 400 and _problem(answer, "X-Trace"), (path, answer)


@pytest.mark.parametrize("header", [*SEND_HEADERS, "Mq-Destination", "Authorization"])
def test_a_single_valued_header_given_twice_is_refused_naming_it(
        gateway: GatewayProcess, unchanged: None, header: str) -> None:
    # Which of two values counts would be a guess: a permission check and the send could
    # read different ones.
    values = {"Mq-Destination": (b"DIRECT=OS:.\\private$\\hostile", b"nowhere"),
              "Authorization": (b"Bearer a", b"Bearer b")}.get(header, (b"1", b"2"))
    for path, extra in ((f"{Q}/messages", []), ("/v1/messages", [TO_HOSTILE])):
        if header == "Mq-Destination" and extra:
            extra = []
        answer = _request(gateway, "POST", path, body=b"body",
                          headers=[*extra, *((header.encode(), v) for v in values)])
        # (aiohttp's parser refuses a second Content-Type itself, naming it)
        assert answer[0] == 400 and _problem(answer, header), (path, answer)


@pytest.mark.parametrize("body,named", [(b'{"timeout": "30s"}', "timeout"),
                                        (b'{"isolation": 1, "ttl": 2}', "isolation, ttl"),
                                        (b"not json", "JSON"), (b"[]", "JSON object")])
def test_a_transaction_begin_with_options_is_refused_naming_them(
        gateway: GatewayProcess, unchanged: None, body: bytes, named: str) -> None:
    # POST /v1/transactions takes no options: one a client believes it set is not ignored.
    answer = _json(gateway, "POST", "/v1/transactions", body)
    assert answer[0] == 400 and _problem(answer, named), answer


# ---- lone surrogates in JSON strings ---------------------------------------------------------

BAD = "x\ud800y"
BATCH_PROPERTIES = ["label", "priority", "delivery", "acknowledge", "journal", "transaction",
                    "time_to_reach_queue", "time_to_be_received", "correlation_id",
                    "response_queue", "admin_queue", "app_specific", "sent_time",
                    "content_type"]
HOSTILE_Q = "private$/hostile"
SURROGATE_FIELDS: list[tuple[str, str, object, str]] = [
    ("PUT", NEW_Q, {"label": BAD}, "label"),
    ("PUT", NEW_Q, {"quota": BAD}, "quota"),
    ("PUT", NEW_Q, {"journal_quota": BAD}, "journal_quota"),
    *[("POST", f"{Q}/requeue", {key: BAD}, key)
      for key in ("queue", "class", "source_queue", "after", "before")],
    ("POST", f"{Q}/messages/abc/requeue", {"queue": BAD}, "queue"),
    ("PUT", f"{Q}/consumers/c1", {"start": BAD}, "start"),
    ("POST", f"{Q}/consumers/c1/commit", {"position": BAD}, "position"),
    ("POST", "/v1/batch", {"messages": [{"queue": BAD}]}, "messages[0].queue"),
    ("POST", "/v1/batch", {"messages": [{"queue": HOSTILE_Q, "body_base64": BAD}]},
     "messages[0].body_base64"),
    *[("POST", "/v1/batch", {"messages": [{"queue": HOSTILE_Q, "properties": {key: BAD}}]},
       f"messages[0].properties.{key}") for key in BATCH_PROPERTIES],
    ("POST", "/v1/batch", {"messages": [{"queue": HOSTILE_Q, "body_base64": ""},
                                        {"queue": HOSTILE_Q, "properties": {"label": BAD}}]},
     "messages[1].properties.label"),
    ("POST", "/v1/admin/backup", {"dest": "/tmp/entrepot-hostile-" + BAD}, "dest"),
]


@pytest.mark.parametrize(("method", "path", "doc", "field"), SURROGATE_FIELDS,
                         ids=[f"{m} {p} {f}" for m, p, _, f in SURROGATE_FIELDS])
def test_lone_surrogates_in_json_strings(gateway: GatewayProcess, unchanged: None,
                                         method: str, path: str, doc: object,
                                         field: str) -> None:
    escaped = json.dumps(doc).encode()  # "\ud800" as an escape
    assert b"\\ud800" in escaped
    answer = _json(gateway, method, path, escaped)
    assert answer[0] == 400 and _problem(answer, field), answer
    # The same code point written as (invalid) UTF-8 bytes rather than escaped.
    raw = json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
    assert b"\xed\xa0\x80" in raw
    _problem(_json(gateway, method, path, raw))


JSON_ROUTES = [("PUT", NEW_Q), ("POST", f"{Q}/requeue"), ("POST", f"{Q}/messages/abc/requeue"),
               ("PUT", f"{Q}/consumers/c1"), ("POST", f"{Q}/consumers/c1/commit"),
               ("POST", "/v1/batch"), ("POST", "/v1/admin/backup")]


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_lone_surrogates_in_json_keys(gateway: GatewayProcess, unchanged: None, method: str,
                                      path: str) -> None:
    _problem(_json(gateway, method, path, json.dumps({BAD: 1}).encode()))


DUPLICATE_KEYS = [
    ("PUT", NEW_Q, b'{"label": "a", "label": "b"}', "'label'"),
    ("PUT", f"{Q}/consumers/c1", b'{"start": "earliest", "start": "latest"}', "'start'"),
    ("POST", "/v1/batch", b'{"messages": [{"queue": "private$/hostile", "body_base64": "",'
     b' "queue": "private$/made_by_hostile"}]}', "'queue'"),
    ("POST", "/v1/batch", b'{"messages": [], "messages": [{"queue": "private$/hostile"}]}',
     "'messages'"),
    ("POST", "/v1/admin/backup", b'{"dest": "/tmp/a", "dest": "/tmp/b"}', "'dest'"),
]


@pytest.mark.parametrize(("method", "path", "body", "named"), DUPLICATE_KEYS)
def test_a_json_key_given_twice_is_refused_naming_it(gateway: GatewayProcess, unchanged: None,
                                                     method: str, path: str, body: bytes,
                                                     named: str) -> None:
    # Which of the two values counts would be a guess the client cannot see.
    answer = _json(gateway, method, path, body)
    assert answer[0] == 400 and _problem(answer, named, "more than once"), answer


MANAGEMENT_BODIES = [
    ("POST", "/v1/admin/backup", b'{"dest": "/tmp/entrepot-hostile-a\\u0000b"}', 400, "NUL"),
    ("POST", "/v1/admin/backup", b'{"dest": "/tmp/entrepot-hostile-x", "extra": 1}', 400,
     "extra"),
    ("POST", "/v1/admin/backup", b'{"dest": "/dev/null"}', 409, "/dev/null"),
    ("POST", f"{Q}/purge", b'{"older_than": 5}', 400, "older_than"),
    ("POST", f"{Q}/purge", b"{", 400, "JSON"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "named"), MANAGEMENT_BODIES)
def test_a_management_body_it_cannot_take_is_refused_naming_why(
        gateway: GatewayProcess, unchanged: None, method: str, path: str, body: bytes,
        status: int, named: str) -> None:
    # A caller's mistake, not the gateway's (no 500): a path with NUL, an option the route
    # does not take (never ignored), a backup target that is a file.
    answer = _json(gateway, method, path, body)
    assert answer[0] == status and _problem(answer, named), answer


# ---- content codings ----------------------------------------------------------------------

BODIES = [("PUT", f"{Q}/consumers/gz"), ("POST", f"{Q}/messages"), ("POST", "/v1/batch"),
          ("PUT", NEW_Q), ("POST", "/v1/transactions"), ("POST", "/v1/admin/backup"),
          ("POST", "/msmq/private$/hostile")]


@pytest.mark.parametrize("coding", [b"gzip", b"deflate", b"GZIP"])
@pytest.mark.parametrize(("method", "path"), BODIES)
def test_a_body_its_content_encoding_does_not_decode_is_refused_naming_it(
        gateway: GatewayProcess, unchanged: None, method: str, path: str,
        coding: bytes) -> None:
    answer = _request(gateway, method, path, body=b'{"not": "compressed"}',
                      headers=[(b"Content-Type", b"application/json"),
                               (b"Content-Encoding", coding)])
    assert answer[0] == 400, answer
    assert _problem(answer, "Content-Encoding", coding.decode())["type"].endswith(
        "/bad-body")


@pytest.mark.parametrize("coding", [b"bogus", b"x-gzip", b"gzip, gzip", b"compress", b"br",
                                    b"zstd"])
@pytest.mark.parametrize(("method", "path"), BODIES)
def test_a_content_encoding_the_gateway_does_not_decode_is_refused_naming_it(
        gateway: GatewayProcess, unchanged: None, method: str, path: str,
        coding: bytes) -> None:
    # Taken as it came, the body would be stored still encoded, as if it were the message.
    answer = _request(gateway, method, path, body=gzip.compress(b"{}"),
                      headers=[(b"Content-Type", b"application/json"),
                               (b"Content-Encoding", coding)])
    assert answer[0] == 415, answer
    assert _problem(answer, "Content-Encoding", repr(coding.decode()), "gzip")


def test_a_gzipped_body_is_taken_decoded(gateway: GatewayProcess) -> None:
    made = "/v1/queues/private$/gzipped"
    answer = _request(gateway, "PUT", made, body=gzip.compress(b'{"label": "zipped"}'),
                      headers=[(b"Content-Type", b"application/json"),
                               (b"Content-Encoding", b"gzip")])
    assert answer[0] == 201, answer
    assert json.loads(answer[2])["label"] == "zipped"
    body = b"an order" * 100
    sent = _request(gateway, "POST", f"{made}/messages", body=zlib.compress(body),
                    headers=[(b"Content-Encoding", b"deflate")])
    assert sent[0] == 201, sent
    received = _request(gateway, "POST", f"{made}/receive")
    [message] = json.loads(received[2])["messages"]
    assert base64.b64decode(message["body_base64"]) == body


_ORDER = bytes(range(256)) * 400  # 100 KiB that compress to more than a few bytes
_GZIPPED = gzip.compress(_ORDER)
_DEFLATED = zlib.compress(_ORDER)


@pytest.mark.parametrize(("coding", "body", "why"), [
    (b"gzip", _GZIPPED[: len(_GZIPPED) // 2], "cut short"),
    (b"gzip", _GZIPPED[:-8], "cut short"),  # all the data, not the end (CRC and size)
    (b"gzip", _GZIPPED + b"trailing", "follow the end"),  # not a second member
    (b"gzip", _GZIPPED + _GZIPPED[:40], "cut short"),  # a second member cut short
    (b"deflate", _DEFLATED[: len(_DEFLATED) // 2], "cut short"),
    (b"deflate", _DEFLATED + b"trailing", "follow the end"),
])
def test_a_compressed_body_cut_short_or_followed_by_more_is_refused(
        gateway: GatewayProcess, unchanged: None, coding: bytes, body: bytes,
        why: str) -> None:
    """An upload that stopped midway must not be stored as a shorter message."""
    answer = _request(gateway, "POST", f"{Q}/messages", body=body,
                      headers=[(b"Content-Encoding", coding)])
    assert answer[0] == 400, answer
    assert _problem(answer, "Content-Encoding", coding.decode(), why)["type"].endswith(
        "/bad-body")


def test_gzip_members_one_after_the_other_are_one_body(gateway: GatewayProcess) -> None:
    """RFC 1952: a gzip body may be several members; and a bare deflate stream (no zlib
    header, as some clients send 'deflate') is taken too."""
    made = "/v1/queues/private$/members"
    assert _request(gateway, "PUT", made, body=b"{}")[0] == 201
    bare = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    for coding, body in ((b"gzip", gzip.compress(b"first ") + gzip.compress(b"second")),
                         (b"deflate", bare.compress(b"first second") + bare.flush())):
        sent = _request(gateway, "POST", f"{made}/messages", body=body,
                        headers=[(b"Content-Encoding", coding)])
        assert sent[0] == 201, sent
        received = _request(gateway, "POST", f"{made}/receive")
        [message] = json.loads(received[2])["messages"]
        assert base64.b64decode(message["body_base64"]) == b"first second"


def test_a_gzipped_body_over_the_limit_once_decoded_is_refused(gateway: GatewayProcess,
                                                                 unchanged: None) -> None:
    bomb = gzip.compress(bytes(64 << 20))  # 64 MiB of zeros in about 64 KiB
    answer = _request(gateway, "POST", f"{Q}/messages", body=bomb,
                      headers=[(b"Content-Encoding", b"gzip")])
    assert answer[0] == 413, answer
    problem = _problem(answer, "server.request_body_max")
    assert problem["type"].endswith("/body-too-large"), problem


# ---- paths ------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", [f"{Q}/messages#f", f"{Q}/messages?#f", "/v1/batch#x"])
def test_a_request_target_with_a_fragment_is_refused(gateway: GatewayProcess,
                                                     unchanged: None, target: str) -> None:
    """A fragment is no part of an HTTP request (RFC 9112 3.2). Taken, it would be in what
    a signature covers in one process and not in what a front passes on."""
    answer = _request(gateway, "POST", target, body=b"x")
    assert answer[0] == 400, answer
    assert _problem(answer, "fragment", "%23")["type"].endswith("/bad-request")


@pytest.mark.parametrize(("path", "escapes"), [
    ("/v1/queues/private$/a_%FF", "%FF"), ("/v1/queues/a%C3", "%C3"),
    ("/v1/queues/private$/hostile%ED%A0%80/messages", "%ED%A0%80"),
    ("/v1/queues/private$/hostile/messages/%e9t%C3%A9", "%e9")])
def test_an_escape_that_is_not_utf8_is_refused_naming_it(gateway: GatewayProcess,
                                                         unchanged: None, path: str,
                                                         escapes: str) -> None:
    # aiohttp keeps such an escape as it came: a_%FF and a_%25FF would name one queue.
    for method in ("PUT", "POST", "GET"):
        answer = _json(gateway, method, path, b"{}")
        problem = _problem(answer, "not UTF-8", f"escapes {escapes} ")
        assert answer[0] == 400 and problem["type"].endswith("ILLEGAL_QUEUE_PATHNAME"), answer


@pytest.mark.parametrize(("target", "named", "queue"), [
    ("/v1/queues/private$/q_%", "'%'", True), ("/v1/queues/private$/q_%F", "'%F'", True),
    ("/v1/queues/private$/q_%zz/messages", "'%zz'", True),
    ("/v1/queues/private$/hostile/messages?after=%FF", "escapes %FF", False),
    ("/v1/queues/private$/hostile/messages?after=1%", "'%'", False),
    ("/MSMQ/private$/hostile%FF", "escapes %FF", True)])
def test_a_percent_that_is_no_escape_or_not_utf8_is_refused_naming_it(
        gateway: GatewayProcess, unchanged: None, target: str, named: str,
        queue: bool) -> None:
    # q_% and q_%25 were one queue; a query's %FF became U+FFFD; /MSMQ/ is /msmq/.
    for method in ("PUT", "POST", "GET"):
        answer = _json(gateway, method, target, b"{}")
        problem = _problem(answer, named)
        slug = "ILLEGAL_QUEUE_PATHNAME" if queue else "bad-request"
        assert answer[0] == 400 and problem["type"].endswith(slug), answer


def test_an_escaped_percent_names_a_queue_with_a_percent(gateway: GatewayProcess) -> None:
    answer = _json(gateway, "PUT", "/v1/queues/private$/made_%25FF", b"{}")
    assert answer[0] in (200, 201) and json.loads(answer[2])["path"] == "private$/made_%FF"
    assert _request(gateway, "DELETE", "/v1/queues/private$/made_%25FF")[0] in (200, 204)


@pytest.mark.parametrize("probe", ["/healthz", "/readyz"])
@pytest.mark.parametrize("headers", [
    [(b"Authorization", b"Bearer a"), (b"Authorization", b"Bearer b")],
    [(b"X-Other", b"\xff")], [(b"Mq-Label", b"\xc3")]], ids=["twice", "other", "mq"])
def test_probes_answer_whatever_headers_they_are_sent(gateway: GatewayProcess, probe: str,
                                                      headers: list[tuple[bytes, bytes]]
                                                      ) -> None:
    # A probe reads no header: a load balancer's odd headers are not its problem.
    answer = _request(gateway, "GET", probe, headers=headers)
    assert answer[0] == 200, answer


@pytest.mark.parametrize("probe", ["/healthz", "/readyz"])
def test_probes_do_not_wait_for_an_announced_body(gateway: GatewayProcess, probe: str) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as sock:
        sock.sendall(f"GET {probe} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
                     .encode())
        head = b""
        while b"\r\n\r\n" not in head:  # with fronts it came only once the body was sent
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 200 "), head


@pytest.mark.parametrize("header", ["Mq-Destination", "Mq-Admin-Queue"])
def test_this_host_under_a_virtual_directory_it_does_not_serve_is_refused(
        gateway: GatewayProcess, unchanged: None, header: str) -> None:
    # It named no local queue, so it was sent by HTTP to this gateway itself, or taken as
    # a local queue under any directory.
    name = f"DIRECT=HTTP://127.0.0.1:{gateway.port}/zzz/private$/hostile".encode()
    extra = [] if header == "Mq-Destination" else [TO_HOSTILE]
    answer = _request(gateway, "POST", "/v1/messages", body=b"x",
                      headers=[*extra, (header.encode(), name)])
    assert answer[0] == 400 and _problem(answer, "/zzz/"), answer


def test_this_host_under_its_virtual_directory_is_local(gateway: GatewayProcess) -> None:
    name = f"DIRECT=HTTP://127.0.0.1:{gateway.port}/MSMQ/private$/hostile".encode()
    answer = _request(gateway, "POST", "/v1/messages", body=b"x",
                      headers=[(b"Mq-Destination", name)])
    assert answer[0] == 201, answer
    received = _json(gateway, "POST", f"{Q}/receive", b"")
    assert received[0] == 200 and json.loads(received[2])["messages"], received


def test_a_link_action_takes_no_fields(gateway: GatewayProcess, unchanged: None) -> None:
    for body in (b'{"a": 1}', b"garbage", b'{"a": 1, "a": 2}'):
        answer = _json(gateway, "POST", "/v1/links/nowhere/pause", body)
        assert answer[0] == 400, answer
    assert _json(gateway, "POST", "/v1/links/nowhere/pause", b"{}")[0] == 404


def test_a_long_number_or_many_unknown_keys_get_a_short_answer(gateway: GatewayProcess,
                                                               unchanged: None) -> None:
    answer = _json(gateway, "PUT", NEW_Q, b'{"quota": 1' + b"0" * 5000 + b"}")
    problem = _problem(answer, "5001 digits")
    assert "sys." not in str(problem["detail"]), problem
    many = json.dumps({f"k{i}": 1 for i in range(1000)}).encode()
    answer = _json(gateway, "PUT", NEW_Q, many)
    problem = _problem(answer, "k0", "and 990 more")
    assert len(str(problem["detail"])) < 300, problem


# ---- nesting ----------------------------------------------------------------------------------

def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
def test_deep_nesting_is_refused_before_parsing(gateway: GatewayProcess, unchanged: None,
                                               method: str, path: str) -> None:
    deep = 100_000
    for body in (_nested(deep), '{"a":' * deep + "1" + "}" * deep,
                 '{"messages": ' + _nested(deep) + "}", _nested(JSON_DEPTH_MAX + 1)):
        answer = _json(gateway, method, path, body.encode())
        assert answer[0] == 400 and _problem(answer, "nested"), (body[:40], answer)


def test_nesting_at_the_limit_is_parsed(gateway: GatewayProcess, unchanged: None) -> None:
    at_limit = '{"zz": ' + _nested(JSON_DEPTH_MAX - 1) + "}"
    problem = _problem(_json(gateway, "PUT", NEW_Q, at_limit.encode()), "zz")
    assert "nested" not in str(problem["detail"])
    over = '{"zz": ' + _nested(JSON_DEPTH_MAX) + "}"
    _problem(_json(gateway, "PUT", NEW_Q, over.encode()), "nested")


def test_brackets_inside_strings_do_not_count_as_nesting(gateway: GatewayProcess,
                                                         unchanged: None) -> None:
    label = "[{" * 100  # 124 characters at most: refused for its length, not as nesting
    problem = _problem(_json(gateway, "PUT", NEW_Q, json.dumps({"label": label}).encode()),
                       "label")
    assert "nested" not in str(problem["detail"])


# ---- lengths at and over their limits --------------------------------------------------------

def test_lengths_over_their_limits(gateway: GatewayProcess, unchanged: None) -> None:
    send = f"{Q}/messages"
    for header, value in (("Mq-Label", "L" * (LABEL_CHARS_MAX + 1)),
                          ("Idempotency-Key", "k" * 256), ("Idempotency-Key", ""),
                          ("Mq-Correlation-Id", "c" * 1025), ("Mq-Response-Queue", "r" * 1025),
                          ("Mq-Admin-Queue", "a" * 1025)):
        answer = _request(gateway, "POST", send, body=b"x",
                          headers=[(header.encode(), value.encode())])
        assert answer[0] == 400 and _problem(answer, header)
    _problem(_json(gateway, "PUT", NEW_Q, json.dumps({"label": "l" * 125}).encode()), "label")
    batch = {"messages": [{"queue": HOSTILE_Q}] * (BATCH_MAX + 1)}
    _problem(_json(gateway, "POST", "/v1/batch", json.dumps(batch).encode()), "messages")
    batch = {"messages": [{"queue": HOSTILE_Q, "properties": {
        "label": "L" * (LABEL_CHARS_MAX + 1)}}]}
    _problem(_json(gateway, "POST", "/v1/batch", json.dumps(batch).encode()), "Mq-Label")
    # A limit's refusal names the setting that raises it.
    _problem(_raw(gateway, f"POST {send} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  "Content-Length: 999999999\r\n\r\n".encode()), "server.request_body_max")
    _problem(_raw(gateway, MALFORMED["too many headers"]), "server.header_count_max")
    _problem(_raw(gateway, MALFORMED["header too long"]), "server.header_bytes_max")


def test_lengths_at_their_limits_are_taken(gateway: GatewayProcess) -> None:
    """The other side of the limits above: at the limit, a send is stored."""
    label = "é" * LABEL_CHARS_MAX  # characters, not bytes
    answer = _request(gateway, "POST", f"{Q}/messages", body=b"x",
                      headers=[(b"Mq-Label", label.encode()), (b"Idempotency-Key", b"k" * 255),
                               (b"Mq-Correlation-Id", b"c" * 1024)])
    assert answer[0] == 201, answer
    received = _request(gateway, "POST", f"{Q}/receive")
    message = json.loads(received[2])["messages"][0]
    assert message["label"] == label and message["correlation_id"] == "c" * 1024


# ---- HTTP that aiohttp's parser refuses ------------------------------------------------------

MALFORMED = {
    "bad method": b"GET\xff /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "not HTTP": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    "bad version": b"GET /healthz HTTP/9.x\r\nHost: x\r\n\r\n",
    "request line too long": b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "header too long": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000
                       + b"\r\n\r\n",
    "too many headers": b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                        + b"".join(b"X-%d: y\r\n" % n for n in range(200)) + b"\r\n",
    "bad header name": b"GET /healthz HTTP/1.1\r\nHo\xffst: x\r\n\r\n",
    "bytes in the path": b"PUT /v1/queues/\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",
    "bytes in the query": b"POST /v1/queues/private$/hostile/receive?wait=\xff HTTP/1.1\r\n"
                          b"Host: x\r\n\r\n",
    "header without colon": b"GET /healthz HTTP/1.1\r\nHost x\r\n\r\n",
    "NUL in a header": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "bad Content-Length": b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    "two Content-Lengths": b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                           b"Content-Length: 2\r\n\r\nab",
    "bad chunk size": b"POST /v1/batch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      b"\r\nzz\r\n{}\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_http_gets_a_problem(gateway: GatewayProcess, unchanged: None,
                                       name: str) -> None:
    _problem(_raw(gateway, MALFORMED[name]))


def test_the_gateway_still_serves_after_the_corpus(gateway: GatewayProcess) -> None:
    assert _request(gateway, "GET", "/healthz")[0] == 200
    assert _request(gateway, "GET", "/readyz")[0] == 200
    assert _request(gateway, "POST", f"{Q}/messages", body=b"fine")[0] == 201


def test_a_reader_hanging_up_mid_range_is_no_error(gateway: GatewayProcess) -> None:
    # The module's teardown finds no "unhandled error" in the log: a reader that leaves in
    # the middle of a range answer is not the gateway's failure.
    assert _json(gateway, "PUT", "/v1/queues/hostile_range", b"{}")[0] == 201
    body = base64.b64encode(b"r" * 65536).decode()
    batch = json.dumps({"messages": [{"queue": "hostile_range", "body_base64": body}] * 16})
    for _ in range(4):  # 4 MiB in all
        assert _json(gateway, "POST", "/v1/batch", batch.encode())[0] == 201
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as sock:
        sock.sendall(b"GET /v1/queues/hostile_range/range?from=1&to=1000 HTTP/1.1\r\n"
                     b"Host: 127.0.0.1\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    deadline = time.monotonic() + 60  # bounds a failure only
    while 'route="/v1/queues/{path}/range"' not in _request(gateway, "GET", "/metrics")[2].decode():
        assert time.monotonic() < deadline, "the range request never ended"
        time.sleep(0.05)


@pytest.mark.parametrize("target", ["http://elsewhere", "http://elsewhere/v1/nowhere"])
def test_an_absolute_form_target_names_its_path_in_the_problem(gateway: GatewayProcess,
                                                               target: str) -> None:
    # The path of "http://elsewhere" is "/" (RFC 9110 4.2.3): one process and several say so.
    status, _, body = _request(gateway, "GET", target)
    assert status == 404, body[:300]
    assert json.loads(body)["instance"] == (target.partition("elsewhere")[2] or "/")
