"""The baseline of bench.spark_ingest: Spark's own Parquet file source moving the rows in
INPUT into a Parquet sink at OUTPUT, as ``entrepot spark-ingest`` would (``local[2]``, the
same session settings and sink options, ``availableNow``), in a process of its own.

    python -m bench.spark_file_source INPUT OUTPUT CHECKPOINT
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    source, output, checkpoint = argv
    from gateway.spark.ingest import PARQUET_OPTIONS
    from gateway.spark.session import owned_session
    from gateway.spark.source import source_schema

    # The ingest's settings without the entrepot source: a job that does not use it does
    # not pay for registering it (Spark then looks for Python data sources once).
    with owned_session("local[2]", "entrepot-bench-baseline",
                       {"spark.sql.shuffle.partitions": "2"}, source=False) as spark:
        # The schema the entrepot source gives its rows: what the ingest wrote.
        query = (spark.readStream.schema(source_schema()).parquet(source)
                 .writeStream.format("parquet").options(**PARQUET_OPTIONS)
                 .option("path", output).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
