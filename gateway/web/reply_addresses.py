"""Checks on the addresses a sender names for what the gateway or a receiver sends back: the
admin queue (acknowledgements, delivery and commitment receipts) and the response queue.

A sender must not reach through them what it cannot reach as a destination:
- a queue the gateway keeps for itself (``gateway.queues.internal``) is refused (403) from
  everyone, whatever the form of the name (path or a ``DIRECT=`` name of this gateway);
- a local queue needs the same send permission as a destination, and nobody names a
  dead-letter queue or a journal (only the queue manager puts messages there);
- an admin queue on another host must be an allowed outbound address
  (``gateway.auth.outbound``), so no sender can make the gateway connect where it chooses;
  a partner's remote response queue too (a receiver's reply would go there).
SRMP senders name their own machine for responses and receipts: an SRMP response queue on
another host is not checked (the gateway never sends there itself), and an SRMP receipt to a
remote address that is not allowed is dropped when it falls due (``gateway.outbound.receipt_gate``)
rather than refusing the message a Windows sender would then dead-letter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.auth.outbound import OutboundPolicy
from gateway.auth.principal import Principal
from gateway.errors import ProblemError
from gateway.msmq.message import MessageProperties
from gateway.queues.internal import is_internal
from gateway.queues.local_names import LocalNames
from gateway.web.appkeys import STATE_KEY
from gateway.web.auth_middleware import principal_of
from gateway.web.state import GatewayState
from mapping.errors import FormatNameError
from mapping.formatnames import DirectFormatName, MultipleFormatName, parse_format_name
from mapping.names import DEADLETTER, DEADXACT, MACHINE_JOURNAL, QueueNameError, parse_queue_path

__all__ = ["ReplyTarget", "reply_targets", "check_reply_addresses", "check_request_replies",
           "check_principal_replies"]

# Who may send to a local queue: "" when the sender may, else why not.
SendCheck = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """One element of a reply address: a local queue (canonical path), a remote URL, or
    neither (``foreign``: a format name the gateway cannot check, such as PUBLIC=)."""

    queue: str = ""
    url: str = ""
    foreign: str = ""


def reply_targets(value: str, local: LocalNames) -> list[ReplyTarget] | None:
    """What ``value`` (a queue path or a format name, possibly of several elements) names;
    None when it is neither."""
    with contextlib.suppress(QueueNameError):  # not a path: perhaps a format name
        return [ReplyTarget(queue=parse_queue_path(value).canonical)]
    try:
        parsed = parse_format_name(value)
    except FormatNameError:
        return None
    elements = parsed.elements if isinstance(parsed, MultipleFormatName) else (parsed,)
    targets = []
    for element in elements:
        if isinstance(element, DirectFormatName) and local.owns(element):
            try:
                targets.append(ReplyTarget(queue=element.path.canonical))
            except QueueNameError:
                return None
        elif isinstance(element, DirectFormatName) and local.names_host(element):
            # this gateway under a virtual directory it does not serve: nothing reaches it
            targets.append(ReplyTarget(foreign=element.format_name()))
        elif isinstance(element, DirectFormatName) and element.protocol in ("http", "https"):
            targets.append(ReplyTarget(url=element.url()))
        else:
            targets.append(ReplyTarget(foreign=element.format_name()))
    return targets


def check_reply_addresses(props: MessageProperties, *, local: LocalNames,
                          outbound: OutboundPolicy, may_send: SendCheck,
                          principal: Principal, srmp: bool = False,
                          where: str = "") -> None:
    """Raises ProblemError (400/403, naming the header) when ``props`` names an admin or
    response queue the sender may not use. ``where``: a prefix for the name (a batch item)."""
    trusted = principal.admin or principal.open
    for header, value, admin in (("Mq-Admin-Queue", props.admin_queue, True),
                                 ("Mq-Response-Queue", props.response_queue, False)):
        if not value:
            continue
        name = f"{where}{header}"
        targets = reply_targets(value, local)
        if targets is None or (admin and len(targets) != 1):
            if srmp:
                continue  # the sender's own name for itself; nothing is sent there by it
            raise ProblemError(400, f"{name}: {value[:200]!r} is not a queue path or a format "
                               "name" + (" of one queue" if admin else ""),
                               type_slug="MQ_ERROR_ILLEGAL_FORMATNAME",
                               extra={"header": header})
        for target in targets:
            if target.queue:
                _check_local(name, value, target.queue, may_send=may_send)
            elif srmp:
                continue  # remote: receipts are checked when they fall due (receipt_gate)
            elif target.url and (admin or not trusted) and not outbound.allows(target.url):
                raise ProblemError(403, f"{name}: {target.url!r} is not an allowed outbound "
                                   "address ([outbound] allow, [[peers]], [[webhooks]] or an "
                                   "outbound redirection)", type_slug="outbound-not-allowed",
                                   extra={"header": header})
            elif target.foreign and admin:
                raise ProblemError(400, f"{name}: {target.foreign!r} is not a queue this "
                                   "gateway can acknowledge to",
                                   type_slug="MQ_ERROR_ILLEGAL_FORMATNAME",
                                   extra={"header": header})
            elif target.foreign and not trusted:
                raise ProblemError(403, f"{name}: {target.foreign!r} is not a queue this "
                                   "gateway can check against the partner's send list",
                                   type_slug="MQ_ERROR_ACCESS_DENIED", extra={"header": header})


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
    check_principal_replies(request.app[STATE_KEY], principal_of(request), props, where=where)


def check_principal_replies(state: GatewayState, principal: Principal,
                            props: MessageProperties, *, where: str = "") -> None:
    """``check_request_replies`` for ``principal``'s send (one process, or the store owner
    for a front's command)."""
    def may_send(canonical: str) -> str:
        if principal.may("send", canonical):
            return ""
        return f"{principal.name} may not send to {canonical!r}"

    check_reply_addresses(props, local=state.local, outbound=state.outbound,
                          may_send=may_send, principal=principal, where=where)
