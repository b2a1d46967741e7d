"""Purge: remove a queue's waiting messages in steps, so a queue of millions never stalls the loop.

Why steps: listing every record of the queue first (an index entry unpacked into a record
each) would hold the event loop for seconds for a million messages, as would rebuilding every
delivery lane at the end. So messages are taken ``STEP`` at a time in sequence order
(``gateway.queues.pages``), removed in one store commit a step (with their negative
acknowledgements), and dropped from the heads of the delivery lanes as they go.

What is purged: every message the queue holds when the purge starts (below its next sequence
then, and resolved then) that is not being received at that step. A message that arrives
meanwhile stays, and so do a prepared transaction's messages: they arrive at its commit. The
purge does not stop at the readable end (the range readers' head), which a prepared
transaction holds back until its coordinator decides.
"""

from __future__ import annotations

from gateway.msmq.classes import MessageClass
from gateway.queues.model import Queue, QueueHost
from gateway.queues.pages import pages

__all__ = ["purge_queue", "STEP"]

STEP = 1000  # messages removed per store commit (and per turn of the event loop at most)


async def purge_queue(qm: QueueHost, queue: Queue, reason: MessageClass) -> int:
    """Remove the waiting messages of ``queue``; return how many were removed."""
    purged = 0
    end, unresolved = qm.store.unresolved(queue.queue_id)
    async for records in pages(qm.store, queue.queue_id, STEP, below=end):
        chosen = [r for r in records
                  if r.seq not in queue.reserved and r.seq not in unresolved]
        if not chosen:
            continue
        seqs = [r.seq for r in chosen]
        # Reserved while their removal is being committed: a receive meanwhile skips them.
        queue.reserved.update(seqs)
        try:
            await qm.finish(queue, chosen, ack=reason)
        finally:
            queue.reserved.difference_update(seqs)
        qm.events.count(queue.path.display, "purged", len(chosen))
        purged += len(chosen)
        _drop_heads(qm, queue, records[-1].seq)
    return purged


def _drop_heads(qm: QueueHost, queue: Queue, upto: int) -> None:
    """Pop the lanes' entries up to ``upto`` whose message is gone (lanes are in sequence
    order; a message still there — received meanwhile and given back — keeps its place). An
    entry left behind out of order is harmless: taking and peeking skip gone messages."""
    record = qm.store.record
    queue_id = queue.queue_id
    for lane in queue.order:
        kept: list[int] = []
        while lane and lane[0] <= upto:
            seq = lane.popleft()
            if record(queue_id, seq) is not None:
                kept.append(seq)
        lane.extendleft(reversed(kept))
