from __future__ import annotations

import contextlib
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from gateway.msmq.classes import AckLevel, parse_ack_level
from gateway.msmq.message import (
    MessageFormatError,
    MessageProperties,
    compose_id,
    decode_payload,
    encode_payload,
    parse_id,
    properties_of,
    property_values,
)
from gateway.queues.local_names import local_host_names, machine_addresses
from gateway.web.rest_codec import HeaderError, message_location, parse_send_headers
from mapping.names import QueueNameError, journal_of, parse_queue_path

GUID = "12345678-1234-1234-1234-123456789abc"


@pytest.mark.parametrize("text, canonical, private", [
    ("orders", "orders", False),
    ("Private$/Orders", "private$/orders", True),
    ("private$\\ORDERS", "private$/orders", True),
    ("SYSTEM$;DEADLETTER", "system$;deadletter", False),
    ("orders;journal", "orders;journal", False),
    ("private$/order_queue$", "private$/order_queue$", True),
])
def test_queue_paths_normalise(text: str, canonical: str, private: bool) -> None:
    path = parse_queue_path(text)
    assert (path.canonical, path.private) == (canonical, private)


@pytest.mark.parametrize("text", ["", "private$/", "a b", "a\"b", "a+b", "a,b", "x" * 125,
                                  "private$/a/b", "a\tb", "private$", "system$", "a\nb"])
def test_invalid_queue_paths(text: str) -> None:
    with pytest.raises(QueueNameError):
        parse_queue_path(text)


def test_journal_of_keeps_case() -> None:
    assert journal_of(parse_queue_path("private$/Orders")).display == "private$/Orders;journal"


@given(st.integers(1, 2**20), st.integers(1, 2**39))
def test_ids_round_trip(queue_id: int, seq: int) -> None:
    assert parse_id(compose_id(GUID, queue_id, seq), GUID) == (queue_id, seq)
    assert parse_id(compose_id(GUID, queue_id, seq), "other") is None


def test_an_id_with_a_line_break_after_it_is_no_id() -> None:
    # A regular expression's $ matches before a final newline: an id must end where it ends.
    assert parse_id(compose_id(GUID, 3, 4) + "\n", GUID) is None


@given(st.text(max_size=40), st.integers(0, 7), st.binary(max_size=200))
def test_payload_round_trip(label: str, priority: int, body: bytes) -> None:
    props = MessageProperties(label=label, priority=priority, extra={"k": "v"})
    decoded = decode_payload(encode_payload(props, body))
    assert decoded.properties == props
    assert decoded.body == body


@given(st.builds(MessageProperties, **{
    f.name: (st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2)
             if f.name == "extra" else st.from_type(type(f.default)))
    for f in fields(MessageProperties)}))
def test_properties_cross_processes_as_their_values(props: MessageProperties) -> None:
    """What a front sends the owner (``property_values``) comes back as the same properties,
    every field in its place."""
    again = properties_of(property_values(props))
    assert again == props and again is not props


@given(st.binary(max_size=100))
def test_any_bytes_decode_or_fail_cleanly(data: bytes) -> None:
    with contextlib.suppress(MessageFormatError):  # the one error it may raise; anything else fails
        decode_payload(data)


@pytest.mark.parametrize("text, level", [
    ("MQMSG_ACKNOWLEDGMENT_FULL_RECEIVE", AckLevel.FULL_RECEIVE), ("pos_arrival",
                                                                   AckLevel.POS_ARRIVAL),
    ("14", AckLevel.FULL_RECEIVE), ("0x05", AckLevel.FULL_REACH_QUEUE), ("0", AckLevel.NONE)])
def test_ack_levels(text: str, level: AckLevel) -> None:
    assert parse_ack_level(text) == level


def test_send_headers_deadlines_are_absolute() -> None:
    request = parse_send_headers({"Mq-Time-To-Be-Received": "2.5",
                                  "Mq-Time-To-Reach-Queue": "60"}, now_ms=1000)
    assert request.properties.receive_by_ms == 3500
    assert request.properties.reach_queue_by_ms == 61000


