"""Store and forward: an SRMP message for another host goes into the outgoing queue for its
destination as it arrived (envelope, body, framing), to be sent on by that queue's link.

The message is not interpreted here: a stream message keeps its sender's stream, and the
final receiver's exactly-once rule (and its receipts, addressed to the original sender)
make the hop at-least-once without harm. Only a redirection re-addresses it (``<to>``). A
resend of a message already stored here is not stored again (the duplicate window, by its
SRMP id): this gateway's link delivers the copy it has.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.msmq.message import MessageProperties
from gateway.outbound.links import Links
from gateway.queues import sending
from gateway.queues.dedup import destination_key
from gateway.queues.manager import QueueManager
from store.records import StoredRecord

__all__ = ["forward"]


async def forward(qm: QueueManager, links: Links, url: str, props: MessageProperties,
                  body: bytes, *, content_type: str, readdressed: bool) -> bool:
    """False when the message is already on its way (a resend of one stored here before).

    Raises: QueueError when the store refuses (quota, disk: 503/507)."""
    dedup = qm.dedup
    assert dedup is not None
    digest = dedup.digest(b"", url)
    # The id and the destination decide, as for messages stored here (gateway.queues.dedup).
    key = destination_key(f"forward:{props.message_id}", digest) if props.message_id else None
    if key is not None:
        if await dedup.seen(key, digest):
            return False
        dedup.begin(key)
    answer: dict[str, object] = {"id": props.message_id}
    try:
        # A recoverable message's id goes into its own commit (a resend after a crash must
        # find it); an express one's stays in memory.
        remembered = key is not None and props.recoverable
        record = await _store(qm, links, url, props, body, content_type, readdressed,
                              dedup.spec(key, digest, answer) if remembered and key else None)
        if key is not None:
            if record is not None:
                dedup.done(key, digest, answer, record)
            else:
                dedup.remember(key, digest, answer)
        return True
    finally:
        if key is not None:
            dedup.failed(key)  # no-op once remembered


async def _store(qm: QueueManager, links: Links, url: str, props: MessageProperties,
                 body: bytes, content_type: str, readdressed: bool,
                 remembered: sending.Send | None) -> StoredRecord | None:
    """Into the destination's outgoing queue, with the duplicate-window record
    ``remembered`` in the same commit; returns that record."""
    queue = await links.queue_for(url)
    extra = {**props.extra, "forward": "1", "srmp_to": url, "srmp_content_type": content_type}
    if readdressed:
        extra["forward_readdressed"] = "1"
    props = replace(props, extra=extra)
    sends = [sending.message(queue, props, body)]
    if remembered is not None:
        sends.append(remembered)
    made = await sending.commit(qm.store, sends, arrived=qm.arrived)
    return made[1] if remembered is not None else None
