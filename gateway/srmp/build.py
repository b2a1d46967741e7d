"""``Envelope`` -> bytes, and whole SRMP requests (pure). docs/srmp.md, "MIME framing",
"Framing".

The printer writes what Windows writes: elements concatenated without white space, in the
order of MC-MQSRM §3.1.7.2.4, the envelope and path namespaces as default namespaces, and MSMQ's
multipart framing (part data straight into the next delimiter). Given the values parsed from
a Windows message it gives back the same bytes (vectors D1-D3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from gateway.srmp.envelope import NS_DSIG, NS_MSMQ, NS_RP, NS_SE, NS_SRMP
from gateway.srmp.mime import join_multipart
from gateway.srmp.model import Envelope, MsmqHeader, Path, Services, Stream

__all__ = ["envelope_bytes", "SrmpRequest", "build_request", "BOUNDARY_PREFIX"]

BOUNDARY_PREFIX = "MSMQ - SOAP boundary, "
_MU = ' se:mustUnderstand="1"'


def _el(name: str, text: str) -> str:
    return f"<{name}>{escape(text)}</{name}>"


def _flag(name: str, on: bool) -> str:
    return f"<{name}/>" if on else ""


def _path(path: Path, receipt: bool) -> str:
    """A receipt's ``<rev>`` comes before its ``<id>``, a user message's after it: the order
    of the spec's examples (V03 against V05, V07)."""
    out = [f'<path xmlns="{NS_RP}"{_MU}>', _el("action", path.action), _el("to", path.to)]
    rev = "" if path.rev_via is None else (
        f"<rev>{_el('via', path.rev_via) if path.rev_via else '<via/>'}</rev>")
    out += [rev, _el("id", path.id)] if receipt else [_el("id", path.id), rev]
    out.append("</path>")
    return "".join(out)


def _services(services: Services) -> str:
    out = [f"<services{_MU}>", _flag("durable", services.durable)]
    if services.delivery_receipt_to is not None:
        out.append("<deliveryReceiptRequest>" + _el("sendTo", services.delivery_receipt_to)
                   + "</deliveryReceiptRequest>")
    if services.commitment_receipt_to is not None:
        out.append("<commitmentReceiptRequest>" + _el("sendTo", services.commitment_receipt_to)
                   + _flag("positiveOnly", services.positive_only)
                   + _flag("negativeOnly", services.negative_only)
                   + "</commitmentReceiptRequest>")
    out.append("</services>")
    return "".join(out)


def _stream(stream: Stream) -> str:
    out = [f"<{stream.element}{_MU}>", _el("streamId", stream.stream_id),
           _el("current", str(stream.current))]
    if stream.previous is not None:
        out.append(_el("previous", str(stream.previous)))
    if stream.send_receipts_to is not None:
        out.append("<start>" + _el("sendReceiptsTo", stream.send_receipts_to) + "</start>")
    out.append(f"</{stream.element}>")
    return "".join(out)


def _msmq(m: MsmqHeader) -> str:
    out = [f'<Msmq xmlns="{NS_MSMQ}">', _el("Class", str(m.message_class)),
           _el("Priority", str(m.priority)), _flag("Journal", m.journal),
           _flag("DeadLetter", m.dead_letter)]
    if m.correlation is not None:
        out.append(_el("Correlation", m.correlation))
    out.append(_flag("Trace", m.trace))
    if m.connector_type is not None:
        out.append(_el("ConnectorType", m.connector_type))
    if m.app is not None:
        out.append(_el("App", str(m.app)))
    out.append(_el("BodyType", str(m.body_type)))
    if m.hash_algorithm is not None:
        out.append(_el("HashAlgorithm", str(m.hash_algorithm)))
    if m.eod:
        connector = "" if m.eod_connector is None else _el("ConnectorId", m.eod_connector)
        out.append(f"<Eod>{_flag('First', m.eod_first)}{_flag('Last', m.eod_last)}"
                   f"{connector}</Eod>")
    if m.provider_type is not None or m.provider_name is not None:
        out.append("<Provider>"
                   + ("" if m.provider_type is None else _el("Type", str(m.provider_type)))
                   + ("" if m.provider_name is None else _el("Name", m.provider_name))
                   + "</Provider>")
    out.append(_el("SourceQmGuid", m.source_qm))
    for name, value in (("DestinationMqf", m.destination_mqf), ("AdminMqf", m.admin_mqf),
                        ("ResponseMqf", m.response_mqf), ("TTrq", m.ttrq)):
        if value is not None:
            out.append(_el(name, value))
    out.append("</Msmq>")
    return "".join(out)


