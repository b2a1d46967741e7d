"""bench.spark_ingest reports the round with the median ratio of several ingest + baseline
pairs, and every round's figures beside it."""

from __future__ import annotations

from typing import Any

import pytest

import bench.spark_ingest as spark_ingest


def test_the_median_round_is_reported_with_every_round(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ratios = iter([0.91, 0.74, 0.82])
    sizes: list[int] = []

    def one_round(bodies: list[bytes]) -> dict[str, Any]:
        sizes.append(len(bodies))
        ratio = next(ratios)
        return {"scenario": "spark-ingest", "ratio": ratio, "wall_s": round(9 / ratio, 1),
                "ceiling_wall_s": 9.0}

    monkeypatch.setattr(spark_ingest, "_round", one_round)
    record = spark_ingest.run(1000, rounds=3)
    assert sizes == [1000, 1000, 1000], "every round moves the same orders"
    assert record["ratio"] == 0.82 and record["wall_s"] == 11.0
    assert [r["ratio"] for r in record["rounds"]] == [0.74, 0.82, 0.91]
