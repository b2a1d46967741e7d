"""The admin commands against a real gateway process: tables, --json, exit codes, --yes,
credentials, dead letters requeued in bulk, links, transactions."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.cli.main import main
from tests.helpers import GatewayProcess

KEY = "admin-cli-key"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    tmp = tmp_path_factory.mktemp("admin-cli")
    config = tmp / "entrepot.toml"
    config.write_text(f'[auth]\nadmin_key_sha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"\n')
    proc = GatewayProcess(tmp / "data", extra_args=["--config", str(config)])
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def run(capsys: Any, gw: GatewayProcess, *args: str, token: str = KEY) -> tuple[int, str, str]:
    code = main([*args, "--url", gw.url, "--token", token])
    out, err = capsys.readouterr()
    return code, out, err


def test_create_on_an_existing_queue_changes_only_what_it_names(capsys: Any,
                                                                 gw: GatewayProcess) -> None:
    code, _, err = run(capsys, gw, "queue", "create", "private$/kept", "--transactional",
                       "--quota", "1GiB", "--journal", "--label", "L")
    assert code == 0, err
    code, out, err = run(capsys, gw, "queue", "create", "private$/kept", "--label", "M",
                         "--json")
    assert code == 0, err
    queue = json.loads(out)
    assert (queue["transactional"], queue["quota"], queue["journal"], queue["label"]) == (
        True, 1 << 30, True, "M")


def test_queue_lifecycle_with_tables_and_json(capsys: Any, gw: GatewayProcess) -> None:
    code, out, _ = run(capsys, gw, "queue", "create", "private$/cli", "--quota", "1MiB",
                       "--label", "orders")
    assert code == 0 and "quota" in out and "1048576" in out
    for i in range(3):
        assert run(capsys, gw, "message", "send", "private$/cli", "--body", f"b{i}",
                   "--label", f"l{i}", "--priority", "5")[0] == 0
    code, out, _ = run(capsys, gw, "queue", "list")
    header, *rows = out.splitlines()
    assert header.split()[:3] == ["QUEUE", "MESSAGES", "BYTES"]
    row = next(r for r in rows if r.startswith("private$/cli"))
    assert row.split()[1] == "3"
    code, out, _ = run(capsys, gw, "queue", "list", "--json")
    assert {q["path"]: q["messages"] for q in json.loads(out)}["private$/cli"] == 3
    code, out, _ = run(capsys, gw, "message", "peek", "private$/cli", "--json")
    assert [m["label"] for m in json.loads(out)] == ["l0", "l1", "l2"]
    code, out, _ = run(capsys, gw, "message", "receive", "private$/cli", "--max", "2")
    # The bodies on their own lines ("b2" may well occur in a random message id).
    assert code == 0 and [line for line in out.splitlines() if not line.startswith("# ")] \
        == ["b0", "b1"]
    code, _, err = run(capsys, gw, "queue", "purge", "private$/cli")
    assert code == 2 and "--yes" in err
    code, out, _ = run(capsys, gw, "queue", "purge", "private$/cli", "--yes")
    assert code == 0 and "purged 1" in out
    assert run(capsys, gw, "queue", "delete", "private$/cli", "--yes")[0] == 0
    code, _, err = run(capsys, gw, "queue", "show", "private$/cli")
    assert code == 4 and "404" in err


def test_exit_codes_for_credentials_and_unreachable(capsys: Any, gw: GatewayProcess) -> None:
    code, _, err = run(capsys, gw, "queue", "list", token="wrong")
    assert code == 1 and "401" in err and "unknown API key" in err
    code = main(["queue", "list", "--url", "http://127.0.0.1:1", "--token", KEY])
    assert code == 3 and "cannot reach" in capsys.readouterr().err
    code = main(["queue", "list", "--url", "ftp://x"])
    assert code == 2 and "--url 'ftp://x'" in capsys.readouterr().err


def test_dead_letters_list_show_requeue_delete(capsys: Any, gw: GatewayProcess) -> None:
    run(capsys, gw, "queue", "create", "work")
    for i in range(5):
        main(["message", "send", "work", "--body", f"d{i}", "--url", gw.url, "--token", KEY])
    capsys.readouterr()
    ids_in_work = [m["id"] for m in json.loads(
        run(capsys, gw, "message", "peek", "work", "--json")[1])]
    # Five messages that expire into the dead-letter queue (time-to-be-received 0).
    import urllib.request
    for i in range(5):
        urllib.request.urlopen(urllib.request.Request(
            f"{gw.url}/v1/queues/work/messages", data=f"x{i}".encode(), method="POST",
            headers={"Authorization": f"Bearer {KEY}", "Mq-Time-To-Be-Received": "0.01",
                     "Mq-Journal": "deadletter"})).read()
    deadline = time.monotonic() + 30  # an upper bound only
    dead: list[dict[str, Any]] = []
    while len(dead) < 5 and time.monotonic() < deadline:
        dead = json.loads(run(capsys, gw, "dlq", "list", "--json")[1])
        time.sleep(0.05)
    assert len(dead) == 5 and {d["class"] for d in dead} == {"MQMSG_CLASS_NACK_RECEIVE_TIMEOUT"}
    code, out, _ = run(capsys, gw, "dlq", "list")
    assert "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT" in out and "work" in out
    code, out, _ = run(capsys, gw, "dlq", "show", dead[0]["id"])
    assert code == 0 and "source_queue" in out and "2 bytes" in out
    assert run(capsys, gw, "dlq", "delete", dead[0]["id"])[0] == 0
    # A --to queue that does not exist is said, not the dead letter (which is there).
    code, _, err = run(capsys, gw, "dlq", "requeue", dead[1]["id"], "--to", "nosuch")
    assert code == 4 and "no queue 'nosuch'" in err and "no dead letter" not in err, err
    code, out, _ = run(capsys, gw, "dlq", "requeue", dead[1]["id"], "--to", "work")
    assert code == 0 and "to work" in out
    for flag, value in (("--class", "BOGUS"), ("--class", ""), ("--source-queue", "bad name"),
                        ("--source-queue", "")):
        code, _, err = run(capsys, gw, "dlq", "requeue", "--all", flag, value)
        assert code != 0 and repr(value) in err, (flag, value, err)
    # --queue names a dead-letter queue: a dlq command does not touch an ordinary queue.
    held = json.loads(run(capsys, gw, "queue", "show", "work", "--json")[1])["messages"]
    for command in (["list"], ["delete", ids_in_work[0]], ["show", ids_in_work[0]],
                    ["requeue", "--all"]):
        code, _, err = run(capsys, gw, "dlq", *command, "--queue", "work")
        assert code == 2 and "not a dead-letter queue" in err, (command, err)
    assert json.loads(run(capsys, gw, "queue", "show", "work", "--json")[1])["messages"] == held
    code, out, _ = run(capsys, gw, "dlq", "requeue", "--all", "--source-queue", "work",
                       "--to", "work")
    assert code == 0 and "requeued 3" in out
    assert json.loads(run(capsys, gw, "dlq", "list", "--json")[1]) == []
    shown = json.loads(run(capsys, gw, "queue", "show", "work", "--json")[1])
    assert shown["messages"] == 5 + 4
    assert run(capsys, gw, "dlq", "requeue")[0] == 2


def test_links_and_transactions(capsys: Any, gw: GatewayProcess) -> None:
    code, _, err = run(capsys, gw, "link", "pause", "nosuchlink")
    assert code == 4
    import urllib.request
    urllib.request.urlopen(urllib.request.Request(  # a link to a peer that is not there
        f"{gw.url}/v1/messages", data=b"far", method="POST",
        headers={"Authorization": f"Bearer {KEY}", "Mq-Transaction": "single",
                 "Mq-Destination": "DIRECT=HTTP://127.0.0.1:1/msmq/private$/far"})).read()
    [link] = json.loads(run(capsys, gw, "link", "list", "--json")[1])
    assert link["backlog"] == 1
    code, out, _ = run(capsys, gw, "link", "pause", link["id"])
    assert code == 0 and "paused" in out
    code, out, _ = run(capsys, gw, "link", "list")
    assert "paused" in out and "127.0.0.1:1" in out
    assert out.split()[:3] == ["ID", "KIND", "DESTINATION"] and " messages " in out
    code, out, _ = run(capsys, gw, "link", "resume", link["id"])
    assert code == 0 and "active" in out
    run(capsys, gw, "queue", "create", "txq", "--transactional")
    import urllib.request
    def post(path: str, headers: dict[str, str] | None = None, body: bytes = b"") -> Any:
        request = urllib.request.Request(f"{gw.url}{path}", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {KEY}",
                                                  **(headers or {})})
        return json.loads(urllib.request.urlopen(request).read())
    tx = post("/v1/transactions")["id"]
    post("/v1/queues/txq/messages", {"Mq-Transaction": tx}, b"m")
    # The CLI's send in a transaction is held (202), not stored: it says so.
    code, out, err = run(capsys, gw, "message", "send", "txq", "--body", "m2",
                         "--transaction", tx)
    assert (code, err) == (0, "") and f"held in transaction {tx}" in out
    post(f"/v1/transactions/{tx}/prepare")
    code, out, _ = run(capsys, gw, "tx", "list")
    assert tx in out and "prepared" in out
    header, row = out.splitlines()[:2]  # since when it waits for its coordinator
    assert header.split()[1] == "OWNER" and header.split()[-1] == "PREPARED" and re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row.split()[-1])
    code, out, _ = run(capsys, gw, "tx", "commit", tx)
    assert code == 0 and "committed" in out
    assert json.loads(run(capsys, gw, "queue", "show", "txq", "--json")[1])["messages"] == 2
    code, _, _ = run(capsys, gw, "tx", "abort", tx)
    assert code == 4, "a finished transaction is gone"


def test_dead_letters_of_transactional_messages_are_found_too(capsys: Any,
                                                              gw: GatewayProcess) -> None:
    """They die in system$;deadxact: dlq lists and finds them without --queue."""
    import urllib.request
    run(capsys, gw, "queue", "create", "txdead", "--transactional")
    for i in range(2):
        urllib.request.urlopen(urllib.request.Request(
            f"{gw.url}/v1/queues/txdead/messages", data=f"t{i}".encode(), method="POST",
            headers={"Authorization": f"Bearer {KEY}", "Mq-Transaction": "single",
                     "Mq-Time-To-Be-Received": "0.01", "Mq-Journal": "deadletter"})).read()
    deadline = time.monotonic() + 30  # an upper bound only
    dead: list[dict[str, Any]] = []
    while len(dead) < 2 and time.monotonic() < deadline:
        dead = json.loads(run(capsys, gw, "dlq", "list", "--json")[1])
        time.sleep(0.05)
    assert {d["queue"] for d in dead} == {"system$;deadxact"} and len(dead) == 2, dead
    code, out, _ = run(capsys, gw, "dlq", "list")
    assert code == 0 and "system$;deadxact" in out and "(no dead letters)" not in out
    code, out, _ = run(capsys, gw, "dlq", "show", dead[0]["id"])
    assert code == 0 and "2 bytes" in out
    assert run(capsys, gw, "dlq", "delete", dead[0]["id"])[0] == 0
    assert run(capsys, gw, "dlq", "delete", dead[0]["id"])[0] == 4, "gone from both"
    code, out, _ = run(capsys, gw, "dlq", "requeue", "--all", "--to", "txdead")
    assert code == 0 and "requeued 1" in out
    assert json.loads(run(capsys, gw, "dlq", "list", "--json")[1]) == []


def test_output_into_a_closed_pipe_ends_quietly(gw: GatewayProcess) -> None:
    """``entrepot queue list | head -0``: the reader is gone before the first line."""
    child = subprocess.Popen(
        [sys.executable, "-m", "gateway", "queue", "list", "--url", gw.url, "--token", KEY],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # long before the child, still starting, writes
    with child.stderr:
        err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141  # as a shell reports a process SIGPIPE stopped
    assert "Traceback" not in err and "BrokenPipe" not in err, err
