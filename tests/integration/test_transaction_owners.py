"""Transactions belong to the principal that opened it, against a real gateway with two
partners: unguessable ids, 404 for anyone else, per-partner quotas, caps on the bodies held
in open transactions (507 with Retry-After), a message too big for the store refused at send,
and the memory of aborted transactions given back."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.settings import ConfigError, parse_settings
from store.framing import max_payload
from tests.helpers import GatewayProcess

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers

PROBLEM = "application/problem+json"
SEGMENT = 1 << 20
LARGEST = max_payload(SEGMENT)  # the largest record payload a 1 MiB segment holds
KIB = 1024
ADMIN, ALPHA, BETA = "root-key", "alpha-key", "beta-key"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _config(root: Path, transactions: str = "", body_max: str = "2MiB",
            segment: str = "1MiB") -> Path:
    partners = "".join(f"""
[[partners]]
name = "{name}"
api_key_sha256 = "{_sha(key)}"
send = ["private$/t_*"]
receive = ["private$/t_*"]
""" for name, key in (("alpha", ALPHA), ("beta", BETA)))
    config = root / "entrepot.toml"
    config.write_text(f"""
[server]
request_body_max = "{body_max}"
[store]
segment_size = "{segment}"
[auth]
admin_key_sha256 = "{_sha(ADMIN)}"
[transactions]
{transactions}
{partners}
[[queues]]
path = "private$/t_a"
transactional = true
[[queues]]
path = "private$/t_b"
transactional = true
""")
    return config


def _start(root: Path, config: Path) -> GatewayProcess:
    proc = GatewayProcess(root / "data", extra_args=["--config", str(config)])
    try:
        proc.wait_ready()
    except BaseException:
        proc.stop()
        raise
    return proc


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    root = tmp_path_factory.mktemp("owners")
    proc = _start(root, _config(root))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    root = tmp_path_factory.mktemp("limited")
    proc = _start(root, _config(root, """
open_max = 8
open_max_per_principal = 3
pending_bytes_max = "3MiB"
pending_bytes_max_per_principal = "2MiB"
"""))
    try:
        yield proc
    finally:
        proc.stop()


class Client:
    """One principal's calls: (status, headers, JSON or None)."""

    def __init__(self, proc: GatewayProcess, key: str) -> None:
        self.proc, self.key = proc, key

    async def call(self, method: str, path: str, *, data: bytes | None = None,
                   headers: dict[str, str] | None = None
                   ) -> tuple[int, dict[str, str], Any]:
        async with aiohttp.ClientSession() as session:
            payload = io.BytesIO(data) if data is not None else None
            async with session.request(method, self.proc.url + path, data=payload, headers={
                    "Authorization": f"Bearer {self.key}", **(headers or {})}) as response:
                body = await response.read()
                kind = response.headers.get("Content-Type", "")
                doc = await response.json(content_type=None) if "json" in kind else None
                assert body is not None
                return response.status, dict(response.headers), doc

    async def begin(self) -> str:
        status, _, doc = await self.call("POST", "/v1/transactions")
        assert status == 201, doc
        return str(doc["id"])

    async def send(self, queue: str, body: bytes, tx: str | None = None
                   ) -> tuple[int, dict[str, str], Any]:
        return await self.call("POST", f"/v1/queues/{queue}/messages", data=body,
                               headers={"Mq-Transaction": tx} if tx else {})

    async def bodies(self, queue: str) -> list[bytes]:
        status, _, page = await self.call("GET", f"/v1/queues/{queue}/messages?limit=1000")
        assert status == 200, page
        return [base64.b64decode(m["body_base64"]) for m in page["messages"]]


async def _abort_everything(proc: GatewayProcess) -> None:
    admin = Client(proc, ADMIN)
    status, _, listed = await admin.call("GET", "/v1/transactions")
    assert status == 200, listed
    for tx in listed["transactions"]:
        status, _, doc = await admin.call("POST", f"/v1/transactions/{tx['id']}/abort")
        assert status == 200, doc
    for queue in ("private$/t_a", "private$/t_b"):
        status, _, doc = await admin.call("POST", f"/v1/queues/{queue}/purge")
        assert status == 200, doc


@pytest.fixture
async def owners(gw: GatewayProcess) -> Any:
    yield gw
    await _abort_everything(gw)


