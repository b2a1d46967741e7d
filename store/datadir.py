"""The data directory: its layout and the lock that keeps a second process out.

Layout (MSMQ's storage folder names; docs/store.md §Files)::

    <data dir>/
      lock                 flock(2) held while a store or gateway has the directory open
      reserve              space held for the store's bookkeeping on a full disk
      audit.log            JSON lines: files changed in storage/ by anything but the store
      storage/
        pNNNNNNN.mq  rNNNNNNN.mq  jNNNNNNN.mq  lNNNNNNN.mq
        QMLog  MQInSeqs.lg1  MQInSeqs.lg2  MQTrans.lg1  MQTrans.lg2
        lqs/nnnnnnnn.hhhhhhhh
        archive/  quarantine/
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from store.errors import StoreLocked, StoreUnusable

__all__ = ["DataDir", "lock_data_dir", "probe_data_dir"]


@dataclass(frozen=True, slots=True)
class DataDir:
    """Paths inside one data directory."""

    root: Path

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def lqs(self) -> Path:
        return self.storage / "lqs"

    @property
    def archive(self) -> Path:
        return self.storage / "archive"

    @property
    def quarantine(self) -> Path:
        return self.storage / "quarantine"

    @property
    def space_reserve(self) -> Path:
        """Space held for the store's bookkeeping on a full disk (``store.space``)."""
        return self.root / "reserve"

    @property
    def lock_file(self) -> Path:
        return self.root / "lock"

    @property
    def audit_log(self) -> Path:
        return self.root / "audit.log"


class DataDirLock:
    """An exclusive ``flock`` on ``<data dir>/lock``, released by ``release``."""

    def __init__(self, fd: int, data_dir: DataDir) -> None:
        self._fd: int | None = fd
        self.data_dir = data_dir

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def lock_data_dir(root: Path) -> DataDirLock:
    """Create the directory tree and take the exclusive lock.

    Raises:
        StoreUnusable: the tree cannot be created or written.
        StoreLocked: another process holds the lock.
    """
    data_dir = DataDir(root)
    for path in (data_dir.root, data_dir.storage, data_dir.lqs):
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnusable(f"cannot create {path}: {exc.strerror or exc}") from exc
    try:
        fd = os.open(data_dir.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StoreUnusable(f"cannot write {data_dir.lock_file}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise StoreLocked(f"{root} is in use by another entrepot process") from exc
        raise StoreUnusable(f"cannot lock {data_dir.lock_file}: {exc.strerror}") from exc
    try:
        _probe_write(data_dir.storage)
    except BaseException:
        DataDirLock(fd, data_dir).release()
        raise
    return DataDirLock(fd, data_dir)


def probe_data_dir(root: Path) -> None:
    """Check at start that the directory is usable and free, then let go of it.

    Raises:
        StoreUnusable, StoreLocked: as ``lock_data_dir``.
    """
    lock_data_dir(root).release()


def _probe_write(directory: Path) -> None:
    probe = directory / ".write-probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            # Writable, and full: the store opens and serves what it holds (docs/store.md).
            probe.unlink(missing_ok=True)
            return
        raise StoreUnusable(f"cannot write in {directory}: {exc.strerror or exc}") from exc
