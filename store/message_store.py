"""MessageStore: the store's public object; owns the data directory for its lifetime."""

from __future__ import annotations

from pathlib import Path

from store.datadir import DataDir, DataDirLock, lock_data_dir
from store.errors import StoreClosed
from store.options import StoreOptions

__all__ = ["MessageStore"]


class MessageStore:
    """A locked data directory with its segments, logs and index."""

    def __init__(self, lock: DataDirLock, options: StoreOptions) -> None:
        self._lock: DataDirLock | None = lock
        self.options = options
        self.data_dir: DataDir = lock.data_dir

    @classmethod
    def open(cls, root: Path, options: StoreOptions) -> MessageStore:
        """Lock ``root`` and recover it. Blocking: call it off the event loop."""
        return cls(lock_data_dir(root), options)

    @property
    def closed(self) -> bool:
        return self._lock is None

    def close(self) -> None:
        """Release the data directory. Blocking: call it off the event loop."""
        if self._lock is None:
            raise StoreClosed("store already closed")
        self._lock.release()
        self._lock = None
