"""A small blocking HTTP client for range reads, as Spark's Python workers need it.

Workers are plain processes without an event loop, and each call is one request, so the
standard library's ``urllib`` is enough (no dependency to ship to a cluster). Transient
failures (connection errors, timeouts, 5xx) are retried a bounded number of times with
back-off: ``local[N]`` does not retry failed tasks, so one lost packet must not fail a query.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["GatewayClient", "GatewayRequestError", "RangeGone", "ClientOptions"]

log = logging.getLogger("entrepot.spark")


class GatewayRequestError(RuntimeError):
    """The gateway refused a request or could not be reached after the retries."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class RangeGone(GatewayRequestError):
    """410: the range was trimmed (retention, a purge) and can never be read again."""


@dataclass(frozen=True, slots=True)
class ClientOptions:
    url: str
    token: str = ""
    timeout_s: float = 30.0
    attempts: int = 5
    cafile: str = ""


class GatewayClient:
    """Calls under ``/v1/queues/{queue}/`` of one gateway."""

    def __init__(self, options: ClientOptions) -> None:
        self.options = options
        self._base = options.url.rstrip("/")
        self._context = (ssl.create_default_context(cafile=options.cafile)
                         if options.cafile else None)

    def head(self, queue: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self._call("GET", queue, "head")[0])
        return result

    def register(self, queue: str, consumer: str, start: str | int) -> int:
        body = json.dumps({"start": start}).encode()
        answer = json.loads(self._call("PUT", queue, f"consumers/{consumer}", body)[0])
        return int(answer["position"])

    def consumer(self, queue: str, consumer: str) -> int | None:
        """The consumer's position, or None when it is not registered on ``queue``."""
        try:
            answer = json.loads(self._call("GET", queue, f"consumers/{consumer}")[0])
        except GatewayRequestError as exc:
            if exc.status == 404:
                return None
            raise
        return int(answer["position"])

    def commit(self, queue: str, consumer: str, position: int) -> int:
        body = json.dumps({"position": position}).encode()
        answer = json.loads(self._call("POST", queue, f"consumers/{consumer}/commit", body)[0])
        return int(answer["position"])

    def range(self, queue: str, start: int, stop: int, max_bytes: int = 0
              ) -> tuple[bytes, int]:
        """(framed records, where the answer ends) for ``[start, stop)``; with ``max_bytes``
        the gateway stops after that much payload (one record at least)."""
        limit = f"&max_bytes={max_bytes}" if max_bytes else ""
        data, headers = self._call("GET", queue, f"range?from={start}&to={stop}{limit}")
        return data, int(headers.get("Entrepot-Next", start))

    def _call(self, method: str, queue: str, tail: str, body: bytes | None = None
              ) -> tuple[bytes, dict[str, str]]:
        url = f"{self._base}/v1/queues/{urllib.parse.quote(queue, safe='$/')}/{tail}"
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.options.token:
            headers["Authorization"] = f"Bearer {self.options.token}"
        delay = 0.2
        for attempt in range(1, self.options.attempts + 1):
            request = urllib.request.Request(url, data=body, method=method, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.options.timeout_s,
                                            context=self._context) as response:
                    return response.read(), dict(response.headers.items())
            except urllib.error.HTTPError as exc:
                detail = _detail(exc)
                if exc.code == 410:
                    raise RangeGone(f"{method} {url}: 410 {detail}", 410) from None
                if exc.code < 500 and exc.code != 429:
                    raise GatewayRequestError(f"{method} {url}: {exc.code} {detail}",
                                              exc.code) from None
                failure = f"{exc.code} {detail}"
            except (OSError, urllib.error.URLError) as exc:  # refused, reset, timed out
                failure = str(exc)
            if attempt == self.options.attempts:
                raise GatewayRequestError(f"{method} {url}: {failure} (after {attempt} "
                                          "attempts)")
            log.warning("%s %s failed (%s); retrying in %.1f s", method, url, failure, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        problem = json.loads(exc.read())
        return str(problem.get("detail") or problem.get("title") or "")
    except (ValueError, OSError):
        return exc.reason if isinstance(exc.reason, str) else ""
