"""SOAP envelope -> ``Envelope`` (pure). docs/srmp.md, "Envelope and header elements";
[MC-MQSRM] §2.2.2-2.2.6, §3.1.5.1.5.

lxml parses namespace-aware, so prefixes do not matter (Windows uses a default namespace on
``<path>``, the spec's example 4.3 uses ``rp:``). The parser resolves no entities, loads no DTD,
reaches no network and refuses a document type declaration, which rules out XXE and
"billion laughs"; the size is bounded before parsing, the nesting depth by libxml2 (256) and
the element count before the tree is looked at. Elements the spec shows only in examples
(``<Stream>``, ``<end/>``, ``<streamReceiptRequest/>``, ``<expiresAt>`` in ``<start>``) are
accepted and ignored.
"""

from __future__ import annotations

import re
import uuid

from lxml import etree

from gateway.srmp.errors import EnvelopeError
from gateway.srmp.model import (
    CommitmentReceipt,
    DeliveryReceipt,
    Envelope,
    MsmqHeader,
    Path,
    Reference,
    Services,
    Signature,
    Stream,
    StreamReceipt,
    objectid_from_base64,
    parse_message_id,
    parse_srmp_time,
    parse_stream_id,
)

__all__ = ["parse_envelope", "ENVELOPE_BYTES_MAX", "NS_SE", "NS_RP", "NS_SRMP", "NS_MSMQ",
           "NS_DSIG"]

ENVELOPE_BYTES_MAX = 1 << 20
# The SignedInfo element's bytes (any prefix): the signature covers them as written.
SIGNED_INFO = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?SignedInfo[\s>/].*?"
                         rb"</(?:[A-Za-z_][\w.-]*:)?SignedInfo\s*>", re.S)
ELEMENTS_MAX = 2000
_MIN_ELEMENT_BYTES = 4
TEXT_CHARS_MAX = 64 * 1024

NS_SE = "http://schemas.xmlsoap.org/soap/envelope/"
NS_RP = "http://schemas.xmlsoap.org/rp/"
NS_SRMP = "http://schemas.xmlsoap.org/srmp/"
NS_MSMQ = "msmq.namespace.xml"
NS_DSIG = "http://www.w3.org/2000/02/xmldsig#"

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                          dtd_validation=False, huge_tree=False, remove_comments=True,
                          remove_pis=True)
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1

_El = etree._Element


def parse_envelope(data: bytes) -> Envelope:
    """Raises: EnvelopeError naming what is wrong (answered 400)."""
    if len(data) > ENVELOPE_BYTES_MAX:
        raise EnvelopeError(f"envelope of {len(data)} bytes is over {ENVELOPE_BYTES_MAX}")
    if b"<!DOCTYPE" in data.upper():
        raise EnvelopeError("a document type declaration is not allowed in an envelope")
    try:
        root = etree.fromstring(data, _PARSER)
    except etree.XMLSyntaxError as exc:
        raise EnvelopeError(f"envelope is not well-formed XML: {exc}") from None
    except ValueError as exc:  # e.g. an encoding declaration lxml cannot use
        raise EnvelopeError(f"envelope cannot be read: {exc}") from None
    if root.getroottree().docinfo.doctype:
        raise EnvelopeError("a document type declaration is not allowed in an envelope")
    _check_shape(root, len(data))
    if _qname(root) != (NS_SE, "Envelope"):
        raise EnvelopeError(f"root element is {root.tag!r}, not a SOAP 1.1 Envelope")
    children = _elements(root)
    if not children or _qname(children[0]) != (NS_SE, "Header"):
        raise EnvelopeError("the SOAP Header must be the Envelope's first child")
    if len(children) > 1 and _qname(children[1]) != (NS_SE, "Body"):
        raise EnvelopeError("only the SOAP Body may follow the Header")
    return _header(children[0], data)


def _check_shape(root: _El, size: int) -> None:
    """Element count; the depth is bounded by libxml2 itself (256 levels without
    XML_PARSE_HUGE, which stays off), and nothing here recurses. An element takes at least
    four bytes (``<a/>``) and no entity expands (no DTD), so a short document needs no count."""
    if size < _MIN_ELEMENT_BYTES * (ELEMENTS_MAX + 1):
        return
    count = 0
    for _ in root.iter():
        count += 1
        if count > ELEMENTS_MAX:
            raise EnvelopeError(f"envelope has more than {ELEMENTS_MAX} elements")


