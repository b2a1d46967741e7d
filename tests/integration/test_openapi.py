"""The OpenAPI document stays true: every operation it lists exists, and every route of the
router is documented."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gateway.web.app import make_app
from gateway.web.appkeys import STATE_KEY
from gateway.web.openapi import document
from gateway.settings import Settings

_VALUES = {"{path}": "system$;deadletter", "{id}": "%7Bnone%7D%5C1", "{name}": "spark"}


async def test_every_documented_operation_is_routed(aiohttp_client: Any,
                                                    settings_factory: Callable[..., Settings]
                                                    ) -> None:
    app = make_app(settings_factory())
    client = await aiohttp_client(app)
    for _ in range(3000):  # an upper bound only
        if app[STATE_KEY].ready:
            break
        await asyncio.sleep(0.01)
    served = await (await client.get("/v1/openapi.json")).json()
    assert served == document()
    for path, operations in document()["paths"].items():
        url = path.replace("/v1/transactions/{id}", "/v1/transactions/tx-0").replace(
            "/v1/links/{id}", "/v1/links/0123abcd")
        for placeholder, value in _VALUES.items():
            url = url.replace(placeholder, value)
        for method in operations:
            response = await client.request(method.upper(), url, json={}
                                            if method in ("post", "put") else None)
            text = await response.text()
            assert response.status != 405, f"{method.upper()} {path}: not allowed"
            assert "no resource" not in text, f"{method.upper()} {path}: not routed"
            if response.status == 404:
                assert "MQ_ERROR" in text or "consumer-not-found" in text, \
                    f"{method.upper()} {path}: {text}"


def test_every_route_is_documented() -> None:
    from aiohttp import web

    app: web.Application = make_app(Settings())
    documented = {path.split("{")[0] for path in document()["paths"]}
    for resource in app.router.resources():
        canonical = resource.canonical
        prefix = canonical.split("{")[0]
        assert any(d.startswith(prefix) or prefix.startswith(d) for d in documented), canonical


def test_queue_path_pattern_agrees_with_the_name_rules() -> None:
    """The documented pattern accepts what parse_queue_path accepts and refuses what it
    refuses (clients and fuzzers generate paths from it)."""
    import re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from mapping.names import QueueNameError, parse_queue_path

    params = document()["paths"]["/v1/queues/{path}"]["get"]["parameters"]
    pattern = re.compile(params[0]["schema"]["pattern"])
    for text in ("orders", "private$/Orders", "ORDERS;journal", "system$;DeadLetter",
                 "private$/order_queue$", "a" * 124):
        assert pattern.fullmatch(text), text
    for text in ("", "a b", "a/b", "q;x", "a,b", 'a"b', "a+b", "a" * 125, "caf\u00e9"):
        assert not pattern.fullmatch(text), text

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=20))
    def agrees(text: str) -> None:
        if not pattern.fullmatch(text):  # ECMA-262's $ is the very end
            return
        if text.lower() in ("private$", "system$") or text.lower().startswith(
                ("private$/private$", "private$/system$")):
            return  # reserved words: the pattern does not spell them out
        try:
            parse_queue_path(text)
        except QueueNameError as exc:
            raise AssertionError(f"{text!r} matches the documented pattern: {exc}") from exc

    agrees()


def test_create_or_update_puts_document_both_success_codes() -> None:
    paths = document()["paths"]
    for path in ("/v1/queues/{path}", "/v1/queues/{path}/consumers/{name}"):
        assert {"200", "201"} <= set(paths[path]["put"]["responses"]), path
