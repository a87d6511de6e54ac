"""Fault injection on /jarvice/ requests: the middleware that applies the fault plan (faults.py)
before a handler runs, and the faults of a submit that come after its job was created."""

import asyncio
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from devplatform.emulator.responses import Reject, error, text_response
from devplatform.emulator.state import STATE, EmulatorState

# What a proxy or login portal in front of the API may answer instead of JARVICE.
HTML_PAGE: Final = b"<!DOCTYPE html><html><body><h1>Gateway</h1><p>Please sign in.</p></body></html>\n"


def drop_connection(request: web.Request) -> web.Response:
    """Close the TCP connection without an HTTP response."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    return web.Response(status=500)


@web.middleware
async def fault_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/jarvice/"):
        return await handler(request)
    state = request.app[STATE]
    endpoint = request.path.removeprefix("/jarvice/")
    state.stats.requests[endpoint] += 1
    faults = state.faults
    if faults.applies(endpoint):
        delay = faults.take_latency()
        if delay:
            state.stats.injected["latency"] += 1
            await asyncio.sleep(delay)
        kind = faults.take(state.rng)
        if kind is not None:
            state.stats.injected[kind] += 1
            if kind == "drop":
                return drop_connection(request)
            if kind == "status503":
                # The self-hosted API's concurrency limiter; plain text, like a proxy would send.
                return text_response(b"Service Unavailable\n", status=503)
            if kind == "status429":
                return error(429, "Too Many Requests")
            if kind == "html":
                return web.Response(body=HTML_PAGE, headers={"Content-Type": "text/html; charset=utf-8"})
            if kind == "status401":
                return error(401, "Not Authorized")
            if kind == "status404":
                return error(404, "Job not found")
            return error(500, "Internal Server Error")
    # The JARVICE handlers' request helpers raise Reject to answer early (responses.py).
    try:
        return await handler(request)
    except Reject as reject:
        return reject.response


def inject_after_submit(request: web.Request, state: EmulatorState) -> web.Response | None:
    """The answer to a submit whose job was just created when an after-submit fault is due, else None."""
    if state.faults.drop_after_submit > 0 and state.faults.applies("submit"):
        state.faults.drop_after_submit -= 1
        state.stats.injected["drop_after_submit"] += 1
        return drop_connection(request)
    if state.faults.status502_after_submit > 0 and state.faults.applies("submit"):
        state.faults.status502_after_submit -= 1
        state.stats.injected["status502_after_submit"] += 1
        return text_response(b"Bad Gateway\n", status=502)
    return None
