"""Data segments made ahead of need, off the writer thread.

Why: making a segment is a row of synced system calls (``posix_fallocate``, the header's write
and ``fdatasync``, the rename and the directory's ``fsync``, the ``l`` file and the directory
again); made by the writer in the middle of a commit, the batch that needed it would wait, and
with small segments under load that wait would set the store's p99 latency. So, as soon as the
writer starts filling a new segment of a kind, this thread makes the next one of that kind;
the writer takes it ready (created, synced, opened and mapped).

A segment made ahead is an ordinary empty segment on disk: a restart finds it and uses it like
any other. While one is ready, it is the kind's spare: a cleanup pass deletes every empty
segment of that kind (it otherwise keeps the newest empty one), so an idle store keeps one
empty segment per kind on disk either way. Out of space (ENOSPC,
EDQUOT), none is made ahead and the writer makes its own when it needs one, reporting the full
disk then. Any other error is an I/O error of the store and is fatal, like every sync error:
``on_fatal``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from store.errors import out_of_descriptors
from store.lfile import LFile
from store.logs import commit_log
from store.segment import Segment
from store.space import is_full

__all__ = ["SegmentPreparer", "Made"]

Made = tuple[Segment, LFile | None]


class SegmentPreparer:
    """At most one segment ready or being made per kind."""

    def __init__(self, make: Callable[[str, int], Made],
                 on_fatal: Callable[[str], object]) -> None:
        self._make = make
        self._on_fatal = on_fatal
        self._lock = threading.Lock()
        self._ready: dict[str, Made] = {}
        self._wanted: dict[str, int] = {}  # kind -> number to make (or being made)
        self._wake = threading.Event()
        self._stopping = False
        self._broken = False
        self._thread = threading.Thread(target=self._run, name="store-segments", daemon=True)
        self._thread.start()

    def take(self, kind: str) -> Made | None:
        """The segment made ahead for ``kind``, if it is ready (writer thread)."""
        with self._lock:
            return self._ready.pop(kind, None)

    def ready(self, kind: str) -> bool:
        """Whether a segment of ``kind`` is made and waiting to be taken."""
        with self._lock:
            return kind in self._ready

    def ensure(self, kind: str, reserve: Callable[[], int]) -> None:
        """Have a segment of ``kind`` made ahead unless one is ready or on its way;
        ``reserve`` gives its number (called on the writer thread, which owns numbering)."""
        with self._lock:
            if self._broken or self._stopping or kind in self._ready or kind in self._wanted:
                return
            self._wanted[kind] = reserve()
        self._wake.set()

    def stop(self) -> list[Made]:
        """Stop the thread (blocking); returns the segments made and not taken (still open)."""
        with self._lock:
            self._stopping = True
        self._wake.set()
        self._thread.join()
        with self._lock:
            made, self._ready = list(self._ready.values()), {}
        return made

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            while True:
                with self._lock:
                    if self._stopping or not self._wanted:
                        break
                    kind, number = next(iter(self._wanted.items()))
                try:
                    made = self._make(kind, number)
                except Exception as exc:  # any failure here stops the store
                    with self._lock:
                        del self._wanted[kind]
                    if is_full(exc) or out_of_descriptors(exc):
                        # Made when it is needed, or refused then (DiskFull, StoreBusy).
                        commit_log.info("no %s segment made ahead: %s", kind, exc)
                        continue
                    with self._lock:
                        self._broken = True
                    what = "I/O error" if isinstance(exc, OSError) else "internal error"
                    self._on_fatal(f"{what} making segment {number}: {exc!r}")
                    return
                with self._lock:
                    del self._wanted[kind]
                    self._ready[kind] = made
            with self._lock:
                if self._stopping:
                    return
