"""Crash loop, end to end: the real server killed with SIGKILL at random moments while REST
and SRMP clients send (single, batches, multi-queue transactions) and receive in
transactions; restarted every time. Afterwards, through the REST API:

- every acknowledged message is present exactly once (or was received by a committed
  transaction, or an SRMP one by a plain receive); sends whose answer was lost are resent
  with the same identity (Idempotency-Key, SRMP message id) and end exactly once too;
- the SRMP messages of each cycle, and the recent ones received, are sent again after the
  restart: none is stored twice and none that was received comes back (duplicate window);
- transactions are all or nothing, across queues;
- each client's transactions appear in its commit order in the transactional queues;
- nothing received by a committed transaction comes back;
- one exactly-once SRMP stream (client 0 sends ordinal n + 1 once n is answered, resends an
  unanswered one, and after each restart resends recent ones, received ones included) ends
  with every answered ordinal once, in order, present or received, and nothing received back.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.helpers import GatewayProcess
from tests.srmp_client import stream_message, user_message

PLAIN, TX, TX2, SRMP = "private$/t_plain", "private$/t_tx", "private$/t_tx2", "private$/t_srmp"
STREAM = "private$/t_stream"
_STREAM_MAX = 1  # messages a stream receive takes (1: an unanswered receive took 0 or 1)
_TIMEOUT = aiohttp.ClientTimeout(total=10)


@dataclass
class Ledger:
    """What the clients know: acknowledged, in doubt (no answer), consumed."""

    keyed_acked: set[str] = field(default_factory=set)  # PLAIN Idempotency-Keys
    keyed_doubt: set[str] = field(default_factory=set)
    srmp_acked: set[int] = field(default_factory=set)  # SRMP ordinals
    srmp_doubt: set[int] = field(default_factory=set)
    srmp_consumed: set[int] = field(default_factory=set)  # taken by a plain receive
    srmp_receive_doubt: int = 0  # receives with no answer: each may have taken one
    srmp_cycle: set[int] = field(default_factory=set)  # ordinals sent in this cycle
    tx_acked: dict[str, int] = field(default_factory=dict)  # tx id -> members
    tx_doubt: dict[str, int] = field(default_factory=dict)
    consumed: set[str] = field(default_factory=set)  # bodies received by committed txs
    consumed_doubt: set[str] = field(default_factory=set)
    commits: dict[int, list[str]] = field(default_factory=dict)  # client -> acked tx order
    counter: int = 0
    stream_next: int = 1  # the stream ordinal to send next
    stream_doubt: int = 0  # an ordinal sent without an answer (resent before the next)
    stream_consumed: set[int] = field(default_factory=set)
    stream_receive_doubt: int = 0  # receives with no answer: each may have taken _STREAM_MAX

    def next(self) -> int:
        self.counter += 1
        return self.counter


def _body(**fields: Any) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


async def _plain(session: aiohttp.ClientSession, url: str, ledger: Ledger, key: str) -> None:
    ledger.keyed_doubt.add(key)
    async with session.post(f"{url}/v1/queues/{PLAIN}/messages", data=_body(k=key),
                            headers={"Idempotency-Key": key}) as response:
        if response.status == 201:
            ledger.keyed_doubt.discard(key)
            ledger.keyed_acked.add(key)


async def _srmp(session: aiohttp.ClientSession, url: str, ledger: Ledger, ordinal: int) -> None:
    ledger.srmp_doubt.add(ordinal)
    ledger.srmp_cycle.add(ordinal)
    request = user_message(f"{url}/msmq/{SRMP}", _body(s=ordinal), ordinal=ordinal)
    headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
    async with session.post(f"{url}/msmq/{SRMP}", data=request.body,
                            headers=headers) as response:
        if response.status == 200:
            ledger.srmp_doubt.discard(ordinal)
            ledger.srmp_acked.add(ordinal)


async def _srmp_receive(session: aiohttp.ClientSession, url: str, ledger: Ledger) -> None:
    ledger.srmp_receive_doubt += 1
    async with session.post(f"{url}/v1/queues/{SRMP}/receive") as response:
        if response.status == 200:
            for message in (await response.json())["messages"]:
                body = json.loads(base64.b64decode(message["body_base64"]))
                ledger.srmp_consumed.add(body["s"])
        ledger.srmp_receive_doubt -= 1


async def _stream(session: aiohttp.ClientSession, url: str, ledger: Ledger,
                  ordinal: int) -> bool:
    """Send one stream message; True when answered (stored, or a duplicate of one stored)."""
    request = stream_message(f"{url}/msmq/{STREAM}", _body(o=ordinal), ordinal,
                             receipts_to=f"{url}/msmq/private$/order_queue$")
    headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
    async with session.post(f"{url}/msmq/{STREAM}", data=request.body,
                            headers=headers) as response:
        return response.status == 200


async def _stream_next(session: aiohttp.ClientSession, url: str, ledger: Ledger) -> None:
    ordinal = ledger.stream_doubt or ledger.stream_next
    ledger.stream_doubt = ordinal
    if await _stream(session, url, ledger, ordinal):
        ledger.stream_doubt = 0
        ledger.stream_next = ordinal + 1


async def _stream_receive(session: aiohttp.ClientSession, url: str, ledger: Ledger) -> None:
    ledger.stream_receive_doubt += 1
    async with session.post(f"{url}/v1/queues/{STREAM}/receive?max={_STREAM_MAX}"
                            ) as response:
        if response.status == 200:
            for message in (await response.json())["messages"]:
                ledger.stream_consumed.add(json.loads(base64.b64decode(
                    message["body_base64"]))["o"])
        ledger.stream_receive_doubt -= 1


async def _batch(session: aiohttp.ClientSession, url: str, ledger: Ledger, client: int) -> None:
    tx = f"b{ledger.next()}"
    size = 1 + ledger.counter % 4
    messages = [{"queue": TX, "body_base64": base64.b64encode(
        _body(t=tx, i=i, m=size, c=client)).decode()} for i in range(size)]
    ledger.tx_doubt[tx] = size
    async with session.post(f"{url}/v1/batch", json={"messages": messages}) as response:
        if response.status == 201:
            del ledger.tx_doubt[tx]
            ledger.tx_acked[tx] = size
            ledger.commits.setdefault(client, []).append(tx)


async def _multi(session: aiohttp.ClientSession, url: str, ledger: Ledger, client: int) -> None:
    """An explicit transaction over two queues, with a receive from the second."""
    async with session.post(f"{url}/v1/transactions") as response:
        if response.status != 201:
            return
        tx_id = (await response.json())["id"]
    tx = f"m{ledger.next()}"
    received: list[str] = []
    async with session.post(f"{url}/v1/queues/{TX2}/receive",
                            headers={"Mq-Transaction": tx_id}) as response:
        if response.status == 200:
            received = [base64.b64decode(m["body_base64"]).decode()
                        for m in (await response.json())["messages"]]
    for index, queue in enumerate((TX, TX2)):
        async with session.post(f"{url}/v1/queues/{queue}/messages",
                                data=_body(t=tx, i=index, m=2, c=client),
                                headers={"Mq-Transaction": tx_id}) as response:
            if response.status not in (201, 202):
                return
    ledger.tx_doubt[tx] = 2
    ledger.consumed_doubt.update(received)
    async with session.post(f"{url}/v1/transactions/{tx_id}/commit") as response:
        if response.status == 200:
            del ledger.tx_doubt[tx]
            ledger.tx_acked[tx] = 2
            ledger.commits.setdefault(client, []).append(tx)
            ledger.consumed_doubt.difference_update(received)
            ledger.consumed.update(received)


async def _client(url: str, ledger: Ledger, client: int, rng: random.Random,
                  stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
        while not stop.is_set():
            kind = rng.random()
            try:
                if client == 0 and kind < 0.5:
                    await _stream_next(session, url, ledger)
                elif client in (1, 2) and kind < 0.7:
                    await _stream_receive(session, url, ledger)
                elif kind < 0.3:
                    await _plain(session, url, ledger, f"p{ledger.next()}")
                elif kind < 0.42:
                    await _srmp(session, url, ledger, ledger.next())
                elif kind < 0.5:
                    await _srmp_receive(session, url, ledger)
                elif kind < 0.8:
                    await _batch(session, url, ledger, client)
                else:
                    await _multi(session, url, ledger, client)
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
                return  # the gateway died: what is unanswered stays in doubt


async def _retry_doubts(url: str, ledger: Ledger) -> None:
    """Resend every keyed send whose answer was lost (what a real sender does)."""
    async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
        for key in sorted(ledger.keyed_doubt):
            await _plain(session, url, ledger, key)
        # Received ones too, while surely inside the window (each ordinal makes at most one
        # key; the window keeps 10,000).
        recent = {s for s in ledger.srmp_consumed if s > ledger.counter - 5000}
        for ordinal in sorted(ledger.srmp_doubt | ledger.srmp_cycle | recent):
            await _srmp(session, url, ledger, ordinal)
        if ledger.stream_doubt:
            await _stream_next(session, url, ledger)
            assert not ledger.stream_doubt, "a resent stream message is answered"
        for ordinal in range(max(1, ledger.stream_next - 30), ledger.stream_next):
            assert await _stream(session, url, ledger, ordinal), "a duplicate is answered"
    ledger.srmp_cycle = set()


async def _setup(url: str) -> None:
    async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
        for queue, tx in ((PLAIN, False), (TX, True), (TX2, True), (SRMP, False),
                          (STREAM, True)):
            async with session.put(f"{url}/v1/queues/{queue}",
                                   json={"transactional": tx}) as response:
                assert response.status in (200, 201), await response.text()


async def _contents(url: str, queue: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = 0
    async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
        while True:
            async with session.get(f"{url}/v1/queues/{queue}/messages",
                                   params={"after": after, "limit": 1000}) as response:
                page = await response.json()
            if not page["messages"]:
                return out
            out.extend(json.loads(base64.b64decode(m["body_base64"]))
                       for m in page["messages"])
            after = page["next"]


def check(ledger: Ledger, queues: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The invariants; returns the counts for the report (raises AssertionError)."""
    plain = Counter(m["k"] for m in queues[PLAIN])
    srmp = Counter(m["s"] for m in queues[SRMP])
    duplicated = sum(n - 1 for n in plain.values() if n > 1) + sum(
        n - 1 for n in srmp.values() if n > 1)
    # A receive nobody saw answered may have taken a message: so many may be missing.
    srmp_missing = len(ledger.srmp_acked - set(srmp) - ledger.srmp_consumed)
    lost = len(ledger.keyed_acked - set(plain)) + max(
        0, srmp_missing - ledger.srmp_receive_doubt)
    present = [json.dumps(m, sort_keys=True, separators=(",", ":"))
               for m in queues[TX] + queues[TX2]]
    copies = Counter(present)
    duplicated += sum(n - 1 for n in copies.values() if n > 1)
    present_set = set(present)
    came_back = len(ledger.consumed & present_set) + len(ledger.srmp_consumed & set(srmp))
    # Members that existed for sure: present now, received by a committed transaction, or
    # received by one whose commit is in doubt (gone or back, either is right).
    found: dict[str, set[int]] = {}
    for text in present_set | ledger.consumed | ledger.consumed_doubt:
        member = json.loads(text)
        found.setdefault(member["t"], set()).add(member["i"])
    torn = 0
    for tx, size in ledger.tx_acked.items():
        lost += size - len(found.get(tx, ()))
    for tx, size in ledger.tx_doubt.items():
        if len(found.get(tx, ())) not in (0, size):
            torn += 1
    out_of_order = 0
    for queue in (TX, TX2):
        last: dict[int, int] = {}
        order = {tx: n for commits in ledger.commits.values() for n, tx in enumerate(commits)}
        for message in queues[queue]:
            if message["t"] not in order:
                continue
            position = order[message["t"]]
            if position < last.get(message["c"], -1):
                out_of_order += 1
            last[message["c"]] = position
    dup_kinds = {"plain": sum(n - 1 for n in plain.values() if n > 1),
                 "srmp": sum(n - 1 for n in srmp.values() if n > 1),
                 "tx": sum(n - 1 for n in copies.values() if n > 1)}
    report = {"duplicated_by_kind": dup_kinds,
              "acknowledged": len(ledger.keyed_acked) + len(ledger.srmp_acked)
              + sum(ledger.tx_acked.values()), "lost": lost, "duplicated": duplicated,
              "out_of_order": out_of_order, "torn_transactions": torn,
              "consumed_came_back": came_back, "srmp_received": len(ledger.srmp_consumed),
              "srmp_receives_unanswered": ledger.srmp_receive_doubt}
    stream = [m["o"] for m in queues[STREAM]]
    answered = set(range(1, ledger.stream_next))
    stream_missing = len(answered - set(stream) - ledger.stream_consumed)
    report["stream"] = {"answered": len(answered), "received": len(ledger.stream_consumed),
                        "present": len(stream), "duplicated": len(stream) - len(set(stream)),
                        "out_of_order": sum(1 for a, b in zip(stream, stream[1:]) if b < a),
                        "came_back": len(ledger.stream_consumed & set(stream)),
                        "receives_unanswered": ledger.stream_receive_doubt,
                        "lost": max(0, stream_missing
                                    - _STREAM_MAX * ledger.stream_receive_doubt)}
    assert (lost, duplicated, out_of_order, torn, came_back) == (0, 0, 0, 0, 0), report
    assert {k: v for k, v in report["stream"].items() if k not in (
        "answered", "received", "present", "receives_unanswered")} == dict.fromkeys(
        ("duplicated", "out_of_order", "came_back", "lost"), 0), report
    return report


