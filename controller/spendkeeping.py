"""Keeps the spend record: what each namespace's JARVICE jobs cost, written to the ConfigMap
`nimbix-burst-spend` in the add-on's namespace, and exported as metrics with the namespaces' cost
caps (I/O shell around `spending`).

Acts only while this replica leads and its pod watch is fresh, and once the cluster identity is
known (it tells this cluster's jobs from others'). One round: list the live jobs; read the
ConfigMap (the ledger in it is the last leader's, so a new leader or a restart counts nothing
twice); list the ended jobs only when a job of the last listing is gone (or there is no ledger
yet); build; write the record when it changed (or is older than `refresh`), guarded by the
resourceVersion read. A failed call skips the round: the record keeps its last figures, and its
`observed_at` tells readers how old they are.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from prometheus_client import Gauge

from controller import spending
from controller.kube import ConfigMapChanged
from controller.machinerates import MachineRates
from controller.metrics import Metrics
from controller.model import owner_namespaces
from controller.store import PodStore
from jarvice.client import JarviceError
from jarvice.model import JobEntry
from kubeplumbing import spendrecord

log = logging.getLogger(__name__)

LEDGER_KEY = "ledger.json"  # beside spend.json: what the next round needs to count nothing twice


class JobsApi(Protocol):
    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]: ...


class ConfigMaps(Protocol):
    def read_configmap(self, namespace: str, name: str) -> tuple[Mapping[str, str], str] | None: ...
    def write_configmap(self, namespace: str, name: str, data: Mapping[str, str], *, resource_version: str) -> None: ...
    def list_namespace_annotations(self) -> dict[str, Mapping[str, str]]: ...


class SpendKeeper:
    def __init__(
        self,
        *,
        store: PodStore,
        jarvice: JobsApi,
        kube: ConfigMaps,
        namespace: str,
        cluster: Callable[[], str | None],
        metrics: Metrics,
        is_leader: Callable[[], bool],
        interval: float,
        refresh: float,
        rates: MachineRates,
        stale_after: float,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._jarvice = jarvice
        self._kube = kube
        self._namespace = namespace
        self._cluster = cluster
        self._metrics = metrics
        self._is_leader = is_leader
        self._interval = interval
        self._refresh = refresh
        self._machine_rates = rates
        self._stale_after = stale_after
        self._clock = clock
        self._wall_clock = wall_clock
        self._shown: dict[object, set[str]] = {}  # gauge -> the namespaces it has a value for

    def round(self) -> float:
        if not self._is_leader():
            self._forget_metrics()
            return self._interval
        fresh, why = self._store.fresh(stale_after=self._stale_after)
        cluster = self._cluster()
        if not fresh or cluster is None:
            log.warning("spend round skipped", extra={"reason": why if not fresh else "cluster identity not known"})
            return self._interval
        try:
            self._round(cluster)
        except JarviceError as exc:
            self._metrics.errors.labels(kind="jarvice-list").inc()
            log.warning("spend record not updated: JARVICE not read", extra={"error": str(exc)[:500]})
        except ConfigMapChanged as exc:
            log.info("spend record not written: changed since read", extra={"reason": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a failed API call costs a round, not the loop
            self._metrics.errors.labels(kind="spend-record").inc()
            log.warning("spend record not updated", extra={"error": str(exc)[:500]})
        return self._interval

    def _round(self, cluster: str) -> None:
        live = spending.this_clusters_jobs(self._jarvice.fetch_jobs(completed=False).values(), cluster=cluster)
        now = int(self._wall_clock())
        stored = self._kube.read_configmap(self._namespace, spendrecord.CONFIGMAP_NAME)
        data, resource_version = stored if stored is not None else ({}, "")
        previous = self._previous_ledger(data)
        ended: list[spending.SpendJob] = []
        if spending.needs_history(previous, live):
            history = self._jarvice.fetch_jobs(completed=True)
            ended = spending.this_clusters_jobs(history.values(), cluster=cluster)
        rates = self._machine_rates.current()
        if not rates:  # no prices: every figure would read 0, and a cap would not hold
            log.warning("spend record not updated: no JARVICE machine prices yet", extra={"live_jobs": len(live)})
            return
        outcome = spending.build(
            live=live,
            ended=ended,
            machines=rates,
            pod_namespaces=owner_namespaces(self._store.reap_views().values(), cluster=cluster),
            previous=previous,
            now=now,
        )
        old_record = _old_record(data)
        ledger_text = spending.ledger_to_text(outcome.ledger)
        old_ledger = spending.ledger_to_text(previous) if previous is not None else ""
        same_ledger = previous is not None and _without_time(old_ledger) == _without_time(ledger_text)
        if spending.worth_writing(old_record, outcome.record, refresh=self._refresh) or not same_ledger:
            text = json.dumps(outcome.record, separators=(",", ":"), sort_keys=True)
            self._kube.write_configmap(
                self._namespace,
                spendrecord.CONFIGMAP_NAME,
                {spendrecord.RECORD_KEY: text, LEDGER_KEY: ledger_text},
                resource_version=resource_version,
            )
            log.info(
                "spend record written",
                extra={
                    "observed_at": now,
                    "live_jobs": len(live),
                    "namespaces": len(outcome.record["namespaces"]),
                    "unattributed_jobs": outcome.record["unattributed"]["jobs"],
                },
            )
        self._export(outcome.record)

    def _previous_ledger(self, data: Mapping[str, str]) -> spending.Ledger | None:
        text = data.get(LEDGER_KEY)
        if text is None:
            return None
        try:
            return spending.parse_ledger(text)
        except spending.LedgerError as exc:
            # Counted afresh from this month's history: nothing twice, only jobs JARVICE forgot are lost.
            log.warning("spend ledger unreadable: counted afresh", extra={"error": str(exc)})
            return None

    def _export(self, record: Mapping[str, Any]) -> None:
        caps = self._kube.list_namespace_annotations()
        m = self._metrics
        spend = record["namespaces"]
        self._set(m.namespace_cost_per_hour, {n: s["cost_per_hour"] for n, s in spend.items()})
        self._set(m.namespace_month_cost, {n: s["month_worst_case"] for n, s in spend.items()})
        self._set(
            m.namespace_remote_gpus, {n: float(sum(p["gpus"] for p in s["pods"].values())) for n, s in spend.items()}
        )
        for gauge, key in (
            (m.namespace_cap_per_hour, spendrecord.ANNOTATION_MAX_COST_PER_HOUR),
            (m.namespace_cap_per_month, spendrecord.ANNOTATION_MAX_COST_PER_MONTH),
        ):
            self._set(gauge, {n: spendrecord.parse_cost_cap(a[key]).limit for n, a in caps.items() if key in a})
        m.unattributed_jobs.set(record["unattributed"]["jobs"])
        m.unattributed_cost_per_hour.set(record["unattributed"]["cost_per_hour"])
        m.spend_record_observed.set(record["observed_at"])

    def _set(self, gauge: Gauge, values: Mapping[str, float]) -> None:
        for gone in self._shown.get(gauge, set()) - set(values):
            gauge.remove(gone)
        for namespace, value in values.items():
            gauge.labels(namespace=namespace).set(value)
        self._shown[gauge] = set(values)

    def _forget_metrics(self) -> None:
        """Only the leader counts: a replica that does not lead shows no spend (not a stale one)."""
        m = self._metrics
        for gauge in (
            m.namespace_cost_per_hour,
            m.namespace_month_cost,
            m.namespace_remote_gpus,
            m.namespace_cap_per_hour,
            m.namespace_cap_per_month,
        ):
            gauge.clear()
        self._shown.clear()
        m.unattributed_jobs.set(0)  # the alerts take the max over replicas: only the leader's counts
        m.unattributed_cost_per_hour.set(0)


def _old_record(data: Mapping[str, str]) -> dict[str, Any] | None:
    try:
        parsed = json.loads(data.get(spendrecord.RECORD_KEY, ""))
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _without_time(ledger_text: str) -> str:
    parsed = json.loads(ledger_text) if ledger_text else {}
    parsed.pop("observed_at", None)
    return json.dumps(parsed, sort_keys=True)
