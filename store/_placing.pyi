"""Types of the C extension store/_placing.c (see store/placing.py)."""

from collections.abc import Callable

from store.records import Job, StoredRecord
from store.runs import Parts

def setup(record_type: type[StoredRecord], crc32: Callable[..., int], /) -> None: ...
def place_run(jobs: list[Job], start: int, segment: int, cursor: int, end: int, lsn: int,
              nonce32: int, payload_max: int, next_seq: dict[int, int],
              items: list[tuple[int, Parts]], /) -> tuple[int, int, int, int]: ...
def runs(items: list[tuple[int, Parts]], /) -> list[tuple[int, list[bytes | memoryview], int]]: ...
