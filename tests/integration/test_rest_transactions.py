"""Transactions and batches over REST: all or nothing, in order, put back in place."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import Settings
from tests.helpers import ready_client

PROBLEM = "application/problem+json"


async def _client(aiohttp_client: Any, settings: Settings) -> Any:
    return await ready_client(aiohttp_client, settings)


@pytest.fixture
async def client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    test_client = await _client(aiohttp_client, settings_factory())
    for name, tx in (("private$/a", True), ("private$/b", True), ("plain", False)):
        await test_client.put(f"/v1/queues/{name}", json={"transactional": tx})
    return test_client


async def _bodies(client: Any, queue: str) -> list[bytes]:
    page = await (await client.get(f"/v1/queues/{queue}/messages?limit=1000")).json()
    return [base64.b64decode(m["body_base64"]) for m in page["messages"]]


async def _begin(client: Any) -> str:
    response = await client.post("/v1/transactions")
    assert response.status == 201
    body = await response.json()
    assert body["expires_at"]
    return str(body["id"])


async def test_sends_become_visible_together_in_order_at_commit(client: Any) -> None:
    tx = await _begin(client)
    for queue, body in (("private$/a", b"1"), ("private$/b", b"2"), ("private$/a", b"3")):
        response = await client.post(f"/v1/queues/{queue}/messages", data=body,
                                     headers={"Mq-Transaction": tx})
        assert response.status == 202
    assert await _bodies(client, "private$/a") == []
    listed = await (await client.get("/v1/transactions")).json()
    assert [t["id"] for t in listed["transactions"]] == [tx]
    committed = await (await client.post(f"/v1/transactions/{tx}/commit")).json()
    assert [m["queue"] for m in committed["messages"]] == ["private$/a", "private$/b",
                                                          "private$/a"]
    assert await _bodies(client, "private$/a") == [b"1", b"3"]
    assert await _bodies(client, "private$/b") == [b"2"]
    response = await client.post(f"/v1/transactions/{tx}/commit")
    assert response.status == 404, "a finished transaction is gone"


async def test_abort_leaves_no_trace(client: Any) -> None:
    tx = await _begin(client)
    await client.post("/v1/queues/private$/a/messages", data=b"x", headers={"Mq-Transaction": tx})
    assert (await client.post(f"/v1/transactions/{tx}/abort")).status == 200
    assert await _bodies(client, "private$/a") == []


async def test_a_prepared_transaction_aborted_holds_nothing_back(client: Any) -> None:
    """Its sends' sequence numbers stop holding a range reader back (``next`` moves on to
    what is sent later) and its bytes stop counting against the queue's quota."""
    assert (await client.put("/v1/queues/private$/q", json={
        "transactional": True, "quota": "3KiB"})).status == 201
    assert (await client.post("/v1/queues/private$/q/messages", data=b"first")).status == 201
    tx = await _begin(client)
    for _ in range(3):
        response = await client.post("/v1/queues/private$/q/messages", data=bytes(600),
                                     headers={"Mq-Transaction": tx})
        assert response.status == 202
    assert (await client.post(f"/v1/transactions/{tx}/prepare")).status == 200
    head = await (await client.get("/v1/queues/private$/q/head")).json()
    assert head["next"] == 2, "held back while the transaction may still commit"
    assert (await client.post(f"/v1/transactions/{tx}/abort")).status == 200
    for _ in range(3):  # the aborted 1,800 bytes are no longer charged
        sent = await client.post("/v1/queues/private$/q/messages", data=bytes(600))
        assert sent.status == 201, await sent.text()
    head = await (await client.get("/v1/queues/private$/q/head")).json()
    assert (head["next"], head["messages"]) == (8, 4)


async def test_abort_after_receive_puts_the_message_back_at_the_head(client: Any) -> None:
    for body in (b"first", b"second", b"third"):
        await client.post("/v1/queues/private$/a/messages", data=body)
    tx = await _begin(client)
    got = await (await client.post("/v1/queues/private$/a/receive",
                                   headers={"Mq-Transaction": tx})).json()
    assert base64.b64decode(got["messages"][0]["body_base64"]) == b"first"
    other = await (await client.post("/v1/queues/private$/a/receive")).json()
    assert base64.b64decode(other["messages"][0]["body_base64"]) == b"second"
    await client.post(f"/v1/transactions/{tx}/abort")
    after = await (await client.post("/v1/queues/private$/a/receive")).json()
    assert base64.b64decode(after["messages"][0]["body_base64"]) == b"first"


