"""Crash-test writer: commits records as fast as it can and reports every acknowledgement.

    python -m tests.crash.store_child DATA_DIR SEED

Each line on stdout is written (and flushed) only after the store acknowledged the operation:

    A <queue> <seq> <token>                      a single append
    T <token> <n> <queue>:<seq>,… <queue>:<seq>|-   a transaction of n sends (and what it
                                                  received, or -)
    X <queue>:<seq>,…                            removals about to be asked for (they may or
                                                  may not happen if the writer is killed now)
    R <queue>:<seq>,…                            removals (a receive outside a transaction)

A payload is ``<token>|<i>/<n>|`` followed by filler derived from the token, so the checker can
recognise every record it finds, including those of transactions it never heard about.
"""

from __future__ import annotations

import asyncio
import random
import sys
import zlib
from pathlib import Path

from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec, StoredRecord

# Past this many live records the writers only remove, so a store killed a thousand times stays
# the same size: every cycle's restart and check cost the same, and segments are emptied and
# reused under the kills.
LIVE_MAX = 4000

OPTIONS = StoreOptions(segment_size=256 << 10, qmlog_size=1 << 20,
                       group_commit_bytes_max=64 << 10, checkpoint_interval_s=0.05,
                       cleanup_interval_s=0.2)


def payload(token: str, index: int, count: int) -> bytes:
    head = f"{token}|{index}/{count}|".encode()
    return head + (token.encode() * 40)[: zlib.crc32(token.encode()) % 900]


async def worker(store: MessageStore, rng: random.Random, name: str,
                 live: list[StoredRecord]) -> None:
    counter = 0
    while True:
        counter += 1
        token = f"{name}-{counter}-{rng.randrange(1 << 30)}"
        roll = rng.random() if len(live) < LIVE_MAX else 1.0
        if roll < 0.55:
            queue = rng.randrange(1, 4)
            record = await store.append(SendSpec(queue, payload(token, 0, 1)))
            live.append(record)
            print(f"A {queue} {record.seq} {token}", flush=True)
        elif roll < 0.85:
            count = rng.randrange(2, 6)
            sends = [SendSpec(rng.randrange(1, 4), payload(token, i, count)) for i in range(count)]
            take = [live.pop(rng.randrange(len(live)))] if live and rng.random() < 0.5 else []
            if take:
                print(f"X {take[0].queue_id}:{take[0].seq}", flush=True)
            records = await store.commit(sends, removes=take)
            keys = ",".join(f"{r.queue_id}:{r.seq}" for r in records)
            taken = ",".join(f"{r.queue_id}:{r.seq}" for r in take) or "-"
            print(f"T {token} {count} {keys} {taken}", flush=True)
            live.extend(records)
        elif len(live) > 3:
            batch = [live.pop(rng.randrange(len(live))) for _ in range(rng.randrange(1, 4))]
            keys = ",".join(f"{r.queue_id}:{r.seq}" for r in batch)
            print(f"X {keys}", flush=True)
            await store.remove(batch)
            print(f"R {keys}", flush=True)


async def main(root: Path, seed: int) -> None:
    loop = asyncio.get_running_loop()
    store = await loop.run_in_executor(None, MessageStore.open, root, OPTIONS)
    store.start(loop)
    rng = random.Random(seed)
    live = [r for q in store.queue_ids() for r in store.records(q)]
    print("READY", flush=True)
    await asyncio.gather(*(worker(store, random.Random(rng.random()), f"w{seed}.{i}", live)
                           for i in range(16)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
