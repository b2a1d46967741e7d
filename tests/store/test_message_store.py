"""MessageStore behaviour on a real data directory (restart = close and open again)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from store import placing
from store.errors import BadRecord, MessageTooLarge, StoreClosed, StoreError, UnknownRecord
from store.framing import RECORD_HEADER_SIZE, RecordFlags, max_payload
from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec, StoredRecord
from store.segment import segment_name
from tests.store.conftest import SMALL, close_store, halt_threads, open_store

Factory = Callable[..., "asyncio.Future[MessageStore]"]


async def _restart(store: MessageStore, options: StoreOptions = SMALL) -> MessageStore:
    root = store.data_dir.root
    await close_store(store)
    return await open_store(root, options)


def _bodies(store: MessageStore, queue_id: int) -> list[bytes]:
    return [store.read(r) for r in store.records(queue_id)]


async def test_append_read_and_restart(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    first = await store.append(SendSpec(7, b"hello", priority=5, expires_ms=123))
    second = await store.append(SendSpec(7, b"world"))
    assert (first.seq, second.seq) == (1, 2)
    assert store.read(first) == b"hello"
    store = await _restart(store)
    assert _bodies(store, 7) == [b"hello", b"world"]
    recovered = next(store.records(7))
    assert (recovered.priority, recovered.expires_ms) == (5, 123)
    assert store.recovery.live_records == 2
    third = await store.append(SendSpec(7, b"!"))
    assert third.seq == 3, "sequence numbers continue after a restart"
    await close_store(store)


async def test_sequence_numbers_are_never_reused(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    records = [await store.append(SendSpec(1, b"x")) for _ in range(3)]
    await store.remove(records)
    store = await _restart(store)
    assert (await store.append(SendSpec(1, b"y"))).seq == 4
    await close_store(store)


async def test_remove_is_durable(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    records = [await store.append(SendSpec(1, bytes([i]) * 100)) for i in range(5)]
    await store.remove(records[1:3])
    assert store.count(1) == 3
    store = await _restart(store)
    assert _bodies(store, 1) == [bytes([i]) * 100 for i in (0, 3, 4)]
    await close_store(store)


async def test_removing_an_unknown_record_changes_nothing(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    record = await store.append(SendSpec(1, b"a"))
    await store.remove([record])
    with pytest.raises(UnknownRecord):
        await store.remove([record])
    other = await store.append(SendSpec(1, b"b"))
    with pytest.raises(UnknownRecord):
        await store.commit([SendSpec(1, b"c")], removes=[record, other])
    assert _bodies(store, 1) == [b"b"]
    await close_store(store)


async def test_a_record_named_twice_in_one_removal_is_refused_not_fatal(tmp_path: Path
                                                                        ) -> None:
    store = await open_store(tmp_path)
    record = await store.append(SendSpec(1, b"a"))
    with pytest.raises(UnknownRecord, match="named twice"):
        await store.remove([record, record])
    with pytest.raises(UnknownRecord, match="named twice"):
        await store.commit([SendSpec(1, b"c")], removes=[record, record])
    assert store.failed is None
    assert _bodies(store, 1) == [b"a"]
    await store.remove([record])  # the store goes on
    await store.append(SendSpec(1, b"b"))
    assert _bodies(store, 1) == [b"b"]
    await close_store(store)


async def test_commit_is_atomic_and_ordered(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    old = await store.append(SendSpec(1, b"to-receive"))
    sent = await store.commit([SendSpec(2, b"a"), SendSpec(3, b"b"), SendSpec(2, b"c")],
                              removes=[old])
    assert [r.tx_id for r in sent] == [sent[0].tx_id] * 3
    assert _bodies(store, 2) == [b"a", b"c"]
    assert store.count(1) == 0
    store = await _restart(store)
    assert _bodies(store, 2) == [b"a", b"c"]
    assert _bodies(store, 3) == [b"b"]
    assert store.count(1) == 0
    await close_store(store)


async def test_prepared_transaction_survives_restart_then_commits(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    held = await store.append(SendSpec(1, b"held"))
    prepared = await store.prepare([SendSpec(2, b"p1"), SendSpec(2, b"p2")], removes=[held])
    assert store.count(2) == 0, "prepared sends are invisible"
    store = await _restart(store)
    assert list(store.prepared) == [prepared.tx_id]
    assert store.count(2) == 0
    assert store.count(1) == 1
    await store.commit_prepared(prepared.tx_id)
    assert _bodies(store, 2) == [b"p1", b"p2"]
    assert store.count(1) == 0
    store = await _restart(store)
    assert _bodies(store, 2) == [b"p1", b"p2"]
    assert store.count(1) == 0
    assert store.prepared == {}
    await close_store(store)


async def test_prepared_transaction_abort_leaves_no_trace(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    prepared = await store.prepare([SendSpec(2, b"p1")])
    store = await _restart(store)
    await store.abort_prepared(prepared.tx_id)
    store = await _restart(store)
    assert store.count(2) == 0
    assert store.prepared == {}
    with pytest.raises(UnknownRecord):
        await store.commit_prepared(prepared.tx_id)
    await close_store(store)


async def test_too_large_message_is_refused_before_writing(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    limit = max_payload(SMALL.segment_size)
    with pytest.raises(MessageTooLarge):
        await store.append(SendSpec(1, bytes(limit + 1)))
    largest = await store.append(SendSpec(1, bytes(limit)))
    assert largest.payload_len == limit
    assert largest.offset + largest.size <= SMALL.segment_size
    assert store.count(1) == 1
    await close_store(store)


async def test_many_appends_at_once_each_answer_once_durable(tmp_path: Path) -> None:
    """``append_many`` of more sends than one writer batch takes (the writer splits them)
    returns once every one is durable: each its record, or its own refusal (a send too large
    fails no other), and every record is readable when it returns."""
    store = await open_store(tmp_path)
    limit = max_payload(SMALL.segment_size)
    sends = [SendSpec(1, bytes(limit + 1) if i % 50 == 7 else b"m%d" % i) for i in range(400)]
    results = await store.append_many(sends)
    assert [isinstance(r, MessageTooLarge) for r in results] == [
        i % 50 == 7 for i in range(400)]
    stored = [r for r in results if isinstance(r, StoredRecord)]
    assert [store.read(r) for r in stored] == [b"m%d" % i for i in range(400) if i % 50 != 7]
    assert store.count(1) == len(stored) == 392
    await close_store(store)


@pytest.mark.parametrize("field", [{"expires_ms": -1}, {"expires_ms": 1 << 64},
                                   {"priority": 8}, {"priority": -1}])
async def test_a_field_the_header_cannot_hold_is_refused_and_the_store_goes_on(
        tmp_path: Path, field: dict[str, int]) -> None:
    """Refused on every write path before anything is written: in the writer the header's
    packing fails, which stops the store (every later write refused until a restart)."""
    store = await open_store(tmp_path)
    bad = SendSpec(1, b"bad")._replace(**field)
    for write in (lambda: store.append(bad), lambda: store.append_many([bad]),
                  lambda: store.commit([bad]),
                  lambda: store.append(bad._replace(express=True))):
        with pytest.raises(BadRecord):
            result = await write()
            if isinstance(result, list) and result and isinstance(result[0], BaseException):
                raise result[0]  # append_many answers each send's own fate
    assert store.failed is None
    assert (await store.append(SendSpec(1, b"fine"))).seq >= 1
    await close_store(store)


async def test_free_space_is_reused_after_a_checkpoint(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    body = bytes(4000)
    records = [await store.append(SendSpec(1, body)) for _ in range(200)]
    segments_before = len(list((tmp_path / "storage").glob("p*.mq")))
    await store.remove(records)
    store = await _restart(store)  # a clean close checkpoints
    again = [await store.append(SendSpec(1, body)) for _ in range(200)]
    assert {r.segment for r in again} <= {r.segment for r in records}
    assert len(list((tmp_path / "storage").glob("p*.mq"))) == segments_before
    await close_store(store)


@pytest.mark.parametrize("native", [True, False], ids=["c-loop", "python-loop"])
async def test_concurrent_appends_fill_freed_holes_and_new_segments(
        tmp_path: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """One batch's appends of mixed sizes take the writer's fast path (the current free
    area bumped in place) and its slow one (another area, or a new segment) in turn; every
    record reads back, and again after a restart. Also with the Python placing loop alone,
    as an install without a C compiler runs."""
    if not native:
        monkeypatch.setattr(placing, "_place_run", None)
    store = await open_store(tmp_path)
    first = [await store.append(SendSpec(1, bytes([i % 251]) * 3000)) for i in range(150)]
    await store.remove(first[::2])  # holes of ~3 KiB between live records
    store = await _restart(store)  # the checkpoint makes the holes free areas
    bodies = [bytes([i % 253]) * (100 + (i * 797) % 6000) for i in range(300)]
    records = await asyncio.gather(*(store.append(SendSpec(2, body)) for body in bodies))
    reused = {(r.segment, r.offset) for r in records} & {(r.segment, r.offset)
                                                        for r in first[::2]}
    assert reused, "freed holes were filled"
    assert [store.read(r) for r in records] == bodies
    live = [*records, *first[1::2]]
    _assert_accounted(store, live)
    store = await _restart(store)
    assert _bodies(store, 2) == bodies
    assert _bodies(store, 1) == [bytes([i % 251]) * 3000 for i in range(1, 150, 2)]
    # The bitmaps written at that checkpoint must hold every record placed above: space
    # allocated now must not overlap any of them.
    more = await asyncio.gather(*(store.append(SendSpec(3, b"m" * (50 + i * 37)))
                                  for i in range(200)))
    _assert_accounted(store, [*live, *more])
    assert [store.read(r) for r in more] == [b"m" * (50 + i * 37) for i in range(200)]
    await close_store(store)


def _assert_accounted(store: MessageStore, live: list[StoredRecord]) -> None:
    """No two live records overlap, and each segment's live count and bytes are theirs."""
    places = sorted((r.segment, r.offset, r.offset + r.size) for r in live)
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in zip(places, places[1:])), "no overlap"
    for number, state in store._engine.segments.items():
        mine = [r for r in live if r.segment == number]
        assert (state.live_count, state.live_bytes) == (len(mine), sum(r.size for r in mine))


