"""Spark ingestion: a PySpark (>= 4.2) data source named ``entrepot`` over range reads, and the
``spark-ingest`` / ``spark-report`` jobs. Importing this package imports no pyspark: the
client and the Arrow conversion work (and are tested) without a JVM."""

__all__: list[str] = []
