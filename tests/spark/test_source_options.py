"""The ``entrepot`` source's options in real Spark: an unknown option is refused when the
source is loaded (naming the known ones), a user schema is a projection of the source's
columns (anything else refused naming the column), offsets as JSON maps of queue ->
sequence (``startingOffsets`` for streams and batches, ``endingOffsets`` for batches), and
``bodyFormat=string`` with the message's content type kept."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException

from tests.helpers import GatewayProcess
from tests.spark.support import call, create_queue, produce


def _source(spark: Any, gw: GatewayProcess, queues: str, stream: bool = False,
            **options: str) -> Any:
    reader = (spark.readStream if stream else spark.read).format("entrepot")
    reader = reader.option("url", gw.url).option("queues", queues)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


@pytest.mark.parametrize("option, hint", [
    ("maxMesagesPerBatch", "did you mean maxMessagesPerBatch?"),
    ("endingOffset", "did you mean endingOffsets?"),
    ("colour", ""),
])
def test_an_unknown_option_is_refused_at_load(spark: Any, spark_gateway: GatewayProcess,
                                              option: str, hint: str) -> None:
    for stream in (True, False):
        with pytest.raises(PySparkException) as refused:
            _source(spark, spark_gateway, "anyq", stream, **{option: "10"}).load()
        message = str(refused.value)
        assert f"option '{option.lower()}' is unknown" in message and hint in message
        assert "takes url, queues, queue, consumer" in message and "bodyFormat" in message


def test_offsets_as_json_maps(spark: Any, spark_gateway: GatewayProcess,
                              tmp_path: Path) -> None:
    a, b = "offsets_a", "offsets_b"
    for queue in (a, b):
        create_queue(spark_gateway.url, queue)
        produce(spark_gateway.url, queue, 0, 20, size=16)
    df = _source(spark, spark_gateway, f"{a},{b}", startingOffsets=json.dumps({a: 3, b: -2}),
                 endingOffsets=json.dumps({a: 8, b: -1})).load()
    rows = sorted((r.queue, r.seq) for r in df.select("queue", "seq").collect())
    assert rows == [(a, s) for s in range(3, 8)] + [(b, s) for s in range(1, 21)]
    stream = _source(spark, spark_gateway, a, True, consumer="offsets",
                     startingOffsets=json.dumps({a: 16})).load()
    query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "table"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start())
    query.awaitTermination()
    table = spark.read.parquet(str(tmp_path / "table"))
    assert sorted(r.seq for r in table.select("seq").collect()) == [16, 17, 18, 19, 20]


def test_a_batch_start_past_the_head_names_the_readable_range(
        spark: Any, spark_gateway: GatewayProcess) -> None:
    queue = "offsets_past"
    create_queue(spark_gateway.url, queue)
    produce(spark_gateway.url, queue, 0, 5, size=16)
    df = _source(spark, spark_gateway, queue, startingOffsets=json.dumps({queue: 999})).load()
    with pytest.raises(PySparkException) as refused:
        df.collect()
    message = str(refused.value)
    assert f"option startingOffsets: {queue}=999 is outside what the gateway can read, " \
        "[1, 6]" in message, message


@pytest.mark.parametrize("options, fragment", [
    ({"startingOffsets": '{"offsets_a": 3}'}, "no offset for offsets_b"),
    ({"startingOffsets": '{"offsets_a": 3, "offsets_b": 1, "other": 1}'},
     "other is not in option queues"),
    ({"startingOffsets": '{"offsets_a": 0, "offsets_b": 1}'}, "offsets_a=0"),
    ({"endingOffsets": '{"offsets_a": -2, "offsets_b": -1}'}, "offsets_a=-2"),
    ({"startingOffsets": "[3]"}, "a JSON object of queue -> sequence"),
    ({"bodyFormat": "base64"}, "bodyFormat='base64'"),
])
def test_bad_offsets_and_formats_are_refused_at_load(
        spark: Any, spark_gateway: GatewayProcess, options: dict[str, str],
        fragment: str) -> None:
    with pytest.raises(PySparkException, match=fragment):
        _source(spark, spark_gateway, "offsets_a,offsets_b", **options).load()


def test_ending_offsets_are_refused_for_a_stream(spark: Any, spark_gateway: GatewayProcess,
                                                 tmp_path: Path) -> None:
    create_queue(spark_gateway.url, "endless")
    stream = _source(spark, spark_gateway, "endless", True,
                     endingOffsets='{"endless": 5}').load()
    with pytest.raises(PySparkException, match="endingOffsets is for batch reads"):
        query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "t"))
                 .option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()


def test_a_user_schema_is_a_projection_with_text_bodies(
        spark: Any, spark_gateway: GatewayProcess, tmp_path: Path) -> None:
    q = "projected"
    create_queue(spark_gateway.url, q)
    order = json.dumps({"order": 1, "item": "café"}).encode()
    call(f"{spark_gateway.url}/v1/batch", "POST", {"messages": [
        {"queue": q, "body_base64": base64.b64encode(order).decode(),
         "properties": {"content_type": "application/json"}},
        {"queue": q, "body_base64": base64.b64encode("grüße".encode("utf-16")).decode(),
         "properties": {"content_type": "text/plain; charset=utf-16"}},
        {"queue": q, "body_base64": base64.b64encode(b"\xff\xfe\xfa").decode()}]})
    schema = "body STRING, content_type STRING, seq BIGINT"
    df = _source(spark, spark_gateway, q, bodyFormat="string").schema(schema).load()
    rows = [r.asDict() for r in df.orderBy("seq").collect()]
    assert rows == [
        {"body": order.decode(), "content_type": "application/json", "seq": 1},
        {"body": "grüße", "content_type": "text/plain; charset=utf-16", "seq": 2},
        {"body": "\ufffd" * 3, "content_type": "application/octet-stream", "seq": 3}]
    binary = _source(spark, spark_gateway, q).load()
    assert dict(binary.dtypes)["body"] == "binary"
    assert binary.orderBy("seq").first().body == order
    stream = _source(spark, spark_gateway, q, True, consumer="projected",
                     bodyFormat="string").schema("seq BIGINT, body STRING").load()
    query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "table"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start())
    query.awaitTermination()
    table = spark.read.parquet(str(tmp_path / "table"))
    assert table.columns == ["seq", "body"]
    assert table.orderBy("seq").first().body == order.decode()


@pytest.mark.parametrize("schema, fragment", [
    ("seq BIGINT, nope STRING", "column 'nope' is not a column of the entrepot source"),
    ("seq INT", "column 'seq' is int but the source gives bigint"),
    ("body STRING", "set option bodyFormat=string"),
])
def test_a_schema_that_is_not_a_projection_is_refused(
        spark: Any, spark_gateway: GatewayProcess, schema: str, fragment: str) -> None:
    create_queue(spark_gateway.url, "unprojected")
    with pytest.raises(PySparkException, match=fragment):
        _source(spark, spark_gateway, "unprojected").schema(schema).load().collect()


def _refused_when_it_starts(stream: Any, name: str, refusal: str) -> None:
    """The stream's query fails with ``refusal``: the query's own error, not one of
    PySpark's stream runner masking it."""
    with pytest.raises(PySparkException) as refused:
        query = (stream.writeStream.format("memory").queryName(name)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
    message = str(refused.value)
    assert refusal in message
    assert "UnboundLocalError" not in message, message[-2000:]


def test_a_stream_with_a_schema_that_is_not_a_projection_says_so_when_it_starts(
        spark: Any, spark_gateway: GatewayProcess) -> None:
    create_queue(spark_gateway.url, "unprojected2")
    stream = _source(spark, spark_gateway, "unprojected2", True).schema("seq INT").load()
    _refused_when_it_starts(stream, "unprojected2",
                            "column 'seq' is int but the source gives bigint")


def test_a_batch_read_of_an_empty_queue_is_empty(spark: Any,
                                                 spark_gateway: GatewayProcess) -> None:
    create_queue(spark_gateway.url, "emptyq")  # first == next: nothing to read
    assert _source(spark, spark_gateway, "emptyq").load().count() == 0


@pytest.mark.parametrize("queues", ["twiceq,TWICEQ", "private$/twiceq,PRIVATE$\\twiceq"])
def test_a_queue_named_twice_in_two_spellings_is_refused(
        spark: Any, spark_gateway: GatewayProcess, queues: str) -> None:
    """Queue names are case-insensitive and take \\ for /: one queue listed twice would be
    read twice."""
    for stream in (True, False):
        with pytest.raises(PySparkException, match="a queue is named twice"):
            _source(spark, spark_gateway, queues, stream).load()


def test_ending_offsets_on_a_stream_say_so_when_it_starts(
        spark: Any, spark_gateway: GatewayProcess, tmp_path: Path) -> None:
    create_queue(spark_gateway.url, "endless2")
    stream = _source(spark, spark_gateway, "endless2", True, endingOffsets="latest").load()
    _refused_when_it_starts(stream, "endless2", "endingOffsets is for batch reads")
