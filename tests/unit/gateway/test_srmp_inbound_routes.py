"""The front door's cache of inbound redirections (gateway.web.srmp_routes._InboundRoutes): the
same format name as asking the rules each time, per rule set, and bounded."""

from __future__ import annotations

from gateway.web.srmp_routes import _InboundRoutes
from mapping.engine import combine
from mapping.parse import parse_mapping

REDIRECT = b"""<redirections xmlns="msmq-queue-redirections.xml">
<redirection><from>https://www.northwindtraders.com/msmq/orderq</from>
<to>https://OrderServer/msmq/private$/orderq</to></redirection>
<redirection><from>http://gw/msmq/alias</from><to>private$/real</to></redirection>
</redirections>"""


def test_redirected_as_the_rules_say_and_per_rule_set() -> None:
    routes = _InboundRoutes()
    rules = combine([parse_mapping(REDIRECT, source="r.xml")])
    for _ in range(2):  # the second time from the cache
        assert routes.redirected(rules, "HTTPS://www.northwindtraders.com/MSMQ/OrderQ") == (
            "DIRECT=https://OrderServer/msmq/private$/orderq")
        assert routes.redirected(rules, "http://gw/msmq/alias") == "DIRECT=OS:.\\private$\\real"
        assert routes.redirected(rules, "http://gw/msmq/other") == "DIRECT=http://gw/msmq/other"
    # Another rule set (a reloaded mapping) is asked afresh, and no rules redirect nothing.
    assert routes.redirected(combine([]), "http://gw/msmq/alias") == (
        "DIRECT=http://gw/msmq/alias")
    assert routes.redirected(None, "http://gw/msmq/alias") == "DIRECT=http://gw/msmq/alias"
    assert routes.redirected(rules, "http://gw/msmq/alias") == "DIRECT=OS:.\\private$\\real"


def test_bounded() -> None:
    routes = _InboundRoutes(size_max=10)
    for n in range(1000):
        assert routes.redirected(None, f"http://gw/msmq/q{n}") == f"DIRECT=http://gw/msmq/q{n}"
    assert len(routes._found) <= 10
