from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from store.fileops import RealFileOps
from store.logcodec import (
    LOG_HEADER_SIZE,
    EntryKind,
    Ref,
    decode_entry,
    encode_entry,
    replay,
    scan_all,
)
from store.pingpong import PingPong, decode_copy, encode_copy


@given(st.integers(0, 2**63), st.binary(max_size=300))
def test_copy_round_trip(sequence: int, payload: bytes) -> None:
    assert decode_copy(encode_copy(sequence, payload)) == (sequence, payload)


@given(st.binary(max_size=100), st.data())
def test_any_torn_or_flipped_copy_is_refused(payload: bytes, data: st.DataObject) -> None:
    copy = encode_copy(5, payload)
    cut = data.draw(st.integers(0, len(copy) - 1))
    assert decode_copy(copy[:cut]) is None
    bit = data.draw(st.integers(0, len(copy) * 8 - 1))
    flipped = bytearray(copy)
    flipped[bit // 8] ^= 1 << (bit % 8)
    assert decode_copy(bytes(flipped)) is None


def test_newest_valid_copy_wins_and_the_next_write_replaces_the_other(tmp_path: Path) -> None:
    ops = RealFileOps()
    pair, payload, bad = PingPong.load(ops, tmp_path, "MQTrans")
    assert payload is None and bad == 0
    pair.write(b"one")
    pair.write(b"two")
    pair.write(b"three")  # lg1: three (seq 3), lg2: two (seq 2)
    _, payload, _ = PingPong.load(ops, tmp_path, "MQTrans")
    assert payload == b"three"
    newest = tmp_path / "MQTrans.lg1"
    newest.write_bytes(newest.read_bytes()[:-1])  # torn while being written
    pair, payload, bad = PingPong.load(ops, tmp_path, "MQTrans")
    assert (payload, bad) == (b"two", 1)
    pair.write(b"four")  # goes over the torn copy, never over the good one
    assert decode_copy((tmp_path / "MQTrans.lg1").read_bytes()) == (3, b"four")
    assert decode_copy((tmp_path / "MQTrans.lg2").read_bytes()) == (2, b"two")


def _log(*entries: bytes, size: int = 4096) -> bytearray:
    buf = bytearray(size)
    offset = LOG_HEADER_SIZE
    for entry in entries:
        buf[offset: offset + len(entry)] = entry
        offset += len(entry)
    return buf


def test_entry_round_trip() -> None:
    refs = (Ref(1, 64, 7), Ref(2, 128, 9))
    for kind, tx in ((EntryKind.REMOVE, 0), (EntryKind.TX_COMMIT, 5), (EntryKind.TX_PREPARE, 6),
                     (EntryKind.TX_ABORT, 7)):
        data = encode_entry(kind, 42, tx_id=tx, refs=refs if kind != EntryKind.TX_ABORT else ())
        entry = decode_entry(data, 0, len(data))
        assert entry is not None
        assert (entry.kind, entry.lsn, entry.tx_id) == (kind, 42, tx)
        assert entry.refs == (refs if kind != EntryKind.TX_ABORT else ())


def test_replay_follows_wraps_and_stops_at_older_entries() -> None:
    first = encode_entry(EntryKind.REMOVE, 10, refs=(Ref(1, 64, 3),))
    second = encode_entry(EntryKind.TX_COMMIT, 11, tx_id=2)
    buf = _log(first, second)
    entries, end = replay(buf, LOG_HEADER_SIZE, after_lsn=9)
    assert [e.lsn for e in entries] == [10, 11]
    assert end == LOG_HEADER_SIZE + len(first) + len(second)
    entries, _ = replay(buf, LOG_HEADER_SIZE, after_lsn=10)
    assert entries == [], "an entry at or below the checkpoint ends the log"
    # A lap: a WRAP at the end sends replay back to the start, where newer entries continue.
    wrap_at = 3000
    buf[wrap_at: wrap_at + 24] = encode_entry(EntryKind.WRAP, 20)
    newer = encode_entry(EntryKind.REMOVE, 21, refs=(Ref(3, 64, 4),))
    buf[LOG_HEADER_SIZE: LOG_HEADER_SIZE + len(newer)] = newer
    entries, _ = replay(buf, wrap_at, after_lsn=19)
    assert [e.lsn for e in entries] == [21]
    assert [e.lsn for e in scan_all(buf)] == [11, 21]


@given(st.binary(max_size=600))
def test_any_bytes_replay_to_values(data: bytes) -> None:
    buf = bytes(LOG_HEADER_SIZE) + data
    replay(buf, LOG_HEADER_SIZE, after_lsn=0)
    scan_all(buf)


def test_a_pair_allocated_ahead_keeps_its_copies_and_an_unwritten_copy_is_not_damage(
        tmp_path: Path) -> None:
    ops = RealFileOps()
    pair, _, _ = PingPong.load(ops, tmp_path, "MQInSeqs")
    pair.reserve_space(None)
    sizes = {(tmp_path / f"MQInSeqs.lg{i}").stat().st_size for i in (1, 2)}
    pair.write(b"one")
    _, payload, bad = PingPong.load(ops, tmp_path, "MQInSeqs")
    assert (payload, bad) == (b"one", 0)  # the other copy: allocated, never written
    pair.write(b"two" * 1000)
    pair.write(b"three")  # written over a longer copy: its tail is not read as its own
    _, payload, bad = PingPong.load(ops, tmp_path, "MQInSeqs")
    assert (payload, bad) == (b"three", 0)
    assert {(tmp_path / f"MQInSeqs.lg{i}").stat().st_size for i in (1, 2)} == sizes
