"""Requests generated from the OpenAPI document, sent to a real gateway on loopback: none gets
a 5xx, and every answer's status code, content type, headers and body are as the document
says (its JSON checked against the documented schema, problem+json included).

Schemathesis builds the requests (valid and invalid) from ``gateway.web.openapi.document()``, so
a route whose documented limits drift from what the server enforces shows up here too. Not
sent: SRMP (its parsers have their own property tests over any bytes) and the backup route
(it writes a copy of the store wherever ``dest`` points).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.web.openapi import document
from tests.helpers import GatewayProcess

schema = schemathesis.openapi.from_dict(document()).exclude(path_regex="^/(msmq|v1/admin)")


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = GatewayProcess(Path(tmp_path_factory.mktemp("fuzz")) / "data")
    try:
        proc.wait_ready()
        yield proc.url
    finally:
        proc.stop()


@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@pytest.mark.timeout(300)
def test_generated_requests_get_documented_answers_and_no_5xx(case: schemathesis.Case,
                                                               gateway_url: str) -> None:
    if isinstance(case.query, dict) and "wait" in case.query:
        case.query["wait"] = "0"  # a valid long poll would hold the test for up to a minute
    response = case.call(base_url=gateway_url, timeout=30)
    case.validate_response(response, checks=[not_a_server_error, status_code_conformance,
                                              content_type_conformance,
                                              response_headers_conformance,
                                              response_schema_conformance])