async def test_cleanup_deletes_or_archives_empty_segments(tmp_path: Path) -> None:
    for archive in (False, True):
        root = tmp_path / f"archive-{archive}"
        options = StoreOptions(segment_size=64 << 10, qmlog_size=1 << 20,
                               group_commit_bytes_max=32 << 10, checkpoint_interval_s=0.1,
                               cleanup_interval_s=0.1, archive_segments=archive)
        store = await open_store(root, options)
        records = [await store.append(SendSpec(1, bytes(8000))) for _ in range(40)]
        assert len(list((root / "storage").glob("p*.mq"))) >= 5
        await store.remove(records)
        # Left: one empty segment as a spare (the one made ahead, store.spare).
        for _ in range(600):  # an upper bound only
            if len(list((root / "storage").glob("p*.mq"))) == 1:
                break
            await asyncio.sleep(0.05)
        assert len(list((root / "storage").glob("p*.mq"))) == 1, "one spare is kept"
        assert len(list((root / "storage").glob("l*.mq"))) == 1
        assert await store.append(SendSpec(1, b"after cleanup"))  # the spare takes it
        archived = list((root / "storage" / "archive").glob("p*.mq")) if archive else []
        assert (len(archived) >= 4) == archive
        await close_store(store)


async def test_journal_messages_go_to_j_segments(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    journal = await store.append(SendSpec(1, b"journal copy", journal=True))
    plain = await store.append(SendSpec(2, b"plain"))
    storage = tmp_path / "storage"
    assert (storage / segment_name("j", journal.segment)).exists()
    assert (storage / segment_name("p", plain.segment)).exists()
    assert journal.segment != plain.segment
    store = await _restart(store)
    assert _bodies(store, 1) == [b"journal copy"]
    await close_store(store)


async def test_deleting_checkpoints_forces_a_full_rebuild(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    records = [await store.append(SendSpec(1, bytes([i]) * 50)) for i in range(30)]
    await store.remove(records[:10])
    store = await _restart(store)
    await store.remove(records[10:12])  # after the last checkpoint: only the QMLog knows
    await store.commit([SendSpec(2, b"t1"), SendSpec(2, b"t2")])
    root = store.data_dir.root
    # Crash-like stop: no final checkpoint.
    await halt_threads(store)
    store._lock.release()  # type: ignore[union-attr]
    for path in list((root / "storage").glob("MQTrans.lg*")) + list(
            (root / "storage").glob("l*.mq")):
        path.unlink()
    store = await open_store(root)
    assert store.recovery.checkpoint_epoch is None
    assert store.recovery.full_scans >= 1
    assert _bodies(store, 1) == [bytes([i]) * 50 for i in range(12, 30)]
    assert _bodies(store, 2) == [b"t1", b"t2"]
    await close_store(store)


async def test_damaged_record_is_quarantined_and_the_rest_recovers(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    records = [await store.append(SendSpec(1, bytes([i]) * 300)) for i in range(10)]
    victim = records[4]
    await close_store(store)
    segment = tmp_path / "storage" / f"p{victim.segment:07x}.mq"
    with open(segment, "r+b") as handle:
        handle.seek(victim.offset + RECORD_HEADER_SIZE + 10)
        byte = handle.read(1)
        handle.seek(victim.offset + RECORD_HEADER_SIZE + 10)
        handle.write(bytes([byte[0] ^ 0x40]))
    store = await open_store(tmp_path)
    assert _bodies(store, 1) == [bytes([i]) * 300 for i in range(10) if i != 4]
    assert [d.offset for d in store.recovery.damaged] == [victim.offset]
    assert len(list((tmp_path / "storage" / "quarantine").glob("*.bin"))) == 1
    await close_store(store)


async def test_bad_segment_header_quarantines_that_segment_only(tmp_path: Path) -> None:
    options = StoreOptions(segment_size=64 << 10, qmlog_size=1 << 20,
                           group_commit_bytes_max=32 << 10, checkpoint_interval_s=3600)
    store = await open_store(tmp_path, options)
    records = [await store.append(SendSpec(1, bytes(9000))) for _ in range(12)]
    segments = sorted({r.segment for r in records})
    assert len(segments) >= 2
    await close_store(store)
    first = tmp_path / "storage" / f"p{segments[0]:07x}.mq"
    with open(first, "r+b") as handle:
        handle.write(b"garbage!")
    store = await open_store(tmp_path, options)
    survivors = [r for r in records if r.segment != segments[0]]
    assert store.count(1) == len(survivors)
    assert (tmp_path / "storage" / "quarantine" / first.name).exists()
    assert any(d.reason == "bad segment magic" for d in store.recovery.damaged)
    # New segments never reuse the quarantined number. (A segment made ahead before the
    # restart, empty, may be taken: its number can be below the others'.)
    fresh = await store.append(SendSpec(1, bytes(60000)))
    assert fresh.segment != segments[0]
    assert store._engine.next_segment > max(segments)
    assert (tmp_path / "storage" / "quarantine" / first.name).exists()
    await close_store(store)


async def test_torn_checkpoint_copy_falls_back_to_the_other(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await store.append(SendSpec(1, b"kept"))
    store = await _restart(store)
    await close_store(store)
    from store.pingpong import decode_copy

    copies = sorted((tmp_path / "storage").glob("MQTrans.lg*"),
                    key=lambda p: decode_copy(p.read_bytes())[0])  # type: ignore[index]
    newest = copies[-1]
    newest.write_bytes(newest.read_bytes()[:10])
    store = await open_store(tmp_path)
    assert store.recovery.checkpoint_epoch is not None
    assert _bodies(store, 1) == [b"kept"]
    await close_store(store)


async def test_express_files_are_discarded_at_start(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await close_store(store)
    (tmp_path / "storage" / "r0000099.mq").write_bytes(b"express leftovers")
    store = await open_store(tmp_path)
    assert store.recovery.express_files_discarded == 1
    assert not (tmp_path / "storage" / "r0000099.mq").exists()
    await close_store(store)


async def test_closed_store_refuses_writes(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await close_store(store)
    with pytest.raises(StoreClosed):
        await store.append(SendSpec(1, b"late"))


async def test_many_concurrent_appends_share_syncs(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    records = await asyncio.gather(*(store.append(SendSpec(1, b"%d" % i)) for i in range(2000)))
    assert sorted(r.seq for r in records) == list(range(1, 2001))
    writer = store._writer
    assert writer is not None
    assert writer.batches < 2000 / 4, "concurrent commits are grouped into shared syncs"
    await close_store(store)


async def test_appends_mixed_with_transactions_in_one_batch_keep_order(tmp_path: Path) -> None:
    """Appends take the writer's fast path, transactions the general one; in a shared batch
    their records still get LSNs in submission order and all recover."""
    store = await open_store(tmp_path)
    old = [await store.append(SendSpec(9, b"old%d" % i)) for i in range(20)]
    calls: list[Any] = []
    for i in range(200):
        if i % 10 == 3:
            calls.append(store.commit([SendSpec(2, b"t%d" % i), SendSpec(3, b"u%d" % i)],
                                      removes=[old[i // 10]]))
        else:
            calls.append(store.append(SendSpec(1 + i % 2 * 3, b"a%d" % i, priority=i % 8,
                                               journal=i % 7 == 0)))
    done = await asyncio.gather(*calls)
    writer = store._writer
    assert writer is not None and writer.batches < 100
    lsns = [r.lsn for result in done for r in (result if isinstance(result, list) else [result])]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    store = await _restart(store)
    assert _bodies(store, 1) == [b"a%d" % i for i in range(200) if i % 2 == 0 and i % 10 != 3]
    assert _bodies(store, 4) == [b"a%d" % i for i in range(200) if i % 2 == 1 and i % 10 != 3]
    assert _bodies(store, 2) == [b"t%d" % i for i in range(3, 200, 10)]
    assert [r.priority for r in store.records(1)][:4] == [0, 2, 4, 6]
    assert store.count(9) == 0
    await close_store(store)


async def test_stream_state_is_kept_in_mqinseqs_ping_pong(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    assert store.stream_state is None
    await store.save_stream_state(b'{"streams": 1}')
    await store.save_stream_state(b'{"streams": 2}')
    assert (tmp_path / "storage" / "MQInSeqs.lg1").exists()
    assert (tmp_path / "storage" / "MQInSeqs.lg2").exists()
    store = await _restart(store)
    assert store.stream_state == b'{"streams": 2}'
    await close_store(store)
    from store.pingpong import decode_copy

    newest = max((tmp_path / "storage").glob("MQInSeqs.lg*"),
                 key=lambda p: decode_copy(p.read_bytes())[0])  # type: ignore[index]
    newest.write_bytes(b"torn")
    store = await open_store(tmp_path)
    assert store.stream_state == b'{"streams": 1}'
    await close_store(store)


async def test_commit_and_prepare_with_only_removals(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    records = [await store.append(SendSpec(1, b"%d" % i)) for i in range(3)]
    await store.commit([], removes=records[:1])
    prepared = await store.prepare([], removes=records[1:2], tx_id=store.reserve_tx_id())
    store = await _restart(store)
    assert store.count(1) == 2
    assert [r.seq for r in store.prepared_receives(prepared.tx_id)] == [2]
    await store.commit_prepared(prepared.tx_id)
    assert [store.read(r) for r in store.records(1)] == [b"2"]
    await close_store(store)


async def test_a_commit_of_many_records_spans_pwritev_calls_and_recovers(tmp_path: Path) -> None:
    """Records go to pwritev as header, payload and padding (three buffers each, empty ones
    left out): 600 records in one commit are more buffers than one call takes (IOV_MAX), with
    every padding length and empty payloads. Checked after a crash (the files as the commit
    left them, copied while the store is open) and after a clean restart."""
    store = await open_store(tmp_path / "data")
    bodies = [bytes([n % 251]) * (n % 200) for n in range(600)]
    made = await store.commit([SendSpec(3, body) for body in bodies])
    assert [store.read(r) for r in made] == bodies
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "data", crashed)  # what a SIGKILL now would leave
    store = await _restart(store)
    assert _bodies(store, 3) == bodies
    await close_store(store)
    recovered = await open_store(crashed)
    assert _bodies(recovered, 3) == bodies
    assert recovered.recovery.damaged == []
    await close_store(recovered)


async def test_keyed_records_are_found_and_announced_before_removal(store_factory: Any
                                                                     ) -> None:
    store = await store_factory()
    keyed = [await store.append(SendSpec(q, f"k{q}".encode(), flags=RecordFlags.KEYED))
             for q in (1, 2, 1)]
    plain = await store.append(SendSpec(1, b"plain"))
    assert [r.lsn for r in store.keyed_records(10)] == sorted(r.lsn for r in keyed)
    assert store.keyed_records(1) == [keyed[2]], "the newest of all queues"
    announced: list[list[StoredRecord]] = []

    async def hook(records: list[StoredRecord]) -> None:
        announced.append(records)
        if len(announced) == 2:
            raise StoreError("cannot keep what they stand for")

    store.removal_hooks.append(hook)
    await store.remove([plain])
    assert announced == [], "only KEYED records are announced"
    await store.remove([keyed[0]])
    assert announced == [[keyed[0]]]
    with pytest.raises(StoreError):
        await store.commit([SendSpec(3, b"x")], removes=[keyed[1], keyed[2]])
    assert announced[1] == [keyed[1], keyed[2]]
    assert store.count(2) == 1 and store.count(1) == 1 and store.count(3) == 0, (
        "a removal refused by the hook changes nothing")
    tx = await store.prepare([], removes=[keyed[1]])
    assert announced[2] == [keyed[1]]
    await store.commit_prepared(tx.tx_id)
    assert store.count(2) == 0


async def test_stream_records_are_found_since_a_mark_and_announced_before_removal(
        store_factory: Any) -> None:
    store = await store_factory()
    before = await store.append(SendSpec(1, b"s0", flags=RecordFlags.STREAM))
    floor = store.lsn_floor()
    assert floor > before.lsn
    after = [await store.append(SendSpec(q, b"s", flags=RecordFlags.STREAM)) for q in (2, 1)]
    await store.append(SendSpec(1, b"plain"))
    assert all(r.lsn >= floor for r in after)
    assert store.flagged_since(RecordFlags.STREAM, floor) == after
    assert store.flagged_since(RecordFlags.STREAM, 0) == [before, *after]
    seen: list[list[StoredRecord]] = []

    async def first(records: list[StoredRecord]) -> None:
        seen.append(records)

    async def second(records: list[StoredRecord]) -> None:
        seen.append([])

    store.removal_hooks.extend([first, second])
    await store.remove([before])
    assert seen == [[before], []], "every hook, in order"
    assert store.flagged_since(RecordFlags.STREAM, 0) == after


async def test_the_writer_wakes_for_every_submit_around_its_timeouts(tmp_path: Path) -> None:
    """The writer sleeps on a one-token lock with a timeout (its checkpoint interval); appends
    arriving just before, during and after its wakes never hang and never find the token
    released twice."""
    import random

    options = StoreOptions(segment_size=256 << 10, qmlog_size=1 << 20,
                           group_commit_bytes_max=64 << 10, checkpoint_interval_s=0.003,
                           cleanup_interval_s=3600.0)
    store = await open_store(tmp_path, options)
    rng = random.Random(5)
    for i in range(300):
        await asyncio.wait_for(store.append(SendSpec(1, b"%d" % i)), 60)  # a hang, not a pace
        if rng.random() < 0.5:
            await asyncio.sleep(rng.uniform(0, 0.008))
    assert store.count(1) == 300
    await close_store(store)


async def test_a_wake_left_over_from_a_timeout_is_drained_before_the_next_sleep(
        tmp_path: Path) -> None:
    """The writer times out of its sleep, a submit wakes it anyway (a token is left): the next
    sleep drains that token first, so it sleeps its full interval, and the next wake releases
    the token once (a second release of the lock would raise)."""
    import threading
    import time

    interval = 0.2
    options = StoreOptions(segment_size=256 << 10, qmlog_size=1 << 20,
                           group_commit_bytes_max=64 << 10, checkpoint_interval_s=interval,
                           cleanup_interval_s=3600.0)
    store = await open_store(tmp_path, options)
    writer = store._writer
    assert writer is not None
    await asyncio.get_running_loop().run_in_executor(None, writer.stop)
    writer._stopping = False  # drive _take by hand from here on
    with writer._lock:
        writer._waiting = True  # as the writer leaves it when its wait times out
        writer._wake_writer()  # a submit in that moment: the token is left behind
    started = time.monotonic()
    assert writer._take() is None
    assert time.monotonic() - started >= interval * 0.9, "slept, not woken by the old token"
    sleeper = threading.Thread(target=writer._take)
    sleeper.start()
    time.sleep(interval / 4)
    with writer._lock:
        assert writer._waiting
        writer._wake_writer()
    sleeper.join(interval / 2)
    assert not sleeper.is_alive(), "woken at once"
    writer._stopping = True
    await close_store(store)


async def test_appends_beyond_the_pending_limit_wait_for_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most the pending limit of jobs queue up for the writer; appends beyond it wait for
    room (nothing queued, nothing refused) and all complete, in order, once the writer,
    held in a write here, moves again."""
    import threading

    from store import writer as writer_module
    from store.fileops import RealFileOps

    class HeldWrites(RealFileOps):
        def __init__(self) -> None:
            self.go = threading.Event()

        def pwritev(self, fd: int, buffers: Any, offset: int) -> None:
            self.go.wait(10)
            super().pwritev(fd, buffers, offset)

    monkeypatch.setattr(writer_module, "_PENDING_JOBS_MAX", 4)
    ops = HeldWrites()
    store = await open_store(tmp_path, ops=ops)
    writer = store._writer
    assert writer is not None
    tasks = [asyncio.create_task(store.append(SendSpec(1, b"%d" % i))) for i in range(12)]
    await asyncio.sleep(0.2)
    # The writer took the first four (held in their write); the other eight wait for room,
    # which only a finished batch makes.
    assert len(writer._pending) == 0 and not writer._room.is_set()
    assert not any(task.done() for task in tasks)
    ops.go.set()
    records = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert [r.seq for r in records] == list(range(1, 13))
    assert _bodies(store, 1) == [b"%d" % i for i in range(12)]
    await close_store(store)