@pytest.fixture
async def quotas(limited: GatewayProcess) -> Any:
    yield limited
    await _abort_everything(limited)


async def test_ids_are_128_random_bits_not_a_counter(owners: GatewayProcess) -> None:
    alpha = Client(owners, ALPHA)
    ids = [await alpha.begin() for _ in range(3)]
    assert len(set(ids)) == 3
    for tx in ids:
        assert re.fullmatch(r"tx-[A-Za-z0-9_-]{22}", tx), tx
        assert len(base64.urlsafe_b64decode(tx[3:] + "==")) == 16
    numbers = [int.from_bytes(base64.urlsafe_b64decode(t[3:] + "==")) for t in ids]
    assert all(abs(b - a) > 1 << 64 for a, b in zip(numbers, numbers[1:])), ids


async def test_another_partner_cannot_touch_a_transaction(owners: GatewayProcess) -> None:
    admin, alpha, beta = (Client(owners, k) for k in (ADMIN, ALPHA, BETA))
    for body in (b"b1", b"b2"):
        assert (await admin.send("private$/t_b", body))[0] == 201
    tx = await alpha.begin()
    assert (await alpha.send("private$/t_a", b"alpha's", tx))[0] == 202
    status, _, got = await alpha.call("POST", "/v1/queues/private$/t_b/receive",
                                      headers={"Mq-Transaction": tx})
    assert status == 200 and len(got["messages"]) == 1
    _, _, before = await alpha.call("GET", f"/v1/transactions/{tx}")

    unknown = "tx-" + "A" * 22
    _, _, unknown_problem = await beta.call("GET", f"/v1/transactions/{unknown}")
    attempts: list[tuple[str, str, dict[str, str], bytes | None]] = [
        ("GET", f"/v1/transactions/{tx}", {}, None),
        ("POST", f"/v1/transactions/{tx}/prepare", {}, None),
        ("POST", f"/v1/transactions/{tx}/commit", {}, None),
        ("POST", f"/v1/transactions/{tx}/abort", {}, None),
        ("POST", "/v1/queues/private$/t_a/messages", {"Mq-Transaction": tx}, b"beta's"),
        ("POST", "/v1/messages", {"Mq-Transaction": tx,
                                  "Mq-Destination": "DIRECT=OS:.\\private$\\t_a"}, b"beta's"),
        ("POST", "/v1/queues/private$/t_b/receive", {"Mq-Transaction": tx}, None),
    ]
    for method, path, headers, data in attempts:
        status, got_headers, problem = await beta.call(method, path, headers=headers, data=data)
        assert status == 404, (method, path, status, problem)
        assert got_headers["Content-Type"] == PROBLEM
        assert problem["type"] == unknown_problem["type"], "same answer as an unknown id"
        assert problem["detail"] == unknown_problem["detail"].replace(unknown, tx)

    _, _, after = await alpha.call("GET", f"/v1/transactions/{tx}")
    assert after == before, "nothing changed in alpha's transaction"
    # The message alpha's transaction received stays invisible to others, browsing too.
    assert await admin.bodies("private$/t_b") == [b"b2"], "browse leaves out held ones"
    status, _, left = await beta.call("POST", "/v1/queues/private$/t_b/receive")
    assert status == 200 and [base64.b64decode(m["body_base64"]) for m in
                              left["messages"]] == [b"b2"], "beta took nothing in alpha's tx"
    status, _, done = await alpha.call("POST", f"/v1/transactions/{tx}/commit")
    assert status == 200, done
    assert await admin.bodies("private$/t_a") == [b"alpha's"]


async def test_the_list_shows_a_partner_its_own_and_the_admin_all(owners: GatewayProcess
                                                                  ) -> None:
    admin, alpha, beta = (Client(owners, k) for k in (ADMIN, ALPHA, BETA))
    mine, theirs = await alpha.begin(), await beta.begin()
    for client, expected in ((alpha, {mine}), (beta, {theirs}), (admin, {mine, theirs})):
        status, _, listed = await client.call("GET", "/v1/transactions")
        assert status == 200, listed
        assert {t["id"] for t in listed["transactions"]} == expected
    status, _, shown = await admin.call("GET", f"/v1/transactions/{mine}")
    assert status == 200 and shown["owner"] == "alpha"
    status, _, problem = await admin.call("POST", "/v1/queues/private$/t_a/messages",
                                          data=b"admin's", headers={"Mq-Transaction": mine})
    assert status == 403, "the admin resolves a partner's transaction but does not join it"
    assert "alpha" in problem["detail"]
    assert (await admin.call("POST", f"/v1/transactions/{mine}/abort"))[0] == 200
    assert (await alpha.call("GET", f"/v1/transactions/{mine}"))[0] == 404


