"""Cross-cutting request handling: error → problem+json, metrics, the concurrency cap.

This is the one place that turns exceptions into HTTP answers; handlers only raise.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.errors import ProblemError
from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.problem import problem_response

__all__ = ["make_middlewares"]


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    if resource is None:
        return "unmatched"
    return resource.canonical


def make_middlewares(metrics: Metrics, *, concurrent_requests_max: int) -> list[Middleware]:
    """Build the middleware chain, outermost first."""
    slots = asyncio.Semaphore(concurrent_requests_max)

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        metrics.http_in_flight.inc()
        status = 500
        try:
            response = await _answer(request, handler)
            status = response.status
            return response
        finally:
            metrics.http_in_flight.dec()
            route = _route_label(request)
            metrics.http_requests.labels(route, request.method, str(status)).inc()
            metrics.http_latency.labels(route).observe(time.perf_counter() - started)

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if slots.locked():
            return problem_response(
                503,
                f"more than {concurrent_requests_max} requests in flight",
                type_slug="overloaded",
                headers={"Retry-After": "1"},
            )
        async with slots:
            return await handler(request)

    return [observe, limit]


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ProblemError as exc:
        return problem_response(
            exc.status_hint,
            exc.detail,
            type_slug=exc.type_slug,
            title=exc.title,
            instance=request.path,
            headers=exc.headers,
            extra=exc.extra,
        )
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        detail = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
        return problem_response(exc.status, detail, instance=request.path, headers=headers)
    except asyncio.CancelledError:
        raise
    except Exception:
        server_log.exception("unhandled error method=%s path=%s", request.method, request.path)
        return problem_response(500, "internal error; see the gateway log", instance=request.path)