def _qname(element: _El) -> tuple[str, str]:
    """(namespace, local name); not etree.QName, which refuses a namespace holding "}"."""
    tag = str(element.tag)
    if tag.startswith("{"):
        namespace, _, local = tag[1:].rpartition("}")
        return namespace, local
    return "", tag


def _local(element: _El) -> str:
    tag = str(element.tag)
    return tag[tag.rfind("}") + 1:]


def _elements(element: _El) -> list[_El]:
    return [c for c in element if isinstance(c.tag, str)]


def _children(element: _El, where: str) -> dict[str, _El]:
    """Children by local name; a repeated one is an error (SRMP has no repeated elements)."""
    found: dict[str, _El] = {}
    for child in element:
        tag = child.tag
        if not isinstance(tag, str):
            continue
        name = tag[tag.rfind("}") + 1:]
        if name in found:
            raise EnvelopeError(f"<{where}> has more than one <{name}>")
        found[name] = child
    return found


def _text(element: _El, name: str) -> str:
    text = element.text or "" if not len(element) else "".join(element.itertext())
    if len(text) > TEXT_CHARS_MAX:
        raise EnvelopeError(f"<{name}> is longer than {TEXT_CHARS_MAX} characters")
    return text.strip()


def _required(found: dict[str, _El], name: str, where: str) -> str:
    element = found.get(name)
    if element is None:
        raise EnvelopeError(f"<{where}> has no <{name}>")
    return _text(element, name)


def _optional(found: dict[str, _El], name: str) -> str | None:
    element = found.get(name)
    return None if element is None else _text(element, name)


def _number(text: str, name: str, high: int) -> int:
    # More than 20 digits is out of every range here (and int() refuses over 4300 digits).
    if not (text.isascii() and text.isdigit()) or len(text) > 20 or int(text) > high:
        raise EnvelopeError(f"<{name}> {text[:40]!r} is not a number in 0..{high}")
    return int(text)


def _time(text: str, name: str) -> str:
    try:
        parse_srmp_time(text)
    except ValueError as exc:
        raise EnvelopeError(f"<{name}>: {exc}") from None
    return text


def _header(header: _El, data: bytes) -> Envelope:
    parts: dict[str, _El] = {}
    extra: list[str] = []
    for child in _elements(header):
        ns, name = _qname(child)
        if name == "Stream":
            name = "stream"
        known = (ns == NS_RP and name == "path") or (ns == NS_MSMQ and name == "Msmq") or (
            ns == NS_DSIG and name == "Signature") or (ns == NS_SRMP and name in (
                "properties", "services", "stream", "deliveryReceipt", "commitmentReceipt",
                "streamReceipt"))
        if not known:
            extra.append(name)
            continue
        if name in parts:
            raise EnvelopeError(f"the Header has more than one <{name}>")
        parts[name] = child
    if "path" not in parts:
        raise EnvelopeError("the Header has no <path> (namespace http://schemas.xmlsoap.org/rp/)")
    if "properties" not in parts:
        raise EnvelopeError("the Header has no <properties>")
    props = _children(parts["properties"], "properties")
    sent_at = _optional(props, "sentAt")
    return Envelope(
        path=_path(parts["path"]),
        expires_at=_time(_required(props, "expiresAt", "properties"), "expiresAt"),
        sent_at=None if sent_at is None else _time(sent_at, "sentAt"),
        services=_services(parts["services"]) if "services" in parts else None,
        stream=_stream(parts["stream"]) if "stream" in parts else None,
        delivery_receipt=(_delivery_receipt(parts["deliveryReceipt"])
                          if "deliveryReceipt" in parts else None),
        commitment_receipt=(_commitment_receipt(parts["commitmentReceipt"])
                            if "commitmentReceipt" in parts else None),
        stream_receipt=(_stream_receipt(parts["streamReceipt"])
                        if "streamReceipt" in parts else None),
        msmq=_msmq(parts["Msmq"]) if "Msmq" in parts else None,
        signature=_signature(parts["Signature"], data) if "Signature" in parts else None,
        extra_headers=tuple(extra),
    )


