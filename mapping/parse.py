"""Mapping files -> rules (pure: bytes in, rules out). docs/mapping.md; vectors M01-M03.

Roots, told apart by their namespace:

====================================  ===================================================
``redirections``                      ``<redirection><from/><to/></redirection>``*
(msmq-queue-redirections.xml)         inbound: logical URL -> physical queue
``outbound_redirections``             ``<redirection><destination/><through/>``*,
(msmq_outbound_mapping.xml)           ``<exception>URL|prefix*|local_names</exception>``*
``StreamReceiptSetup``                ``<setup><LogicalAddress/><StreamReceiptURL/>``*,
(msmq-streamreceipt-mapping.xml)      optional ``<default>``
``mapping`` (msmq-queue-mapping.xml)  legacy: ``<queue><name/><alias/></queue>``*, where
                                      alias is the logical address and name the physical
====================================  ===================================================

The parser is namespace-aware, resolves no entities, loads no DTD, reaches no network, and
refuses a document type declaration outright; a file over the size limit or with more
elements than allowed is refused before or while it is read. Any problem rejects the whole
file with its line and the reason (MSMQ logs event 2156 and ignores the file).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from mapping.errors import MappingError
from mapping.rules import OutboundRedirection, Pattern, Redirection, StreamReceipt

__all__ = ["MappingSyntaxError", "MappingFile", "parse_mapping", "FILE_BYTES_MAX",
           "RULES_MAX"]

FILE_BYTES_MAX = 1 << 20
RULES_MAX = 10_000

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                          dtd_validation=False, huge_tree=False, remove_comments=True,
                          remove_pis=True)

NS_REDIRECTIONS = "msmq-queue-redirections.xml"
NS_OUTBOUND = "msmq_outbound_mapping.xml"
NS_STREAM = "msmq-streamreceipt-mapping.xml"
NS_LEGACY = "msmq-queue-mapping.xml"


class MappingSyntaxError(MappingError):
    """A mapping file that is rejected whole; ``line`` is where the problem is (0: unknown)."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}:{line}: {reason}")
        self.source = source
        self.line = line
        self.reason = reason


@dataclass(frozen=True, slots=True)
class MappingFile:
    source: str
    kind: str
    redirections: tuple[Redirection, ...] = ()
    outbound: tuple[OutboundRedirection, ...] = ()
    exceptions: tuple[Pattern, ...] = ()
    local_names: bool = False
    stream_receipts: tuple[StreamReceipt, ...] = ()
    default_receipt_url: str | None = field(default=None)


def parse_mapping(data: bytes, *, source: str) -> MappingFile:
    """Parse one mapping file.

    Raises:
        MappingSyntaxError: too large, not well-formed, a DTD, an unknown root or element, a
            missing or repeated child, too many rules.
    """
    if len(data) > FILE_BYTES_MAX:
        raise MappingSyntaxError(source, 0, f"larger than {FILE_BYTES_MAX} bytes")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise MappingSyntaxError(source, 0, "document type declarations are not allowed")
    try:
        root = etree.fromstring(data, _PARSER)
    except etree.XMLSyntaxError as exc:
        line = exc.lineno or 0
        raise MappingSyntaxError(source, line, f"not well-formed XML: {exc.msg}") from exc
    namespace = etree.QName(root).namespace or ""
    local = etree.QName(root).localname
    parsers = {(NS_REDIRECTIONS, "redirections"): _redirections,
               (NS_OUTBOUND, "outbound_redirections"): _outbound,
               (NS_STREAM, "StreamReceiptSetup"): _stream_receipts,
               (NS_LEGACY, "mapping"): _legacy}
    parser = parsers.get((namespace, local))
    if parser is None:
        raise MappingSyntaxError(source, root.sourceline or 0,
                                 f"unknown root <{local}> in namespace {namespace!r}")
    if sum(1 for _ in root.iter()) > RULES_MAX * 4:
        raise MappingSyntaxError(source, 0, f"more than {RULES_MAX} rules")
    result: MappingFile = parser(root, source)
    return result


def _children(element: etree._Element, source: str, allowed: set[str]
              ) -> list[etree._Element]:
    children = []
    for child in element:
        name = etree.QName(child).localname
        if name not in allowed:
            raise MappingSyntaxError(source, child.sourceline or 0,
                                     f"unexpected <{name}> in <{etree.QName(element).localname}>")
        children.append(child)
    return children


def _text(element: etree._Element, name: str, source: str) -> str:
    found = [c for c in element if etree.QName(c).localname == name]
    if len(found) != 1:
        raise MappingSyntaxError(source, element.sourceline or 0,
                                 f"<{etree.QName(element).localname}> needs exactly one <{name}>")
    text = (found[0].text or "").strip()
    if not text:
        raise MappingSyntaxError(source, found[0].sourceline or 0, f"<{name}> is empty")
    return text


def _origin(source: str, index: int) -> str:
    return f"{source}#{index + 1}"


def _redirections(root: etree._Element, source: str) -> MappingFile:
    rules = []
    for index, item in enumerate(_children(root, source, {"redirection"})):
        _children(item, source, {"from", "to"})
        rules.append(Redirection(Pattern.parse(_text(item, "from", source)),
                                 _text(item, "to", source), _origin(source, index)))
    return MappingFile(source, "redirections", redirections=tuple(rules))


def _legacy(root: etree._Element, source: str) -> MappingFile:
    rules = []
    for index, item in enumerate(_children(root, source, {"queue"})):
        _children(item, source, {"name", "alias"})
        rules.append(Redirection(Pattern.parse(_text(item, "alias", source)),
                                 _text(item, "name", source), _origin(source, index)))
    return MappingFile(source, "legacy", redirections=tuple(rules))


def _outbound(root: etree._Element, source: str) -> MappingFile:
    rules, exceptions, local_names = [], [], False
    for index, item in enumerate(_children(root, source, {"redirection", "exception"})):
        if etree.QName(item).localname == "exception":
            text = (item.text or "").strip()
            if not text:
                raise MappingSyntaxError(source, item.sourceline or 0, "<exception> is empty")
            if text.lower() == "local_names":
                local_names = True
            else:
                exceptions.append(Pattern.parse(text))
            continue
        _children(item, source, {"destination", "through"})
        rules.append(OutboundRedirection(Pattern.parse(_text(item, "destination", source)),
                                         _text(item, "through", source), _origin(source, index)))
    return MappingFile(source, "outbound", outbound=tuple(rules), exceptions=tuple(exceptions),
                       local_names=local_names)


def _stream_receipts(root: etree._Element, source: str) -> MappingFile:
    rules, default = [], None
    for index, item in enumerate(_children(root, source, {"setup", "default"})):
        if etree.QName(item).localname == "default":
            if default is not None:
                raise MappingSyntaxError(source, item.sourceline or 0, "more than one <default>")
            default = (item.text or "").strip()
            if not default:
                raise MappingSyntaxError(source, item.sourceline or 0, "<default> is empty")
            continue
        _children(item, source, {"LogicalAddress", "StreamReceiptURL"})
        rules.append(StreamReceipt(Pattern.parse(_text(item, "LogicalAddress", source)),
                                   _text(item, "StreamReceiptURL", source),
                                   _origin(source, index)))
    return MappingFile(source, "stream_receipts", stream_receipts=tuple(rules),
                       default_receipt_url=default)