def envelope_bytes(env: Envelope) -> bytes:
    receipt = (env.delivery_receipt is not None or env.commitment_receipt is not None
               or env.stream_receipt is not None)
    out = [f'<se:Envelope xmlns:se="{NS_SE}" xmlns="{NS_SRMP}"><se:Header>',
           _path(env.path, receipt),
           f"<properties{_MU}>", _el("expiresAt", env.expires_at)]
    if env.sent_at is not None:
        out.append(_el("sentAt", env.sent_at))
    out.append("</properties>")
    if env.services is not None:
        out.append(_services(env.services))
    if env.stream is not None:
        out.append(_stream(env.stream))
    if env.delivery_receipt is not None:
        r = env.delivery_receipt
        out.append("<deliveryReceipt>" + _el("receivedAt", r.received_at) + _el("id", r.id)
                   + "</deliveryReceipt>")
    if env.commitment_receipt is not None:
        c = env.commitment_receipt
        out.append("<commitmentReceipt>" + _el("decidedAt", c.decided_at)
                   + _el("decision", c.decision) + _el("id", c.id) + "</commitmentReceipt>")
    if env.stream_receipt is not None:
        s = env.stream_receipt
        out.append("<streamReceipt>" + _el("streamId", s.stream_id)
                   + _el("lastOrdinal", str(s.last_ordinal)) + "</streamReceipt>")
    if env.msmq is not None:
        out.append(_msmq(env.msmq))
    if env.signature is not None:
        sig = env.signature
        out.append(f'<Signature xmlns="{NS_DSIG}">' + sig.signed_info.decode()
                   + _el("SignatureValue", sig.signature_value) + "</Signature>")
    out.append("</se:Header><se:Body></se:Body></se:Envelope>")
    return "".join(out).encode("utf-8")


@dataclass(frozen=True, slots=True)
class SrmpRequest:
    """What to POST: the target path, headers in Windows' order, and the body."""

    path: str
    headers: Sequence[tuple[str, str]]
    body: bytes

    def to_bytes(self) -> bytes:
        """The whole HTTP/1.1 request as Windows writes it (for exact comparisons)."""
        head = [f"POST {self.path} HTTP/1.1"] + [f"{k}: {v}" for k, v in self.headers]
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + self.body


def build_request(env: Envelope, body: bytes | None, *, host: str, path: str,
                  boundary_number: int = 0, body_id: str | None = None) -> SrmpRequest:
    """A user message (``body`` given: multipart/related) or a receipt (``body`` None:
    single-part text/xml). ``body_id`` is the GUID of the body's ``Content-Id``
    (default: the sending QM's)."""
    envelope = envelope_bytes(env)
    if body is None:
        content_type, payload = "text/xml", envelope
    else:
        boundary = f"{BOUNDARY_PREFIX}{boundary_number}"
        guid = body_id or (env.msmq.source_qm if env.msmq is not None else env.path.id[-36:])
        payload = join_multipart(boundary, [
            ((("Content-Type", "text/xml; charset=UTF-8"),
              ("Content-Length", str(len(envelope)))), envelope),
            ((("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body))),
              ("Content-Id", f"body@{guid}")), body),
        ])
        content_type = f'multipart/related; boundary="{boundary}"; type=text/xml'
    headers = [("Host", host), ("Content-Type", content_type),
               ("Content-Length", str(len(payload))), ("SOAPAction", '"MSMQMessage"'),
               ("Proxy-Accept", "NonInteractiveClient")]
    return SrmpRequest(path, headers, payload)