@given(st.sampled_from(["application/octet-stream", "text/plain; charset=utf-8", "x/y"]),
       st.sampled_from(["Mq-Priority", "MQ-PRIORITY", "mq-priority"]))
def test_a_send_without_mq_headers_takes_the_defaults_the_headers_would_give(
        content_type: str, priority: str) -> None:
    from multidict import CIMultiDict

    plain = CIMultiDict({"Host": "h", "Content-Type": content_type})
    spelled = CIMultiDict({**plain, priority: "3", "Mq-Delivery": "recoverable",
                           "Mq-Journal": "none"})
    assert parse_send_headers(plain, now_ms=7) == parse_send_headers(spelled, now_ms=7)
    # A property header in any case is read, not passed over as absent.
    for name in ("MQ-LABEL", "mq-label"):
        assert parse_send_headers(CIMultiDict({name: "x"}), now_ms=7).properties.label == "x"
    assert parse_send_headers(CIMultiDict({"IDEMPOTENCY-KEY": "k"}), now_ms=7
                              ).idempotency_key == "k"


@pytest.mark.parametrize("name", ["Mq-Time-To-Be-Received", "Mq-Time-To-Reach-Queue"])
@pytest.mark.parametrize("value", ["1e3", "1_0", "\uff15", "+1", "2.", ".5", "inf", "0x10",
                                   "1,5"])
def test_a_deadline_is_ascii_seconds_with_an_optional_fraction(name: str, value: str) -> None:
    with pytest.raises(HeaderError, match=name):
        parse_send_headers({name: value}, now_ms=0)
    assert parse_send_headers({name: " 2.5 "}, now_ms=0).properties == parse_send_headers(
        {name: "2.5"}, now_ms=0).properties


@pytest.mark.parametrize("value", ["1_0", "\uff15", "0b1", "0o7", "+1", "010"])
def test_an_acknowledgement_number_is_decimal_or_hexadecimal_in_ascii(value: str) -> None:
    with pytest.raises(HeaderError, match="Mq-Acknowledge"):
        parse_send_headers({"Mq-Acknowledge": value}, now_ms=0)


def test_an_idempotency_key_is_refused_on_a_send_held_in_a_transaction() -> None:
    with pytest.raises(HeaderError, match="Idempotency-Key") as info:
        parse_send_headers({"Mq-Transaction": "tx-1", "Idempotency-Key": "k"}, now_ms=0)
    assert "transaction" in info.value.detail
    for outside in ("single", "none"):
        assert parse_send_headers({"Mq-Transaction": outside, "Idempotency-Key": "k"},
                                  now_ms=0).idempotency_key == "k"


def test_header_error_names_the_header() -> None:
    with pytest.raises(HeaderError) as info:
        parse_send_headers({"Mq-Priority": "8"}, now_ms=0)
    assert info.value.header == "Mq-Priority"


def test_sent_time_header() -> None:
    now = 1_800_000_000_000
    request = parse_send_headers({"Mq-Sent-Time": "2026-11-20T10:00:00Z"}, now_ms=now)
    assert request.properties.sent_at_ms == 1_795_168_800_000
    assert parse_send_headers({}, now_ms=now).properties.sent_at_ms == now
    for bad in ("yesterday", "2099-01-01T00:00:00Z"):
        with pytest.raises(HeaderError, match="Mq-Sent-Time"):
            parse_send_headers({"Mq-Sent-Time": bad}, now_ms=now)


@pytest.mark.parametrize("text, value", [
    ("1024.0", 1024), ("1e3", 1000), ("-0.0", 0), ("1.5", 1.5), ("9007199254740992.0", 2**53),
    ("9007199254740994.0", 9007199254740994.0),  # past 2**53 a double is not exact: stays float
])
def test_json_numbers_with_a_fraction_or_exponent(text: str, value: float) -> None:
    from gateway.web.rest_body import json_number

    result = json_number(text)
    assert result == value and type(result) is type(value)


@given(st.text(max_size=30), st.one_of(st.text(max_size=30), st.from_regex(
    r"\{[0-9a-f-]{36}\}\\[0-9]{1,12}", fullmatch=True)))
