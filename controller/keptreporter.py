"""Says on a finished burst pod, and on its Job, that outputs of its job stayed in the JARVICE vault
(I/O shell around `keptoutputs`).

Acts only while this replica leads and its pod watch is fresh. Each round takes the pods the store
found finished with `kept_in_vault` in a runner's termination message and not yet marked, and for each
writes the mark first (a JSON patch that tests the UID and resourceVersion it was planned from), then
the Events. A refused patch costs the pod a round and no Event; an Event that fails after its patch is
lost rather than repeated, as the job Events are (controller.recording). Needs no JARVICE call: it runs
whatever the controller's credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from controller import keptoutputs
from controller.kube import PodChangedOrGone
from controller.metrics import Metrics
from controller.store import PodStore

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 10.0  # a scan of the store: no API call unless a pod is to be reported
# API calls per round at most (a patch and two Events per pod): a backlog, such as the pods that ended
# before an upgrade, is worked off over a few rounds.
PODS_PER_ROUND = 50


class KeptWriter(Protocol):
    def patch_pod_json(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> None: ...
    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = ...
    ) -> None: ...


class KeptReporter:
    def __init__(
        self,
        *,
        store: PodStore,
        kube: KeptWriter,
        metrics: Metrics,
        is_leader: Callable[[], bool],
        stale_after: float,
        pods_per_round: int = PODS_PER_ROUND,
    ) -> None:
        self._store = store
        self._kube = kube
        self._metrics = metrics
        self._is_leader = is_leader
        self._stale_after = stale_after
        self._pods_per_round = pods_per_round
        # Marked by this leader, until the watch shows the mark (the store then drops the pod).
        self._marked: set[str] = set()

    def round(self) -> None:
        if not self._is_leader():
            self._marked.clear()
            return
        fresh, why = self._store.fresh(stale_after=self._stale_after)
        if not fresh:
            log.warning("kept outputs round skipped", extra={"reason": why})
            return
        pods = self._store.kept_pods()
        self._marked &= {pod.uid for pod in pods}
        waiting = sorted((pod for pod in pods if pod.uid not in self._marked), key=lambda p: (p.namespace, p.name))
        for pod in waiting[: self._pods_per_round]:
            self._report(pod)

    def _report(self, pod: keptoutputs.KeptPod) -> None:
        context: dict[str, object] = {"uid": pod.uid, "namespace": pod.namespace, "pod": pod.name}
        try:
            self._kube.patch_pod_json(pod.namespace, pod.name, keptoutputs.mark_patch(pod))
        except PodChangedOrGone as exc:
            log.info("kept outputs not reported: pod changed or gone", extra={**context, "reason": str(exc)})
            return
        except Exception as exc:  # noqa: BLE001 - a failed API call costs this pod one round, not the loop
            self._metrics.errors.labels(kind="kubernetes").inc()
            log.warning("kept outputs not reported", extra={**context, "error": str(exc)[:500]})
            return
        self._marked.add(pod.uid)
        for involved, message in keptoutputs.event_targets(pod):
            try:
                self._kube.record_event(
                    namespace=pod.namespace,
                    involved=involved,
                    reason=keptoutputs.REASON,
                    message=message,
                    event_type=keptoutputs.EVENT_TYPE,
                )
            except Exception as exc:  # noqa: BLE001 - the mark says it was reported; the Event is lost, never repeated
                self._metrics.errors.labels(kind="kubernetes").inc()
                log.warning(
                    "kept outputs event not recorded",
                    extra={**context, "kind": involved["kind"], "error": str(exc)[:500]},
                )
                continue
            if involved["kind"] == "Pod":  # counted once per pod, with the other Events on burst pods
                self._metrics.job_events.labels(reason=keptoutputs.REASON).inc()
        log.warning("kept outputs reported", extra={**context, "detail": pod.message})
