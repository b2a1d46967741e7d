"""Checks a store against the acknowledgements a crashed writer printed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from store.message_store import MessageStore
from tests.crash.store_child import OPTIONS, payload


@dataclass
class Ledger:
    """What was acknowledged, over every cycle so far."""

    appended: dict[tuple[int, int], str] = field(default_factory=dict)
    transactions: dict[str, tuple[int, list[tuple[int, int]]]] = field(default_factory=dict)
    removed: set[tuple[int, int]] = field(default_factory=set)
    maybe_removed: set[tuple[int, int]] = field(default_factory=set)
    seen_whole: set[str] = field(default_factory=set)  # transactions checked whole once

    def read(self, lines: list[str]) -> None:
        for line in lines:
            parts = line.split()
            if not parts or parts[0] == "READY":
                continue
            if parts[0] == "A":
                self.appended[(int(parts[1]), int(parts[2]))] = parts[3]
            elif parts[0] == "T" and len(parts) == 5:
                keys = [tuple(map(int, k.split(":"))) for k in parts[3].split(",")]
                self.transactions[parts[1]] = (int(parts[2]), keys)  # type: ignore[misc]
                if parts[4] != "-":
                    self.removed.update(tuple(map(int, k.split(":")))  # type: ignore[misc]
                                        for k in parts[4].split(","))
            elif parts[0] == "X" and len(parts) == 2:
                self.maybe_removed.update(tuple(map(int, k.split(":")))  # type: ignore[misc]
                                          for k in parts[1].split(","))
            elif parts[0] == "R" and len(parts) == 2:
                self.removed.update(tuple(map(int, k.split(":")))  # type: ignore[misc]
                                    for k in parts[1].split(","))
            # A torn last line (the kill cut the print) acknowledged nothing.


def check(root: Path, ledger: Ledger) -> int:
    """Assert the invariants; return the number of live records checked."""
    store = MessageStore.open(root, OPTIONS)
    try:
        found: dict[tuple[int, int], bytes] = {}
        for queue in store.queue_ids():
            for record in store.records(queue):
                found[(record.queue_id, record.seq)] = store.read(record)
        # Two live records with one (queue, sequence) would hide each other in the index.
        assert len(found) == store.recovery.live_records, (
            f"{store.recovery.live_records} live records recovered, {len(found)} in the index")
        tokens: Counter[str] = Counter()
        tx_parts: dict[str, set[int]] = {}
        for key, body in found.items():
            token, position, _ = body.split(b"|", 2)
            index, count = map(int, position.split(b"/"))
            assert body == payload(token.decode(), index, count), f"{key}: body damaged"
            tokens[f"{token.decode()}#{index}"] += 1
            if count > 1:
                tx_parts.setdefault(token.decode(), set()).add(index)
        assert max(tokens.values(), default=1) == 1, "a record is present twice"
        gone_ok = ledger.removed | ledger.maybe_removed
        for key, token in ledger.appended.items():
            if key not in gone_ok:
                assert key in found, f"acknowledged append {key} {token} lost"
                # A sequence number handed out twice would hide one record behind another.
                assert found[key].startswith(token.encode() + b"|"), (
                    f"acknowledged append {key} {token} replaced by {found[key][:40]!r}")
        for token, (count, keys) in ledger.transactions.items():
            for key in keys:
                if key not in gone_ok:
                    assert key in found, f"acknowledged transaction {token} lost {key}"
                    assert found[key].startswith(token.encode() + b"|"), (
                        f"acknowledged transaction {token} {key} replaced by "
                        f"{found[key][:40]!r}")
        for key in ledger.removed:
            assert key not in found, f"acknowledged removal {key} came back"
        # A transaction never acknowledged shows whole or not at all when it is first seen (an
        # acknowledged one is checked key by key above). Later runs of the writer may receive
        # some of its messages, so it is checked once.
        for token, parts in tx_parts.items():
            if token in ledger.seen_whole or token in ledger.transactions:
                continue
            count = int(next(b for k, b in found.items()
                             if b.startswith(token.encode() + b"|")).split(b"|")[1].split(b"/")[1])
            assert len(parts) == count, f"transaction {token} partly visible: {sorted(parts)}"
            ledger.seen_whole.add(token)
        assert not store.recovery.damaged, f"damage after a crash: {store.recovery.damaged}"
        # Settle what might have been removed: gone now means removed; found means it stays.
        ledger.removed |= {k for k in ledger.maybe_removed if k not in found}
        ledger.maybe_removed = set()
        return len(found)
    finally:
        store.close()
