"""The GPUs a burst pod comes home to are held for its Job's next pod (through admit(), the watch as
CacheSync feeds it): from the moment the watch shows the controller evicting the pod it marked
`coming-home`, until that Job's next pod is admitted (it takes them over) or the hold expires. Another
pod decided meanwhile, or the controller's dry run for another queued pod, finds them taken."""

from __future__ import annotations

from typing import Any

from jarvice import contract
from tests.support.clocks import Clock
from tests.support.reinvocation import patched_by
from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, node, pod
from webhook import admission
from webhook.cache import ClusterCache
from webhook.job_moves import HOMECOMING_HOLD_SECONDS
from webhook.review import AdmissionRequest
from webhook.rewrite_terms import RewritePolicy
from webhook.sync import CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
NS = "team"


def job_ref(uid: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "name": uid, "uid": uid, "controller": True}


def job_pod(name: str, job: str) -> dict[str, Any]:
    raw = pod(container(gpus=1), namespace=NS, name=name)
    raw["spec"]["restartPolicy"] = "Never"
    raw["metadata"]["ownerReferences"] = [job_ref(job)]
    return raw


def admit(sync: CacheSync, raw: dict[str, Any], *, dry_run: bool = False) -> tuple[str, dict[str, Any]]:
    request = AdmissionRequest(
        uid=raw["metadata"]["name"], operation="CREATE", kind="Pod", group="", namespace=NS, dry_run=dry_run, object=raw
    )
    result = admission.admit(request, cache=sync.cache, policy=POLICY)
    return result.outcome, patched_by(raw, result)


def burst_then_free_one_gpu(*, mark: bool, freed: int = 1) -> tuple[CacheSync, Clock]:
    """Job `home`'s pod burst on a full node; the node's GPU freed; the controller evicts the burst pod
    (marked coming-home when `mark`), and the watch shows it going."""
    clock = Clock()
    cache = ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60, wall_clock=clock)
    sync = CacheSync(cache, clock=clock)
    sync.apply_list("nodes", [node("gpu", 0)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [{"kind": "Namespace", "metadata": {"name": NS}}, KUBE_SYSTEM])
    outcome, burst = admit(sync, job_pod("home-1", "home"))
    assert outcome == "remote"
    burst["metadata"]["uid"] = "home-1"
    sync.apply_event("pods", "ADDED", burst)
    sync.apply_event("nodes", "MODIFIED", node("gpu", freed))
    if mark:
        burst["metadata"]["annotations"][contract.ANNOTATION_COMING_HOME] = "true"
    burst["metadata"]["deletionTimestamp"] = "2026-09-21T14:13:20Z"
    sync.apply_event("pods", "MODIFIED", burst)
    return sync, clock


def test_the_gpu_a_pod_comes_home_to_is_held_for_its_jobs_next_pod_and_no_other() -> None:
    sync, _ = burst_then_free_one_gpu(mark=True)
    assert admit(sync, job_pod("other-1", "other"), dry_run=True)[0] == "remote"  # the controller's next dry run
    assert admit(sync, job_pod("other-2", "other"))[0] == "remote"
    outcome, replacement = admit(sync, job_pod("home-2", "home"))
    assert outcome == "local"
    assert replacement["metadata"]["annotations"][contract.ANNOTATION_DECISION] == "local"


def test_the_hold_is_taken_over_once_the_next_pod_is_admitted() -> None:
    sync, _ = burst_then_free_one_gpu(mark=True)
    assert admit(sync, job_pod("home-2", "home"))[0] == "local"  # it holds the GPU now, under its own reservation
    assert admit(sync, job_pod("other-1", "other"))[0] == "remote"
    assert sync.cache.job_moves.homecomings == {}


def test_a_hold_no_pod_takes_over_expires() -> None:
    sync, clock = burst_then_free_one_gpu(mark=True)
    clock.now += HOMECOMING_HOLD_SECONDS + 1
    sync.cache.expire_reservations()
    assert admit(sync, job_pod("other-1", "other"))[0] == "local"


def test_a_burst_pod_deleted_without_the_mark_holds_nothing() -> None:
    sync, _ = burst_then_free_one_gpu(mark=False)
    assert admit(sync, job_pod("other-1", "other"))[0] == "local"


def test_the_evicted_pods_later_events_hold_nothing_again_once_taken_over() -> None:
    """The evicted runner's pod keeps changing as it stops (and its finalizer goes) after its replacement was
    admitted: those events never hold its GPUs a second time."""
    sync, _ = burst_then_free_one_gpu(mark=True, freed=2)  # a GPU more than it needs: one a new hold could take
    assert admit(sync, job_pod("home-2", "home"))[0] == "local"
    assert sync.cache.job_moves.homecomings == {}
    old = sync.cache.pods()["home-1"]
    assert old.coming_home
    sync.cache.upsert_pod(old)  # a later event of the pod being deleted, still marked
    assert sync.cache.job_moves.homecomings == {}
    assert admit(sync, job_pod("other-1", "other"))[0] == "local"  # the second GPU is free
