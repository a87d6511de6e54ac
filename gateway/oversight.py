"""The controller's view of every account's jobs, through the gateway (the only holder of the keys).

Two routes, for the controller's own ServiceAccount only: its projected token of an audience of its
own (`nimbix-burst-gateway-controller`), reviewed by the API server; any other caller is refused (401
for a token that proves nobody, 403 for anyone else).
  - GET /controller/jobs: every account's live jobs, each with the terms the ledger counted for it
    (none: the gateway submitted no such job). The accounts are listed BEFORE the ledger is read: the
    ledger entry of a submit is written before it is sent, so a listed job the gateway made always has
    its entry in the read that follows.
  - POST /controller/terminate {"account": name, "number": n}: terminates that job.
  - GET /controller/checkpoint?namespace=..&pod=..&uid=..: the newest complete checkpoint the pod's
    remote job wrote into its vault directory (gateway.checkpoint_reader): {"checkpoint": {"name",
    "mtime"} or null, "directory", "checked_at"}; an error is {"error": why} with its status.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from gateway import ledger
from gateway.accounts import Account, Accounts
from gateway.checkpoint_reader import CheckpointReader, Unanswered
from gateway.identity import SERVICE_ACCOUNT_PREFIX, NotAuthenticated
from gateway.kube import StoredLedger
from gateway.submission import Catalogue
from gateway.submits import Submits
from gateway.upstream import Upstream, UpstreamFailed
from jarvice.model import is_terminal
from jarvice.wire import ProtocolError, parse_jobs

log = logging.getLogger(__name__)


class OversightKube(Protocol):
    def review_token(self, token: str, *, audience: str) -> dict[str, Any]: ...
    def read_ledger(self) -> StoredLedger: ...


class NotTheController(Exception):
    """An authenticated caller that is not the controller's ServiceAccount."""


def controller_user(namespace: str, service_account: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{service_account}"


def check_controller(review: Mapping[str, Any], *, audience: str, user: str) -> None:
    """Pass for the controller's token; NotAuthenticated (401) or NotTheController (403) otherwise."""
    status = review.get("status")
    if not isinstance(status, Mapping) or status.get("authenticated") is not True:
        error = status.get("error") if isinstance(status, Mapping) else None
        raise NotAuthenticated(f"the token was not accepted: {error or 'invalid or expired'}")
    audiences = status.get("audiences")
    if isinstance(audiences, list) and audience not in audiences:
        raise NotAuthenticated(f"the token is not for audience {audience!r}")
    username = (status.get("user") or {}).get("username") if isinstance(status.get("user"), Mapping) else None
    if username != user:
        raise NotTheController(f"only the controller ({user}) lists and stops the accounts' jobs")


def _counted(entry: ledger.Entry | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {
        "namespace": entry.namespace,
        "pod_uid": entry.pod_uid,
        "gpus": entry.gpus,
        "machine": entry.machine,
        "nodes": entry.nodes,
        "cost_per_hour": entry.cost_per_hour,
        "worst_case": entry.worst_case,
        "at": entry.at,
    }


def live_jobs(listing: object, *, counted: Mapping[str, ledger.Entry], catalogue: Catalogue) -> list[dict[str, Any]]:
    """An account's live jobs with what their machine gives and what the ledger counted (pure)."""
    try:
        entries = parse_jobs(listing)
    except ProtocolError as exc:
        raise UpstreamFailed(f"JARVICE's job list is unreadable: {exc}") from None
    jobs = []
    for number, entry in sorted(entries.items()):
        if is_terminal(entry.state):
            continue
        machine = catalogue.machines.get(entry.machine)
        jobs.append(
            {
                "number": number,
                "label": entry.label or "",
                "state": entry.state,
                "machine": entry.machine,
                "nodes": entry.nodes,
                "gpus": None if machine is None else machine.gpus_on(entry.nodes),
                "cost_per_hour": None if machine is None else machine.price_for(entry.nodes),
                "counted": _counted(counted.get(entry.label or "")),
            }
        )
    return jobs


class Oversight:
    def __init__(
        self,
        *,
        kube: OversightKube,
        upstream: Upstream,
        submits: Submits,
        accounts: Accounts,
        audience: str,
        user: str,
        checkpoints: CheckpointReader | None = None,
    ) -> None:
        self._kube = kube
        self._checkpoints = checkpoints
        self._upstream = upstream
        self._submits = submits
        self._accounts = accounts
        self._audience = audience
        self._user = user

    async def _authorize(self, request: web.Request) -> None:
        header = request.headers.get("Authorization", "")
        token = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
        if not token:
            raise NotAuthenticated("no token: give the controller's projected token as a Bearer header")
        review = await asyncio.to_thread(self._kube.review_token, token, audience=self._audience)
        check_controller(review, audience=self._audience, user=self._user)

    async def _listing(self, account: Account) -> object:
        answer = await self._upstream.get(account, "jobs", {})
        if answer.status != 200:
            raise UpstreamFailed(f"jobs of account {account.name}: HTTP {answer.status}")
        return answer.json()

    async def jobs(self, request: web.Request) -> web.StreamResponse:
        await self._authorize(request)
        accounts = self._accounts.accounts
        listings = await asyncio.gather(*(self._listing(a) for a in accounts))
        catalogues = await asyncio.gather(*(self._submits.catalogue(a) for a in accounts))
        stored = await asyncio.to_thread(self._kube.read_ledger)
        counted = ledger.parse_ledger(stored.text)
        return web.json_response(
            {
                "accounts": [
                    {"name": a.name, "jobs": live_jobs(listing, counted=counted, catalogue=catalogue)}
                    for a, listing, catalogue in zip(accounts, listings, catalogues, strict=True)
                ]
            }
        )

    async def terminate(self, request: web.Request) -> web.StreamResponse:
        await self._authorize(request)
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        number = body.get("number") if isinstance(body, dict) else None
        name = body.get("account") if isinstance(body, dict) else None
        if not isinstance(number, int) or isinstance(number, bool) or not isinstance(name, str):
            return web.json_response({"error": 'give {"account": <name>, "number": <job number>}'}, status=400)
        account = next((a for a in self._accounts.accounts if a.name == name), None)
        if account is None:
            return web.json_response({"error": f"no account is named {name!r}"}, status=404)
        answer = await self._upstream.get(account, "terminate", {"number": str(number)})
        return web.Response(
            status=answer.status, body=answer.body, content_type=answer.content_type or "application/json"
        )

    async def checkpoint(self, request: web.Request) -> web.StreamResponse:
        await self._authorize(request)
        asked = [request.query.get(key, "") for key in ("namespace", "pod", "uid")]
        if not all(asked):
            return web.json_response({"error": "give ?namespace=<namespace>&pod=<name>&uid=<pod UID>"}, status=400)
        if self._checkpoints is None:
            return web.json_response({"error": "this gateway reads no vault"}, status=501)
        try:
            found = await self._checkpoints.newest(*asked)
        except Unanswered as exc:
            log.warning("checkpoint not read", extra={"path": request.path, "status": exc.status, "reason": str(exc)})
            return web.json_response({"error": str(exc)}, status=exc.status)
        return web.json_response(found)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/controller/jobs", self.jobs)
        app.router.add_post("/controller/terminate", self.terminate)
        app.router.add_get("/controller/checkpoint", self.checkpoint)
