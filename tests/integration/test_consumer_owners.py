"""A range consumer is its registering partner's: another partner that may read the same
queue neither sees it nor commits, deletes or takes over its name (which would let it free
the first one's unread messages); the admin sees and manages them all. On a real gateway,
so that the fronts' commands carry whose consumers a request sees (make test runs it again
in one process)."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import GatewayProcess, serving

pytestmark = pytest.mark.workers

KEYS = {"acme": "acme-key-0123456789", "bravo": "bravo-key-0123456789",
        "admin": "admin-key-0123456789"}


def _call(gateway: GatewayProcess, who: str, method: str, path: str,
          doc: object = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        gateway.url + path, method=method,
        data=None if doc is None else json.dumps(doc).encode(),
        headers={"Authorization": f"Bearer {KEYS[who]}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            body = answer.read()
            return answer.status, json.loads(body) if body else None
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root: Path = tmp_path_factory.mktemp("owners")
    with serving(root, f"""[auth]
admin_key_sha256 = "{_sha(KEYS['admin'])}"
[[partners]]
name = "acme"
api_key_sha256 = "{_sha(KEYS['acme'])}"
send = ["shared"]
receive = ["shared"]
[[partners]]
name = "bravo"
api_key_sha256 = "{_sha(KEYS['bravo'])}"
receive = ["shared"]
[[queues]]
path = "shared"
""") as running:
        yield running


def test_a_partner_sees_and_changes_only_its_own_consumers(gateway: GatewayProcess) -> None:
    q = "/v1/queues/shared"
    assert _call(gateway, "acme", "PUT", f"{q}/consumers/acme-spark",
                 {"start": "earliest"})[0] == 201
    for n in range(5):
        request = urllib.request.Request(
            gateway.url + f"{q}/messages", data=b"m%d" % n, method="POST",
            headers={"Authorization": f"Bearer {KEYS['acme']}"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 201
    # bravo may read the queue, not acme's consumer
    assert _call(gateway, "bravo", "GET", f"{q}/consumers") == (200, {"consumers": []})
    assert _call(gateway, "bravo", "GET", f"{q}/head")[1]["consumers"] == {}
    for method, tail, doc in [("GET", "", None), ("DELETE", "", None),
                              ("POST", "/commit", {"position": 6})]:
        status, problem = _call(gateway, "bravo", method, f"{q}/consumers/acme-spark{tail}",
                                doc)
        assert (status, problem["type"].rpartition("/")[2]) == (404, "consumer-not-found")
    status, problem = _call(gateway, "bravo", "PUT", f"{q}/consumers/acme-spark",
                            {"start": "latest"})
    assert (status, problem["type"].rpartition("/")[2]) == (409, "consumer-name-taken")
    head = _call(gateway, "acme", "GET", f"{q}/head")[1]
    assert (head["first"], head["messages"], head["consumers"]) == (1, 5, {"acme-spark": 1})
    # a name is the queue's: bravo takes another, and each sees its own
    assert _call(gateway, "bravo", "PUT", f"{q}/consumers/bravo-spark",
                 {"start": "latest"}) == (201, {"name": "bravo-spark", "position": 6})
    assert [c["name"] for c in _call(gateway, "acme", "GET", f"{q}/consumers")[1][
        "consumers"]] == ["acme-spark"]
    # the admin sees both and may end either
    assert _call(gateway, "admin", "GET", f"{q}/head")[1]["consumers"] == {
        "acme-spark": 1, "bravo-spark": 6}
    assert _call(gateway, "admin", "DELETE", f"{q}/consumers/bravo-spark")[0] == 204
    assert _call(gateway, "acme", "POST", f"{q}/consumers/acme-spark/commit",
                 {"position": 3})[1]["position"] == 3
    assert _call(gateway, "acme", "GET", f"{q}/consumers/acme-spark") == (
        200, {"name": "acme-spark", "position": 3})


def test_each_partner_has_its_own_consumer_slots(gateway: GatewayProcess) -> None:
    """One partner's 64 consumers on a queue leave another its own 64, and a partner refused
    a receive by another's consumer is told who can see it."""
    q = "/v1/queues/shared"
    held = len(_call(gateway, "acme", "GET", f"{q}/consumers")[1]["consumers"])
    statuses = [_call(gateway, "acme", "PUT", f"{q}/consumers/slot-{n}", {"start": "latest"})[0]
                for n in range(65 - held)]
    assert statuses == [201] * (64 - held) + [409], statuses
    assert _call(gateway, "bravo", "PUT", f"{q}/consumers/bravo-slot",
                 {"start": "latest"})[0] == 201
    status, problem = _call(gateway, "bravo", "POST", f"{q}/receive")
    assert (status, problem["type"].rpartition("/")[2]) == (409, "queue-has-consumers")
    assert "the admin sees them all" in problem["detail"]