def _path(element: _El) -> Path:
    found = _children(element, "path")
    to = _required(found, "to", "path")
    if not to:
        raise EnvelopeError("<to> is empty")
    message_id = _required(found, "id", "path")
    try:
        parse_message_id(message_id)
    except ValueError as exc:
        raise EnvelopeError(f"<id>: {exc}") from None
    rev_via = None
    if "rev" in found:
        vias = [c for c in _elements(found["rev"]) if _local(c) == "via"]
        if len(vias) != 1:
            raise EnvelopeError("<rev> must hold exactly one <via>")
        rev_via = _text(vias[0], "via")
    return Path(action=_required(found, "action", "path"), to=to, id=message_id,
                rev_via=rev_via)


def _send_to(element: _El, where: str) -> str:
    url = _required(_children(element, where), "sendTo", where)
    if not url:
        raise EnvelopeError(f"<{where}><sendTo> is empty")
    return url


def _services(element: _El) -> Services:
    found = _children(element, "services")
    delivery = found.get("deliveryReceiptRequest")
    commitment = found.get("commitmentReceiptRequest")
    commit_found = _children(commitment, "commitmentReceiptRequest") if commitment is not None \
        else {}
    return Services(
        durable="durable" in found,
        delivery_receipt_to=(None if delivery is None
                             else _send_to(delivery, "deliveryReceiptRequest")),
        commitment_receipt_to=(None if commitment is None
                               else _send_to(commitment, "commitmentReceiptRequest")),
        positive_only="positiveOnly" in commit_found,
        negative_only="negativeOnly" in commit_found,
    )


def _stream_id(found: dict[str, _El], where: str) -> str:
    stream_id = _required(found, "streamId", where)
    try:
        parse_stream_id(stream_id)
    except ValueError as exc:
        raise EnvelopeError(f"<streamId>: {exc}") from None
    return stream_id


def _stream(element: _El) -> Stream:
    found = _children(element, "stream")
    stream_id = _stream_id(found, "stream")
    current = _number(_required(found, "current", "stream"), "current", _U32)
    if current == 0:
        raise EnvelopeError("<current> starts at 1")
    previous_text = _optional(found, "previous")
    previous = None if previous_text is None else _number(previous_text, "previous", _U32)
    if previous is not None and previous >= current:
        raise EnvelopeError(f"<previous> {previous} is not below <current> {current}")
    receipts_to = None
    if "start" in found:
        receipts_to = _optional(_children(found["start"], "start"), "sendReceiptsTo")
    return Stream(stream_id=stream_id, current=current, previous=previous,
                  send_receipts_to=receipts_to, element=_local(element))


def _delivery_receipt(element: _El) -> DeliveryReceipt:
    found = _children(element, "deliveryReceipt")
    return DeliveryReceipt(
        received_at=_time(_required(found, "receivedAt", "deliveryReceipt"), "receivedAt"),
        id=_required(found, "id", "deliveryReceipt"))


def _commitment_receipt(element: _El) -> CommitmentReceipt:
    found = _children(element, "commitmentReceipt")
    decision = _required(found, "decision", "commitmentReceipt")
    if decision not in ("positive", "negative"):
        raise EnvelopeError(f"<decision> {decision[:40]!r} is not positive or negative")
    return CommitmentReceipt(
        decided_at=_time(_required(found, "decidedAt", "commitmentReceipt"), "decidedAt"),
        decision=decision, id=_required(found, "id", "commitmentReceipt"))


def _stream_receipt(element: _El) -> StreamReceipt:
    found = _children(element, "streamReceipt")
    return StreamReceipt(stream_id=_stream_id(found, "streamReceipt"), last_ordinal=_number(
        _required(found, "lastOrdinal", "streamReceipt"), "lastOrdinal", _U32))


_CANONICAL_GUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _guid(text: str, name: str) -> str:
    if _CANONICAL_GUID.fullmatch(text):
        return text  # already what str(UUID) gives: skip building a UUID
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise EnvelopeError(f"<{name}> {text[:60]!r} is not a GUID") from None


_MSMQ_NUMBERS = (("Class", 0xFFFF), ("Priority", 7), ("BodyType", 0xFFFF), ("App", _U32),
                 ("HashAlgorithm", _U32))
