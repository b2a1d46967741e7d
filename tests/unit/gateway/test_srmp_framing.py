"""What the gateway writes looks like what Windows writes (issue 31 item 6): receipts in the
element order of the spec's receipts, Correlation/App/HashAlgorithm always present, URLs with
a lower-case scheme."""

from __future__ import annotations

import re

import pytest

from gateway.msmq.classes import AckLevel
from gateway.msmq.message import MessageProperties
from gateway.srmp.build import envelope_bytes
from gateway.srmp.codec import parse_request
from gateway.srmp.outbound import outbound_envelope, url_of_format_name
from gateway.srmp.receipts import delivery_receipt
from tests.srmp_vectors import wire

QM = "ac678228-2dd6-418b-b31f-0539ffeea853"


def _compact(body: bytes) -> bytes:
    """A printed spec envelope as Windows puts it on the wire (no presentation white space)."""
    return re.sub(rb">\s+<", b"><", body.replace(b"\r\nxmlns=", b" xmlns=")).strip()


@pytest.mark.parametrize("name", ["V05", "V07"])
def test_receipts_print_as_the_spec_shows_them(name: str) -> None:
    request = wire(name)
    message = parse_request(request.headers["Content-Type"], request.body)
    assert envelope_bytes(message.envelope) == _compact(request.body)


def test_a_delivery_receipt_has_the_shape_of_v05() -> None:
    envelope = delivery_receipt(original_id="uuid:1@00000000-0000-0000-0000-000000000000",
                                label="", send_to="http://machine1/MSMQ/private$/receipts",
                                queue_url="http://machine2/msmq/private$/simpleq",
                                received_at_s=1184815494, qm_guid=QM, ordinal=34826,
                                now_s=1184815491, correlation="AAAAAAAAAAAAAAAAAAAAAAEAAAA=")
    request = wire("V05")
    assert envelope_bytes(envelope) == _compact(request.body)


def test_a_user_message_writes_correlation_app_and_hash_algorithm_like_windows() -> None:
    props = MessageProperties(sent_at_ms=1_900_000_000_000, recoverable=False)
    printed = envelope_bytes(outbound_envelope(
        props, to="http://machine2/msmq/private$/simpleQ", ordinal=20503, qm_guid=QM,
        admin_url=None, response_url=None, stream=None)).decode()
    msmq = re.search(r"<Msmq [^>]*>(.*)</Msmq>", printed)
    assert msmq is not None
    assert re.findall(r"<(\w+)[ />]", msmq.group(1)) == [
        "Class", "Priority", "Correlation", "App", "BodyType", "HashAlgorithm",
        "SourceQmGuid", "TTrq"]  # V02's elements, in V02's order
    assert "<Correlation>AAAAAAAAAAAAAAAAAAAAAAAAAAA=</Correlation><App>0</App>" in printed
    assert "<HashAlgorithm>32772</HashAlgorithm>" in printed


@pytest.mark.parametrize("given, on_the_wire", [(-1, 4294967295), (-7, 4294967289),
                                                (4294967295, 4294967295), (42, 42)])
def test_app_specific_goes_out_as_the_ulong_windows_reads(given: int, on_the_wire: int) -> None:
    """A REST client may give it as .NET's Int32 shows it: a peer reads <App> as unsigned
    (entrepot's own SRMP front door refused <App>-1</App>, and the link lost the message)."""
    props = MessageProperties(sent_at_ms=1_900_000_000_000, app_specific=given)
    printed = envelope_bytes(outbound_envelope(
        props, to="http://machine2/msmq/private$/q", ordinal=1, qm_guid=QM, admin_url=None,
        response_url=None, stream=None)).decode()
    assert f"<App>{on_the_wire}</App>" in printed


def test_format_names_become_urls_with_a_lower_case_scheme() -> None:
    assert url_of_format_name("DIRECT=HTTP://Machine1/MSMQ/private$/Q1") == (
        "http://Machine1/MSMQ/private$/Q1")
    assert url_of_format_name("direct=https://h/msmq/q") == "https://h/msmq/q"
    props = MessageProperties(sent_at_ms=1_900_000_000_000, ack=int(AckLevel.POS_ARRIVAL),
                              admin_queue="DIRECT=HTTP://machine1/msmq/private$/admin")
    printed = envelope_bytes(outbound_envelope(
        props, to="http://machine2/msmq/private$/q", ordinal=1, qm_guid=QM,
        admin_url=url_of_format_name(props.admin_queue),
        response_url=url_of_format_name("DIRECT=HTTP://machine1/msmq/private$/r"),
        stream=None))
    assert b"HTTP://" not in printed
    assert b"<sendTo>http://machine1/msmq/private$/admin</sendTo>" in printed


@pytest.mark.parametrize("given, on_the_wire", [
    # a message id: the GUID's 16 bytes as Windows lays them out (little-endian groups), then
    # the number's 4, little-endian
    ("{" + QM + "}\\7", "KIJnrNYti0GzHwU5/+6oUwcAAAA="),
    ("order-42", "AAAAAAAAAAAAAAAAAAAAAAAAAAA="),  # other text: none (docs/rest-api.md)
])
def test_only_a_message_id_crosses_as_the_correlation(given: str, on_the_wire: str) -> None:
    """SRMP's Correlation is an OBJECTID; a REST client's free text cannot be one."""
    props = MessageProperties(sent_at_ms=1_900_000_000_000, correlation_id=given)
    printed = envelope_bytes(outbound_envelope(
        props, to="http://machine2/msmq/private$/q", ordinal=1, qm_guid=QM, admin_url=None,
        response_url=None, stream=None)).decode()
    assert f"<Correlation>{on_the_wire}</Correlation>" in printed
