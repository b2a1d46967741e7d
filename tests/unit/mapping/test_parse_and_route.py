"""Mapping files M01-M03 (srmp-vectors.txt), every rule kind, precedence, and refusals."""

from __future__ import annotations

import pytest

from mapping.engine import combine, receipt_url_for, route_inbound, route_outbound
from mapping.parse import MappingSyntaxError, parse_mapping
from mapping.rules import normalise_address

M01 = b"""<redirections xmlns="msmq-queue-redirections.xml">
<redirection>
<from>https://www.northwindtraders.com/msmq/orderq</from>
<to>https://OrderServer/msmq/private$/orderq</to>
</redirection>
</redirections>"""

# As published: the blog post shows no closing </mapping> tag.
M02 = b"""<mapping host="localhost" xmlns="msmq-queue-mapping.xml">
<queue>
<name>https://OrderServer/msmq/private$/orderq</name>
<alias>https://www.northwindtraders.com/msmq/orderq</alias>
</queue>"""

M03 = b"""<mapping host="localhost" xmlns="msmq-queue-mapping.xml">
<queue>
<name>https://OrderServer/msmq/private$/order_queue$</name>
<alias>https://www.northwindtraders.com/msmq/orderack</alias>
</queue>
</mapping>"""


def test_m01_inbound_redirection() -> None:
    rules = combine([parse_mapping(M01, source="m01.xml")])
    found = route_inbound(rules, "HTTPS://WWW.northwindtraders.com:443/MSMQ/OrderQ")
    assert found is not None
    assert found.target == "https://OrderServer/msmq/private$/orderq"
    assert found.origin == "m01.xml#1"
    assert route_inbound(rules, "https://www.northwindtraders.com/msmq/other") is None


def test_m02_as_published_is_rejected_because_it_is_not_well_formed() -> None:
    """The spec example lacks its closing tag: the file is refused whole, naming the line."""
    with pytest.raises(MappingSyntaxError) as info:
        parse_mapping(M02, source="m02.xml")
    assert "not well-formed" in info.value.reason
    assert info.value.line >= 5


def test_m02_completed_means_the_same_as_m01() -> None:
    legacy = combine([parse_mapping(M02 + b"\n</mapping>", source="m02.xml")])
    modern = combine([parse_mapping(M01, source="m01.xml")])
    address = "https://www.northwindtraders.com/msmq/orderq"
    assert route_inbound(legacy, address).target == route_inbound(modern, address).target  # type: ignore[union-attr]


def test_m03_gives_the_order_queue_an_external_alias() -> None:
    rules = combine([parse_mapping(M03, source="m03.xml")])
    found = route_inbound(rules, "https://www.northwindtraders.com/msmq/orderack")
    assert found is not None and found.target.endswith("private$/order_queue$")


def test_outbound_redirections_and_exceptions() -> None:
    data = b"""<outbound_redirections xmlns="msmq_outbound_mapping.xml">
      <redirection><destination>https://partner.example/*</destination>
        <through>https://front.internal/msmq</through></redirection>
      <exception>https://partner.example/msmq/direct*</exception>
      <exception>local_names</exception>
    </outbound_redirections>"""
    rules = combine([parse_mapping(data, source="out.xml")])
    found = route_outbound(rules, "DIRECT=HTTPS://partner.example/msmq/private$/in")
    assert found is not None and found.through == "https://front.internal/msmq"
    assert route_outbound(rules, "https://partner.example/msmq/direct_q") is None
    assert route_outbound(rules, "https://partner.example/msmq/q", local_name=True) is None
    assert route_outbound(rules, "https://other.example/msmq/q") is None


def test_stream_receipt_setup_and_default() -> None:
    data = b"""<StreamReceiptSetup xmlns="msmq-streamreceipt-mapping.xml">
      <setup><LogicalAddress>https://partner.example/msmq/*</LogicalAddress>
        <StreamReceiptURL>https://gw.example/msmq/orderack</StreamReceiptURL></setup>
      <default>https://gw.example/msmq/private$/order_queue$</default>
    </StreamReceiptSetup>"""
    rules = combine([parse_mapping(data, source="sr.xml")])
    assert receipt_url_for(rules, "https://partner.example/msmq/q") == \
        "https://gw.example/msmq/orderack"
    assert receipt_url_for(rules, "https://elsewhere/msmq/q") == \
        "https://gw.example/msmq/private$/order_queue$"


def _redirections(*pairs: tuple[str, str]) -> bytes:
    body = "".join(f"<redirection><from>{a}</from><to>{b}</to></redirection>"
                   for a, b in pairs)
    return f'<redirections xmlns="msmq-queue-redirections.xml">{body}</redirections>'.encode()


def test_precedence_exact_then_longest_prefix_then_first_file_and_element() -> None:
    first = parse_mapping(_redirections(("http://h/msmq/*", "short"),
                                        ("http://h/msmq/orders*", "long"),
                                        ("http://h/msmq/orders*", "long-second")),
                          source="a.xml")
    second = parse_mapping(_redirections(("http://h/msmq/orders", "exact"),
                                         ("http://h/msmq/orders*", "long-other-file")),
                           source="b.xml")
    rules = combine([second, first])  # given out of order: files are ordered by name
    assert rules.files == ("a.xml", "b.xml")
    assert route_inbound(rules, "http://h/msmq/orders").target == "exact"  # type: ignore[union-attr]
    assert route_inbound(rules, "http://h/msmq/orders2").target == "long"  # type: ignore[union-attr]
    assert route_inbound(rules, "http://h/msmq/x").target == "short"  # type: ignore[union-attr]


@pytest.mark.parametrize("data, fragment", [
    (b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
     b'<redirections xmlns="msmq-queue-redirections.xml">&x;</redirections>',
     "document type declarations"),
    (b"<other/>", "unknown root"),
    (b'<redirections xmlns="msmq-queue-redirections.xml"><redirection><from>a</from>'
     b'</redirection></redirections>', "exactly one <to>"),
    (b'<redirections xmlns="msmq-queue-redirections.xml"><oops/></redirections>',
     "unexpected <oops>"),
    (b'<redirections xmlns="msmq-queue-redirections.xml"><redirection><from>a</from>'
     b'<to> </to></redirection></redirections>', "<to> is empty"),
    (b"<redirections", "not well-formed"),
    (b" " * (1 << 20) + b"<x/>", "larger than"),
])
def test_bad_files_are_rejected_whole_with_a_reason(data: bytes, fragment: str) -> None:
    with pytest.raises(MappingSyntaxError) as info:
        parse_mapping(data, source="bad.xml")
    assert fragment in str(info.value)
    assert str(info.value).startswith("bad.xml:")


def test_billion_laughs_is_refused() -> None:
    data = (b'<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
            b'<redirections xmlns="msmq-queue-redirections.xml">&lol2;</redirections>')
    with pytest.raises(MappingSyntaxError):
        parse_mapping(data, source="lol.xml")


@pytest.mark.parametrize("text, expected", [
    ("HTTPS://Host:443/MSMQ\\Private$\\Q", "https://host/msmq/private$/q"),
    ("DIRECT=http://h:80/msmq/q", "http://h/msmq/q"),
    ("http://h:8080/msmq/Q", "http://h:8080/msmq/q"),
])
def test_addresses_normalise(text: str, expected: str) -> None:
    assert normalise_address(text) == expected
