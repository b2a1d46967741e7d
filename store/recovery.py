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
GROUPED        whole group found            no          live (state byte set to LIVE)
GROUPED        whole group found            yes         dead (state byte set to DEAD)
GROUPED        part of the group missing    —           dead (state byte set to DEAD)
DEAD           —                            —           dead
=============  ===========================  ==========  ======================================

A grouped commit (``store.grouped``) wrote ``group`` records with its ``tx_id`` at consecutive
LSNs and no QMLog entry; it is whole when that many are found (in any state: some may be
removed, or settled to LIVE by a checkpoint that did not finish) spanning exactly that many
LSNs. Anything less is a write a crash cut (it was never acknowledged) — or a member damaged
before the next checkpoint, which is reported as damage like any other, and takes its group
with it.

"Removed" means a REMOVE entry, or a TX_COMMIT entry's list, names the record's exact place and
LSN (a reused place with another LSN is a different record).
"""

from __future__ import annotations

import operator
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
    found = found if isinstance(found, list) else list(found)
    whole = _whole_groups(found) if any(map(_GROUP, found)) else set()
    live = result.live
    if not removed:  # the common case, kept cheap: no Ref is built per record
        for item in found:
            if item.state == RecordState.LIVE:
                live.append(item)
            else:
                _resolve_one(item, removed, prepared, committed, whole, result)
        return result
    for item in found:
        _resolve_one(item, removed, prepared, committed, whole, result)
    return result


_GROUP = operator.attrgetter("group")
_GROUPED_STATE = RecordState.GROUPED.value


def _whole_groups(found: list[RecordHeader]) -> set[int]:
    """The tx ids of grouped commits found whole (see the module docstring). Only commits with
    a member still GROUPED are counted: settled ones are ordinary records, and a store written
    mostly by grouped commits would otherwise gather every record here."""
    unsettled = {item.tx_id for item in found if item.state == _GROUPED_STATE}
    members: dict[int, list[RecordHeader]] = {}
    for item in found:
        if item.group and item.tx_id in unsettled:
            members.setdefault(item.tx_id, []).append(item)
    whole = set()
    for tx_id, items in members.items():
        size = items[0].group
        lsns = [item.lsn for item in items]
        if (len(items) == size and all(item.group == size for item in items)
                and max(lsns) - min(lsns) == size - 1):
            whole.add(tx_id)
    return whole


def _resolve_one(item: RecordHeader, removed: set[Ref], prepared: dict[int, list[Ref]],
                 committed: set[int], whole: set[int], result: Resolution) -> None:
    state = item.state
    ref = item.ref
    if state == RecordState.DEAD:
        result.dead += 1
        return
    if state == RecordState.GROUPED:
        if item.tx_id not in whole:
            result.state_fixes.append((ref, RecordState.DEAD))
            result.dead += 1
            return
        if ref not in removed:
            result.state_fixes.append((ref, RecordState.LIVE))
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
