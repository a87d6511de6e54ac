"""Stops the live jobs on the add-on's accounts that nothing accounts for (I/O shell around `accounting`).

Each round, while this replica leads and its pod watch is fresh (an empty store would make every job
look undecided): every account's live jobs with what the gateway counted for each, the decided pods,
and each namespace's budget, caps and this month's recorded spend go to accounting.plan_stops. Each job
it stops gets a terminate through the gateway, an Event (on its pod, or its namespace when no pod is
known), a count by reason and a log line."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from controller import accounting
from controller.metrics import Metrics
from controller.model import ReapView, member_of
from controller.store import PodStore
from jarvice import contract
from kubeplumbing.spendrecord import CONFIGMAP_NAME as SPEND_CONFIGMAP
from kubeplumbing.spendrecord import RECORD_KEY, SpendRecordError, parse_spend_record

log = logging.getLogger(__name__)

EVENT_REASON = "NimbixUnaccountedJobStopped"


class AccountsJobs(Protocol):
    def live_jobs(self) -> list[accounting.LiveJob]: ...
    def terminate(self, account: str, number: int) -> None: ...


class StopperKube(Protocol):
    def list_namespace_annotations(self) -> dict[str, Mapping[str, str]]: ...
    def read_configmap(self, namespace: str, name: str) -> tuple[Mapping[str, str], str] | None: ...
    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = "Warning"
    ) -> None: ...


def decided_uids(views: Collection[ReapView], *, cluster: str) -> set[str]:
    """The UIDs a decided pod stands for: its own, and its gang's when it is a member (model.member_of)."""
    uids: set[str] = set()
    for view in views:
        if view.decided and view.burst and not view.terminal:
            uids.add(view.uid)
            if gang := member_of(view, cluster=cluster):
                uids.add(gang)
    return uids


def _uids_of(views: Collection[ReapView], namespaces: Collection[str], *, cluster: str) -> set[str]:
    """The UIDs the pods of `namespaces` stand for: their own and, for members, their gangs'."""
    mine = [view for view in views if view.namespace in namespaces]
    return {view.uid for view in mine} | decided_uids(mine, cluster=cluster)


class Stopper:
    def __init__(
        self,
        *,
        store: PodStore,
        jobs: AccountsJobs,
        kube: StopperKube,
        namespace: str,
        cluster: str,
        dry_run: bool,
        stale_after: float,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        orphans_reaped: bool = False,
    ) -> None:
        self._orphans_reaped = orphans_reaped  # the orphan reaper runs: a counted job whose pod left is its
        self._store = store
        self._jobs = jobs
        self._kube = kube
        self._namespace = namespace
        self._cluster = cluster
        self._dry_run = dry_run
        self._stale_after = stale_after
        self._metrics = metrics
        self._is_leader = is_leader
        self._marked: frozenset[tuple[str, int]] = frozenset()
        for reason in accounting.STOP_REASONS:  # every reason's series exists from the start, at 0
            metrics.unaccounted_stopped.labels(reason=reason)

    def _month_recorded(self) -> Mapping[str, float]:
        stored = self._kube.read_configmap(self._namespace, SPEND_CONFIGMAP)
        text = stored[0].get(RECORD_KEY) if stored is not None else None
        if not text:
            return {}
        try:
            record = parse_spend_record(text)
        except SpendRecordError:
            return {}
        return {name: spend.month_recorded for name, spend in record.namespaces.items()}

    def _namespaces(self) -> tuple[dict[str, accounting.Caps], set[str]]:
        """Each namespace's caps, and the namespaces that pay with their own key."""
        month = self._month_recorded()
        caps, own_key = {}, set()
        for name, marks in self._kube.list_namespace_annotations().items():
            if (found := accounting.caps_of(marks, month_recorded=month.get(name, 0.0))) is not None:
                caps[name] = found
            if marks.get(contract.ANNOTATION_JARVICE_ACCOUNT) == contract.JARVICE_ACCOUNT_OWN:
                own_key.add(name)
        return caps, own_key

    def round(self) -> None:
        if not self._is_leader():
            self._marked = frozenset()  # a new leader proves everything afresh
            return
        fresh, why = self._store.fresh(stale_after=self._stale_after)
        if not fresh:
            log.warning("unaccounted-job round skipped", extra={"reason": why})
            return
        try:
            live = self._jobs.live_jobs()
            caps, own_key = self._namespaces()
        except Exception as exc:  # noqa: BLE001 - the round is given up; the next one tries again
            self._metrics.errors.labels(kind="gateway-jobs").inc()
            log.warning("accounts' jobs not listed", extra={"error": str(exc)[:500]})
            return
        # The pods as of after the listing: a pod created meanwhile is not taken for missing.
        views = self._store.reap_views()
        plan = accounting.plan_stops(
            live,
            cluster=self._cluster,
            decided_uids=decided_uids(views.values(), cluster=self._cluster),
            caps=caps,
            marked=self._marked,
            own_key_uids=_uids_of(views.values(), own_key, cluster=self._cluster),
            orphans_reaped=self._orphans_reaped,
        )
        self._marked = plan.marked
        self._metrics.unaccounted_marked.set(len(plan.marked))
        for stop in plan.stop:
            self._stop(stop, views.get(stop.pod_uid))

    def _stop(self, stop: accounting.Stop, pod: ReapView | None) -> None:
        job = stop.job
        context = {
            "account": job.account,
            "job": job.number,
            "job_label": job.label,
            "reason": stop.reason,
            "namespace": pod.namespace if pod is not None else stop.namespace,
            "pod": pod.name if pod is not None else "",
            "machine": job.machine,
            "nodes": job.nodes,
            "detail": stop.detail,
        }
        if self._dry_run:
            log.warning("unaccounted job not stopped (dry run)", extra=context)
            return
        try:
            self._jobs.terminate(job.account, job.number)
        except Exception as exc:  # noqa: BLE001 - marked again next round, tried again then
            self._metrics.errors.labels(kind="gateway-terminate").inc()
            log.warning("unaccounted job terminate failed", extra={**context, "error": str(exc)[:500]})
            self._marked |= {job.key}
            return
        self._metrics.unaccounted_stopped.labels(reason=stop.reason).inc()
        log.warning("unaccounted job stopped", extra=context)
        self._event(stop, pod)

    def _event(self, stop: accounting.Stop, pod: ReapView | None) -> None:
        job = stop.job
        message = (
            f"JARVICE job {job.number} ({job.machine} x {job.nodes}, account {job.account}) was stopped: "
            f"{stop.reason}: {stop.detail}"
        )
        if pod is not None:
            namespace, involved = pod.namespace, {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}
        else:
            namespace = stop.namespace or self._namespace
            involved = {"apiVersion": "v1", "kind": "Namespace", "name": namespace}
        try:
            self._kube.record_event(namespace=namespace, involved=involved, reason=EVENT_REASON, message=message)
        except Exception as exc:  # noqa: BLE001 - the stop stands; its Event is best effort
            self._metrics.errors.labels(kind="kubernetes").inc()
            log.warning("unaccounted job event not recorded", extra={"job": job.number, "error": str(exc)[:500]})