def run(data_dir: Path, cycles: int, seed: int = 20261122, clients: int = 6
        ) -> dict[str, Any]:
    """The whole loop; returns the report (raises AssertionError on any violation)."""
    rng = random.Random(seed)
    ledger = Ledger()
    # A stream message out of order (which a lost position would make every later one) is
    # answered after reorder_wait: short, so a broken run fails in seconds, not hours.
    config = data_dir.parent / "crash-loop.toml"
    config.write_text('[srmp]\nreorder_wait = "50ms"\n')
    args = ["--config", str(config)]
    gateway = GatewayProcess(data_dir, extra_args=args)
    gateway.wait_ready()
    asyncio.run(_setup(gateway.url))
    port = gateway.port
    for _ in range(cycles):
        async def load(url: str) -> None:
            stop = asyncio.Event()
            tasks = [asyncio.create_task(_client(url, ledger, c, random.Random(rng.random()),
                                                 stop)) for c in range(clients)]
            await asyncio.sleep(rng.uniform(0.2, 1.0))
            gateway.proc.send_signal(signal.SIGKILL)
            await asyncio.gather(*tasks)

        asyncio.run(load(gateway.url))
        gateway.stop()
        gateway = GatewayProcess(data_dir, port=port, extra_args=args)
        gateway.wait_ready()
        asyncio.run(_retry_doubts(gateway.url, ledger))
    try:
        queues = {q: asyncio.run(_contents(gateway.url, q))
                  for q in (PLAIN, TX, TX2, SRMP, STREAM)}
        assert not ledger.keyed_doubt and not ledger.srmp_doubt, "resends all answered"
        report = check(ledger, queues)
    finally:
        gateway.stop()
    return {"scenario": "crash-loop", "cycles": cycles, **report}