async def test_receive_commits_with_sends_atomically(client: Any) -> None:
    await client.put("/v1/queues/private$/a", json={"transactional": True, "journal": True})
    await client.post("/v1/queues/private$/a/messages", data=b"order")
    tx = await _begin(client)
    await client.post("/v1/queues/private$/a/receive", headers={"Mq-Transaction": tx})
    await client.post("/v1/queues/private$/b/messages", data=b"reply",
                      headers={"Mq-Transaction": tx})
    await client.post(f"/v1/transactions/{tx}/commit")
    assert await _bodies(client, "private$/a") == []
    assert await _bodies(client, "private$/b") == [b"reply"]
    assert await _bodies(client, "private$/a;journal") == [b"order"]


async def test_a_transaction_cannot_receive_what_it_sent(client: Any) -> None:
    tx = await _begin(client)
    await client.post("/v1/queues/private$/a/messages", data=b"mine",
                      headers={"Mq-Transaction": tx})
    response = await client.post("/v1/queues/private$/a/receive", headers={"Mq-Transaction": tx})
    assert response.status == 409
    body = await response.json(content_type=PROBLEM)
    assert "cannot receive a message it sent" in body["detail"]


async def test_transactional_send_to_a_plain_queue_is_refused(client: Any) -> None:
    tx = await _begin(client)
    response = await client.post("/v1/queues/plain/messages", data=b"x",
                                 headers={"Mq-Transaction": tx})
    assert response.status == 400
    body = await response.json(content_type=PROBLEM)
    assert body["class"] == "MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q"


async def test_unknown_transaction_and_action(client: Any) -> None:
    response = await client.post("/v1/queues/private$/a/messages", data=b"x",
                                 headers={"Mq-Transaction": "tx-999999"})
    assert response.status == 404
    tx = await _begin(client)
    assert (await client.post(f"/v1/transactions/{tx}/explode")).status == 404
    refused = await client.post(f"/v1/transactions/{tx}/commit", json={"force": True})
    assert refused.status == 400 and "force" in (await refused.json())["detail"]
    assert (await client.post(f"/v1/transactions/{tx}/commit", json={})).status == 200


async def test_prepared_transaction_survives_a_restart(aiohttp_client: Any,
                                                       settings_factory: Callable[..., Settings]
                                                       ) -> None:
    settings = settings_factory()
    first = await _client(aiohttp_client, settings)
    await first.put("/v1/queues/private$/a", json={"transactional": True})
    await first.post("/v1/queues/private$/a/messages", data=b"held")
    tx = await _begin(first)
    await first.post("/v1/queues/private$/a/receive", headers={"Mq-Transaction": tx})
    await first.post("/v1/queues/private$/a/messages", data=b"sent",
                     headers={"Mq-Transaction": tx})
    prepared = await (await first.post(f"/v1/transactions/{tx}/prepare")).json()
    assert prepared["state"] == "prepared"
    response = await first.post("/v1/queues/private$/a/messages", data=b"late",
                                headers={"Mq-Transaction": tx})
    assert response.status == 409, "a prepared transaction takes no more sends"
    await first.close()

    second = await _client(aiohttp_client, settings)
    listed = await (await second.get("/v1/transactions")).json()
    assert [(t["id"], t["state"]) for t in listed["transactions"]] == [(tx, "prepared")]
    assert [(t["sends"], t["receives"]) for t in listed["transactions"]] == [(1, 1)]
    # The message the prepared transaction received is invisible to others until it ends.
    assert await _bodies(second, "private$/a") == [], "browsing does not see the held message"
    nothing = await (await second.post("/v1/queues/private$/a/receive")).json()
    assert nothing["messages"] == [], "the prepared receive still holds its message"
    await second.post(f"/v1/transactions/{tx}/commit")
    assert await _bodies(second, "private$/a") == [b"sent"]


