"""Fuzzing a real gateway over HTTP: mutated SRMP requests (the spec's vectors and the
gateway's own printer's), REST sends with garbage in every ``Mq-*`` header, mutated JSON batch
bodies; and mutated mapping files through the mapping parser. Some SRMP requests are made
larger than the gateway parses on its loop, so the parse worker processes get them. Checks:
no 5xx other than 507 (a full disk); no 503 either, which is what a request gets when the
parse worker crashed on it, and no parse worker restarted (read from /metrics); the process
never dies, memory stays flat, nothing is stored by a refused request (the stored count moves
only by what the 2xx answers account for), and the store checks whole afterwards."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from mapping.errors import MappingError
from mapping.parse import parse_mapping
from tests.helpers import REPO_ROOT, GatewayProcess, http_get
from tests.srmp_client import user_message
from tests.srmp_vectors import derived, split_request, wire

QUEUE = "private$/t_fuzz"
_HEADERS = ["Mq-Label", "Mq-Priority", "Mq-Delivery", "Mq-Time-To-Reach-Queue",
            "Mq-Time-To-Be-Received", "Mq-Correlation-Id", "Mq-Response-Queue",
            "Mq-Admin-Queue", "Mq-Acknowledge", "Mq-Journal", "Mq-App-Specific",
            "Mq-Transaction", "Mq-Sent-Time", "Idempotency-Key", "Content-Type"]
_NASTY = ["", "-1", "8", "99999999999999999999", "1e400", "nan", "\u00b2", "none", "single",
          "x" * 2000, "\u202e", "0x10", " 3 ", "journal", "deadletter", "express",
          "2026-13-40T99:99:99Z", "MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE", "{}", "%00", "9" * 30]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        if not out:
            out += rng.randbytes(8)
        choice = rng.random()
        position = rng.randrange(len(out))
        if choice < 0.4:
            out[position] ^= 1 << rng.randrange(8)
        elif choice < 0.6:
            del out[position: position + rng.randint(1, 64)]
        elif choice < 0.8:
            out[position:position] = rng.choice([b"<", b">", b"--", b"\r\n", b"\x00",
                                                 b"&amp;", b"<!DOCTYPE x>", rng.randbytes(16)])
        else:
            chunk = bytes(out[position: position + rng.randint(1, 200)])
            out[position:position] = chunk * rng.randint(1, 20)
    return bytes(out)


def _srmp_seeds(url: str) -> list[tuple[dict[str, str], bytes]]:
    seeds = []
    for name in ("V01", "V02", "V04", "V05", "V06"):
        request = wire(name)
        seeds.append((request.headers, request.body))
    for name in ("D1", "D2", "D3"):
        request = split_request(derived(name))
        seeds.append((request.headers, request.body))
    mine = user_message(f"{url}/msmq/{QUEUE}", b"fuzz", ordinal=1)
    seeds.append((dict(mine.headers), mine.body))
    return [({k: v for k, v in h.items() if k not in ("Host", "Content-Length")}, b)
            for h, b in seeds]


async def _one(session: aiohttp.ClientSession, url: str, rng: random.Random,
               seeds: list[tuple[dict[str, str], bytes]], tally: dict[str, int],
               ids: set[str]) -> None:
    kind = rng.random()
    if kind < 0.5:
        headers, body = rng.choice(seeds)
        headers = dict(headers)
        if rng.random() < 0.3:
            key = rng.choice(list(headers))
            mutated = _mutate(headers[key].encode(), rng).decode("latin-1")
            # A client cannot send control characters in a header (aiohttp refuses them).
            headers[key] = "".join(c for c in mutated if " " <= c != "\x7f")
        body = _mutate(body, rng)
        if rng.random() < 0.1:  # over PARSE_INLINE_BYTES_MAX: parsed by a worker process
            position = rng.randrange(len(body) + 1)
            body = body[:position] + body[position:position + 64] * 1100 + body[position:]
        response = await session.post(f"{url}/msmq/{QUEUE}", data=body, headers=headers)
        tag = "srmp"
    elif kind < 0.8:
        headers = {name: rng.choice(_NASTY) for name in rng.sample(_HEADERS, rng.randint(1, 5))}
        response = await session.post(f"{url}/v1/queues/{QUEUE}/messages",
                                      data=rng.randbytes(rng.randint(0, 300)), headers=headers)
        tag = "rest"
    else:
        doc = {"messages": [{"queue": QUEUE, "body_base64": base64.b64encode(b"b").decode(),
                             "properties": {"label": "x"}} for _ in range(rng.randint(1, 3))]}
        raw = _mutate(json.dumps(doc).encode(), rng)
        response = await session.post(f"{url}/v1/batch", data=raw,
                                      headers={"Content-Type": "application/json"})
        tag = "batch"
    async with response:
        text = await response.read()
        status = response.status
    tally["cases"] += 1
    if status == 503:  # counted by answer, not raised: run() reports them with the restarts
        tally["unavailable"] += 1
        tally[f"503 {text[:300]!r}"] = tally.get(f"503 {text[:300]!r}", 0) + 1
    elif status >= 500 and status != 507:
        tally["server_errors"] += 1
        raise AssertionError(f"{tag} answered {status}: {text[:300]!r}")
    if 200 <= status < 300:
        tally[f"{tag}_2xx"] += 1
        if tag == "rest":
            ids.add(json.loads(text)["id"])
        elif tag == "batch":
            ids.update(json.loads(text)["ids"])


async def _drive(url: str, cases: int, seed: int, tally: dict[str, int], ids: set[str]
                 ) -> None:
    rng = random.Random(seed)
    seeds = _srmp_seeds(url)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for _ in range(cases):
            await _one(session, url, rng, seeds, tally, ids)


def _parse_workers_started(url: str) -> int:
    """Parse worker processes the gateway started, from its /metrics."""
    _, _, raw = http_get(f"{url}/metrics", timeout=30)
    for line in raw.decode().splitlines():
        if line.startswith("entrepot_srmp_parse_workers_started_total "):
            return int(float(line.split()[1]))
    raise AssertionError("/metrics has no entrepot_srmp_parse_workers_started_total")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _stored_ids(url: str) -> list[str]:
    out, after = [], 0
    while True:
        _, _, raw = http_get(f"{url}/v1/queues/{QUEUE}/messages?after={after}&limit=1000",
                             timeout=30)
        page = json.loads(raw)
        if not page["messages"]:
            return out
        out.extend(m["id"] for m in page["messages"])
        after = page["next"]


def fuzz_mapping(cases: int, seed: int) -> dict[str, int]:
    """Mutated mapping files through the parser: a MappingError or a result, nothing else.
    Returns how many were parsed and how many refused."""
    rng = random.Random(seed)
    examples = sorted((REPO_ROOT / "config" / "mapping.examples").glob("*.xml"))
    seeds = [p.read_bytes() for p in examples]
    outcomes = {"parsed": 0, "refused": 0}
    for _ in range(cases):
        data = _mutate(rng.choice(seeds), rng)
        try:
            parse_mapping(data, source="fuzz.xml")
        except MappingError:
            outcomes["refused"] += 1
        else:
            outcomes["parsed"] += 1
    return outcomes


def run(data_dir: Path, cases: int, seed: int = 11) -> dict[str, Any]:
    gateway = GatewayProcess(data_dir)
    gateway.wait_ready()
    tally: dict[str, int] = {"cases": 0, "server_errors": 0, "unavailable": 0, "srmp_2xx": 0,
                             "rest_2xx": 0, "batch_2xx": 0}
    ids: set[str] = set()  # what REST and batch 2xx answers said they stored
    try:
        urllib.request.urlopen(urllib.request.Request(f"{gateway.url}/v1/queues/{QUEUE}",
                                                      data=b"{}", method="PUT"), timeout=10)
        warmup = min(2000, cases // 10)
        asyncio.run(_drive(gateway.url, warmup, seed, tally, ids))
        rss_start = _rss_kib(gateway.proc.pid)
        asyncio.run(_drive(gateway.url, cases - warmup, seed + 1, tally, ids))
        rss_end = _rss_kib(gateway.proc.pid)
        assert gateway.proc.poll() is None, "the gateway died"
        workers_started = _parse_workers_started(gateway.url)
        stored = _stored_ids(gateway.url)
    finally:
        gateway.stop()
    check = subprocess.run([sys.executable, "-m", "gateway", "check", str(data_dir)],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-2000:]
    # One worker (srmp.parse_workers' default) started on first use, and never again: a
    # crashed worker is started anew, and the requests it held were answered 503.
    unavailable = {k: v for k, v in tally.items() if k.startswith("503 ")}
    assert tally["unavailable"] == 0, f"{tally['unavailable']} answers were 503: {unavailable}"
    assert workers_started <= 1, f"{workers_started - 1} SRMP parse workers were restarted"
    # Every stored message was answered 2xx: by id for REST and batches (some of those may
    # have expired since: time-to-be-received is fuzzed too), by count for SRMP.
    unaccounted = [i for i in stored if i not in ids]
    assert len(unaccounted) <= tally["srmp_2xx"], (
        f"{len(unaccounted)} stored messages no 2xx accounts for ({tally}): a refused "
        "request stored something")
    growth = rss_end - rss_start
    assert growth < 64 * 1024, f"RSS grew by {growth} KiB over {cases} cases"
    mapping = fuzz_mapping(max(1000, cases // 10), seed)
    return {"scenario": "fuzz", "cases": tally["cases"], "mapping": mapping,
            "server_errors": tally["server_errors"], "unavailable": tally["unavailable"],
            "parse_workers_started": workers_started, "stored": len(stored),
            "accepted": {k: v for k, v in tally.items() if k.endswith("_2xx")},
            "rss_kib_after_warmup": rss_start, "rss_kib_end": rss_end,
            "rss_growth_kib": growth}