def test_a_location_escapes_the_queue_and_the_id_as_quote_does(queue: str, mid: str) -> None:
    from urllib.parse import quote

    assert message_location(queue, mid) == (
        f"/v1/queues/{quote(queue, safe='$/')}/messages/{quote(mid, safe='')}")


@pytest.mark.parametrize(("name", "hint"), [("Mq-Prority", "Mq-Priority"),
                                             ("MQ-TIME-TO-BE-RECIEVED", "Mq-Time-To-Be-Received"),
                                             ("mq-bogus", "")])
def test_an_mq_header_a_send_does_not_take_is_refused_naming_it(name: str, hint: str) -> None:
    with pytest.raises(HeaderError) as refused:
        parse_send_headers({"Mq-Label": "l", name: "7"}, now_ms=0)
    assert refused.value.header == name
    assert (f"did you mean {hint}?" in str(refused.value)) if hint else "mean" not in str(
        refused.value)
    with pytest.raises(HeaderError):  # alone too: not taken for a send with defaults
        parse_send_headers({name: "7"}, now_ms=0)
    headers = CIMultiDict({"Mq-Destination": "DIRECT=OS:.\\q", "MQ-PRIORITY": "5"})
    known = parse_send_headers(headers, now_ms=0, by_format_name=True)
    assert known.properties.priority == 5
    with pytest.raises(HeaderError) as refused:  # a send to a queue names it in the path
        parse_send_headers(headers, now_ms=0)
    assert refused.value.header == "Mq-Destination"


def test_a_label_an_entrepot_webhook_percent_encoded_is_decoded() -> None:
    sent = parse_send_headers({"Mq-Label": "caf%C3%A9%0A", "Mq-Label-Encoding": "percent",
                               "Mq-Message-Id": "{g}\\1", "Mq-Sent-At": "1"}, now_ms=0)
    assert sent.properties.label == "caf\u00e9\n"
    for headers, named in (({"Mq-Label": "%FF", "Mq-Label-Encoding": "percent"}, "Mq-Label"),
                           ({"Mq-Label": "a", "Mq-Label-Encoding": "base64"},
                            "Mq-Label-Encoding")):
        with pytest.raises(HeaderError) as refused:
            parse_send_headers(headers, now_ms=0)
        assert refused.value.header == named


@pytest.mark.parametrize("name", ["Mq-Priority", "Mq-App-Specific"])
def test_a_number_of_thousands_of_digits_is_refused_naming_the_header(name: str) -> None:
    # int() refuses more than 4300 digits with its own ValueError: a 500, not a 400.
    with pytest.raises(HeaderError) as refused:
        parse_send_headers({name: "9" * 5000}, now_ms=0)
    assert refused.value.header == name and len(str(refused.value)) < 200


@pytest.mark.parametrize(("label", "why"), [("a%00b", "NUL"), ("%ZZ", "two hex digits"),
                                            ("50%", "two hex")])
def test_a_percent_encoded_label_is_refused_when_it_does_not_decode(label: str,
                                                                    why: str) -> None:
    with pytest.raises(HeaderError) as refused:
        parse_send_headers({"Mq-Label": label, "Mq-Label-Encoding": "percent"}, now_ms=0)
    assert refused.value.header == "Mq-Label" and why in str(refused.value)


def test_machine_addresses_are_the_local_ones_without_link_local() -> None:
    fib_trie = ("  +-- 10.0.0.0/8 2 0 2\n     |-- 10.1.2.3\n        /32 host LOCAL\n"
                "     |-- 10.255.255.255\n        /32 link BROADCAST\n"
                "     |-- not-an-address\n        /32 host LOCAL\n")
    if_inet6 = ("fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
                "fd000000000000000000000000000002 04 40 00 82     eth0\n"
                "zz\n\n")
    assert machine_addresses(fib_trie, if_inet6) == {"10.1.2.3", "fd00::2", "[fd00::2]"}


def test_configured_and_ipv6_listen_names_compare_as_addresses() -> None:
    hosts = local_host_names(["[FD00:0:0::7]", "GW.Example"], "::", 8080).hosts
    assert {"[fd00::7]", "gw.example", "::", "[::]"} <= hosts
