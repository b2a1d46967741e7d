"""The authorization matrix of docs/security.md, held against the running application: each
row's request, sent as each caller, gets the status the table says; a route of the app's
router that no row reaches fails the test (a new route needs its row)."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.web.app import make_app
from gateway.web.appkeys import STATE_KEY
from gateway.settings import parse_settings
from tests.helpers import REPO_ROOT

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers

COLUMNS = ("open remote", "open loopback", "keyed anonymous", "partner A", "partner B",
           "admin")
REMOTE = "203.0.113.9"  # TEST-NET-3: never routed; only this test's requests carry it


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _matrix() -> list[dict[str, str]]:
    text = (REPO_ROOT / "docs" / "security.md").read_text()
    block = text.split("<!-- authorization-matrix:begin -->")[1].split(
        "<!-- authorization-matrix:end -->")[0]
    lines = [line for line in block.strip().splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == ["operation", "request", *COLUMNS], header
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def _request(cell: str) -> tuple[str, str, dict[str, str], bytes]:
    """``METHOD PATH`` plus an optional header (``Name: value``) or JSON body, all in code
    spans, or a body described in words ("one message to `q`")."""
    spans = re.findall(r"`([^`]*)`", cell)
    method, path = spans[0].split(" ", 1)
    headers: dict[str, str] = {}
    body = b"{}"
    for span in spans[1:]:
        if span.startswith("{"):
            body = span.encode()
        elif ": " in span:
            name, value = span.split(": ", 1)
            headers[name] = value
        else:
            body = (b'{"messages": [{"queue": "%s", "body_base64": "eA=="}]}' % span.encode())
    if path.startswith("/msmq/"):
        body = b"not an SRMP request"
        headers["Content-Type"] = "text/xml"
    elif path.endswith("/messages") and method == "POST" or path == "/v1/messages":
        body = b"hello"
    return method, path, headers, body


def _settings(tmp_path: Path, keyed: bool) -> Any:
    doc: dict[str, Any] = {
        "store": {"data_dir": str(tmp_path / "data")},
        "queues": [{"path": "private$/a_in"}, {"path": "private$/a_gone"},
                   {"path": "private$/b_in"}],
    }
    if keyed:
        doc["auth"] = {"admin_key_sha256": _sha("admin-key")}
        doc["partners"] = [
            {"name": "a", "api_key_sha256": _sha("a-key"), "send": ["private$/a_*"],
             "receive": ["private$/a_*"]},
            {"name": "b", "api_key_sha256": _sha("b-key"), "send": ["private$/b_*"],
             "receive": ["private$/b_*"]}]
    return parse_settings(doc)


CALLERS: dict[str, tuple[bool, dict[str, str], bool]] = {
    # column: (keyed gateway, credential, from another host)
    "open remote": (False, {}, True),
    "open loopback": (False, {}, False),
    "keyed anonymous": (True, {}, False),
    "partner A": (True, {"Authorization": "Bearer a-key"}, False),
    "partner B": (True, {"Authorization": "Bearer b-key"}, False),
    "admin": (True, {"Authorization": "Bearer admin-key"}, False),
}


async def _until_ready(app: web.Application) -> None:
    for _ in range(6000):  # waits for the store's open, not a deadline of the machine's speed
        if app[STATE_KEY].ready:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not ready: {app[STATE_KEY].not_ready_reason()}")


@pytest.mark.parametrize("column", COLUMNS)
async def test_authorization_matrix(aiohttp_client: Any, tmp_path: Path, column: str) -> None:
    keyed, credential, remote = CALLERS[column]
    app = make_app(_settings(tmp_path, keyed))
    reached: set[str] = set()

    @web.middleware
    async def note_route(request: web.Request, handler: Any) -> web.StreamResponse:
        reached.add(request.match_info.route.resource.canonical
                    if request.match_info.route.resource is not None else "")
        response: web.StreamResponse = await handler(request)
        return response

    app.middlewares.insert(0, _remote_from_header)
    app.middlewares.insert(0, note_route)
    client = await aiohttp_client(app)
    await _until_ready(app)
    headers = {**credential, **({"X-Test-Remote": REMOTE} if remote else {})}
    opener = {"Authorization": "Bearer a-key"} if column == "partner B" else headers
    tx = ""
    mismatches = []
    for row in _matrix():
        method, path, extra, body = _request(row["request"])
        if "{tx}" in path:
            if not tx or row["operation"] == "end a transaction":
                made = await client.post("/v1/transactions", headers=opener)
                tx = (await made.json()).get("id", "") if made.status == 201 else "none"
            path = path.replace("{tx}", tx)
        response = await client.request(method, path, headers={**headers, **extra},
                                         data=body)
        text = await response.text()
        if str(response.status) != row[column]:
            mismatches.append(f"{row['operation']}: {response.status} != {row[column]}"
                              f" ({text[:160]})")
    assert not mismatches, "\n".join(mismatches)
    routes = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert routes - reached == set(), f"routes without a row: {sorted(routes - reached)}"


def test_an_open_gateway_on_the_network_says_what_is_open(tmp_path: Path) -> None:
    from tests.helpers import GatewayProcess, free_port

    port = free_port()
    gateway = GatewayProcess(tmp_path / "data", port=port,
                             extra_args=["--listen", f"0.0.0.0:{port}"])
    try:
        gateway.wait_ready()
        log = gateway.log()
    finally:
        gateway.stop()
    warning = [line for line in log.splitlines() if "no credentials configured" in line]
    assert warning and "WARNING" in warning[0], log
    assert "send to and receive from every queue" in warning[0]
    assert "loopback clients only" in warning[0]


@web.middleware
async def _remote_from_header(request: web.Request, handler: Any) -> web.StreamResponse:
    """The one change to the app under test: the socket's address as the test says
    (X-Test-Remote), what the socket would say of a client on another host."""
    remote = request.headers.get("X-Test-Remote")
    if remote:
        request = request.clone(remote=remote)
    response: web.StreamResponse = await handler(request)
    return response


async def test_open_management_refuses_web_pages_and_rebound_names(aiohttp_client: Any,
                                                                    tmp_path: Path) -> None:
    """A page in a browser on the gateway's machine connects from loopback too: its Origin,
    or the foreign name it rebound to 127.0.0.1 (Host), keeps it out of management."""
    app = make_app(_settings(tmp_path, keyed=False))
    app.middlewares.insert(0, _remote_from_header)
    client = await aiohttp_client(app)
    await _until_ready(app)
    for headers in ({"Origin": "http://evil.example"}, {"Host": "evil.example"},
                    {"Host": "evil.example:8080", "Origin": "http://evil.example:8080"}):
        for method, path in (("POST", "/v1/queues/private$/a_in/purge"),
                             ("PUT", "/v1/queues/private$/a_new"), ("GET", "/metrics"),
                             ("GET", "/v1/links"), ("GET", "/ui/status.json")):
            response = await client.request(method, path, headers=headers, data=b"{}")
            assert response.status == 403, (headers, method, path, await response.text())
    # The gateway's own names pass; an IPv4 client of a dual-stack listener is loopback.
    for headers in ({"Origin": f"http://127.0.0.1:{client.server.port}"},
                    {"Host": "localhost"}, {"X-Test-Remote": "::ffff:127.0.0.1"},
                    {"Host": f"[0:0:0:0:0:0:0:1]:{client.server.port}"},
                    {"Host": f"[::ffff:127.0.0.1]:{client.server.port}"}):
        response = await client.put("/v1/queues/private$/a_new", headers=headers, json={})
        assert response.status in (200, 201), (headers, await response.text())
    response = await client.put("/v1/queues/private$/a_new", json={},
                                headers={"X-Test-Remote": "::ffff:203.0.113.9"})
    assert response.status == 403


async def test_metrics_take_the_admin_key_as_bearer_or_basic_from_another_host(
        aiohttp_client: Any, tmp_path: Path) -> None:
    """As the status page takes it: a browser or a scraper configured with Basic
    credentials sends the key as the password."""
    import base64

    app = make_app(_settings(tmp_path, keyed=True))
    app.middlewares.insert(0, _remote_from_header)
    client = await aiohttp_client(app)
    await _until_ready(app)

    def basic(user_password: str) -> str:
        return "Basic " + base64.b64encode(user_password.encode()).decode()

    for authorization, status in (("Bearer admin-key", 200), (basic("x:admin-key"), 200),
                                  (basic(":admin-key"), 200), (basic("admin-key:"), 403),
                                  (basic("x:a-key"), 403), ("Basic !!", 403), ("", 403)):
        response = await client.get("/metrics", headers={"X-Test-Remote": REMOTE,
                                                         "Authorization": authorization})
        assert response.status == status, (authorization, await response.text())