# The <Msmq> children read as text (others, known or not, are not read).
_MSMQ_TEXTS = frozenset({name for name, _ in _MSMQ_NUMBERS} | {
    "Correlation", "ConnectorType", "TTrq", "SourceQmGuid", "DestinationMqf", "AdminMqf",
    "ResponseMqf"})


def _msmq(element: _El) -> MsmqHeader:
    # Each child's text read once into a dict: this runs for every message, and a helper call
    # per possible element (most are absent) cost more than reading the ones present.
    found = _children(element, "Msmq")
    text = {name: _text(child, name) for name, child in found.items() if name in _MSMQ_TEXTS}
    numbers: dict[str, int | None] = {}
    for name, high in _MSMQ_NUMBERS:
        value = text.get(name)
        numbers[name] = None if value is None else _number(value, name, high)
    klass, priority, body_type = numbers["Class"], numbers["Priority"], numbers["BodyType"]
    if klass is None or priority is None or body_type is None:
        missing = [n for n, v in (("Class", klass), ("Priority", priority),
                                  ("BodyType", body_type)) if v is None]
        raise EnvelopeError(f"<Msmq> has no <{missing[0]}>")
    correlation = text.get("Correlation")
    if correlation is not None:
        try:
            objectid_from_base64(correlation)
        except ValueError as exc:
            raise EnvelopeError(f"<Correlation>: {exc}") from None
    eod = _children(found["Eod"], "Eod") if "Eod" in found else {}
    provider = _children(found["Provider"], "Provider") if "Provider" in found else {}
    provider_type = _optional(provider, "Type")
    connector = text.get("ConnectorType")
    eod_connector = _optional(eod, "ConnectorId")
    ttrq = text.get("TTrq")
    source_qm = text.get("SourceQmGuid")
    if source_qm is None:
        raise EnvelopeError("<Msmq> has no <SourceQmGuid>")
    return MsmqHeader(
        message_class=klass, priority=priority, journal="Journal" in found,
        dead_letter="DeadLetter" in found, correlation=correlation, trace="Trace" in found,
        connector_type=None if connector is None else _guid(connector, "ConnectorType"),
        app=numbers["App"], body_type=body_type, hash_algorithm=numbers["HashAlgorithm"],
        eod="Eod" in found, eod_first="First" in eod, eod_last="Last" in eod,
        eod_connector=None if eod_connector is None else _guid(eod_connector, "ConnectorId"),
        provider_type=(None if provider_type is None
                       else _number(provider_type, "Provider/Type", _U32)),
        provider_name=_optional(provider, "Name"),
        source_qm=_guid(source_qm, "SourceQmGuid"),
        destination_mqf=text.get("DestinationMqf"),
        admin_mqf=text.get("AdminMqf"),
        response_mqf=text.get("ResponseMqf"),
        ttrq=None if ttrq is None else _time(ttrq, "TTrq"),
    )


def _signature(element: _El, data: bytes) -> Signature:
    found = _children(element, "Signature")
    signed_info = found.get("SignedInfo")
    if signed_info is None:
        raise EnvelopeError("<Signature> has no <SignedInfo>")
    method = next((c.get("Algorithm", "") for c in _elements(signed_info)
                   if _local(c) == "SignatureMethod"), "")
    references = []
    for ref in _elements(signed_info):
        if _local(ref) != "Reference":
            continue
        ref_found = _children(ref, "Reference")
        digest_method = ref_found.get("DigestMethod")
        references.append(Reference(
            uri=ref.get("URI", ""),
            digest_method="" if digest_method is None else digest_method.get("Algorithm", ""),
            digest_value=_required(ref_found, "DigestValue", "Reference")))
    return Signature(signature_method=method, references=tuple(references),
                     signature_value=_required(found, "SignatureValue", "Signature"),
                     signed_info=_raw_signed_info(data))


def _raw_signed_info(data: bytes) -> bytes:
    """``SignedInfo`` as it appears in the envelope: what the signature covers."""
    match = SIGNED_INFO.search(data)
    if match is None:  # a SignedInfo the pattern misses: lxml saw one, so keep its form
        raise EnvelopeError("<SignedInfo> is not written as a plain element")
    return match.group(0)
