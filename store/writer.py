"""Group commit: one writer thread makes batches of jobs durable; the event loop awaits them.

Handlers on the event loop ``submit`` a job and await its future. The thread takes half of
what is pending (at least ``_BATCH_JOBS_MIN`` jobs, at most ``group_commit_bytes_max`` of
payload), calls ``Engine.write_batch`` — one sync per file for the whole batch — and hands the
batch back to the loop with one ``call_soon_threadsafe``. Between batches it checkpoints every
``checkpoint_interval_s`` and deletes empty segments every ``cleanup_interval_s``. The loop
never waits on a lock held across I/O: the only shared structure is the pending list, guarded
by a lock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence

from store.engine import Engine
from store.errors import StoreBusy, StoreClosed, StoreError, StoreFailed
from store.logs import commit_log
from store.records import Job
from store.stats import BATCH_BUCKETS, SYNC_BUCKETS_S, Histogram

__all__ = ["GroupCommitter"]

# Jobs waiting for the writer, at most: beyond it ``submit`` makes callers wait (back-pressure).
_PENDING_JOBS_MAX = 65_536
# A batch takes half of what is pending (at least this many jobs): a burst of closed-loop
# committers then splits into two groups, and the loop resumes one group while the other is
# written and synced (store/runs.py: the sync holds no GIL). Taking everything would keep the
# loop, the framing and the disk in series.
_BATCH_JOBS_MIN = 32


class _Waiter:
    """What one ``submit`` or ``submit_many`` awaits: its future, resolved once the last of
    its ``left`` jobs is done (one future for a whole group: the owner of a gateway with
    fronts submits a loop pass's sends together, and a future each cost it per message)."""

    __slots__ = ("future", "left")

    def __init__(self, future: asyncio.Future[Job], left: int) -> None:
        self.future = future
        self.left = left


class GroupCommitter:
    """The writer thread and its queue of pending jobs."""

    def __init__(self, engine: Engine, loop: asyncio.AbstractEventLoop,
                 on_done: Callable[[list[Job]], None]) -> None:
        self._engine = engine
        self._loop = loop
        self._on_done = on_done
        self._pending: list[tuple[Job, _Waiter]] = []
        # Payload bytes of each pending job (same order) and their sum, counted by ``submit``
        # on the loop, so the writer does not count a batch's bytes job by job under the lock
        # (its Python between two synced writes is on the commit path).
        self._sizes: list[int] = []
        self._pending_bytes = 0
        # A waiting writer sleeps on ``_wakeup``, a lock used as a one-token semaphore, which
        # the loop releases only when ``_waiting`` says the writer sleeps: threading.Condition
        # (its __enter__, notify and wait are Python code) would cost the loop on every
        # commit. Both flags live under ``_lock``; ``_take`` empties the token before waiting.
        self._lock = threading.Lock()
        self._wakeup = threading.Lock()
        self._wakeup.acquire()
        self._waiting = False
        self._room = asyncio.Event()
        self._room.set()
        self._stopping = False
        self._batch_bytes_max = engine.options.group_commit_bytes_max
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self.batches = 0
        self.jobs = 0
        self.sync_seconds_total = 0.0
        # How long a batch's write + fdatasync takes, and how many jobs a batch carries.
        self.sync_seconds = Histogram(SYNC_BUCKETS_S)
        self.batch_jobs = Histogram(BATCH_BUCKETS)
        self._thread.start()

    async def submit(self, job: Job, size: int = -1) -> Job:
        """Queue ``job`` and wait until it is durable (or failed). ``size``: its payload
        bytes when the caller knows them (else counted here).

        Raises:
            StoreError: the job's own error (quota, too large, unknown record) or the store's
                (closed, fail-stopped).
        """
        while len(self._pending) >= _PENDING_JOBS_MAX:
            self._room.clear()
            await self._room.wait()
        future: asyncio.Future[Job] = self._loop.create_future()
        if size < 0:
            size = sum(len(send.payload) for send in job.sends)
        with self._lock:
            if self._stopping:
                raise StoreClosed("the store is closing")
            if self._engine.failed is not None:
                raise StoreFailed(self._engine.failed)
            self._pending.append((job, _Waiter(future, 1)))
            self._sizes.append(size)
            self._pending_bytes += size
            self._wake_writer()
        done = await future
        if done.error is not None:
            raise done.error
        return done

    async def submit_many(self, jobs: Sequence[Job], sizes: Sequence[int]) -> None:
        """Queue ``jobs`` together (``sizes``: their payload bytes) and wait until each is
        durable or failed: what ``submit`` would raise for a job is left on it
        (``job.error``), so that one job's refusal fails no other.

        Raises:
            StoreClosed, StoreFailed: the store takes no writes; none was queued.
        """
        while len(self._pending) >= _PENDING_JOBS_MAX:
            self._room.clear()
            await self._room.wait()
        if not jobs:
            return
        future: asyncio.Future[Job] = self._loop.create_future()
        waiter = _Waiter(future, len(jobs))
        with self._lock:
            if self._stopping:
                raise StoreClosed("the store is closing")
            if self._engine.failed is not None:
                raise StoreFailed(self._engine.failed)
            self._pending.extend([(job, waiter) for job in jobs])
            self._sizes.extend(sizes)
            self._pending_bytes += sum(sizes)
            self._wake_writer()
        await future

    def stop(self) -> None:
        """Finish what is pending, stop the thread (blocking: call it off the loop)."""
        with self._lock:
            self._stopping = True
            self._wake_writer()
        self._thread.join()

    def _wake_writer(self) -> None:
        """Under ``_lock``: release the token once per sleep (never twice: a release of an
        unheld lock raises)."""
        if self._waiting:
            self._waiting = False
            self._wakeup.release()

    def _take(self) -> list[tuple[Job, _Waiter]] | None:
        interval = self._engine.options.checkpoint_interval_s
        with self._lock:
            sleep = not self._pending and not self._stopping
            if sleep:
                self._wakeup.acquire(blocking=False)  # a token left by a wake after a timeout
                self._waiting = True
        if sleep:
            self._wakeup.acquire(timeout=interval)
        with self._lock:
            self._waiting = False
            if not self._pending:
                return None
            pending = len(self._pending)
            count = min(pending, max(_BATCH_JOBS_MIN, (pending + 1) // 2))
            if self._pending_bytes >= self._batch_bytes_max:  # then the bytes may cut first
                size = 0
                for index, job_size in enumerate(self._sizes[:count]):
                    size += job_size
                    if size >= self._batch_bytes_max:
                        count = index + 1
                        break
            taken = self._pending_bytes if count == pending else sum(self._sizes[:count])
            self._pending_bytes -= taken
            del self._sizes[:count]
            batch, self._pending = self._pending[:count], self._pending[count:]
            return batch

    def _run(self) -> None:
        last_checkpoint = time.monotonic()
        options = self._engine.options
        while True:
            batch = self._take()
            if batch is not None:
                self._write(batch)
            elif self._stopping:
                return
            now = time.monotonic()
            due = now - last_checkpoint >= options.checkpoint_interval_s
            if self._engine.failed is None and due and not self._engine.checkpoints_held:
                cleanup = now - self._engine.last_cleanup >= options.cleanup_interval_s
                try:
                    self._engine.checkpoint(cleanup=cleanup)
                except StoreBusy as exc:  # nothing changed: tried again at the next interval
                    commit_log.warning("checkpoint put off: %s", exc)
                except StoreError as exc:
                    # The engine fail-stopped and logged it critically; every later job is
                    # refused with StoreFailed, so there is nothing more to do here.
                    commit_log.debug("checkpoint not taken: %s", exc)
                last_checkpoint = now

    def _write(self, batch: list[tuple[Job, _Waiter]]) -> None:
        jobs = [job for job, _ in batch]
        started = time.perf_counter()
        try:
            self._engine.write_batch(jobs)
        except StoreFailed as exc:
            for job in jobs:
                job.error = exc
        except Exception as exc:  # a bug: fail the batch loudly rather than hang callers
            commit_log.critical("writer thread error", exc_info=True)
            self._engine.failed = f"internal error: {exc!r}"
            for job in jobs:
                job.error = StoreFailed(self._engine.failed)
        elapsed = time.perf_counter() - started
        self.sync_seconds_total += elapsed
        self.sync_seconds.observe(elapsed)
        self.batch_jobs.observe(len(jobs))
        self.batches += 1
        self.jobs += len(jobs)
        self._loop.call_soon_threadsafe(self._deliver, batch)

    def _deliver(self, batch: list[tuple[Job, _Waiter]]) -> None:
        self._on_done([job for job, _ in batch if job.error is None])
        for job, waiter in batch:
            waiter.left -= 1
            if not waiter.left and not waiter.future.done():
                waiter.future.set_result(job)
        if len(self._pending) < _PENDING_JOBS_MAX:
            self._room.set()