async def test_idle_transaction_times_out(aiohttp_client: Any,
                                          settings_factory: Callable[..., Settings]) -> None:
    client = await _client(aiohttp_client, settings_factory(transactions__idle_timeout="0.3s"))
    await client.put("/v1/queues/private$/a", json={"transactional": True})
    await client.post("/v1/queues/private$/a/messages", data=b"m")
    tx = await _begin(client)
    await client.post("/v1/queues/private$/a/receive", headers={"Mq-Transaction": tx})
    for _ in range(600):  # until the idle sweep aborts it (an upper bound only)
        if (await client.get(f"/v1/transactions/{tx}")).status == 404:
            break
        await asyncio.sleep(0.05)
    assert (await client.get(f"/v1/transactions/{tx}")).status == 404
    back = await (await client.post("/v1/queues/private$/a/receive")).json()
    assert base64.b64decode(back["messages"][0]["body_base64"]) == b"m"


async def test_batch_is_one_atomic_transaction(client: Any) -> None:
    good = {"messages": [
        {"queue": "private$/a", "body_base64": base64.b64encode(b"1").decode()},
        {"queue": "plain", "body_base64": base64.b64encode(b"2").decode(),
         "properties": {"label": "l", "priority": 6}},
    ]}
    response = await client.post("/v1/batch", json=good)
    assert response.status == 201
    assert len((await response.json())["ids"]) == 2
    plain = await (await client.get("/v1/queues/plain/messages")).json()
    assert plain["messages"][0]["label"] == "l"
    bad = {"messages": [
        {"queue": "private$/a", "body_base64": base64.b64encode(b"3").decode()},
        {"queue": "nowhere", "body_base64": ""},
    ]}
    assert (await client.post("/v1/batch", json=bad)).status == 404
    # A batch is a transaction of its own: one naming another is refused, not put in it.
    tx = await _begin(client)
    named = await client.post("/v1/batch", json={"messages": [
        {"queue": "plain", "body_base64": base64.b64encode(b"x").decode()}]},
        headers={"Mq-Transaction": tx})
    assert named.status == 400 and "Mq-Transaction" in (await named.json())["detail"]
    assert await _bodies(client, "private$/a") == [b"1"]
    for broken in ({"messages": []}, {"messages": [{"queue": "plain", "body_base64": "!!"}]},
                   {"messages": [{"queue": "plain", "properties": {"priority": 99}}]}, []):
        assert (await client.post("/v1/batch", json=broken)).status == 400
    assert await _bodies(client, "plain") == [b"2"]


async def test_a_message_received_in_a_transaction_is_not_browsed_until_it_ends(
        client: Any) -> None:
    await client.put("/v1/queues/private$/b", json={"transactional": True})
    for body in (b"one", b"two", b"three"):
        await client.post("/v1/queues/private$/b/messages", data=body)
    tx = await _begin(client)
    got = await client.post("/v1/queues/private$/b/receive?max=2",
                            headers={"Mq-Transaction": tx})
    assert len((await got.json())["messages"]) == 2
    page = await (await client.get("/v1/queues/private$/b/messages?limit=1")).json()
    assert [base64.b64decode(m["body_base64"]) for m in page["messages"]] == [b"three"]
    assert (await client.post(f"/v1/transactions/{tx}/abort")).status == 200
    assert await _bodies(client, "private$/b") == [b"one", b"two", b"three"]


