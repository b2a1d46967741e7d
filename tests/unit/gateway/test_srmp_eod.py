"""The EOD receiver rule (docs/srmp.md, "Exactly-once in-order delivery: receiver rule") and
stream receipts, as a state machine with time as an argument: new stream, in order, gap via
<previous>, duplicate, out of order, restart."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.srmp.build import envelope_bytes
from gateway.srmp.envelope import parse_envelope
from gateway.srmp.eod import COALESCE_MAX_S, COALESCE_S, StreamTable, Verdict
from gateway.srmp.eod_sender import SenderStream
from gateway.srmp.model import Kind, Stream
from gateway.srmp.receipts import ORDER_ACK_ACTION, stream_receipt

SID = "uid:4a85b192-3ccd-4ba2-a0ac-7f0a11be1b08\\4839986701558349830"
KEY = (SID, "private$/orders")
URL = "http://gw/msmq/private$/orders"


def _s(current: int, previous: int | None = None, start: bool = False) -> Stream:
    return Stream(SID, current, previous, "http://sender/msmq/private$/order_queue$"
                  if start else None)


def _feed(table: StreamTable, stream: Stream, now: float) -> Verdict:
    verdict = table.decide(KEY, stream)
    if verdict is Verdict.ACCEPT:
        table.accepted(KEY, stream, queue_url=URL, now=now)
    else:
        table.rejected(KEY, now=now)
    return verdict


def test_new_stream_needs_start_and_current_1() -> None:
    table = StreamTable()
    assert table.decide(KEY, _s(1)) is Verdict.OUT_OF_ORDER  # no <start>
    assert table.decide(KEY, _s(2, start=True)) is Verdict.OUT_OF_ORDER
    assert _feed(table, _s(1, start=True), 0.0) is Verdict.ACCEPT
    assert _feed(table, _s(1, start=True), 0.1) is Verdict.DUPLICATE


def test_in_order_gap_duplicate_out_of_order() -> None:
    table = StreamTable()
    _feed(table, _s(1, start=True), 0.0)
    assert _feed(table, _s(2), 0.1) is Verdict.ACCEPT
    assert _feed(table, _s(4), 0.2) is Verdict.OUT_OF_ORDER  # 3 missing, no <previous>
    assert _feed(table, _s(5, previous=3), 0.3) is Verdict.OUT_OF_ORDER  # 3 never arrived
    assert _feed(table, _s(5, previous=2), 0.4) is Verdict.ACCEPT  # 3 and 4 expired
    assert _feed(table, _s(5, previous=2), 0.5) is Verdict.DUPLICATE
    assert _feed(table, _s(2), 0.6) is Verdict.DUPLICATE
    state = table.get(KEY)
    assert state is not None and state.incoming_seq == 5 and state.rejected == 4


def test_receipts_coalesce_500ms_and_at_most_10s_after_oldest() -> None:
    table = StreamTable()
    _feed(table, _s(1, start=True), 0.0)
    assert table.due(COALESCE_S - 0.01) == []
    now = 0.0
    for n in range(2, 100):  # a steady trickle keeps pushing the 500 ms timer out
        now += 0.4
        _feed(table, _s(n), now)
        due = table.due(now)
        if due:
            break
    assert due and now >= COALESCE_MAX_S and due[0].last_ordinal == n
    assert due[0].send_to == "http://sender/msmq/private$/order_queue$"
    assert due[0].queue_url == URL
    assert table.due(now + 100) == []  # nothing new


def test_duplicate_re_acknowledges_what_was_accepted() -> None:
    """A lost receipt must not leave the sender resending for ever (docs/srmp.md,
    "Exactly-once in-order delivery: receiver rule")."""
    table = StreamTable()
    _feed(table, _s(1, start=True), 0.0)
    _feed(table, _s(2), 0.0)
    assert [d.last_ordinal for d in table.due(1.0)] == [2]
    _feed(table, _s(2), 50.0)
    assert table.due(50.0) == []
    assert [d.last_ordinal for d in table.due(50.0 + COALESCE_S)] == [2]


def test_restart_in_the_middle_keeps_the_position() -> None:
    table = StreamTable()
    _feed(table, _s(1, start=True), 0.0)
    _feed(table, _s(2), 0.0)
    table.due(1.0)
    snapshot = table.snapshot()
    _feed(table, _s(3), 2.0)
    newer = [StreamTable.position(s) for s in table.states()]
    again = StreamTable()
    again.restore(snapshot, newer, now=100.0)
    assert again.decide(KEY, _s(3)) is Verdict.DUPLICATE
    assert again.decide(KEY, _s(4)) is Verdict.ACCEPT
    # 3 was accepted but never acknowledged: a receipt goes out soon after the start.
    assert [d.last_ordinal for d in again.due(100.0 + COALESCE_S)] == [3]
    older_only = StreamTable()
    older_only.restore(snapshot, [], now=0.0)
    assert older_only.decide(KEY, _s(3)) is Verdict.ACCEPT


def test_a_snapshot_in_pieces_is_the_whole_table_with_each_piece_s_states() -> None:
    table = StreamTable()
    docs = [json.dumps({"id": f"uid:s\\{n}", "queue": "private$/orders", "seq": n, "ack": n,
                        "to": "", "via": URL}).encode() for n in range(1, 6)]
    table.restore(None, docs, now=0.0)
    pieces = table.snapshot_parts(lsn_mark=42, streams_per_part=2)
    parts, seen = [], {}
    for part, states in pieces:
        assert len(states) <= 2
        seen.update({s.stream_id: s.incoming_seq for s in states})
        parts.append(part)
        if len(seen) == 2:  # a stream not yet in a piece moves on meanwhile: taken as it is then
            state = table.get(("uid:s\\5", "private$/orders"))
            assert state is not None
            state.incoming_seq = state.last_acknowledged = 50
    whole = json.loads(b"".join(parts))
    assert whole["lsn_mark"] == 42 and len(parts) == 5, "header, 3 pieces, footer"
    assert {d["id"]: d["seq"] for d in whole["streams"]} == seen
    assert seen["uid:s\\5"] == 50 and seen["uid:s\\1"] == 1
    assert json.loads(table.snapshot(lsn_mark=42)) == whole
    again = StreamTable()
    again.restore(b"".join(parts), [], now=0.0)
    assert sorted(s.incoming_seq for s in again.states()) == [1, 2, 3, 4, 50]
    empty = b"".join(part for part, _ in StreamTable().snapshot_parts())
    assert json.loads(empty) == {"version": 1, "lsn_mark": 0, "streams": []}


def test_the_highest_of_several_position_records_wins_in_any_order() -> None:
    """Superseded position records stay until the stream checkpoint removes them: a restart
    in between reads several for one stream."""
    table = StreamTable()
    records = []
    for n in (1, 2, 3):
        _feed(table, _s(n, start=n == 1), 0.0)
        records.append(StreamTable.position(next(iter(table.states()))))
    again = StreamTable()
    again.restore(None, [records[2], records[0], records[1]], now=0.0)
    assert again.decide(KEY, _s(3)) is Verdict.DUPLICATE
    assert again.decide(KEY, _s(4)) is Verdict.ACCEPT


def test_streams_are_keyed_by_stream_and_queue_and_pruned_when_acknowledged() -> None:
    table = StreamTable(streams_max=2)
    for i in range(4):
        key = (f"uid:4a85b192-3ccd-4ba2-a0ac-7f0a11be1b08\\{i}", "q")
        stream = Stream(key[0], 1, None, "http://s/msmq/r")
        assert table.decide(key, stream) is Verdict.ACCEPT
        table.accepted(key, stream, queue_url=URL, now=float(i))
        table.due(float(i) + 1)
    assert len(table) == 2  # the least recently active acknowledged streams went


def test_stream_receipt_envelope_round_trips() -> None:
    env = stream_receipt(stream_id=SID, last_ordinal=3, send_to="http://s/msmq/r",
                         queue_url=URL, qm_guid="11111111-2222-3333-4444-555555555555",
                         ordinal=9, now_s=1_700_000_000)
    parsed = parse_envelope(envelope_bytes(env))
    assert parsed == env and parsed.kind == Kind.STREAM_RECEIPT
    assert parsed.path.action == ORDER_ACK_ACTION and parsed.msmq is not None
    assert parsed.msmq.message_class == 255 and parsed.msmq.priority == 0


def test_a_resend_round_sends_only_the_head_again_and_progress_restarts_the_wait() -> None:
    """A deep backlog behind a slow receipt path must not be sent again whole: each round
    resends the oldest ``limit``, and a receipt that makes progress restarts the wait."""
    stream = SenderStream("uid:x\\1", base_seq=1, send_receipts_to="http://a/msmq/q")
    for seq in range(1, 1001):
        stream.add(seq)
    for current in stream.to_send():
        stream.mark_sent(current, now=0.0)
    assert stream.to_send() == [] and stream.next_deadline((3.0,)) == 3.0
    assert stream.resend_due(2.9, (3.0,), limit=64) == 0
    assert stream.resend_due(3.0, (3.0,), limit=64) == 64
    assert stream.to_send() == list(range(1, 65)) and stream.round == 1
    for current in stream.to_send():
        stream.mark_sent(current, now=3.5)
    assert stream.acknowledged(500, now=4.0) == list(range(1, 501))
    assert stream.round == 0 and stream.next_deadline((3.0, 30.0)) == 7.0  # from the receipt
    assert stream.resend_due(6.0, (3.0,), limit=64) == 0
    assert stream.resend_due(7.0, (3.0,), limit=64) == 64
    assert stream.to_send() == list(range(501, 565))
    assert stream.acknowledged(1000, now=8.0) == list(range(501, 1001))
    assert stream.finished and stream.next_deadline((3.0,)) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["send", "resend", "due"]), st.integers(0, 5),
                          st.floats(0.0, 3.0)), max_size=60),
       st.integers(1, 6))
def test_receipts_fall_due_as_a_walk_of_the_table_would_find_them(
        steps: list[tuple[str, int, float]], streams_max: int) -> None:
    """The heap of due times against the plain rule: a receipt is due when its stream's
    ``receipt_due_at`` has passed — with many streams, moved-on times, pruned streams."""
    table = StreamTable(streams_max=streams_max)
    sent: dict[int, int] = {}
    now = 0.0
    for op, number, later in steps:
        now += later
        sid = SID[:-1] + str(number)
        key = (sid, "private$/orders")
        pending = {s.stream_id: s.receipt_due_at for s in table.states()
                   if s.receipt_due_at is not None}
        assert table.next_due() == (min(pending.values()) if pending else None)
        if op == "due":
            expected = {sid for sid, at in pending.items() if at <= now}
            assert {d.stream_id for d in table.due(now)} == expected
            continue
        current = sent.get(number, 0) + (op == "send")
        if current == 0:
            continue
        stream = Stream(sid, current, None, "http://sender/q" if current == 1 else None)
        if table.decide(key, stream) is Verdict.ACCEPT:
            table.accepted(key, stream, queue_url=URL, now=now)
            sent[number] = current
            # A new stream prunes down to the limit where acknowledged streams allow it.
            assert len(table) <= streams_max or all(
                s.receipt_due_at is not None or s.last_acknowledged != s.incoming_seq
                for s in table.states())
        else:
            table.rejected(key, now=now)
            sent[number] = table.get(key).incoming_seq if table.get(key) else 0
