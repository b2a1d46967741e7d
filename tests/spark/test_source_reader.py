"""The ``entrepot`` source's reader called directly (as Spark's runner and executors call it)
against a real gateway: offsets, admission control, partitions, reads, commits, 410s."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from gateway.spark.client import GatewayRequestError, RangeGone
from gateway.spark.offsets import by_queue
from gateway.spark.source import (
    EntrepotDataSource,
    RangePartition,
    SourceOptionError,
    SourceOptions,
    fair_shares,
)
from tests.helpers import GatewayProcess
from tests.spark.support import call, create_queue, head, payload, produce

_names = itertools.count(1)


def _queue(gw: GatewayProcess) -> str:
    name = f"reader{next(_names)}"
    create_queue(gw.url, name)
    return name


def _reader(gw: GatewayProcess, queues: str, **options: str) -> Any:
    source = EntrepotDataSource({"url": gw.url, "queues": queues, **options})
    return source.streamReader(source.schema())


def test_offsets_limits_partitions_and_reads(spark_gateway: GatewayProcess) -> None:
    a, b = _queue(spark_gateway), _queue(spark_gateway)
    produce(spark_gateway.url, a, 0, 30, size=64,
            properties={"correlation_id": "corr", "sent_time": "2026-01-02T03:04:05Z"})
    produce(spark_gateway.url, b, 100, 5, size=64)
    reader = _reader(spark_gateway, f"{a},{b}", consumer="t1", maxMessagesPerBatch="20",
                     maxMessagesPerPartition="8")
    start = reader.initialOffset()
    assert by_queue(start) == {a: 1, b: 1}
    assert head(spark_gateway.url, a)["consumers"] == {"t1": 1}, "registered when planned"
    assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
    end = reader.latestOffset(start, ReadMaxRows(20))
    assert by_queue(end) == {a: 16, b: 6}, "b's whole backlog fits its share; a takes the rest"
    parts = reader.partitions(start, end)
    assert [(p.queue, p.start, p.end) for p in parts] == [  # 4 tasks of 5, none over 8
        (a, 1, 6), (a, 6, 11), (a, 11, 16), (b, 1, 6)]
    assert reader.partitions(end, end) == []
    [batch] = list(reader.read(parts[1]))
    rows = batch.to_pylist()
    assert [r["seq"] for r in rows] == list(range(6, 11))
    assert rows[0]["body"] == payload(5, 64) and rows[0]["label"] == "i5"
    assert rows[0]["class"] == "MQMSG_CLASS_NORMAL" and rows[0]["correlation_id"] == "corr"
    assert rows[0]["sent_at"].year == 2026 and rows[0]["arrived_at"] > rows[0]["sent_at"]
    assert rows[0]["id"].startswith("{") and rows[0]["queue"] == a
    assert list(reader.read(RangePartition(a, 6, 11)))[0].equals(batch), "same bytes again"
    # Spark asks for the next batch once this one is committed: that moves the consumer,
    # retention trims what it passed, and the range is then gone.
    assert by_queue(reader.latestOffset(end, ReadAllAvailable())) == {a: 31, b: 6}
    assert head(spark_gateway.url, a)["consumers"] == {"t1": 16}
    assert head(spark_gateway.url, a)["first"] == 16
    with pytest.raises(RangeGone, match=r"\[6, 16\) are gone"):
        list(reader.read(parts[1]))
    reader.commit({a: 31, b: 6})  # Spark's own commit call, one batch late
    assert head(spark_gateway.url, b)["consumers"] == {"t1": 6}
    assert head(spark_gateway.url, a)["first"] == 31


def test_a_batch_read_starting_at_latest_names_the_queue() -> None:
    source = EntrepotDataSource({"url": "http://127.0.0.1:1", "queues": "a,b",
                                 "startingOffsets": '{"a": -2, "b": -1}'})
    with pytest.raises(SourceOptionError, match=r"startingOffsets: b would start at latest "
                       r"\(-1 in a JSON map\)"):
        source.reader(source.schema())


def test_min_partitions_cuts_a_small_batch_for_the_cores(
        spark_gateway: GatewayProcess) -> None:
    """``minPartitions`` (Kafka's option): a batch is cut into at least that many tasks of
    even sizes, each read whole."""
    q = _queue(spark_gateway)
    produce(spark_gateway.url, q, 0, 30, size=16)
    reader = _reader(spark_gateway, q, consumer="t9", minPartitions="4")
    start = reader.initialOffset()
    parts = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    assert [(p.start, p.end) for p in parts] == [(1, 9), (9, 17), (17, 24), (24, 31)]
    seqs = [s for p in parts for batch in reader.read(p) for s in batch.column("seq").to_pylist()]
    assert seqs == list(range(1, 31))


def test_a_partition_is_read_in_pieces_each_record_once(
        spark_gateway: GatewayProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition wider than one range read comes as several batches (Spark writes one
    while the next is read), together every record of the range once, in order."""
    import gateway.spark.source as source_module

    monkeypatch.setattr(source_module, "_PIECE_RECORDS", 4)
    a = _queue(spark_gateway)
    produce(spark_gateway.url, a, 0, 10, size=32)
    reader = _reader(spark_gateway, a, consumer="pieces")
    batches = list(reader.read(RangePartition(a, 1, 11)))
    assert [b.num_rows for b in batches] == [4, 4, 2]
    rows = [row for b in batches for row in b.to_pylist()]
    assert [r["seq"] for r in rows] == list(range(1, 11))
    assert [r["body"] for r in rows] == [payload(i, 32) for i in range(10)]
    # Large messages: a piece ends after its bytes too (here each record is over them).
    monkeypatch.setattr(source_module, "_PIECE_BYTES", 40)
    batches = list(reader.read(RangePartition(a, 1, 11)))
    assert [b.num_rows for b in batches] == [1] * 10
    assert [row["seq"] for b in batches for row in b.to_pylist()] == list(range(1, 11))


def test_a_queue_spelt_otherwise_keeps_its_offsets_and_its_name(
        spark_gateway: GatewayProcess) -> None:
    """Queue names are case-insensitive and take \\ for /: a run that spells a queue
    otherwise than the run that wrote the checkpoint reads on from the checkpoint's offset
    (not from 1), and the rows name the queue one way."""
    a = _queue(spark_gateway)
    produce(spark_gateway.url, a, 0, 5, size=16)
    first = _reader(spark_gateway, a.upper(), consumer="spelt")
    start = first.initialOffset()
    end = first.latestOffset(start, ReadAllAvailable())
    first.commit(end)  # as Spark does once the batch is written
    assert (by_queue(start), by_queue(end)) == ({a: 1}, {a: 6})
    produce(spark_gateway.url, a, 5, 2, size=16)
    again = _reader(spark_gateway, a, consumer="spelt",
                    startingOffsets=json.dumps({a.upper(): 1}))
    # Offsets as a checkpoint written under the other spelling hands them back.
    assert by_queue(again.latestOffset({a.upper(): 6}, ReadAllAvailable())) == {a: 8}
    assert head(spark_gateway.url, a)["consumers"] == {"spelt": 6}
    parts = again.partitions({a.upper(): 6}, {a: 8})
    assert [(p.queue, p.start, p.end) for p in parts] == [(a, 6, 8)]
    [batch] = list(again.read(parts[0]))
    assert [(r["queue"], r["seq"]) for r in batch.to_pylist()] == [(a, 6), (a, 7)]


def test_a_fast_fed_first_queue_does_not_starve_the_second(
        spark_gateway: GatewayProcess) -> None:
    fast, slow = _queue(spark_gateway), _queue(spark_gateway)
    produce(spark_gateway.url, fast, 0, 3000, size=16)
    produce(spark_gateway.url, slow, 0, 3000, size=16)
    reader = _reader(spark_gateway, f"{fast},{slow}", consumer="fair", maxMessagesPerBatch="1000")
    offsets = reader.initialOffset()
    taken: list[tuple[int, int]] = []
    for batch in range(4):
        end = reader.latestOffset(offsets, ReadMaxRows(1000))
        ends, starts = by_queue(end), by_queue(offsets)
        taken.append((ends[fast] - starts[fast], ends[slow] - starts[slow]))
        offsets = end
        produce(spark_gateway.url, fast, 3000 + batch * 1000, 1000, size=16)  # fed on
    # Shares follow the backlogs (the fast queue's grows); half the budget is split equally.
    assert taken == [(500, 500), (545, 455), (587, 413), (624, 376)]
    assert all(n >= 250 for pair in taken for n in pair)


@pytest.mark.parametrize("budget, backlogs, shares", [
    (1000, [3000, 3000], [500, 500]),
    (1000, [1_000_000, 10], [990, 10]),
    (1000, [0, 5000, 5000], [0, 500, 500]),
    (10, [100, 100, 100], [4, 3, 3]),
    (50, [10, 20], [10, 20]),
])
def test_fair_shares(budget: int, backlogs: list[int], shares: list[int]) -> None:
    assert fair_shares(budget, backlogs) == shares


def test_available_now_freezes_its_target(spark_gateway: GatewayProcess) -> None:
    q = _queue(spark_gateway)
    produce(spark_gateway.url, q, 0, 10, size=16)
    reader = _reader(spark_gateway, q, consumer="t2")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    produce(spark_gateway.url, q, 10, 10, size=16)
    assert by_queue(reader.latestOffset(start, ReadAllAvailable())) == {q: 11}
    assert reader.reportLatestOffset() == {q: 21}


def test_latest_start_and_a_head_behind_the_checkpoint(spark_gateway: GatewayProcess) -> None:
    q = _queue(spark_gateway)
    produce(spark_gateway.url, q, 0, 4, size=16)
    reader = _reader(spark_gateway, q, consumer="t3", startingOffsets="latest")
    assert by_queue(reader.initialOffset()) == {q: 5}
    assert head(spark_gateway.url, q)["consumers"] == {"t3": 5}
    created = head(spark_gateway.url, q)["created_ms"]
    with pytest.raises(RuntimeError, match="behind the checkpoint"):
        reader.latestOffset({q: [99, created]}, ReadAllAvailable())


def test_a_restarted_query_whose_offset_was_trimmed_fails_loudly(
        spark_gateway: GatewayProcess) -> None:
    q = _queue(spark_gateway)
    produce(spark_gateway.url, q, 0, 6, size=16)
    first = _reader(spark_gateway, q, consumer="t4")
    first.initialOffset()
    call(f"{spark_gateway.url}/v1/queues/{q}/consumers/t4", "DELETE")
    call(f"{spark_gateway.url}/v1/queues/{q}/purge", "POST")
    restarted = _reader(spark_gateway, q, consumer="t4")  # the checkpoint says 1
    with pytest.raises(RuntimeError, match="consumer 't4' is not registered"):
        restarted.latestOffset({q: 1}, ReadAllAvailable())
    # A queue the checkpoint has not read starts at its first message, trimmed or not.
    added = _reader(spark_gateway, q, consumer="t4")
    assert by_queue(added.latestOffset({}, ReadAllAvailable())) == {q: 7}
    assert head(spark_gateway.url, q)["consumers"] == {"t4": 7}


def test_a_queue_created_again_under_a_checkpoint_fails_loudly(
        spark_gateway: GatewayProcess) -> None:
    """A queue deleted and created again starts its sequences over: a checkpoint that read
    the old one up to 6 must not read the new one from 6 (and retention free 1-5 unread)."""
    q = _queue(spark_gateway)
    produce(spark_gateway.url, q, 0, 5, size=16)
    first = _reader(spark_gateway, q, consumer="t6")
    end = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    first.commit(end)
    assert by_queue(end) == {q: 6}
    call(f"{spark_gateway.url}/v1/queues/{q}", "DELETE")
    create_queue(spark_gateway.url, q)
    produce(spark_gateway.url, q, 100, 10, size=16)
    restarted = _reader(spark_gateway, q, consumer="t6")
    with pytest.raises(RuntimeError, match="deleted and created again at the gateway"):
        restarted.latestOffset(end, ReadAllAvailable())
    after = head(spark_gateway.url, q)
    assert (after["first"], after["next"], after["messages"], after["consumers"]) == (
        1, 11, 10, {})
    # The consumer registered again, at the checkpoint's offset or anywhere: still refused,
    # and nothing committed (the new queue's 1-5 stay).
    for start in (6, "earliest"):
        call(f"{spark_gateway.url}/v1/queues/{q}/consumers/t6", "PUT", {"start": start})
        with pytest.raises(RuntimeError, match="deleted and created again at the gateway"):
            _reader(spark_gateway, q, consumer="t6").latestOffset(end, ReadAllAvailable())
        call(f"{spark_gateway.url}/v1/queues/{q}/consumers/t6", "DELETE")
    assert head(spark_gateway.url, q)["messages"] == 10
    # A checkpoint written before offsets named the queue's creation meets the missing
    # consumer instead.
    with pytest.raises(RuntimeError, match="consumer 't6' is not registered"):
        _reader(spark_gateway, q, consumer="t6").latestOffset(by_queue(end),
                                                             ReadAllAvailable())


def test_unknown_queue_is_a_clear_error(spark_gateway: GatewayProcess) -> None:
    reader = _reader(spark_gateway, "nosuchqueue", attempts="1")
    with pytest.raises(GatewayRequestError, match="404"):
        reader.initialOffset()


@pytest.mark.parametrize("options, fragment", [
    ({"url": "ftp://x", "queues": "q"}, "option url"),
    ({"url": "http://127.0.0.1:1", "queues": " , "}, "option queues"),
    ({"url": "http://127.0.0.1:1", "queues": "q", "startingOffsets": "middle"},
     "startingOffsets"),
    ({"url": "http://127.0.0.1:1", "queues": "q", "maxMessagesPerBatch": "ten"},
     "maxMessagesPerBatch='ten'"),
    ({"url": "http://127.0.0.1:1", "queues": "q", "maxMessagesPerPartition": "200000"},
     "at most 100000"),
    ({"url": "http://127.0.0.1:1", "queues": "q", "minPartitions": "0"},
     "minPartitions=0: expected at least 1"),
    ({"url": "http://127.0.0.1:1", "queues": "q", "minPartitions": "10001"},
     "minPartitions=10001: at most 10000"),
    *[({"url": "http://127.0.0.1:1", "queues": "q", "minPartitions": lax},
       re.escape(f"minPartitions={lax!r}: expected an integer"))
      for lax in (" 2", "+3", "1_000", "\u0663")],
    ({"url": "http://127.0.0.1:1", "queues": "q", "consumer": "my job"},
     "option consumer='my job'"),
    ({"url": "http://127.0.0.1:1", "queues": "q", "consumer": "job\n"},  # as the gateway
     re.escape("option consumer='job\\n'")),
    ({"url": "http://127.0.0.1:1", "queues": "a,b,c", "maxMessagesPerBatch": "2"},
     "maxMessagesPerBatch=2: at least one message per queue"),
    # Which of the two counts would be a guess: the other queue would go unread unsaid.
    ({"url": "http://127.0.0.1:1", "queues": "a", "queue": "b"}, "queues and queue"),
    # A URL path cannot carry them: such a consumer could not be deleted.
    *[({"url": "http://127.0.0.1:1", "queues": "q", "consumer": dots},
       re.escape(f"option consumer={dots!r}")) for dots in (".", "..")],
])
def test_bad_options_name_themselves(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(SourceOptionError, match=fragment):
        SourceOptions.parse(options)


def test_an_offset_without_the_queues_creation_must_agree_with_the_consumer(
        spark_gateway: GatewayProcess) -> None:
    """A checkpoint written before offsets named the queue's creation: taken where the
    consumer is at its offset, refused where it is elsewhere (the queue may have been
    created again), and nothing is committed then."""
    q = _queue(spark_gateway)
    produce(spark_gateway.url, q, 0, 8, size=16)
    first = _reader(spark_gateway, q, consumer="t7")
    first.commit(first.latestOffset(first.initialOffset(), ReadMaxRows(5)))  # at 6
    assert by_queue(_reader(spark_gateway, q, consumer="t7").latestOffset(
        {q: 6}, ReadAllAvailable())) == {q: 9}
    with pytest.raises(RuntimeError, match="written before offsets named the queue's"):
        _reader(spark_gateway, q, consumer="t7").latestOffset({q: 8}, ReadAllAvailable())
    assert head(spark_gateway.url, q)["consumers"] == {"t7": 6}


def test_a_new_checkpoint_reads_from_the_first_message_whatever_the_consumer(
        spark_gateway: GatewayProcess) -> None:
    """startingOffsets earliest for a new checkpoint means the first readable message, even
    where the consumer was registered further on by hand: nothing below it is left to
    retention unread."""
    q = _queue(spark_gateway)
    produce(spark_gateway.url, q, 0, 8, size=16)
    call(f"{spark_gateway.url}/v1/queues/{q}/consumers/t8", "PUT", {"start": 5})
    reader = _reader(spark_gateway, q, consumer="t8")
    start = reader.initialOffset()
    assert by_queue(start) == {q: 1}
    end = reader.latestOffset(start, ReadAllAvailable())
    [part] = reader.partitions(start, end)
    assert (part.start, part.end) == (1, 9)
    assert head(spark_gateway.url, q)["messages"] == 8


def test_a_queue_out_of_the_list_keeps_its_place_and_comes_back_there(
        spark_gateway: GatewayProcess) -> None:
    """A queue taken out of a query's list: a batch planned before (Spark replays it from
    its write-ahead log) does not move that queue's consumer past what was written, and put
    back, the queue goes on where its consumer is; a queue new to the checkpoint starts at
    its first message."""
    x, y, z = _queue(spark_gateway), _queue(spark_gateway), _queue(spark_gateway)
    for q in (x, y):
        produce(spark_gateway.url, q, 0, 4, size=16)
    both = _reader(spark_gateway, f"{x},{y}", consumer="t9")
    start = both.initialOffset()
    end = both.latestOffset(start, ReadAllAvailable())  # planned: x and y [1, 5)
    only_y = _reader(spark_gateway, y, consumer="t9")
    only_y.commit(end)  # the planned batch, run with y alone
    assert head(spark_gateway.url, x)["consumers"] == {"t9": 1}
    assert head(spark_gateway.url, y)["consumers"] == {"t9": 5}
    produce(spark_gateway.url, z, 0, 6, size=16)
    call(f"{spark_gateway.url}/v1/queues/{z}/purge", "POST")
    produce(spark_gateway.url, z, 6, 2, size=16)  # z's first is 7
    again = _reader(spark_gateway, f"{x},{y},{z}", consumer="t9")
    later = again.latestOffset({y: by_queue(end)[y]}, ReadAllAvailable())
    assert [(p.queue, p.start, p.end) for p in again.partitions({y: 5}, later)] == [
        (x, 1, 5), (z, 7, 9)]