@pytest.mark.parametrize("state", ["active", "prepared", "prepared, after a restart"])
async def test_a_queue_a_transaction_sends_to_is_not_deleted_under_it(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], state: str) -> None:
    """Deleting the queue would leave the commit nowhere to put the message (it was stored,
    and answered 500): the delete is refused until the transaction ends."""
    settings = settings_factory()
    client = await _client(aiohttp_client, settings)
    await client.put("/v1/queues/private$/gone", json={"transactional": True})
    tx = await _begin(client)
    response = await client.post("/v1/queues/private$/gone/messages", data=b"held",
                                 headers={"Mq-Transaction": tx})
    assert response.status == 202
    if state != "active":
        assert (await client.post(f"/v1/transactions/{tx}/prepare")).status == 200
    if state == "prepared, after a restart":
        await client.close()
        client = await _client(aiohttp_client, settings)
    refused = await client.delete("/v1/queues/private$/gone")
    assert (refused.status, (await refused.json())["type"].rsplit("/", 1)[-1]) == (
        409, "queue-busy")
    # nor made non-transactional: the commit would put a transactional message in it
    changed = await client.put("/v1/queues/private$/gone", json={"transactional": False})
    assert (changed.status, (await changed.json())["type"].rsplit("/", 1)[-1]) == (
        409, "queue-busy")
    assert (await (await client.get("/v1/queues/private$/gone")).json())["transactional"]
    committed = await client.post(f"/v1/transactions/{tx}/commit")
    assert committed.status == 200, await committed.text()
    assert await _bodies(client, "private$/gone") == [b"held"]
    assert (await client.delete("/v1/queues/private$/gone")).status == 204


async def test_a_commit_is_not_refused_for_a_journal_copy_with_no_room(client: Any) -> None:
    """The journal copies of a transaction's receives follow MSMQ's rule too: one its
    journal has no room for is left out, and the commit goes through (it answered 507 for
    as long as the journal stayed full)."""
    await client.put("/v1/queues/private$/tj", json={"transactional": True, "journal": True,
                                                     "journal_quota": 4096})
    for body in (bytes(8000), b"fits"):
        assert (await client.post("/v1/queues/private$/tj/messages", data=body)).status == 201
    tx = await _begin(client)
    got = await client.post("/v1/queues/private$/tj/receive?max=2",
                            headers={"Mq-Transaction": tx})
    assert len((await got.json())["messages"]) == 2
    committed = await client.post(f"/v1/transactions/{tx}/commit")
    assert committed.status == 200, await committed.text()
    assert await _bodies(client, "private$/tj") == []
    assert await _bodies(client, "private$/tj;journal") == [b"fits"]


async def test_a_transaction_ending_during_a_backup_comes_back_prepared_under_its_id(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The backup copies the log, then transactions.json: a transaction committed between
    the two is prepared in the copied log, and must come back with its id (its coordinator
    holds it), not as one the admin must resolve."""
    from gateway.cli.offline import run_restore
    from store import backup as backup_module

    settings = settings_factory()
    client = await _client(aiohttp_client, settings)
    await client.put("/v1/queues/private$/a", json={"transactional": True})
    tx = await _begin(client)
    await client.post("/v1/queues/private$/a/messages", data=b"in doubt",
                      headers={"Mq-Transaction": tx})
    assert (await client.post(f"/v1/transactions/{tx}/prepare")).status == 200
    loop = asyncio.get_running_loop()
    copy_file = backup_module.copy_file
    committed = []

    def copy_then_commit(path: Path, *args: Any) -> Any:
        copied = copy_file(path, *args)
        if path.name == "QMLog":  # the log is copied: the transaction ends now
            answer = asyncio.run_coroutine_threadsafe(
                client.post(f"/v1/transactions/{tx}/commit"), loop).result()
            committed.append(answer.status)
        return copied

    monkeypatch.setattr(backup_module, "copy_file", copy_then_commit)
    response = await client.post("/v1/admin/backup", json={"dest": str(tmp_path / "copy")})
    assert response.status == 200, await response.text()
    assert committed == [200]
    live = (Path(settings.store.data_dir) / "transactions.json").read_text()
    assert tx not in live, "once the backup is done, the ended transaction's entry goes"
    await client.close()
    assert await loop.run_in_executor(None, run_restore, tmp_path / "copy",
                                      tmp_path / "restored") == 0
    restored = await _client(aiohttp_client, settings_factory(
        store__data_dir=str(tmp_path / "restored")))
    listed = await (await restored.get("/v1/transactions")).json()
    assert [(t["id"], t["state"]) for t in listed["transactions"]] == [(tx, "prepared")]
    assert (await restored.post(f"/v1/transactions/{tx}/commit")).status == 200
    assert await _bodies(restored, "private$/a") == [b"in doubt"]
