"""Which addresses a sender's words may make the gateway call: prefixes match by URL parts,
not by characters; the queue managers links reach and outbound redirections count."""

from __future__ import annotations

from gateway.auth.outbound import OutboundPolicy
from mapping.engine import combine
from mapping.parse import parse_mapping


def test_a_prefix_matches_by_scheme_host_port_and_path() -> None:
    policy = OutboundPolicy(["http://relay.example/msmq", "https://partner.example:8443/*"])
    assert policy.allows("http://relay.example/msmq/private$/acks")
    assert policy.allows("HTTP://RELAY.EXAMPLE:80/MSMQ/x")
    assert policy.allows("http://relay.example/msmq")
    assert policy.allows("https://partner.example:8443/anything")
    for refused in ("http://relay.example.evil.example/msmq/x",  # another host
                    "http://relay.example:8080/msmq/x",  # another port
                    "https://relay.example/msmq/x",  # another scheme
                    "http://relay.example/msmqx/x",  # the path, not at a "/"
                    "http://relay.example/", "https://partner.example/x",
                    "http://evil.example/?u=http://relay.example/msmq",
                    "http://relay.example@evil.example/msmq/x",
                    "ftp://relay.example/msmq", "not a url", ""):
        assert not policy.allows(refused), refused


def test_a_path_is_read_as_the_server_reads_it() -> None:
    """Dot segments (escaped too) would leave the allowed path on the server; credentials
    would be the sender's choice of what the gateway presents; MSMQ's "\\" and doubled "/"
    are the server's "/"."""
    links = ["http://peer.example/msmq/private$/orders"]
    policy = OutboundPolicy(["http://relay.example/msmq/allowed"], links=lambda: links)
    for refused in ("http://relay.example/msmq/allowed/../../evil",
                    "http://relay.example/msmq/allowed/%2e%2e/%2E%2E/evil",
                    "http://relay.example/msmq/allowed/./x/../../y",
                    "http://peer.example/msmq/../other/r", "http://peer.example/msmq/%2e%2e/x",
                    "http://evil@relay.example/msmq/allowed",
                    "http://u:p@peer.example/msmq/private$/acks"):
        assert not policy.allows(refused), refused
    for allowed in ("http://relay.example/msmq//allowed", "http://relay.example/msmq\\allowed",
                    "http://relay.example/msmq/%61llowed/x", "http://peer.example/msmq\\acks"):
        assert policy.allows(allowed), allowed


def test_nothing_is_allowed_by_default() -> None:
    assert not OutboundPolicy(()).allows("http://127.0.0.1:8080/msmq/q")


def test_queue_managers_the_gateway_forwards_to_are_allowed() -> None:
    """Under a link's virtual directory: that queue manager's other queues, not any path
    of its host."""
    links = ["http://peer.example:8080/msmq/private$/orders", "http://bare.example"]
    policy = OutboundPolicy((), links=lambda: links)
    assert policy.allows("http://peer.example:8080/msmq/private$/order_queue$")
    assert policy.allows("http://peer.example:8080/MSMQ/acks")
    for refused in ("http://peer.example/msmq/private$/order_queue$",  # another port
                    "http://peer.example:8080/anything/else", "http://peer.example:8080/",
                    "http://peer.example:8080/msmqx/q", "http://bare.example/msmq/q"):
        assert not policy.allows(refused), refused


def test_outbound_redirections_and_their_gateways_are_allowed() -> None:
    mapping = parse_mapping(
        b'<outbound_redirections xmlns="msmq_outbound_mapping.xml"><redirection>'
        b"<destination>http://machine1/*</destination>"
        b"<through>http://relay.example:8080/msmq</through></redirection>"
        b"</outbound_redirections>", source="out.xml")
    rules = combine([mapping])
    policy = OutboundPolicy((), rules=lambda: rules)
    assert policy.allows("http://machine1/msmq/private$/acks")
    assert policy.allows("http://relay.example:8080/msmq/orderack")
    assert not policy.allows("http://machine2/msmq/private$/acks")
    assert not policy.allows("http://relay.example:8080/admin/x")  # not the gateway's MSMQ
