"""The table ``entrepot check`` reads internal queues with (gateway.cli.state_queues): a reader
for every internal queue, refusing what a start would set aside and reading what the gateway
writes."""

from __future__ import annotations

import json

import pytest

from gateway.queues.internal import INTERNAL_QUEUES, WIRE_IDS_QUEUE
from gateway.cli.state_queues import STATE_QUEUES
from gateway.queues.state_records import why_unreadable


@pytest.mark.parametrize("queue", INTERNAL_QUEUES)
def test_every_internal_queue_has_a_reader_that_refuses_foreign_bytes(queue: str) -> None:
    nested = b"[" * 100_000  # deeper than the JSON decoder recurses
    for raw in (b"\xff\xfe not ours", b"[]", b"{}", b"", nested):
        reason = why_unreadable(STATE_QUEUES[queue], raw)
        assert reason is not None and reason.split(":")[0].endswith("Error"), (raw, reason)


def test_a_record_the_gateway_wrote_is_read() -> None:
    state = STATE_QUEUES[WIRE_IDS_QUEUE]
    assert why_unreadable(state, json.dumps({"reserved": 4096}).encode()) is None
    reason = why_unreadable(state, json.dumps({"reserved": -1}).encode())
    assert reason is not None and reason.startswith("ValueError: ")
