"""``entrepot spark-ingest`` and ``entrepot spark-report``: argument parsing and exit codes
(0 done, 1 the Spark job failed — its reason on one stderr line, 2 bad usage)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from gateway.units import parse_duration

__all__ = ["add_commands"]


def add_commands(commands: Any) -> None:
    ingest = commands.add_parser(
        "spark-ingest", help="stream queues into Parquet through Spark, exactly once",
        description="Run a Spark streaming query from the gateway at --source into files at "
        "--output with its checkpoint at --checkpoint. Restart it with the same checkpoint to "
        "continue where it stopped; a new checkpoint is a new consumer.")
    ingest.add_argument("--source", required=True, metavar="URL", help="the gateway's URL")
    ingest.add_argument("--queue", required=True, action="append", metavar="Q",
                        help="queue path (repeat or comma-separate for several)")
    ingest.add_argument("--output", required=True, metavar="PATH")
    ingest.add_argument("--checkpoint", required=True, metavar="PATH")
    ingest.add_argument("--format", default="parquet", choices=("parquet", "json"),
                        help="parquet (default) or json (JSON Lines)")
    ingest.add_argument("--master", default="local[*]",
                        help="Spark master: local[*] (default) or spark://host:7077")
    when = ingest.add_mutually_exclusive_group()
    when.add_argument("--available-now", action="store_true",
                      help="ingest what is there now (in batches of at most "
                      "--max-messages-per-batch, when given), then stop")
    when.add_argument("--trigger", type=_duration, default=10.0, metavar="DURATION",
                      help="micro-batch interval when running continuously (default 10s)")
    ingest.add_argument("--consumer", default="spark",
                        help="consumer name registered at the gateway (default spark)")
    ingest.add_argument("--starting-offsets", type=_starting, default="earliest",
                        metavar="WHERE", help="where a new checkpoint starts: earliest "
                        "(default), latest, or a JSON object of queue -> sequence")
    ingest.add_argument("--max-messages-per-batch", type=_count, default=0, metavar="N",
                        help="admission control: at most N messages per micro-batch")
    ingest.add_argument("--max-messages-per-partition", type=_count_up_to(100_000),
                        default=100_000, metavar="N", help="at most N messages per Spark task "
                        "(default and most 100000)")
    ingest.add_argument("--min-partitions", type=_count_up_to(10_000), default=0, metavar="N",
                        help="cut each micro-batch into at least N Spark tasks (default: "
                        "Spark's default parallelism, the cores)")
    ingest.add_argument("--token-file", metavar="FILE",
                        help="file holding the API key (else $ENTREPOT_TOKEN)")
    ingest.add_argument("--cafile", default="", help="CA bundle for an https --source")
    ingest.add_argument("--driver-memory", default="", help="e.g. 2g")
    ingest.set_defaults(handler=_cmd_ingest)

    report = commands.add_parser(
        "spark-report", help="report on an ingested table (volume, latency, dead letters)",
        description="Read the table spark-ingest wrote at --input and write report.json, "
        "volume.csv, latency.csv, dead_letters.csv and report.png into --output.")
    report.add_argument("--input", required=True, metavar="PATH")
    report.add_argument("--output", required=True, metavar="PATH")
    report.add_argument("--format", default="parquet", choices=("parquet", "json"))
    report.add_argument("--master", default="local[*]")
    report.set_defaults(handler=_cmd_report)


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be positive")
    return seconds


def _starting(text: str) -> str:
    """earliest, latest or a JSON object (the source checks its queues and sequences)."""
    if text in ("earliest", "latest"):
        return text
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: expected earliest, latest or a JSON "
                                         "object of queue -> sequence")
    return text


def _count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return int(text)


def _count_up_to(most: int) -> Callable[[str], int]:
    def count(text: str) -> int:
        if _count(text) > most:
            raise argparse.ArgumentTypeError(f"{text!r}: at most {most}")
        return int(text)
    return count


def _token(args: argparse.Namespace) -> str:
    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError as exc:  # bad usage (exit 2), as every other refused option
            print(f"entrepot: --token-file {args.token_file}: {exc.strerror}", file=sys.stderr)
            raise SystemExit(2) from None
    return os.environ.get("ENTREPOT_TOKEN", "")


def _cmd_ingest(args: argparse.Namespace) -> int:
    from gateway.spark.ingest import IngestJob, run_ingest

    if not args.source.startswith(("http://", "https://")):
        print(f"entrepot: --source {args.source!r}: expected an http(s) URL", file=sys.stderr)
        return 2
    queues = tuple(q.strip() for item in args.queue for q in item.split(",") if q.strip())
    if 0 < args.max_messages_per_batch < len(queues):  # a share for every queue
        print(f"entrepot: --max-messages-per-batch {args.max_messages_per_batch}: at least one "
              f"message per queue ({len(queues)} queues)", file=sys.stderr)
        return 2
    job = IngestJob(source=args.source, queues=queues, output=args.output,
                    checkpoint=args.checkpoint, fmt=args.format, master=args.master,
                    available_now=args.available_now, trigger_s=args.trigger,
                    consumer=args.consumer, token=_token(args), cafile=args.cafile,
                    starting_offsets=args.starting_offsets,
                    max_messages_per_batch=args.max_messages_per_batch,
                    max_messages_per_partition=args.max_messages_per_partition,
                    min_partitions=args.min_partitions,
                    driver_memory=args.driver_memory)
    try:
        summary = run_ingest(job)
    except Exception as exc:  # noqa: BLE001 - the job's failure, on one line
        print(f"entrepot: spark-ingest failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from gateway.spark.report import run_report

    try:
        summary = run_report(args.input, args.output, fmt=args.format, master=args.master)
    except Exception as exc:  # noqa: BLE001
        print(f"entrepot: spark-report failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


# The line a Python traceback ends with: the exception's type (a dotted name) and message.
_RAISED = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*): (\S.*)$", re.MULTILINE)


def _one_line(exc: BaseException) -> str:
    """The job's failure on one line. Spark carries the error a Python process raised (the
    source's, naming the queue and the cause) inside a message of its own, with the whole
    traceback, the query and its state: the error's own line is what says why."""
    text = str(exc)
    _, found, last = text.rpartition("Traceback (most recent call last):")
    raised = _RAISED.search(last) if found else None
    if raised is not None:
        text = f"{raised.group(1)}: {raised.group(2)}"
    text = " ".join(text.split())
    return text[:2000] or type(exc).__name__
