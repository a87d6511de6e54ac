"""The last check before money is spent, and the submit itself (I/O around gateway.ledger).

For one submit: the pod's terms are read from the pod as the API server holds it now, the body is
made to fit them, the account's live jobs are listed, and the ledger entry is written under a
resourceVersion precondition BEFORE the submit is sent; a conflict (another replica wrote) re-reads
and checks again. After the answer the entry gets its job number (or is dropped when JARVICE
refused the submit: nothing was created)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gateway import ledger
from gateway.accounts import Account
from gateway.kube import KubeAdapter, LedgerChanged
from gateway.metrics import GatewayMetrics
from gateway.submission import AdmittedSubmit, Catalogue
from gateway.upstream import Answer, Upstream, UpstreamFailed
from jarvice.wire import ProtocolError, parse_machines
from kubeplumbing.spendrecord import SpendRecordError, parse_spend_record

log = logging.getLogger(__name__)

MAX_LEDGER_ROUNDS: Final = 20
CATALOGUE_SECONDS: Final = 60.0


class Refused(Exception):
    """The namespace's budget or caps refuse the submit; the message says which."""


@dataclass(frozen=True, slots=True)
class SubmitTiming:
    pending_seconds: float = 180.0  # how long a submit without an answer counts before the listing decides


class Submits:
    def __init__(
        self,
        kube: KubeAdapter,
        upstream: Upstream,
        *,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        timing: SubmitTiming,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self._kube = kube
        self._metrics = metrics
        self._upstream = upstream
        self._clock = clock
        self._wall_clock = wall_clock
        self._timing = timing
        self._catalogues: dict[str, tuple[float, Catalogue]] = {}
        self._settling: set[asyncio.Task[None]] = set()  # held so they are not collected mid-write

    async def catalogue(self, account: Account) -> Catalogue:
        now = self._clock()
        held = self._catalogues.get(account.name)
        if held is not None and now - held[0] < CATALOGUE_SECONDS:
            return held[1]
        answer = await self._upstream.get(account, "machines", {})
        if answer.status != 200:
            raise UpstreamFailed(f"machines: HTTP {answer.status}")
        raw = answer.json()
        try:
            machines = parse_machines(raw)
        except ProtocolError as exc:
            raise UpstreamFailed(f"JARVICE's machine list is unreadable: {exc}") from None
        catalogue = Catalogue(machines=machines)
        self._catalogues[account.name] = (now, catalogue)
        return catalogue

    async def _live_labels(self, account: Account) -> set[str]:
        answer = await self._upstream.get(account, "jobs", {})
        if answer.status != 200:
            raise UpstreamFailed(f"jobs: HTTP {answer.status}")
        listing = answer.json()
        if not isinstance(listing, dict):
            raise UpstreamFailed("jobs: not a map of jobs")
        return {e["job_label"] for e in listing.values() if isinstance(e, dict) and isinstance(e.get("job_label"), str)}

    def _month_recorded(self, namespace: str) -> float:
        text = self._kube.read_spend_record()
        if text is None:
            return 0.0
        try:
            record = parse_spend_record(text)
        except SpendRecordError:
            return 0.0
        spend = record.namespaces.get(namespace)
        return spend.month_recorded if spend is not None else 0.0

    async def _reserve(self, account: Account, submit: AdmittedSubmit, *, namespace: str, pod_uid: str) -> None:
        # The reads of a round are independent: made at once (a submit's added time is their slowest).
        annotations, month = await asyncio.gather(
            asyncio.to_thread(self._kube.namespace_annotations, namespace),
            asyncio.to_thread(self._month_recorded, namespace),
        )
        limits = ledger.limits_from_annotations(annotations)
        if limits.max_cost_per_month is None:
            month = 0.0
        for _ in range(MAX_LEDGER_ROUNDS):
            live, stored = await asyncio.gather(self._live_labels(account), asyncio.to_thread(self._kube.read_ledger))
            if submit.label in live:
                raise Refused(f"a job for this pod attempt ({submit.label}) is live: one job per attempt")
            now = self._wall_clock()
            current = ledger.prune(
                ledger.parse_ledger(stored.text),
                live_labels=live,
                now=now,
                pending_seconds=self._timing.pending_seconds,
            )
            if ledger.in_flight(current, submit.label, now=now):
                raise Refused(f"a submit of this pod attempt ({submit.label}) is in flight: one job per attempt")
            why = ledger.refusal(current, namespace=namespace, limits=limits, submit=submit, month_recorded=month)
            if why is not None:
                raise Refused(why)
            wanted = ledger.with_submit(current, submit, namespace=namespace, pod_uid=pod_uid, now=now)
            try:
                await asyncio.to_thread(
                    self._kube.write_ledger, ledger.encode_ledger(wanted), resource_version=stored.resource_version
                )
                return
            except LedgerChanged:
                if self._metrics is not None:
                    self._metrics.ledger_conflicts.inc()
                continue
        raise UpstreamFailed("the ledger kept changing under this submit; try again")

    async def _settle(self, label: str, number: int | None) -> None:
        """The entry gets its job number (from then on it counts while JARVICE lists the job), or goes
        (the submit was refused: nothing was created)."""
        for _ in range(MAX_LEDGER_ROUNDS):
            stored = await asyncio.to_thread(self._kube.read_ledger)
            current = ledger.parse_ledger(stored.text)
            wanted = ledger.without(current, label) if number is None else ledger.with_number(current, label, number)
            try:
                await asyncio.to_thread(
                    self._kube.write_ledger, ledger.encode_ledger(wanted), resource_version=stored.resource_version
                )
                return
            except LedgerChanged:
                if self._metrics is not None:
                    self._metrics.ledger_conflicts.inc()
                continue

    async def submit(self, account: Account, submit: AdmittedSubmit, *, namespace: str, pod_uid: str) -> Answer:
        await self._reserve(account, submit, namespace=namespace, pod_uid=pod_uid)
        answer = await self._upstream.submit(account, submit.body)
        if self._metrics is not None:
            kind = "answered" if answer.status < 400 else "rejected" if answer.status < 500 else "failed"
            self._metrics.submits.labels(answer=kind).inc()
        if 400 <= answer.status < 500:
            await self._settle(submit.label, None)
        elif (number := submitted_number(answer)) is not None:
            # After the answer, not before it: the submit's time is what the runner waits for.
            task = asyncio.get_running_loop().create_task(self._settle(submit.label, number))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)
        log.info(
            "submit forwarded",
            extra={
                "namespace": namespace,
                "pod_uid": pod_uid,
                "job_label": submit.label,
                "machine": submit.machine,
                "nodes": submit.nodes,
                "status": answer.status,
                "changes": list(submit.changes),
            },
        )
        return answer


def submitted_number(answer: Answer) -> int | None:
    try:
        value: Mapping[str, Any] = json.loads(answer.body)
        number = value.get("number")
    except (ValueError, AttributeError):
        return None
    return number if isinstance(number, int) else None
