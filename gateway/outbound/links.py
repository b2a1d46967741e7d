"""The links: one per outgoing queue, started with the gateway and whenever a message first
goes to a new destination; where they connect (outbound redirection) and where stream
receipts are to be sent (stream-receipt mapping) are read from the current mapping rules at
each use, so a reload applies at once. The receipt lanes (gateway.outbound.receipt_lanes) route the
gateway's receipts the same way and are listed with the links.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence
from dataclasses import replace
from urllib.parse import urlsplit

from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.outbound.link import Link, LinkOptions
from gateway.outbound.outgoing import Outgoing
from gateway.outbound.peers import Peer, peer_for
from gateway.outbound.receipt_lanes import LANE_ID_PREFIX, ReceiptLane, ReceiptLanes
from gateway.queues.events import Tally
from gateway.queues.internal import OUTGOING_PREFIX
from gateway.queues.manager import Queue, QueueManager
from mapping.engine import receipt_url_for, route_outbound
from mapping.names import ORDER_QUEUE
from mapping.rules import Pattern, RuleSet, normalise_address

__all__ = ["Links"]


class Links:
    def __init__(self, qm: QueueManager, options: LinkOptions, metrics: Metrics,
                 rules: Callable[[], RuleSet | None],
                 webhooks: Sequence[tuple[str, str, bytes]] = (),
                 peers: Sequence[Peer] = (), paused: bool = False) -> None:
        """``paused``: every link and receipt lane starts paused (links.start_paused) and
        forwards nothing until it is resumed."""
        self.qm = qm
        self.options = options
        self.metrics = metrics
        self._rules = rules
        self.outgoing = Outgoing(qm)
        self.links: dict[str, Link] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # (normalised URL or prefix, partner name, secret), as [[webhooks]] declares them
        self._webhooks = [(Pattern.parse(url), name, secret) for url, name, secret in webhooks]
        self._peers = list(peers)
        self.paused = paused
        # Retries and acknowledgements since start by destination, for the metrics
        # (gateway.web.metrics_state); destinations past metrics.queues_max share "_other".
        self.counts = Tally()
        # The receipts this gateway posts: routed by ``route`` too, with the links' back-off
        self.receipts = ReceiptLanes(self.route, metrics, cap_s=options.retry_max_s,
                                     counts=self.counts,
                                     tls=self.tls_for, paused=paused)

    def start(self) -> None:
        for queue in self.outgoing.queues():
            self._start(queue)

    def _start(self, queue: Queue) -> Link:
        destination = Outgoing.destination_of(queue)
        webhook = next(((name or urlsplit(destination).hostname or "", secret)
                        for pattern, name, secret in self._webhooks
                        if pattern.matches(normalise_address(destination))), None)
        options, tls = self.options, None
        peer = peer_for(self._peers, destination)
        if peer is not None:  # [[peers]] override [links] for this destination
            options = replace(options, stream_element=peer.stream_element
                              or options.stream_element, window=peer.window or options.window)
            tls = peer.ssl_context
        link = Link(self.qm, self.outgoing, queue, options, route=self.route,
                    receipts_to=self.receipts_to, webhook=webhook, tls=tls,
                    counts=self.counts)
        if self.paused:
            link.pause()
        self.links[queue.path.canonical] = link
        self._tasks[queue.path.canonical] = asyncio.create_task(
            link.run(), name=f"link {link.destination}")
        return link

    async def queue_for(self, destination: str) -> Queue:
        """The outgoing queue for ``destination``, with its link running."""
        queue = await self.outgoing.queue_for(destination)
        if queue.path.canonical not in self.links:
            self._start(queue)
        return queue

    def route(self, destination: str) -> str:
        """The URL a link posts to: the ``through`` gateway of an outbound redirection, else
        the destination itself."""
        rules = self._rules()
        if rules is None:
            return destination
        host = urlsplit(destination).hostname or ""
        found = route_outbound(rules, destination, local_name="." not in host)
        return found.through if found is not None else destination

    def tls_for(self, destination: str) -> ssl.SSLContext | None:
        """The TLS context of ``destination``'s ``[[peers]]`` entry, if it has one."""
        peer = peer_for(self._peers, destination)
        return peer.ssl_context if peer is not None else None

    def receipts_to(self, destination: str) -> str:
        """``sendReceiptsTo`` for a new stream: the stream-receipt mapping's URL, else this
        gateway's order queue."""
        rules = self._rules()
        mapped = receipt_url_for(rules, destination) if rules is not None else None
        return mapped or f"{self.options.public_url}/msmq/{ORDER_QUEUE}"

    async def on_stream_receipt(self, stream_id: str, last_ordinal: int,
                                final: tuple[bool, int] | None = None) -> bool:
        """Advance the stream a receipt names, or settle the message a final receipt names
        (``final`` = (positive, class)); False when no link has it."""
        if final is not None:
            for link in self.links.values():
                if await link.final_receipt(stream_id, last_ordinal, *final):
                    return True
            return False
        for link in self.links.values():
            if link.stream is not None and link.stream.stream_id == stream_id:
                done = await link.receipt(last_ordinal)
                self.counts.count(link.destination, "acknowledged", done)
                return True
        return False

    def destinations(self) -> list[str]:
        """The destination URL of every link."""
        return [link.destination for link in self.links.values()]

    def find(self, link_id: str) -> Link | ReceiptLane:
        """A link by its outgoing queue's hash, or a receipt lane by its id.

        Raises: KeyError for an unknown id."""
        if link_id.startswith(LANE_ID_PREFIX):
            return self.receipts.find(link_id)
        return self.links[OUTGOING_PREFIX + link_id]

    def summaries(self) -> list[dict[str, object]]:
        out = []
        for canonical, link in sorted(self.links.items(), key=lambda i: i[1].destination):
            summary = link.summary()
            summary["id"] = canonical[len(OUTGOING_PREFIX):]
            out.append(summary)
        out.extend(self.receipts.summaries())
        return out

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        server_log.debug("links stopped: %d", len(self._tasks))
