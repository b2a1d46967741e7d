"""Checks on the addresses a sender names for what the gateway or a receiver sends back: the
admin queue (acknowledgements, delivery and commitment receipts) and the response queue.

A sender must not reach through them what it cannot reach as a destination:
- a queue the gateway keeps for itself (``gateway.internal_queues``) is refused (403) from
  everyone, whatever the form of the name (path or a ``DIRECT=`` name of this gateway);
- a local queue needs the same send permission as a destination, and nobody names a
  dead-letter queue or a journal (only the queue manager puts messages there);
- an admin queue on another host must be an allowed outbound address
  (``gateway.auth.outbound``), so no sender can make the gateway connect where it chooses;
  a partner's remote response queue too (a receiver's reply would go there).
SRMP senders name their own machine for responses and receipts: an SRMP response queue on
another host is not checked (the gateway never sends there itself), and an SRMP receipt to a
remote address that is not allowed is dropped when it falls due (``gateway.receipt_gate``)
rather than refusing the message a Windows sender would then dead-letter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.appkeys import STATE_KEY
from gateway.auth.middleware import principal_of
from gateway.auth.outbound import OutboundPolicy
from gateway.auth.principal import Principal
from gateway.destinations import LocalNames, split_destinations
from gateway.errors import ProblemError
from gateway.internal_queues import is_internal
from gateway.msmq.message import MessageProperties
from mapping.names import DEADLETTER, DEADXACT, MACHINE_JOURNAL, QueueNameError, parse_queue_path

__all__ = ["ReplyTarget", "reply_target", "check_reply_addresses", "check_request_replies"]

# Who may send to a local queue: "" when the sender may, else why not.
SendCheck = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """A reply address: a local queue (canonical path), a remote URL, or neither (a format
    name the gateway does not deliver to, such as PUBLIC=)."""

    queue: str = ""
    url: str = ""


def reply_target(value: str, local: LocalNames) -> ReplyTarget:
    """What ``value`` (a queue path or a format name) names."""
    try:
        return ReplyTarget(queue=parse_queue_path(value).canonical)
    except QueueNameError:
        pass
    try:
        paths, urls = split_destinations(value, local)
    except ProblemError:
        return ReplyTarget()
    if len(paths) + len(urls) != 1:
        return ReplyTarget()
    if urls:
        return ReplyTarget(url=urls[0])
    try:
        return ReplyTarget(queue=parse_queue_path(paths[0]).canonical)
    except QueueNameError:
        return ReplyTarget()


def check_reply_addresses(props: MessageProperties, *, local: LocalNames,
                          outbound: OutboundPolicy, may_send: SendCheck,
                          principal: Principal, srmp: bool = False,
                          where: str = "") -> None:
    """Raises ProblemError (400/403, naming the header) when ``props`` names an admin or
    response queue the sender may not use. ``where``: a prefix for the name (a batch item)."""
    for header, value, admin in (("Mq-Admin-Queue", props.admin_queue, True),
                                 ("Mq-Response-Queue", props.response_queue, False)):
        if not value:
            continue
        name = f"{where}{header}"
        target = reply_target(value, local)
        if target.queue:
            _check_local(name, value, target.queue, may_send=may_send)
        elif target.url:
            checked = not srmp and (admin or not (principal.admin or principal.open))
            if checked and not outbound.allows(target.url):
                raise ProblemError(403, f"{name}: {target.url!r} is not an allowed outbound "
                                   "address ([outbound] allow, [[peers]], [[webhooks]] or an "
                                   "outbound redirection)", type_slug="outbound-not-allowed",
                                   extra={"header": header})
        elif admin and not srmp:
            raise ProblemError(400, f"{name}: {value[:200]!r} is neither a queue path nor a "
                               "DIRECT=HTTP(S) format name this gateway can acknowledge to",
                               type_slug="MQ_ERROR_ILLEGAL_FORMATNAME",
                               extra={"header": header})


def _check_local(name: str, value: str, canonical: str, *, may_send: SendCheck) -> None:
    if is_internal(canonical):
        raise ProblemError(403, f"{name}: {value[:200]!r} is a queue the gateway keeps for "
                           "itself", type_slug="MQ_ERROR_ACCESS_DENIED")
    if canonical in (DEADLETTER, DEADXACT, MACHINE_JOURNAL) or canonical.endswith(";journal"):
        raise ProblemError(403, f"{name}: nobody sends to {value[:200]!r}: only the queue "
                           "manager puts messages there", type_slug="MQ_ERROR_ACCESS_DENIED")
    refusal = may_send(canonical)
    if refusal:
        raise ProblemError(403, f"{name}: {refusal}", type_slug="MQ_ERROR_ACCESS_DENIED")


def check_request_replies(request: web.Request, props: MessageProperties, *,
                          where: str = "") -> None:
    """``check_reply_addresses`` for a REST request, with its principal's send permission."""
    state = request.app[STATE_KEY]
    principal = principal_of(request)

    def may_send(canonical: str) -> str:
        if principal.may("send", canonical):
            return ""
        return f"{principal.name} may not send to {canonical!r}"

    check_reply_addresses(props, local=state.local, outbound=state.outbound,
                          may_send=may_send, principal=principal, where=where)
