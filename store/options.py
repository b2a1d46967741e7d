"""Store options: the store's own view of its settings (the store never imports gateway)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StoreOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreOptions:
    """Sizes in bytes, times in seconds; defaults match ``config/entrepot.toml``."""

    segment_size: int = 4 << 20
    machine_quota: int = 8 << 30
    machine_journal_quota: int = 8 << 30
    express_memory: int = 64 << 20
    cleanup_interval_s: float = 30.0
    archive_segments: bool = False
    checkpoint_interval_s: float = 5.0
    qmlog_size: int = 16 << 20
    group_commit_bytes_max: int = 512 << 10
    audit_interval_s: float = 60.0
    # Data segments made ahead of need by a thread of their own (store.spare); off only in
    # tests that need every file operation on the writer thread.
    segments_ahead: bool = True

    def __post_init__(self) -> None:
        assert self.segment_size >= 64 << 10, "segment_size below 64 KiB"
        assert self.segment_size % 4096 == 0, "segment_size must be a multiple of 4 KiB"
        assert self.group_commit_bytes_max <= self.segment_size
