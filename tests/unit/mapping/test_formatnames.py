"""Format names: every form, normalisation, and refusals naming the bad part."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mapping.errors import FormatNameError
from mapping.formatnames import (
    DirectFormatName,
    DistributionListFormatName,
    MachineFormatName,
    MultipleFormatName,
    PrivateFormatName,
    PublicFormatName,
    parse_format_name,
    parse_queue_url,
)

GUID = "1e6a0c68-1d4a-4c4a-9b3a-0123456789ab"


@pytest.mark.parametrize("text, expected", [
    ("DIRECT=HTTP://Host.Example/msmq/private$/Orders",
     DirectFormatName("http", "host.example", "private$/orders", 80, "msmq")),
    ("direct=https://HOST:443/MSMQ\\private$\\orders",
     DirectFormatName("https", "host", "private$/orders", 443, "msmq")),
    ("DIRECT=HTTP://host:8080/msmq/orders",
     DirectFormatName("http", "host", "orders", 8080, "msmq")),
    ("DIRECT=HTTP://host/msmq\\SYSTEM$;DEADLETTER",
     DirectFormatName("http", "host", "system$;deadletter", 80, "msmq")),
    ("DIRECT=OS:.\\private$\\q;journal", DirectFormatName("os", ".", "private$/q;journal")),
    ("DIRECT=OS:Machine2\\orders", DirectFormatName("os", "machine2", "orders")),
    ("DIRECT=TCP:10.1.2.3\\private$\\q", DirectFormatName("tcp", "10.1.2.3", "private$/q")),
    # An IPv6 address in its one canonical spelling (RFC 5952), so equal addresses compare
    # equal: this gateway's own address is local however a sender writes it.
    ("DIRECT=HTTP://[FD00:0:0:0:0:0:0:2]:8080/msmq/q",
     DirectFormatName("http", "[fd00::2]", "q", 8080, "msmq")),
    ("DIRECT=HTTP://[fd00::0002]/msmq/q", DirectFormatName("http", "[fd00::2]", "q", 80, "msmq")),
    # An IPv4 address written as IPv4-mapped IPv6 is that IPv4 address.
    ("DIRECT=HTTP://[::FFFF:127.0.0.1]:8080/msmq/q",
     DirectFormatName("http", "127.0.0.1", "q", 8080, "msmq")),
    (f"PUBLIC={GUID.upper()}", PublicFormatName(GUID)),
    (f"PUBLIC={GUID};JOURNAL", PublicFormatName(GUID, journal=True)),
    (f"PRIVATE={GUID}\\00000004", PrivateFormatName(GUID, 4)),
    (f"PRIVATE={{{GUID}}}\\a;journal", PrivateFormatName(GUID, 10, journal=True)),
    (f"MACHINE={GUID};DEADXACT", MachineFormatName(GUID, "deadxact")),
    (f"DL={GUID}@Example.COM", DistributionListFormatName(GUID, "example.com")),
])
def test_every_form_parses_and_normalises(text: str, expected: object) -> None:
    parsed = parse_format_name(text)
    assert parsed == expected
    assert parse_format_name(parsed.format_name()) == parsed, "printing round-trips"


def test_multiple_element_format_name() -> None:
    parsed = parse_format_name(f"DIRECT=OS:.\\a, PUBLIC={GUID} ,DIRECT=HTTP://h/msmq/b")
    assert isinstance(parsed, MultipleFormatName)
    assert [type(e).__name__ for e in parsed.elements] == [
        "DirectFormatName", "PublicFormatName", "DirectFormatName"]
    assert parse_format_name(parsed.format_name()) == parsed


def test_equal_addresses_compare_equal_and_keep_their_spelling() -> None:
    a = parse_format_name("DIRECT=HTTP://HOST:80/msmq/Private$/Orders")
    b = parse_format_name("DIRECT=http://host/MSMQ\\private$\\orders")
    assert a == b
    assert isinstance(a, DirectFormatName)
    assert a.url() == "http://host/msmq/private$/Orders"
    assert parse_queue_url("HTTP://host/msmq/private$/orders") == b


@pytest.mark.parametrize("text, fragment", [
    ("", "empty"),
    ("orders", "expected DIRECT="),
    ("DIRECT=FTP://h/msmq/q", "unknown protocol"),
    ("DIRECT=HTTP:h/msmq/q", "expected HTTP://"),
    ("DIRECT=HTTP://h", "no virtual directory"),
    ("DIRECT=HTTP://h/msmq", "expected /<virtual directory>/<queue>"),
    ("DIRECT=HTTP://h:99999/msmq/q", "port"),
    ("DIRECT=HTTP://bad host/msmq/q", "not a host"),
    ("DIRECT=HTTP://h/msmq/a b", "not allowed"),
    ("DIRECT=OS:machine", "machine\\queue"),
    ("DIRECT=TCP:machine\\q", "IP address"),
    ("PUBLIC=not-a-guid", "not a GUID"),
    (f"PUBLIC={GUID};DEADLETTER", "unknown suffix"),
    (f"PRIVATE={GUID}", "PRIVATE= takes"),
    (f"MACHINE={GUID}", "needs ;JOURNAL"),
    ("QUEUE=x", "unknown format name type"),
    ("DIRECT=HTTP://h/msmq/a,", "empty"),
])
def test_bad_format_names_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(FormatNameError) as info:
        parse_format_name(text)
    assert fragment in str(info.value)
    assert info.value.code == "MQ_ERROR_ILLEGAL_FORMATNAME"


@given(st.text(max_size=80))
def test_any_text_parses_or_raises_format_name_error(text: str) -> None:
    with contextlib.suppress(FormatNameError):  # the one error it may raise; anything else fails
        parse_format_name(text)


def test_host_names_dns_cannot_carry_are_refused() -> None:
    """A link to such a name could never connect (the IDNA codec refuses it): refused when
    the format name is read, not retried for ever."""
    from mapping.errors import FormatNameError
    from mapping.formatnames import parse_format_name

    for host in ("a" * 64 + ".example", ".".join(["abcdefghi"] * 26), "a..example",
                 "host\n"):
        with pytest.raises(FormatNameError, match="not a host name"):
            parse_format_name(f"DIRECT=HTTP://{host}/msmq/q")
    assert parse_format_name("DIRECT=HTTP://" + "a" * 63 + ".example/msmq/q")
