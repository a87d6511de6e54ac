"""The gateway's HTTP surface: the JARVICE API as a burst pod's runner speaks it (aiohttp, I/O).

The runner's key is its pod's projected token: `apikey` in the query (GET) or in the submit body's
`user` block, as JARVICE takes its key, or an `Authorization: Bearer` header. Answers keep JARVICE's
shapes and statuses; the gateway's own refusals are JSON `{"error": ...}`: 401 for a token that
proves no pod, 403 for a pod that may not do this, 502 when JARVICE could not be reached."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.accounts import Account, Accounts
from gateway.callers import Callers
from gateway.identity import Caller, NotAuthenticated
from gateway.metrics import GatewayMetrics, route_of
from gateway.oversight import NotTheController, Oversight
from gateway.scope import find_label, own_jobs, pod_scope
from gateway.submission import SubmitNotAllowed, admit_submit
from gateway.submits import Refused, Submits, submitted_number
from gateway.terms import NotDecided, decided_terms
from gateway.upstream import Answer, Upstream, UpstreamFailed
from jarvice.labels import ParsedLabel, parse_job_label

log = logging.getLogger(__name__)

# The endpoints that name one job (`number` or `name`): served for the pod's own jobs only.
JOB_ENDPOINTS: Final = frozenset({"status", "tail", "output", "shutdown", "terminate", "signal", "info"})
STREAMED: Final = frozenset({"tail", "output"})
MAX_REMEMBERED_LABELS: Final = 65536
FORWARDED_PARAMS: Final = frozenset({"number", "name", "lines", "signal", "completed"})


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _relay(answer: Answer) -> web.Response:
    return web.Response(status=answer.status, body=answer.body, content_type=answer.content_type or "application/json")


def _token(request: web.Request, body: Mapping[str, Any] | None = None) -> str:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header[len("Bearer ") :].strip()
    if body is not None:
        user = body.get("user")
        if isinstance(user, Mapping) and isinstance(user.get("apikey"), str):
            return str(user["apikey"]).strip()
        return ""
    return request.query.get("apikey", "").strip()


@dataclass(frozen=True, slots=True)
class GatewayParts:
    accounts: Accounts
    callers: Callers
    submits: Submits
    upstream: Upstream
    metrics: GatewayMetrics


class Handlers:
    def __init__(self, parts: GatewayParts) -> None:
        self._parts = parts
        # A job's label never changes: known once (from a listing, or the submit's answer), a runner's
        # polls of its job cost JARVICE no listing. Bounded, oldest forgotten first.
        self._labels: OrderedDict[tuple[str, str], str] = OrderedDict()

    def _remember(self, account: Account, number: str, label: str) -> None:
        self._labels[(account.name, number)] = label
        while len(self._labels) > MAX_REMEMBERED_LABELS:
            self._labels.popitem(last=False)

    def _account(self, caller: Caller) -> Account:
        account = self._parts.accounts.for_namespace(caller.namespace)
        if account is None:
            raise NotDecided(f"no JARVICE account of this cluster pays for namespace {caller.namespace!r}")
        return account

    async def submit(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(400, "the submit body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "the submit body must be a JSON object")
        caller = await self._parts.callers.authenticate(_token(request, body))
        pod = await self._parts.callers.pod(caller, fresh=True)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise NotDecided("the pod is being deleted: nothing is submitted for it")
        account = self._account(caller)
        container = _container_of(pod, parse_job_label(str(body.get("job_label", ""))))
        terms = decided_terms(pod, caller, container)
        catalogue = await self._parts.submits.catalogue(account)
        admitted = admit_submit(body, terms, catalogue)
        answer = await self._parts.submits.submit(account, admitted, namespace=caller.namespace, pod_uid=caller.pod_uid)
        if (number := submitted_number(answer)) is not None:
            self._remember(account, str(number), admitted.label)
        return _relay(answer)

    async def _caller_and_pod(self, request: web.Request) -> tuple[Caller, dict[str, Any], Account]:
        caller = await self._parts.callers.authenticate(_token(request))
        pod = await self._parts.callers.pod(caller, fresh=False)
        return caller, pod, self._account(caller)

    async def jobs(self, request: web.Request) -> web.StreamResponse:
        _, pod, account = await self._caller_and_pod(request)
        params = {k: v for k, v in request.query.items() if k in FORWARDED_PARAMS}
        answer = await self._parts.upstream.get(account, "jobs", params)
        if answer.status != 200:
            return _relay(answer)
        listing = answer.json()
        if not isinstance(listing, dict):
            return _error(502, "JARVICE's job list is not a map")
        return web.json_response(own_jobs(listing, pod_scope(pod)))

    async def machines(self, request: web.Request) -> web.StreamResponse:
        _, _, account = await self._caller_and_pod(request)
        return _relay(await self._parts.upstream.get(account, "machines", {}))

    async def _label_of(self, account: Account, number: str | None, name: str | None) -> str | None:
        if number is not None and (account.name, number) in self._labels:
            return self._labels[(account.name, number)]
        for completed in (False, True):
            answer = await self._parts.upstream.get(account, "jobs", {"completed": "true"} if completed else {})
            if answer.status == 200 and isinstance(listing := answer.json(), dict):
                label = find_label([listing], number=number, name=name)
                if label is not None:
                    if number is not None:
                        self._remember(account, number, label)
                    return label
        return None

    async def job(self, request: web.Request) -> web.StreamResponse:
        endpoint = request.match_info["endpoint"]
        if endpoint not in JOB_ENDPOINTS:
            return _error(404, f"/jarvice/{endpoint} is not served to burst pods")
        number, name = request.query.get("number"), request.query.get("name")
        if number is None and name is None:
            return _error(400, f"/jarvice/{endpoint} needs a job: give number or name")
        _, pod, account = await self._caller_and_pod(request)
        label = await self._label_of(account, number, name)
        if label is None or not pod_scope(pod).owns(label):
            return _error(404, "no job of this pod has that number or name")
        params = {k: v for k, v in request.query.items() if k in FORWARDED_PARAMS}
        if endpoint in STREAMED:
            return await self._stream(request, account, endpoint, params)
        return _relay(await self._parts.upstream.get(account, endpoint, params))

    async def _stream(
        self, request: web.Request, account: Account, endpoint: str, params: Mapping[str, str]
    ) -> web.StreamResponse:
        chunks = self._parts.upstream.stream(account, endpoint, params)
        first = await anext(chunks)
        assert isinstance(first, Answer)
        response = web.StreamResponse(status=first.status)
        response.content_type = first.content_type or "text/plain"
        await response.prepare(request)
        async for chunk in chunks:
            assert isinstance(chunk, bytes)
            await response.write(chunk)
        await response.write_eof()
        return response


def _container_of(pod: Mapping[str, Any], label: ParsedLabel | None) -> str:
    """The burst container a label names (by name, or by its hash when the name was too long)."""
    if label is None:
        raise NotDecided("the submit's job_label is not a label the runner makes")
    names = [str(c.get("name", "")) for c in (pod.get("spec") or {}).get("containers") or ()]
    matching = [n for n in names if label.names_container(n)]
    if len(matching) != 1:
        raise NotDecided(f"the submit's job_label names no single container of the pod ({label.container!r})")
    return matching[0]


async def _healthy(_: web.Request) -> web.Response:
    return web.json_response({"status": "OK"})


# Each refusal's reason, as the metric counts it.
REFUSAL_KINDS: Final[tuple[tuple[type[Exception], str], ...]] = (
    (NotDecided, "not-decided"),
    (SubmitNotAllowed, "not-allowed"),
    (Refused, "ledger"),
    (NotTheController, "not-the-controller"),
)


def refusals(metrics: GatewayMetrics) -> Middleware:
    """The gateway's own answers, for every route: who asks is not proven (401), may not do this (403),
    or JARVICE could not be reached (502). Each is logged with its reason (never the token), and counted."""

    def count(request: web.Request, reason: str) -> None:
        metrics.refusals.labels(route=route_of(request.path), reason=reason).inc()

    @web.middleware
    async def refused(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except NotAuthenticated as exc:
            count(request, "not-authenticated")
            log.warning("call refused", extra={"path": request.path, "status": 401, "reason": str(exc)})
            return _error(401, str(exc))
        except (NotDecided, SubmitNotAllowed, Refused, NotTheController) as exc:
            count(request, next(kind for cls, kind in REFUSAL_KINDS if isinstance(exc, cls)))
            log.warning("call refused", extra={"path": request.path, "status": 403, "reason": str(exc)})
            return _error(403, str(exc))
        except UpstreamFailed as exc:
            count(request, "upstream")
            log.warning("jarvice unreachable", extra={"path": request.path, "status": 502, "reason": str(exc)})
            return _error(502, str(exc))

    return refused


def create_app(parts: GatewayParts, oversight: Oversight | None = None) -> web.Application:
    app = web.Application(client_max_size=1024 * 1024, middlewares=[refusals(parts.metrics)])
    handlers = Handlers(parts)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(parts.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", _healthy)
    app.router.add_get("/readyz", _healthy)
    app.router.add_get("/jarvice/live", _healthy)
    app.router.add_post("/jarvice/submit", handlers.submit)
    app.router.add_get("/jarvice/jobs", handlers.jobs)
    app.router.add_get("/jarvice/machines", handlers.machines)
    app.router.add_get("/jarvice/{endpoint}", handlers.job)
    if oversight is not None:  # the controller's routes (gateway.oversight)
        oversight.add_routes(app)
    return app
