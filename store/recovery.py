"""What recovery decides about the records it found (pure: no I/O).

Input: every valid record found on disk (from checkpointed live runs, from the chains written
since the checkpoint, or from a full scan), the QMLog entries since the checkpoint in LSN order,
and the transactions the checkpoint says are prepared.

Decision table for each record:

=============  ===========================  ==========  ======================================
state byte     its transaction              removed?    outcome
=============  ===========================  ==========  ======================================
LIVE           —                            no          live
LIVE           —                            yes         dead (state byte set to DEAD)
PENDING        committed                    no          live (state byte set to LIVE)
PENDING        committed                    yes         dead (state byte set to DEAD)
PENDING        prepared, not resolved       —           kept pending; the transaction is
                                                        restored as prepared
PENDING        aborted or never finished    —           dead (state byte set to DEAD)
DEAD           —                            —           dead
=============  ===========================  ==========  ======================================

"Removed" means a REMOVE entry, or a TX_COMMIT entry's list, names the record's exact place and
LSN (a reused place with another LSN is a different record).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from store.framing import RecordHeader, RecordState
from store.logcodec import EntryKind, LogEntry, Ref

__all__ = ["Resolution", "resolve"]


@dataclass(slots=True)
class Resolution:
    live: list[RecordHeader] = field(default_factory=list)
    prepared_records: dict[int, list[RecordHeader]] = field(default_factory=dict)
    prepared_removes: dict[int, list[Ref]] = field(default_factory=dict)
    state_fixes: list[tuple[Ref, RecordState]] = field(default_factory=list)
    dead: int = 0


def resolve(found: Iterable[RecordHeader], entries: Iterable[LogEntry],
            prepared_at_checkpoint: dict[int, list[Ref]]) -> Resolution:
    """Apply the decision table; see the module docstring."""
    removed: set[Ref] = set()
    committed: set[int] = set()
    prepared = {tx: list(refs) for tx, refs in prepared_at_checkpoint.items()}
    for entry in sorted(entries, key=lambda e: e.lsn):
        if entry.kind == EntryKind.REMOVE:
            removed.update(entry.refs)
        elif entry.kind == EntryKind.TX_PREPARE:
            prepared[entry.tx_id] = list(entry.refs)
        elif entry.kind == EntryKind.TX_COMMIT:
            committed.add(entry.tx_id)
            removed.update(entry.refs)
            prepared.pop(entry.tx_id, None)
        elif entry.kind == EntryKind.TX_ABORT:
            prepared.pop(entry.tx_id, None)
    result = Resolution(prepared_removes=prepared)
    live = result.live
    if not removed:  # the common case, kept cheap: no Ref is built per record
        for item in found:
            if item.state == RecordState.LIVE:
                live.append(item)
            else:
                _resolve_one(item, removed, prepared, committed, result)
        return result
    for item in found:
        _resolve_one(item, removed, prepared, committed, result)
    return result


def _resolve_one(item: RecordHeader, removed: set[Ref], prepared: dict[int, list[Ref]],
                 committed: set[int], result: Resolution) -> None:
    state = item.state
    ref = item.ref
    if state == RecordState.DEAD:
        result.dead += 1
        return
    if state == RecordState.PENDING:
        tx_id = item.tx_id
        if tx_id in prepared and tx_id not in committed:
            result.prepared_records.setdefault(tx_id, []).append(item)
            return
        if tx_id not in committed:
            result.state_fixes.append((ref, RecordState.DEAD))
            result.dead += 1
            return
        if ref not in removed:
            result.state_fixes.append((ref, RecordState.LIVE))
    if ref in removed:
        result.state_fixes.append((ref, RecordState.DEAD))
        result.dead += 1
        return
    result.live.append(item)