async def _prepared_then_stopped(tmp_path: Path, config: Path, body: bytes) -> str:
    """Alpha's transaction holding one send, prepared; the gateway stopped."""
    proc = _start(tmp_path, config)
    try:
        alpha = Client(proc, ALPHA)
        tx = await alpha.begin()
        assert (await alpha.send("private$/t_a", body, tx))[0] == 202
        assert (await alpha.call("POST", f"/v1/transactions/{tx}/prepare"))[0] == 200
        return tx
    finally:
        proc.stop()


async def test_prepared_transaction_keeps_its_id_and_owner_across_a_restart(
        tmp_path: Path) -> None:
    config = _config(tmp_path)
    tx = await _prepared_then_stopped(tmp_path, config, b"prepared")
    proc = _start(tmp_path, config)
    try:
        alpha, beta = Client(proc, ALPHA), Client(proc, BETA)
        status, _, shown = await alpha.call("GET", f"/v1/transactions/{tx}")
        assert status == 200 and shown["state"] == "prepared", shown
        for method, path in (("GET", f"/v1/transactions/{tx}"),
                             ("POST", f"/v1/transactions/{tx}/commit"),
                             ("POST", f"/v1/transactions/{tx}/abort")):
            assert (await beta.call(method, path))[0] == 404
        fresh = await alpha.begin()
        assert fresh != tx
        assert (await alpha.call("POST", f"/v1/transactions/{tx}/commit"))[0] == 200
        assert await alpha.bodies("private$/t_a") == [b"prepared"]
    finally:
        proc.stop()


async def test_a_prepared_transaction_whose_record_is_lost_is_left_to_the_admin(
        tmp_path: Path) -> None:
    config = _config(tmp_path)
    tx = await _prepared_then_stopped(tmp_path, config, b"orphan")
    (tmp_path / "data" / "transactions.json").write_text("{not json")
    proc = _start(tmp_path, config)
    try:
        admin, alpha = Client(proc, ADMIN), Client(proc, ALPHA)
        assert (await alpha.call("GET", "/v1/transactions"))[2] == {"transactions": []}
        _, _, listed = await admin.call("GET", "/v1/transactions")
        [orphan] = listed["transactions"]
        assert orphan["state"] == "prepared" and orphan["owner"] is None
        assert orphan["id"] != tx and re.fullmatch(r"tx-[A-Za-z0-9_-]{22}", orphan["id"])
        assert (await alpha.call("POST", f"/v1/transactions/{orphan['id']}/commit"))[0] == 404
        assert (await admin.call("POST", f"/v1/transactions/{orphan['id']}/commit"))[0] == 200
        assert await admin.bodies("private$/t_a") == [b"orphan"]
    finally:
        proc.stop()


async def test_open_transactions_per_principal(quotas: GatewayProcess) -> None:
    alpha, beta = Client(quotas, ALPHA), Client(quotas, BETA)
    held = [await alpha.begin() for _ in range(3)]
    status, headers, problem = await alpha.call("POST", "/v1/transactions")
    assert status == 429 and headers["Content-Type"] == PROBLEM and headers["Retry-After"]
    assert "transactions.open_max_per_principal" in problem["detail"]
    assert len({await beta.begin() for _ in range(3)}) == 3, "beta has its own quota"
    assert (await alpha.call("POST", f"/v1/transactions/{held[0]}/abort"))[0] == 200
    await alpha.begin()


