"""Store and forward: an SRMP message for another host goes into the outgoing queue for its
destination as it arrived (envelope, body, framing), to be sent on by that queue's link.

The message is not interpreted here: a stream message keeps its sender's stream, and the
final receiver's exactly-once rule (and its receipts, addressed to the original sender)
make the hop at-least-once without harm. Only a redirection re-addresses it (``<to>``).
"""

from __future__ import annotations

from dataclasses import replace

from gateway.links import Links
from gateway.msmq.message import MessageProperties, encode_payload
from gateway.queue_manager import QueueManager
from gateway.store_errors import store_call
from store.records import SendSpec

__all__ = ["forward"]


async def forward(qm: QueueManager, links: Links, url: str, props: MessageProperties,
                  body: bytes, *, content_type: str, readdressed: bool) -> None:
    """Raises: ProblemError when the store refuses (quota, disk: 503/507)."""
    queue = await links.queue_for(url)
    extra = {**props.extra, "forward": "1", "srmp_to": url, "srmp_content_type": content_type}
    if readdressed:
        extra["forward_readdressed"] = "1"
    props = replace(props, extra=extra)
    spec = SendSpec(queue.queue_id, encode_payload(props, body), priority=props.priority,
                    expires_ms=props.receive_by_ms, express=not props.recoverable)
    record = await store_call(qm.store.append(spec))
    qm.arrived(queue, record)
