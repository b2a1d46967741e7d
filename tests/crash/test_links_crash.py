"""The mission's picture under faults: internal queue manager A sends transactional messages
to partner P through the store-and-forward gateway F; fault proxies drop, duplicate, delay and
reorder requests and responses on A->F, F->P and P's order acknowledgements back to F; each of
A, F and P is killed with SIGKILL at a random moment and restarted. Every message ends in P's
queue exactly once and in order, A's outgoing queue empties, and no dead letter appears. The
same with two gateways: A -> proxy -> P, P's receipts -> proxy -> A, both killed once."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fault.proxy import FaultProxy
from tests.helpers import GatewayProcess, free_port, http_get

MESSAGES = int(os.environ.get("ENTREPOT_LINKS_CRASH_MESSAGES", "2000"))
SLOW_MESSAGES = 100_000
WORKERS = 16
STALL_S = 300  # no new message in P's queue for this long: delivery has stopped
COMMON = """
[links]
resend = ["3s"]
retry_max = "300ms"
request_timeout = "5s"
[srmp]
reorder_wait = "1s"
"""


def _write(root: Path, outbound: str, name: str, config: str, mapping: dict[str, str]
           ) -> list[str]:
    (root / f"{name}-mapping").mkdir(parents=True)
    for file, text in mapping.items():
        (root / f"{name}-mapping" / file).write_text(text)
    path = root / f"{name}.toml"
    path.write_text(config.replace("MAPPING_DIR", str(root / f"{name}-mapping")) + outbound)
    return ["--config", str(path)]


def _configs(root: Path, ports: dict[str, int]) -> dict[str, list[str]]:
    # Receipts (stream receipts to the published order-ack address) go to the other gateways
    # and the fault proxies: each gateway allows all of them as outbound addresses.
    outbound = "\n[outbound]\nallow = [" + ", ".join(
        f'"http://127.0.0.1:{port}"' for port in ports.values()) + "]\n"
    a, p = ports["a"], ports["p"]
    p_args = _write(root, outbound, "p", COMMON + """
[[queues]]
path = "private$/orders"
transactional = true
""", {})
    if "f" not in ports:  # two gateways: A -> proxy -> P, P's receipts -> proxy -> A
        acks = (f'<redirections xmlns="msmq-queue-redirections.xml"><redirection>'
                f'<from>http://127.0.0.1:{ports["pa"]}/msmq/orderack</from>'
                f"<to>http://127.0.0.1:{a}/msmq/private$/order_queue$</to>"
                "</redirection></redirections>")
        return {"p": p_args, "a": _write(root, outbound, "a", COMMON + """
[mapping]
dir = "MAPPING_DIR"
""", {"acks.xml": acks, **_a_mapping(ports, "ap", "pa")})}
    f_args = _write(root, outbound, "f", COMMON.replace("[srmp]", "[srmp]\nforward = true") + """
[mapping]
dir = "MAPPING_DIR"
""", {
        "acks.xml": '<redirections xmlns="msmq-queue-redirections.xml"><redirection>'
                    f'<from>http://127.0.0.1:{ports["pf"]}/msmq/orderack</from>'
                    f"<to>http://127.0.0.1:{a}/msmq/private$/order_queue$</to>"
                    "</redirection></redirections>",
        "out.xml": '<outbound_redirections xmlns="msmq_outbound_mapping.xml"><redirection>'
                   f"<destination>http://127.0.0.1:{p}/*</destination>"
                   f'<through>http://127.0.0.1:{ports["fp"]}/msmq</through></redirection>'
                   "</outbound_redirections>"})
    a_args = _write(root, outbound, "a", COMMON + """
