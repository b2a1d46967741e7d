"""The ``entrepot`` source's options: parsed and checked when ``load()`` creates the source,
so that a misspelt or bad one fails at once, naming itself (docs/spark.md has the table)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.range_wire import CONSUMER_NAME, CONSUMER_NAME_RULE
from gateway.spark.client import ClientOptions
from gateway.spark.offsets import canonical
from mapping.errors import QueueNameError
from mapping.names import parse_queue_path

__all__ = ["OPTIONS", "SourceOptionError", "SourceOptions"]

_RANGE_WIDTH_MAX = 100_000  # what one range read may span (gateway.web.rest_range)
_PARTITIONS_MAX = 10_000  # minPartitions: more tasks than this only cost their start

# Every option the source takes, as documented; matched case-insensitively.
OPTIONS = ("url", "queues", "queue", "consumer", "token", "cafile", "startingOffsets",
           "endingOffsets", "maxMessagesPerBatch", "maxBytesPerBatch",
           "maxMessagesPerPartition", "minPartitions", "timeoutSeconds", "attempts",
           "bodyFormat")
_KNOWN = {name.lower(): name for name in OPTIONS}
_INTEGER = re.compile(r"^-?[0-9]{1,19}\Z")  # what the command line takes, and negatives
_EARLIEST, _LATEST = -2, -1  # Kafka's numbers for them in a JSON offsets map


class SourceOptionError(ValueError):
    """A bad option of the ``entrepot`` source; the message names it and its value."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    client: ClientOptions
    queues: tuple[str, ...]
    consumer: str
    # Per queue: "earliest", "latest" or a sequence (a JSON map names one per queue).
    starting: Mapping[str, str | int]
    max_rows: int
    max_bytes: int
    per_partition: int
    # A micro-batch is split into at least this many partitions (Kafka's minPartitions).
    min_partitions: int
    # Per queue for a batch read: "latest" or an exclusive end; None when not given.
    ending: Mapping[str, str | int] | None = None
    body_format: str = "binary"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}
        unknown = sorted(k for k in opts if k not in _KNOWN)
        if unknown:
            name = unknown[0]
            close = difflib.get_close_matches(name, list(_KNOWN), n=1)
            hint = f" (did you mean {_KNOWN[close[0]]}?)" if close else ""
            raise SourceOptionError(f"option {name!r} is unknown{hint}; the entrepot source "
                                    f"takes {', '.join(OPTIONS)}")
        url = opts.get("url", "")
        if not url.startswith(("http://", "https://")):
            raise SourceOptionError(f"option url={url!r}: expected the gateway's http(s) URL")
        if "queues" in opts and "queue" in opts:  # which one counts would be a guess
            raise SourceOptionError("options queues and queue: give one of them (queues takes "
                                    "a comma-separated list)")
        given = [q.strip() for q in opts.get("queues", opts.get("queue", "")).split(",")
                 if q.strip()]
        if not given:
            raise SourceOptionError("option queues: name at least one queue")
        # Queues go by their canonical names (lower case, "/"): the checkpoint's offsets,
        # the consumer and the queue column are the same however a run spells them.
        queues = tuple(_canonical_option(q) for q in given)
        if len(set(queues)) != len(queues):  # one queue in two spellings: read twice
            raise SourceOptionError(f"option queues={','.join(given)!r}: a queue is named "
                                    "twice")
        starting = _offsets(opts.get("startingoffsets", "earliest"), queues, "startingOffsets",
                            ("earliest", "latest"))
        ending = (None if "endingoffsets" not in opts else
                  _offsets(opts["endingoffsets"], queues, "endingOffsets", ("latest",)))
        body_format = opts.get("bodyformat", "binary").lower()
        if body_format not in ("binary", "string"):
            raise SourceOptionError(f"option bodyFormat={opts['bodyformat']!r}: expected "
                                    "binary or string")
        per_partition = _int(opts, "maxmessagesperpartition", 20_000, 1)
        if per_partition > _RANGE_WIDTH_MAX:
            raise SourceOptionError(f"option maxMessagesPerPartition={per_partition}: at "
                                    f"most {_RANGE_WIDTH_MAX}")
        client = ClientOptions(url=url, token=opts.get("token", ""),
                               timeout_s=float(_int(opts, "timeoutseconds", 30, 1)),
                               attempts=_int(opts, "attempts", 8, 1),
                               cafile=opts.get("cafile", ""))
        consumer = opts.get("consumer", "spark")
        if not CONSUMER_NAME.match(consumer):
            raise SourceOptionError(f"option consumer={consumer!r}: {CONSUMER_NAME_RULE}")
        max_rows = _int(opts, "maxmessagesperbatch", 0, 0)
        if 0 < max_rows < len(queues):
            raise SourceOptionError(f"option maxMessagesPerBatch={max_rows}: at least one "
                                    f"message per queue ({len(queues)})")
        min_partitions = _int(opts, "minpartitions", 1, 1)
        if min_partitions > _PARTITIONS_MAX:
            raise SourceOptionError(f"option minPartitions={min_partitions}: at most "
                                    f"{_PARTITIONS_MAX}")
        return cls(client, queues, consumer, starting, max_rows,
                   _int(opts, "maxbytesperbatch", 0, 0), per_partition, min_partitions,
                   ending, body_format)


def _canonical_option(name: str) -> str:
    try:
        return parse_queue_path(name).canonical
    except QueueNameError as exc:
        raise SourceOptionError(f"option queues: {name!r}: {exc}") from None


def _offsets(raw: str, queues: Sequence[str], option: str, words: tuple[str, ...]
             ) -> dict[str, str | int]:
    """``earliest``/``latest`` for every queue, or a JSON object naming each queue's
    sequence (``-2`` earliest, ``-1`` latest, as Kafka's source)."""
    text = raw.strip()
    if text.lower() in words:
        return {q: text.lower() for q in queues}
    expected = (f"expected {' or '.join(words)}, or a JSON object of queue -> sequence "
                f"naming each of {', '.join(queues)}")
    try:
        doc = json.loads(text)
    except ValueError:
        raise SourceOptionError(f"option {option}={raw!r}: {expected}") from None
    if not isinstance(doc, dict):
        raise SourceOptionError(f"option {option}={raw!r}: {expected}")
    doc = {canonical(str(k)): v for k, v in doc.items()}
    missing = [q for q in queues if q not in doc]
    extra = [k for k in doc if k not in queues]
    if missing or extra:
        what = (f"no offset for {', '.join(missing)}" if missing
                else f"{', '.join(extra)} is not in option queues")
        raise SourceOptionError(f"option {option}: {what} ({expected})")
    numbers = {_LATEST: "latest", _EARLIEST: "earliest"}
    result: dict[str, str | int] = {}
    for queue in queues:
        value = doc[queue]
        if isinstance(value, bool) or not isinstance(value, int) or (
                value < 1 and numbers.get(value) not in words):
            allowed = ", ".join(f"{n} ({numbers[n]})" for n in sorted(numbers)
                                if numbers[n] in words)
            raise SourceOptionError(f"option {option}: {queue}={value!r}: expected a "
                                    f"sequence >= 1 or {allowed}")
        result[queue] = numbers.get(value, value) if value < 1 else value
    return result


def _int(opts: Mapping[str, str], key: str, default: int, low: int) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    if not _INTEGER.match(raw):  # int() would take " 2", "+3", "1_000" and other digits
        raise SourceOptionError(f"option {_KNOWN[key]}={raw!r}: expected an integer")
    value = int(raw)
    if value < low:
        raise SourceOptionError(f"option {_KNOWN[key]}={value}: expected at least {low}")
    return value