async def test_pending_bytes_are_capped_per_principal_and_in_all(quotas: GatewayProcess
                                                                 ) -> None:
    alpha, beta = Client(quotas, ALPHA), Client(quotas, BETA)
    body = b"p" * (900 * KIB)
    mine = await alpha.begin()
    for _ in range(2):
        assert (await alpha.send("private$/t_a", body, mine))[0] == 202
    status, headers, problem = await alpha.send("private$/t_a", body, mine)
    assert status == 507 and headers["Content-Type"] == PROBLEM
    assert int(headers["Retry-After"]) > 0
    assert "transactions.pending_bytes_max_per_principal" in problem["detail"]
    second = await alpha.begin()
    assert (await alpha.send("private$/t_a", body, second))[0] == 507, "per principal"

    theirs = await beta.begin()
    assert (await beta.send("private$/t_a", body, theirs))[0] == 202
    status, headers, problem = await beta.send("private$/t_a", body, theirs)
    assert status == 507 and int(headers["Retry-After"]) > 0
    assert re.search(r"transactions\.pending_bytes_max(?!_)", problem["detail"]), problem
    _, _, shown = await alpha.call("GET", f"/v1/transactions/{mine}")
    assert shown["sends"] == 2, "a refused send is not held"

    assert (await alpha.call("POST", f"/v1/transactions/{mine}/abort"))[0] == 200
    assert (await beta.send("private$/t_a", body, theirs))[0] == 202, "capacity is back"
    assert (await alpha.send("private$/t_a", body, second))[0] == 202
    assert (await beta.call("POST", f"/v1/transactions/{theirs}/commit"))[0] == 200
    assert (await alpha.send("private$/t_a", body, second))[0] == 202, "and after commit"


async def test_a_message_too_big_for_the_store_is_413_at_send(owners: GatewayProcess
                                                              ) -> None:
    alpha = Client(owners, ALPHA)
    tx = await alpha.begin()
    assert (await alpha.send("private$/t_a", b"fits", tx))[0] == 202
    status, headers, problem = await alpha.send("private$/t_a", b"B" * LARGEST, tx)
    assert status == 413 and headers["Content-Type"] == PROBLEM
    assert str(LARGEST) in problem["detail"], problem
    _, _, shown = await alpha.call("GET", f"/v1/transactions/{tx}")
    assert shown["sends"] == 1
    status, _, done = await alpha.call("POST", f"/v1/transactions/{tx}/commit")
    assert status == 200, done
    assert await alpha.bodies("private$/t_a") == [b"fits"]


def _rss_mib(proc: GatewayProcess) -> int:
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


async def test_memory_of_aborted_transactions_is_given_back(tmp_path: Path) -> None:
    """Bodies held by 24 concurrent transactions (600 MiB) go back to the system when they
    are aborted, not only to the allocator."""
    config = _config(tmp_path, 'pending_bytes_max = "1GiB"\n'
                               'pending_bytes_max_per_principal = "1GiB"\n'
                               'open_max_per_principal = 100\n',
                     body_max="6MiB", segment="8MiB")
    proc = _start(tmp_path, config)
    try:
        alpha = Client(proc, ALPHA)
        body = b"m" * (5 << 20)
        for _ in range(3):
            start = _rss_mib(proc)
            txs = [await alpha.begin() for _ in range(24)]

            async def fill(tx: str) -> None:
                for _ in range(5):
                    assert (await alpha.send("private$/t_a", body, tx))[0] == 202

            await asyncio.gather(*(fill(tx) for tx in txs))
            assert _rss_mib(proc) > start + 500
            for tx in txs:
                assert (await alpha.call("POST", f"/v1/transactions/{tx}/abort"))[0] == 200
            assert _rss_mib(proc) < start + 48, "the bodies' memory went back to the system"
    finally:
        proc.stop()


def test_quota_keys_are_validated() -> None:
    for key, value in (("transactions.open_max_per_principal", 0),
                       ("transactions.pending_bytes_max", "1B"),
                       ("transactions.pending_bytes_max_per_principal", "1B")):
        with pytest.raises(ConfigError, match=re.escape(key)):
            parse_settings({}, {key: value})
    settings = parse_settings({}, {"transactions.open_max_per_principal": 7,
                                   "transactions.pending_bytes_max": "3MiB",
                                   "transactions.pending_bytes_max_per_principal": "2MiB"})
    assert (settings.transactions.open_max_per_principal, settings.transactions.pending_bytes_max,
            settings.transactions.pending_bytes_max_per_principal) == (7, 3 << 20, 2 << 20)
