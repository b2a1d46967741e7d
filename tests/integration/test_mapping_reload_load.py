"""Mapping reloads while requests flow: no request ever sees a half-written file's rules
(a file caught mid-write is rejected whole and keeps its previous rules), and the shipped
example files load without a problem."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.web.appkeys import STATE_KEY
from gateway.settings import Settings
from mapping.loader import MappingLoader
from tests.helpers import REPO_ROOT, ready_client

RULES = 200


def _document(version: int) -> str:
    rules = "".join(f"<redirection><from>http://logical.example/msmq/l{i}</from>"
                    f"<to>http://gw/msmq/private$/v{version}</to></redirection>"
                    for i in range(RULES))
    return f'<redirections xmlns="msmq-queue-redirections.xml">{rules}</redirections>'


async def test_reload_during_load_never_exposes_a_partial_rule_set(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], tmp_path: Path) -> None:
    mapping = tmp_path / "mapping"
    mapping.mkdir()
    target = mapping / "rules.xml"
    target.write_text(_document(1))
    client = await ready_client(aiohttp_client, settings_factory(
        server__names=["gw"], mapping__dir=str(mapping), mapping__reload_interval="100ms"))
    for version in (1, 2):
        await client.put(f"/v1/queues/private$/v{version}", json={})
    state = client.server.app[STATE_KEY]
    stop = asyncio.Event()
    rewrites = 0

    async def rewrite() -> None:
        nonlocal rewrites
        version = 1
        while not stop.is_set():
            version = 3 - version
            text = _document(version)
            with target.open("w") as out:  # not atomic on purpose: a reload may catch it
                out.write(text[: len(text) // 2])
                out.flush()
                state.reload_mapping.set()
                await asyncio.sleep(0.02)
                out.write(text[len(text) // 2:])
            state.reload_mapping.set()
            rewrites += 1
            await asyncio.sleep(0.02)

    writer = asyncio.create_task(rewrite())
    statuses: list[int] = []
    try:
        for index in range(300):
            address = f"DIRECT=http://logical.example/msmq/l{RULES - 1 - index % 3}"
            response = await client.post("/v1/messages", data=b"x",
                                         headers={"Mq-Destination": address})
            statuses.append(response.status)
    finally:
        stop.set()
        await writer
    assert rewrites >= 3 and set(statuses) == {201}, set(statuses)
    assert state.mapping is not None and state.mapping.rejected_total >= 1  # caught mid-write
    counts = [int((await (await client.get(f"/v1/queues/private$/v{v}")).json())["messages"])
              for v in (1, 2)]
    assert sum(counts) == 300


def test_shipped_examples_load_cleanly() -> None:
    loader = MappingLoader(REPO_ROOT / "config" / "mapping.examples")
    loader.load()
    assert loader.rejected_total == 0
    assert len(loader.rules.files) == 4
    assert loader.rules.redirections and loader.rules.outbound and loader.rules.stream_receipts
