"""Value types shared by the store's engine, recovery and public API."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from store.errors import StoreError
from store.framing import RecordFlags
from store.logcodec import Ref

__all__ = ["SendSpec", "StoredRecord", "Placed", "Job", "Op", "PreparedTx"]

Op = Literal["append", "commit", "prepare", "commit_prepared", "abort", "remove", "express",
             "remove_express"]


class SendSpec(NamedTuple):
    """One message to store: its queue, payload and the fields the index needs. A tuple:
    every send builds two (the caller's and the numbered one), and a frozen dataclass is
    slower to build, on the event loop."""

    queue_id: int
    payload: bytes
    priority: int = 0
    expires_ms: int = 0
    flags: RecordFlags = RecordFlags.NONE
    journal: bool = False  # journal messages live in j segments
    express: bool = False  # kept in RAM, spilled to r segments, lost on restart
    seq: int = 0  # the queue sequence number, assigned by MessageStore in submission order


class StoredRecord(NamedTuple):
    """A record on disk: where it is and what the index needs; never the payload. A tuple:
    one is built per message sent and per message the index hands out (the index itself
    keeps packed ints, see ``store.index``), and a frozen dataclass is slower to build."""

    queue_id: int
    seq: int
    segment: int
    offset: int
    size: int
    payload_len: int
    lsn: int
    priority: int
    expires_ms: int
    flags: RecordFlags
    tx_id: int

    @property
    def ref(self) -> Ref:
        return Ref(self.segment, self.offset, self.lsn)


class Placed(Protocol):
    """What the index and the segment bookkeeping need of a record: a ``StoredRecord``, or
    at recovery the ``RecordHeader`` a scan found (no conversion per record)."""

    @property
    def queue_id(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def segment(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def payload_len(self) -> int: ...
    @property
    def lsn(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def expires_ms(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def tx_id(self) -> int: ...


@dataclass(slots=True)
class PreparedTx:
    """A two-phase transaction that is prepared: its records and the messages it receives."""

    tx_id: int
    records: list[StoredRecord]
    removes: list[Ref]


@dataclass(slots=True)
class Job:
    """One unit of work for the writer thread; results are filled in place."""

    op: Op
    sends: Sequence[SendSpec] = ()
    removes: Sequence[Ref] = ()
    tx_id: int = 0
    records: list[StoredRecord] = field(default_factory=list)
    error: StoreError | None = None
    # (queue_id, seq) of each removed record, for the loop-side index; the engine uses removes.
    removed_keys: Sequence[tuple[int, int]] = ()
    grouped: bool = False  # set by the engine: a grouped commit (see store.grouped)

    def log_bytes_max(self) -> int:
        """Upper bound of the QMLog bytes this job writes."""
        return 64 + 16 * len(self.removes)
