"""Sends addressed by format name (``POST /v1/messages`` with ``Mq-Destination``).

A format name is local when it names this gateway (one of its host names) or the local
machine (``DIRECT=OS:.``). Remote destinations are forwarded by links; with no link for them
the send is refused (422) and nothing is stored. A multiple-element format name sends a copy to
each destination, all in one atomic store commit. When such a send is transactional
(``Mq-Transaction: single``, or no header and a transactional local destination), a local
destination that is not transactional gets no copy: the copy goes to ``system$;deadxact`` with
class NACK_NOT_TRANSACTIONAL_Q and a negative acknowledgement goes to the admin queue. A send
in an explicit transaction, or to one local queue, refuses such a queue instead (the table in
docs/rest-api.md §Sends by format name, which a test runs row by row).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import replace

from gateway.msmq.classes import MessageClass
from gateway.msmq.message import MessageProperties, compose_id
from gateway.queues import sending
from gateway.queues.copies import ack_specs, dead_letter_spec
from gateway.queues.errors import BadRequest, Unprocessable
from gateway.queues.local_names import LocalNames
from gateway.queues.manager import Queue, QueueManager, ReceivedMessage
from gateway.queues.wire_ids import local_id
from mapping.engine import route_inbound
from mapping.errors import FormatNameError
from mapping.formatnames import (
    DirectFormatName,
    MultipleFormatName,
    SingleFormatName,
    parse_format_name,
)
from mapping.rules import RuleSet

__all__ = ["redirect_inbound", "resolve_local", "split_destinations", "remote_positions",
           "send_to_destinations"]


def redirect_inbound(text: str, rules: RuleSet | None) -> str:
    """Apply the inbound redirections (mapping files) to each element of a format name, before
    any queue lookup: a logical address becomes the physical one the rules name (a URL, or a
    local queue path). A name that does not parse, or that no rule touches, is returned as it
    is (so a caller can tell whether a redirection applied)."""
    if rules is None or not rules.redirections:
        return text
    try:
        parsed = parse_format_name(text)
    except FormatNameError:
        return text
    elements = parsed.elements if isinstance(parsed, MultipleFormatName) else (parsed,)
    out = []
    changed = False
    for element in elements:
        found = None
        if isinstance(element, DirectFormatName) and element.protocol in ("http", "https"):
            found = route_inbound(rules, element.url())
        changed = changed or found is not None
        if found is None:
            out.append(element.format_name())
        elif "://" in found.target:
            out.append("DIRECT=" + found.target)
        else:
            out.append("DIRECT=OS:.\\" + found.target.replace("/", "\\"))
    return ",".join(out) if changed else text


def split_destinations(text: str, local: LocalNames) -> tuple[list[str], list[str]]:
    """(local queue paths, remote queue URLs) of the elements of the format name ``text``;
    remote ones are reached by links over SRMP, so they must be HTTP(S) direct names.

    Raises:
        QueueError: 400 for a bad format name; 422 for a remote element SRMP cannot reach.
    """
    paths, urls, _ = _split(text, local)  # senders repeat the same few names: parsed once
    return list(paths), list(urls)


def remote_positions(text: str, local: LocalNames) -> list[int]:
    """Where the remote elements of the format name ``text`` stand among all its elements
    (``split_destinations`` lists the local and the remote ones apart), so an answer can
    list the copies in the order the client named the destinations."""
    return list(_split(text, local)[2])


@functools.lru_cache(maxsize=1024)
def _split(text: str, local: LocalNames
           ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]:
    try:
        parsed = parse_format_name(text)
    except FormatNameError as exc:
        raise BadRequest(str(exc), type_slug=exc.code) from exc
    elements: tuple[SingleFormatName, ...] = (
        parsed.elements if isinstance(parsed, MultipleFormatName) else (parsed,))
    paths: list[str] = []
    urls: list[str] = []
    remote_at: list[int] = []
    for position, element in enumerate(elements):
        if isinstance(element, DirectFormatName):
            try:
                local.check_vdir(element)  # else it would go to this gateway by HTTP
            except FormatNameError as exc:
                raise BadRequest(str(exc), type_slug=exc.code) from exc
        if isinstance(element, DirectFormatName) and local.owns(element):
            paths.append(element.display_queue or element.queue)
        elif isinstance(element, DirectFormatName) and element.protocol in ("http", "https"):
            urls.append(element.url())
            remote_at.append(position)
        else:
            raise Unprocessable(f"{element.format_name()} is not on this gateway and "
                                "SRMP links reach only DIRECT=HTTP(S) format names",
                                type_slug="no-route")
    return tuple(paths), tuple(urls), tuple(remote_at)


def resolve_local(text: str, local: LocalNames) -> list[str]:
    """The local queue path of each element of the format name ``text``.

    Raises:
        QueueError: 400 for a bad format name; 422 when an element is not local.
    """
    paths, urls = split_destinations(text, local)
    if urls:
        raise Unprocessable(f"{urls[0]} is not on this gateway", type_slug="no-route")
    return paths


async def send_to_destinations(qm: QueueManager, paths: list[str], body: bytes,
                               properties: MessageProperties, *, transactional: bool,
                               remote: Sequence[tuple[Queue, str]] = (),
                               remote_at: Sequence[int] = (),
                               dedup_key: tuple[str, str] | None = None
                               ) -> dict[str, object]:
    """One copy per destination in one atomic commit (a remote one in its outgoing queue,
    ``remote`` = (outgoing queue, destination URL)); returns the answer: the stored copies,
    in the destinations' order (``remote_at``: the remote ones' places, as
    ``remote_positions`` gives them; without it the remote ones come first), and the
    destinations whose copy was dead-lettered. With ``dedup_key`` (key, digest) the answer
    is remembered in the duplicate window in the same commit."""
    specs: list[sending.Send] = []
    try:
        return await _send(qm, paths, body, properties, transactional, remote, remote_at,
                           dedup_key, specs)
    except BaseException:
        sending.release(qm.store, specs)
        raise


async def _send(qm: QueueManager, paths: list[str], body: bytes,
                properties: MessageProperties, transactional: bool,
                remote: Sequence[tuple[Queue, str]], remote_at: Sequence[int],
                dedup_key: tuple[str, str] | None, specs: list[sending.Send]
                ) -> dict[str, object]:
    now_ms = int(time.time() * 1000)
    remote_places = list(remote_at) or list(range(len(remote)))
    taken = set(remote_places)
    local_places = [n for n in range(len(remote) + len(paths)) if n not in taken]
    stored: list[tuple[int, ReceivedMessage]] = []
    dead: list[dict[str, str]] = []
    for outgoing, url in remote:
        assert qm.wire_ids is not None
        # A copy for a remote queue gets its wire id now (kept with it, so a resend after a
        # restart carries the same one): one-to-one with the id the answer shows.
        message_id = properties.message_id or local_id(qm.qm_guid, await qm.wire_ids.next())
        props = replace(properties, message_id=message_id, transactional=transactional,
                        arrived_at_ms=now_ms,
                        sent_at_ms=properties.sent_at_ms or now_ms,
                        source_qm=properties.source_qm or qm.qm_guid,
                        priority=0 if transactional else properties.priority,
                        recoverable=properties.recoverable or transactional,
                        extra={**properties.extra, "srmp_to": url})
        seq = sending.reserve(qm.store, outgoing)
        message = ReceivedMessage(props.message_id or compose_id(qm.qm_guid,
                                                                  outgoing.queue_id, seq),
                                  url, seq, props, body)
        # Durable in the outgoing queue until its link delivers it, express or not.
        specs.append(sending.message(outgoing, props, body, seq=seq, express=False))
        stored.append((remote_places[len(stored)], message))
    for place, path in zip(local_places, paths):
        queue = qm.queue(path)
        props = replace(properties, transactional=transactional, arrived_at_ms=now_ms,
                        sent_at_ms=properties.sent_at_ms or now_ms,
                        source_qm=properties.source_qm or qm.qm_guid,
                        priority=0 if transactional else properties.priority,
                        recoverable=True)
        if transactional and not queue.settings.transactional:
            nack = MessageClass.NACK_NOT_TRANSACTIONAL_Q
            message = ReceivedMessage(props.message_id or "", queue.path.display, 0, props, body)
            specs.append(dead_letter_spec(qm, queue, message, nack, now_ms))
            specs.extend(ack_specs(qm, queue, message, nack, now_ms))
            dead.append({"queue": queue.path.display, "class": nack.msmq_name})
            continue
        queue = qm.check_send(path, transactional=transactional)
        seq = sending.reserve(qm.store, queue)
        message = ReceivedMessage(props.message_id or compose_id(qm.qm_guid, queue.queue_id,
                                                                  seq),
                                  queue.path.display, seq, props, body)
        specs.append(sending.message(queue, props, body, seq=seq))
        stored.append((place, message))
    if not specs:
        raise BadRequest("no destination", type_slug="bad-request")
    stored.sort(key=lambda placed: placed[0])
    answer = answer_of([m for _, m in stored], dead)
    if dedup_key is not None:  # remembered in the same commit as the messages
        assert qm.dedup is not None
        specs.append(qm.dedup.spec(dedup_key[0], dedup_key[1], answer))
    made = await sending.commit(qm.store, specs, atomic=True, arrived=qm.arrived)
    if dedup_key is not None and qm.dedup is not None:
        qm.dedup.done(dedup_key[0], dedup_key[1], answer, made[-1])
    return answer


def answer_of(stored: list[ReceivedMessage], dead: list[dict[str, str]]
              ) -> dict[str, object]:
    return {"messages": [{"id": m.message_id, "queue": m.queue, "seq": m.seq}
                         for m in stored], "dead_lettered": dead}
