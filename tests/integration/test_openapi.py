"""The OpenAPI document stays true: every operation it lists exists, and every route of the
router is documented."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from gateway.web.app import make_app
from gateway.web.appkeys import STATE_KEY
from gateway.web.openapi import document
from gateway.settings import Settings
from tests.helpers import ready_client

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


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, operation) for path, operations in document()["paths"].items()
            for method, operation in operations.items()]


def _resolve(doc: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in item:
        node: Any = doc
        for part in item["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        item = node
    return item


def test_the_document_is_valid_openapi() -> None:
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

    try:
        validate(document())
    except OpenAPIValidationError as exc:
        raise AssertionError(f"not valid OpenAPI 3.1: {exc}") from None


def test_every_operation_has_its_own_operation_id() -> None:
    ids = [operation.get("operationId") for _, _, operation in _operations()]
    missing = [f"{m.upper()} {p}" for p, m, o in _operations() if not o.get("operationId")]
    assert not missing, missing
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)


# SRMP answers 200 with an empty body, as MSMQ does: the one success without a body but 204.
_EMPTY_SUCCESS = {("/msmq/{path}", "post", "200")}


def test_every_success_body_has_a_schema_and_every_error_is_the_problem_response() -> None:
    doc = document()
    for path, method, operation in _operations():
        where = f"{method.upper()} {path}"
        assert any(code.startswith("2") for code in operation["responses"]), where
        for code, response in operation["responses"].items():
            if code.startswith("2"):
                content = _resolve(doc, response).get("content")
                if code == "204" or (path, method, code) in _EMPTY_SUCCESS:
                    assert not content, f"{where} {code}: has no body"
                    continue
                assert content, f"{where} {code}: no body documented"
                for media, body in content.items():
                    assert body.get("schema"), f"{where} {code} {media}: no schema"
            else:
                assert response == {"$ref": "#/components/responses/Problem"}, \
                    f"{where} {code}: {response}"
    problem = _resolve(doc, {"$ref": "#/components/responses/Problem"})
    assert set(problem["content"]) == {"application/problem+json"}


def test_created_messages_carry_a_location_and_held_sends_a_202() -> None:
    doc = document()
    paths = doc["paths"]
    for path in ("/v1/queues/{path}/messages", "/v1/messages", "/v1/batch"):
        created = _resolve(doc, paths[path]["post"]["responses"]["201"])
        assert "Location" in created.get("headers", {}), path
        assert "Idempotency-Replayed" in created["headers"], path
        params = {p["name"] for p in paths[path]["post"]["parameters"]}
        assert "Idempotency-Key" in params, path
    for path in ("/v1/queues/{path}/messages", "/v1/messages"):
        held = _resolve(doc, paths[path]["post"]["responses"]["202"])
        assert held["content"]["application/json"]["schema"], path


async def _conforms(response: Any, template: str, method: str) -> Any:
    """Check one real answer against what the document says of it; returns its JSON."""
    from jsonschema import Draft202012Validator

    doc = document()
    where = f"{method} {template} -> {response.status}"
    responses = doc["paths"][template][method.lower()]["responses"]
    assert str(response.status) in responses, f"{where}: undocumented status " \
        f"{await response.text()}"
    documented = _resolve(doc, responses[str(response.status)])
    raw = await response.read()
    if not documented.get("content"):
        assert raw == b"", where
        return None
    media = documented["content"].get(response.content_type)
    assert media is not None, f"{where}: {response.content_type} not documented"
    for header in documented.get("headers", {}):
        if documented["headers"][header].get("required"):
            assert header in response.headers, f"{where}: no {header}"
    if response.content_type not in ("application/json", "application/problem+json"):
        return raw
    body = json.loads(raw)
    schema = {**media["schema"], "components": doc["components"]}
    errors = sorted(Draft202012Validator(schema).iter_errors(body), key=str)
    assert not errors, f"{where}: {errors[0].message} at {list(errors[0].absolute_path)}"
    return body


async def test_real_answers_match_their_documented_schemas(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], tmp_path: Any) -> None:
    """Every operation's success answers, made for real, against the documented schemas."""
    client = await ready_client(aiohttp_client, settings_factory())

    async def call(method: str, template: str, url: str | None = None, **kwargs: Any) -> Any:
        response = await client.request(method, url or template, **kwargs)
        return await _conforms(response, template, method)

    for path in ("/healthz", "/readyz", "/metrics", "/v1/openapi.json", "/ui",
                 "/ui/status.json"):
        await call("GET", path)
    q, one = "/v1/queues/{path}", "/v1/queues/{path}/messages/{id}"
    await call("PUT", q, "/v1/queues/plain", json={"label": "l"})
    await call("PUT", q, "/v1/queues/plain", json={"label": "m"})
    await call("PUT", q, "/v1/queues/other", json={})
    await call("PUT", q, "/v1/queues/private$/tx", json={"transactional": True})
    await call("GET", "/v1/queues")
    await call("GET", q, "/v1/queues/plain")
    send = "/v1/queues/{path}/messages"
    for _ in range(2):
        await call("POST", send, "/v1/queues/plain/messages", data=b"a",
                   headers={"Idempotency-Key": "k1"})
    await call("POST", send, "/v1/queues/plain/messages", data=b"b")
    browsed = await call("GET", send, "/v1/queues/plain/messages")
    message_id = quote(browsed["messages"][0]["id"], safe="")
    await call("GET", one, f"/v1/queues/plain/messages/{message_id}")
    await call("DELETE", one, f"/v1/queues/plain/messages/{message_id}")
    await call("POST", "/v1/messages", headers={"Mq-Destination": "DIRECT=OS:.\\plain"},
               data=b"c")
    await call("POST", "/v1/messages", data=b"d", headers={
        "Mq-Destination": "DIRECT=OS:.\\private$\\tx,DIRECT=OS:.\\plain"})
    await call("POST", "/v1/messages", data=b"r", headers={
        "Mq-Destination": "DIRECT=HTTP://remote.invalid/msmq/q"})
    await call("POST", "/v1/batch", json={"messages": [
        {"queue": "plain", "body_base64": "eA==", "properties": {"label": "x"}}]})
    tx = (await call("POST", "/v1/transactions"))["id"]
    await call("POST", send, "/v1/queues/private$/tx/messages", data=b"e",
               headers={"Mq-Transaction": tx})
    await call("POST", "/v1/messages", data=b"f", headers={
        "Mq-Transaction": tx, "Mq-Destination": "DIRECT=OS:.\\private$\\tx"})
    await call("POST", "/v1/queues/{path}/receive", "/v1/queues/private$/tx/receive",
               headers={"Mq-Transaction": tx})
    await call("GET", "/v1/transactions")
    await call("GET", "/v1/transactions/{id}", f"/v1/transactions/{tx}")
    await call("POST", "/v1/transactions/{id}/prepare", f"/v1/transactions/{tx}/prepare")
    await call("POST", "/v1/transactions/{id}/commit", f"/v1/transactions/{tx}/commit")
    aborted = (await call("POST", "/v1/transactions"))["id"]
    await call("POST", "/v1/transactions/{id}/abort", f"/v1/transactions/{aborted}/abort")
    await call("POST", "/v1/queues/{path}/receive", "/v1/queues/plain/receive?max=2")
    dead = await call("GET", send, "/v1/queues/system$;deadxact/messages")
    dead_id = quote(dead["messages"][0]["id"], safe="")
    await call("POST", one + "/requeue",
               f"/v1/queues/system$;deadxact/messages/{dead_id}/requeue",
               json={"queue": "other"})
    await call("POST", "/v1/queues/{path}/requeue", "/v1/queues/system$;deadxact/requeue",
               json={})
    consumer = "/v1/queues/{path}/consumers/{name}"
    await call("PUT", consumer, "/v1/queues/other/consumers/c1", json={})
    await call("PUT", consumer, "/v1/queues/other/consumers/c1", json={})
    await call("GET", consumer, "/v1/queues/other/consumers/c1")
    await call("GET", "/v1/queues/{path}/consumers", "/v1/queues/other/consumers")
    await call("POST", consumer + "/commit", "/v1/queues/other/consumers/c1/commit",
               json={"position": 1})
    await call("GET", "/v1/queues/{path}/head", "/v1/queues/other/head")
    for fmt in ("json", "records"):
        await call("GET", "/v1/queues/{path}/range",
                   f"/v1/queues/other/range?from=1&to=5&format={fmt}")
    await call("DELETE", consumer, "/v1/queues/other/consumers/c1")
    links = await call("GET", "/v1/links")
    link = links["links"][0]["id"]
    await call("POST", "/v1/links/{id}/pause", f"/v1/links/{link}/pause")
    await call("POST", "/v1/links/{id}/resume", f"/v1/links/{link}/resume")
    await call("POST", "/v1/queues/{path}/purge", "/v1/queues/plain/purge")
    await call("POST", "/v1/admin/backup", json={"dest": str(tmp_path / "backup")})
    await call("DELETE", q, "/v1/queues/other")
