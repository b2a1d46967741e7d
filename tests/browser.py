"""A headless Chromium driven over the DevTools protocol (aiohttp's WebSocket client): load
a page with an Authorization header on every request, run JavaScript in it, read results."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

__all__ = ["find_browser", "Browser"]


def find_browser() -> str | None:
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """``async with Browser(binary, profile) as b: await b.open(url, headers)``."""

    def __init__(self, binary: str, profile: Path) -> None:
        self._args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                      "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                      f"--user-data-dir={profile}", "about:blank"]
        self._log = profile.parent / f"{profile.name}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)

    async def __aenter__(self) -> Browser:
        with self._log.open("wb") as log:  # the child keeps its own descriptor
            # Its own process group: the distribution's launcher is a shell script, so
            # killing the child alone left the browser and its renderers running.
            self._proc = subprocess.Popen(self._args, stdout=subprocess.DEVNULL, stderr=log,
                                          start_new_session=True)
        port = await self._devtools_port()
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
            pages = [t for t in await response.json() if t["type"] == "page"]
        self._ws = await self._session.ws_connect(pages[0]["webSocketDebuggerUrl"],
                                                  max_msg_size=0)
        return self

    async def _devtools_port(self) -> int:
        assert self._proc is not None
        for _ in range(300):
            match = re.search(rb"DevTools listening on ws://127\.0\.0\.1:(\d+)/",
                              self._log.read_bytes())
            if match:
                return int(match.group(1))
            if self._proc.poll() is not None:
                break
            await asyncio.sleep(0.1)
        raise AssertionError(f"no DevTools endpoint: {self._log.read_text(errors='replace')}")

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._ws is not None
        ident = next(self._ids)
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self._ws.receive_json(), 30)
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    async def open(self, url: str, headers: dict[str, str]) -> None:
        await self.call("Network.enable")
        await self.call("Network.setExtraHTTPHeaders", headers=headers)
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            assert loop.time() < deadline, f"never true in the page: {expression}"
            await asyncio.sleep(0.1)


def table_rows(table_id: str) -> str:
    """A page expression: the rows of a table as lists of cell texts (JSON)."""
    return (f"JSON.stringify([...document.querySelectorAll('#{table_id} tbody tr')]"
            ".map(r => [...r.children].map(c => c.textContent)))")


def parse(value: str) -> Any:
    return json.loads(value)
