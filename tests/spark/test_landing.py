"""Landing links: a queue landed as immutable files (``[[landings]]``) that Spark's file
source reads; every message in exactly one file, through a kill -9 of the gateway."""

from __future__ import annotations

import base64
import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.helpers import GatewayProcess
from tests.spark.support import head, payload, produce

_NAME = re.compile(r"^(\d{20})-(\d{20})\.(parquet|jsonl)$")


def _gateway(tmp: Path, fmt: str, port: int = 0) -> GatewayProcess:
    config = tmp / "entrepot.toml"
    config.write_text(f"""
[[queues]]
path = "landed"

[[landings]]
queue = "landed"
directory = "{tmp / 'landing'}"
format = "{fmt}"
file_messages = 100
file_delay = "50ms"
""")
    proc = GatewayProcess(tmp / "data", extra_args=["--config", str(config)], port=port)
    proc.wait_ready()
    return proc


def _landed(directory: Path, expected: int, timeout: float = 30.0) -> list[Path]:
    """The landed files, once they cover sequences 1..expected."""
    deadline = time.monotonic() + timeout
    while True:
        files = sorted(p for p in directory.iterdir() if _NAME.match(p.name))
        last = max((int(_NAME.match(p.name).group(2)) for p in files), default=0)  # type: ignore[union-attr]
        if last >= expected:
            return files
        assert time.monotonic() < deadline, f"landed up to {last} of {expected}"
        time.sleep(0.05)


def _seqs(files: list[Path]) -> list[int]:
    seqs: list[int] = []
    for path in files:
        first, last = (int(x) for x in _NAME.match(path.name).groups()[:2])  # type: ignore[union-attr]
        if path.suffix == ".parquet":
            rows = pq.read_table(path).to_pylist()
        else:
            rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert all(first <= r["seq"] <= last for r in rows), path.name
        for row in rows:
            body = row["body"] if "body" in row else base64.b64decode(row["body_base64"])
            assert body == payload(row["seq"] - 1, 64)
        seqs.extend(r["seq"] for r in rows)
    return seqs


def test_parquet_landing_through_a_kill_and_read_by_spark(spark: Any, tmp_path: Path) -> None:
    gw = _gateway(tmp_path, "parquet")
    try:
        produce(gw.url, "landed", 0, 250, size=64, chunk=50)
        files = _landed(tmp_path / "landing", 250)
        assert _seqs(files) == list(range(1, 251))
        assert len(files) >= 3, "at most 100 messages a file"
        state = head(gw.url, "landed")
        assert state["consumers"] == {"landing": 251} and state["first"] == 251, \
            "retention dropped what landed"
        produce(gw.url, "landed", 250, 300, size=64, chunk=50)
        gw.stop(signal.SIGKILL)
    finally:
        gw.stop()
    gw = _gateway(tmp_path, "parquet", port=gw.port)
    try:
        files = _landed(tmp_path / "landing", 550)
        assert _seqs(files) == list(range(1, 551)), "each message in exactly one file"
        assert not list((tmp_path / "landing" / "_staging").iterdir())
    finally:
        gw.stop()
    df = (spark.readStream.schema(spark.read.parquet(str(files[0])).schema)
          .parquet(str(tmp_path / "landing")))
    query = (df.writeStream.format("parquet").option("path", str(tmp_path / "table"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
             .start())
    query.awaitTermination()
    table = spark.read.parquet(str(tmp_path / "table"))
    assert table.count() == 550 and table.select("seq").distinct().count() == 550


def test_json_lines_landing(tmp_path: Path) -> None:
    gw = _gateway(tmp_path, "jsonl")
    try:
        produce(gw.url, "landed", 0, 120, size=64, chunk=60)
        files = _landed(tmp_path / "landing", 120)
        assert [p.suffix for p in files] == [".jsonl"] * len(files)
        assert _seqs(files) == list(range(1, 121))
        row = json.loads(files[0].read_text().splitlines()[0])
        assert row["queue"] == "landed" and row["label"] == "i0" and row["id"]
    finally:
        gw.stop()


@pytest.mark.parametrize("table, fragment", [
    ('queue = "bad queue name!"\ndirectory = "x"', "landings[0].queue"),
    ('queue = "q"', "landings[0].directory"),
    ('queue = "q"\ndirectory = "x"\nformat = "csv"', "landings[0].format"),
    ('queue = "q"\ndirectory = "x"\nfile_messages = 0', "landings[0].file_messages"),
    ('queue = "q"\ndirectory = "x"\nconsumer = "land\\n"', "landings[0].consumer"),
])
def test_bad_landing_configuration_is_refused(tmp_path: Path, table: str,
                                              fragment: str) -> None:
    from gateway.errors import ConfigError
    from gateway.settings import load_settings

    config = tmp_path / "bad.toml"
    config.write_text(f"[[landings]]\n{table}\n")
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_settings(config)