[mapping]
dir = "MAPPING_DIR"
""", _a_mapping(ports, "af", "pf"))
    return {"a": a_args, "f": f_args, "p": p_args}


def _a_mapping(ports: dict[str, int], out: str, receipts: str) -> dict[str, str]:
    """A sends P's messages through ``out`` and publishes ``receipts`` as the address of its
    order acknowledgements."""
    p = ports["p"]
    return {
        "out.xml": '<outbound_redirections xmlns="msmq_outbound_mapping.xml"><redirection>'
                   f"<destination>http://127.0.0.1:{p}/*</destination>"
                   f'<through>http://127.0.0.1:{ports[out]}/msmq</through></redirection>'
                   "</outbound_redirections>",
        "receipts.xml": '<StreamReceiptSetup xmlns="msmq-streamreceipt-mapping.xml"><setup>'
                        f"<LogicalAddress>http://127.0.0.1:{p}/*</LogicalAddress>"
                        f'<StreamReceiptURL>http://127.0.0.1:{ports[receipts]}/msmq/orderack'
                        "</StreamReceiptURL></setup></StreamReceiptSetup>"}


async def _sender(url: str, p_port: int, worker: int, acked: list[tuple[int, int]],
                  messages: int) -> None:
    destination = f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/orders"
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for number in range(worker, messages, WORKERS):
            while True:  # the same Idempotency-Key until A says 201: stored once at A
                status = 0  # no answer: A is down (killed) or the connection broke
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    async with session.post(url + "/v1/messages", data=b"%d:%d" % (
                            worker, number), headers={
                            "Mq-Destination": destination, "Mq-Transaction": "single",
                            "Idempotency-Key": f"m{number}"}) as response:
                        status = response.status
                if status == 201:
                    acked.append((worker, number))
                    break
                await asyncio.sleep(0.2)


def _count(url: str) -> int:
    status, _, raw = http_get(f"{url}/v1/queues/private$/orders/head")
    assert status == 200, raw
    return int(json.loads(raw)["messages"])


def _orders(url: str) -> list[tuple[int, int]]:
    found, after = [], 0
    while True:
        status, _, raw = http_get(f"{url}/v1/queues/private$/orders/messages?after={after}"
                                  "&limit=1000")
        assert status == 200
        page = json.loads(raw)
        for message in page["messages"]:
            worker, number = base64.b64decode(message["body_base64"]).decode().split(":")
            found.append((int(worker), int(number)))
        if not page["messages"]:
            return found
        after = page["next"]


@pytest.mark.crash
@pytest.mark.timeout(900)
async def test_a_to_p_through_f_with_faults_and_kills(tmp_path: Path) -> None:
    await links_under_faults(tmp_path, MESSAGES)


@pytest.mark.crash
@pytest.mark.timeout(600)
async def test_a_to_p_directly_with_faults_and_kills(tmp_path: Path) -> None:
    await links_under_faults(tmp_path, MESSAGES // 2, gateways=2)


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.timeout(14400)
async def test_a_to_p_through_f_with_faults_and_kills_long(tmp_path: Path) -> None:
    figures = await links_under_faults(tmp_path, SLOW_MESSAGES)
    print(json.dumps(figures))  # the run's counts, shown by pytest -rP


async def links_under_faults(tmp_path: Path, messages: int, gateways: int = 3
                             ) -> dict[str, Any]:
    """The whole scenario (also ``make torture``'s ``network-faults``) with three gateways
    (A -> F -> P) or two (A -> P); returns its figures and raises AssertionError on any
    violation."""
    hops = {"af": "f", "fp": "p", "pf": "f"} if gateways == 3 else {"ap": "p", "pa": "a"}
    names = ["a", "f", "p"] if gateways == 3 else ["a", "p"]
    ports = {name: free_port() for name in (*names, *hops)}
    args = _configs(tmp_path, ports)
    seed = int(os.environ.get("ENTREPOT_SEED", "11"))
    proxies = [FaultProxy(f"http://127.0.0.1:{ports[up]}", drop=0.05, drop_response=0.05,
                          duplicate=0.05, delay=0.1, seed=seed + i)
               for i, up in enumerate(hops.values())]
    for proxy, name in zip(proxies, hops):
        await proxy.start(ports[name])
    procs: dict[str, GatewayProcess] = {}

    def start(name: str) -> None:
        procs[name] = GatewayProcess(tmp_path / f"{name}-data", extra_args=args[name],
                                     port=ports[name])
        procs[name].wait_ready(60)

    loop = asyncio.get_running_loop()
    for name in reversed(names):
        await loop.run_in_executor(None, start, name)
    acked: list[tuple[int, int]] = []
    senders = [asyncio.create_task(_sender(procs["a"].url, ports["p"], w, acked, messages))
               for w in range(WORKERS)]
    rng = random.Random(seed)
    try:
        kills = min(int(os.environ.get("ENTREPOT_LINKS_CRASH_KILLS", "3")), len(names))
        for victim in rng.sample(names, kills):  # each one killed once
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            procs[victim].stop(signal.SIGKILL)
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            await loop.run_in_executor(None, start, victim)
        await asyncio.wait_for(asyncio.gather(*senders), 300 + messages / 20)
        # Delivery goes on after the senders stop, at the pace of the faults and resends: wait
        # while P's queue grows; a stall of STALL_S with nothing new ends the wait.
        count, progress_at = -1, loop.time()
        deadline = loop.time() + 600 + messages / 20
        while loop.time() < deadline and loop.time() - progress_at < STALL_S:
            now = await loop.run_in_executor(None, _count, procs["p"].url)
            if now >= messages:
                break
            if now > count:
                count, progress_at = now, loop.time()
            await asyncio.sleep(0.5)
        got = await loop.run_in_executor(None, _orders, procs["p"].url)
        assert len(got) == len(set(got)), "duplicates in P's queue"
        links = {name: http_get(procs[name].url + "/v1/links")[2].decode()
                 for name in names[:-1]}
        assert set(got) == set(acked) and len(acked) == messages, (
            len(got), len(acked), links, [p.counts for p in proxies])
        for worker in range(WORKERS):  # each sender's messages in the order it sent them
            numbers = [n for w, n in got if w == worker]
            assert numbers == sorted(numbers), f"worker {worker} out of order"
        status, _, raw = http_get(procs["a"].url + "/v1/links")
        deadline = loop.time() + 60
        while loop.time() < deadline and any(
                link["backlog"] for link in json.loads(raw)["links"]):
            await asyncio.sleep(0.5)
            status, _, raw = http_get(procs["a"].url + "/v1/links")
        assert all(link["backlog"] == 0 for link in json.loads(raw)["links"]), raw
        for name in names:
            for queue in ("system$;deadletter", "system$;deadxact"):
                _, _, listing = http_get(f"{procs[name].url}/v1/queues/{queue}/messages")
                assert json.loads(listing)["messages"] == [], (name, queue)
        assert sum(p.counts["dropped"] + p.counts["responses_dropped"] for p in proxies) > 0
        faults: dict[str, int] = {}
        for proxy in proxies:
            for key, value in proxy.counts.items():
                faults[key] = faults.get(key, 0) + value
        return {"scenario": "network-faults", "gateways": gateways, "messages": messages,
                "acknowledged": len(acked),
                "delivered": len(got), "lost": len(set(acked) - set(got)), "duplicated": 0,
                "out_of_order": 0, "kills": kills, "proxy": faults}
    finally:
        for task in senders:
            task.cancel()
        for proc in procs.values():
            proc.stop()
        for proxy in proxies:
            await proxy.stop()
