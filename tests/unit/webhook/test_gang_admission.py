"""A gang's pods through the real admission: decided once, at the first pod, and followed by the rest,
on this replica, on the next leader (handed-over reservations) and after a restart (the pods)."""

from __future__ import annotations

import copy
from typing import Any

from tests.support.budgets import NS
from tests.support.clocks import Clock
from tests.support.reinvocation import patched_by, review
from tests.unit.webhook import test_spending as spent
from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, namespace, node, pod
from webhook import admission, gangs, gpu_models, spending
from webhook.cache import ClusterCache
from webhook.review import AdmissionRequest
from webhook.rewrite_terms import RewritePolicy
from webhook.sync import KINDS_WITH_JOBS, CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
JOB_UID = "11111111-2222-3333-4444-555555555555"
GANG = "nimbix-burst.io/gang"
RANK = "nimbix-burst.io/gang-rank"
SIZE = "nimbix-burst.io/gang-size"
DECISION = "nimbix-burst.io/decision"


def indexed_job(size: int, *, name: str = "train") -> dict[str, Any]:
    return {
        "metadata": {"uid": JOB_UID, "namespace": "ns", "name": name},
        "spec": {"completionMode": "Indexed", "parallelism": size, "completions": size},
    }


def make_sync(
    *gpus_per_node: int, jobs: tuple[dict[str, Any], ...] = (), budget: str | None = None, clock: Clock | None = None
) -> CacheSync:
    clock = clock or Clock()
    cache = ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60)
    sync = CacheSync(cache, clock=clock, kinds=KINDS_WITH_JOBS)
    sync.apply_list("nodes", [node(f"n{i}", gpus) for i, gpus in enumerate(gpus_per_node)])
    sync.apply_list("pods", [])
    annotations = {} if budget is None else {"nimbix-burst.io/max-remote-gpus": budget}
    sync.apply_list("namespaces", [KUBE_SYSTEM, namespace("ns", annotations=annotations)])
    sync.apply_list("jobs", list(jobs))
    assert sync.ready(stale_after=60) == (True, "ok")
    return sync


def job_pod(index: int, gpus: int = 2, *, name: str = "") -> dict[str, Any]:
    raw = pod(container(gpus=gpus), name=name or f"train-{index}")
    raw["metadata"]["annotations"] = {gangs.ANNOTATION_COMPLETION_INDEX: str(index)}
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB_UID, "controller": True}
    ]
    return raw


def group_pod(name: str, total: int = 3, gpus: int = 1) -> dict[str, Any]:
    raw = pod(container(gpus=gpus), name=name, labels={"task-type": "Nimbix", gangs.LABEL_KUEUE_GROUP: "ddp"})
    raw["metadata"]["annotations"] = {gangs.ANNOTATION_KUEUE_TOTAL: str(total)}
    return raw


def admit(
    sync: CacheSync, raw: dict[str, Any], uid: str, *, policy: RewritePolicy = POLICY, **kwargs: Any
) -> tuple[dict[str, Any], admission.Admission]:
    result = admission.admit(review(raw, uid), cache=sync.cache, policy=policy, **kwargs)
    return patched_by(raw, result), result


def appear(sync: CacheSync, patched: dict[str, Any], uid: str) -> None:
    """The watch shows the created pod."""
    shown = copy.deepcopy(patched)
    shown["metadata"]["uid"] = uid
    assert sync.apply_event("pods", "ADDED", shown) is None


def env_of(raw: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in raw["spec"]["containers"][0].get("env", [])}


def test_three_two_gpu_pods_on_two_nodes_with_two_free_each_all_burst_as_one_gang() -> None:
    sync = make_sync(2, 2, jobs=(indexed_job(3),))
    results = [admit(sync, job_pod(i), f"u{i}") for i in range(3)]
    assert [r.outcome for _, r in results] == ["remote"] * 3
    assert "only 2 of its 3 pods fit" in results[0][1].reason
    assert all("as decided at its first pod" in r.reason for _, r in results[1:])
    for index, (patched, _) in enumerate(results):
        env = env_of(patched)
        assert (env["NIMBIX_BURST_GANG_UID"], env["NIMBIX_BURST_GANG_SIZE"]) == (JOB_UID, "3")
        assert env["NIMBIX_BURST_GANG_RANK"] == str(index)
        assert env["NIMBIX_BURST_COUNTED_GPUS"] == "6"  # the whole gang: 3 nodes x 2 GPUs
        assert env["NUM_GPUS"] == "2"  # per node
        notes = patched["metadata"]["annotations"]
        assert (notes[DECISION], notes[GANG], notes[SIZE], notes[RANK]) == ("remote", JOB_UID, "3", str(index))
        # Rank 0 submits the whole gang's job: it carries the gang's count, the others none.
        assert notes["nimbix-burst.io/remote-gpus"] == ("6" if index == 0 else "0")
    # Nothing was reserved locally: the two nodes stay free for others.
    assert sync.cache.free("n0")[GPU] == 2 and sync.cache.free("n1")[GPU] == 2


def test_two_two_gpu_pods_on_the_same_nodes_stay_local_each_on_its_reserved_node() -> None:
    sync = make_sync(2, 2, jobs=(indexed_job(2),))
    first, first_result = admit(sync, job_pod(0), "u0")
    # Both ranks' places are taken now: a pod of someone else no longer fits.
    assert sync.cache.free("n0")[GPU] + sync.cache.free("n1")[GPU] == 0
    _, other_result = admit(sync, pod(container(gpus=1), name="other"), "x")
    assert other_result.outcome == "remote"
    second, second_result = admit(sync, job_pod(1), "u1")
    assert (first_result.outcome, second_result.outcome) == ("local", "local")
    assert {first_result.node, second_result.node} == {"n0", "n1"}
    assert second["metadata"]["annotations"]["nimbix-burst.io/reservation"] == "gang." + JOB_UID + ".1.pod"
    assert second["metadata"]["annotations"][RANK] == "1"
    assert "NIMBIX_BURST_GANG_UID" not in env_of(second)  # runs here, as the Job made it
    appear(sync, first, "pod-0")
    appear(sync, second, "pod-1")
    assert sync.cache.reservation_count == 0  # each pod's own claim took over its rank's


def test_a_kueue_pod_group_is_never_split_and_its_ranks_are_given_in_order() -> None:
    sync = make_sync(2, jobs=())
    results = [admit(sync, group_pod(f"w{i}"), f"u{i}") for i in range(4)]
    assert [r.outcome for _, r in results[:3]] == ["remote"] * 3
    assert [p["metadata"]["annotations"][RANK] for p, _ in results[:3]] == ["0", "1", "2"]
    uid = results[0][0]["metadata"]["annotations"][GANG]
    assert {p["metadata"]["annotations"][GANG] for p, _ in results[:3]} == {uid}
    # A fourth pod of a group of three has no rank left: it does not join the job.
    assert results[3][1].outcome == "local" and "this extra pod is kept local" in results[3][1].reason


def test_a_rank_freed_by_a_pod_gone_goes_to_its_replacement() -> None:
    sync = make_sync(1, jobs=())
    results = [admit(sync, group_pod(f"w{i}", total=2), f"u{i}") for i in range(2)]
    for i, (patched, _) in enumerate(results):
        appear(sync, patched, f"pod-{i}")
    sync.apply_event("pods", "DELETED", {"metadata": {"uid": "pod-0"}})
    replacement, result = admit(sync, group_pod("w9", total=2), "u9")
    assert result.outcome == "remote"
    assert replacement["metadata"]["annotations"][RANK] == "0"


def test_the_next_leader_follows_the_gang_from_the_handed_over_reservations() -> None:
    leader = make_sync(2, 2, jobs=(indexed_job(2),))
    _, first = admit(leader, job_pod(0), "u0")
    assert first.outcome == "local"
    successor = make_sync(2, 2, jobs=(indexed_job(2),))
    successor.cache.adopt_reservations(leader.cache.export_reservations())
    # Room for the second pod anywhere? No: the handed-over reservation holds rank 1's place.
    _, result = admit(successor, job_pod(1), "u1")
    assert result.outcome == "local" and "recorded by the previous leader" in result.reason
    assert result.node != first.node


def test_a_restarted_webhook_follows_the_gang_from_its_pods() -> None:
    before = make_sync(2, 2, jobs=(indexed_job(3),))
    first, _ = admit(before, job_pod(0), "u0")
    # A new process: nothing in memory, no reservation; the first pod is in the list it reads.
    after = make_sync(8, 8, jobs=(indexed_job(3),))
    appear(after, first, "pod-0")
    second, result = admit(after, job_pod(1), "u1")
    assert result.outcome == "remote"  # though the gang would fit now: it is never split
    assert "as its pods already running or waiting were decided" in result.reason
    assert env_of(second)["NIMBIX_BURST_GANG_RANK"] == "1"


def test_a_gang_whose_pods_are_all_gone_is_decided_afresh() -> None:
    clock = Clock()
    sync = make_sync(2, 2, jobs=(indexed_job(3),), clock=clock)
    first, _ = admit(sync, job_pod(0), "u0")
    appear(sync, first, "pod-0")
    sync.apply_event("pods", "DELETED", {"metadata": {"uid": "pod-0"}})
    clock.now += 61  # the gang's record and reservations lapse
    sync.apply_list("nodes", [node("n0", 8)])
    _, again = admit(sync, job_pod(0), "u9")
    assert again.outcome == "local"


def test_the_budget_counts_the_whole_gang() -> None:
    sync = make_sync(1, jobs=(indexed_job(3),), budget="5")
    results = [admit(sync, job_pod(i), f"u{i}") for i in range(3)]
    assert [r.outcome for _, r in results] == ["local"] * 3
    assert all(r.over_budget for _, r in results[:1])
    assert "this pod needs 6 (the whole gang of 3 pods)" in results[0][1].reason
    assert "is kept local, as decided at its first pod" in results[1][1].reason


def test_over_budget_deny_refuses_every_pod_of_the_gang() -> None:
    sync = make_sync(1, jobs=(indexed_job(2),), budget="1")
    results = [admit(sync, job_pod(i), f"u{i}", over_budget="deny") for i in range(2)]
    assert [r.outcome for _, r in results] == ["denied", "denied"]


def test_within_budget_the_gang_reserves_every_ranks_gpus() -> None:
    sync = make_sync(1, jobs=(indexed_job(3),), budget="6")
    _, first = admit(sync, job_pod(0), "u0")
    assert first.outcome == "remote"
    assert sync.cache.remote_in_use("ns") == 6
    _, other = admit(sync, pod(container(gpus=4), name="other"), "x")
    assert other.outcome == "local" and other.over_budget


def test_a_pod_whose_job_is_not_in_the_cache_yet_is_kept_local_and_its_gang_follows() -> None:
    sync = make_sync(2, 2, jobs=())
    first, result = admit(sync, job_pod(0), "u0")
    assert result.outcome == "local" and "not in the webhook's cache yet" in result.reason
    assert first["metadata"]["annotations"][GANG] == JOB_UID
    appear(sync, first, "pod-0")
    sync.apply_event("jobs", "ADDED", indexed_job(3))
    _, second = admit(sync, job_pod(1), "u1")
    assert second.outcome == "local"  # 3 x 2 GPUs do not fit, but rank 0 is here: the gang stays here


def test_without_a_leader_a_gang_makes_no_local_promise() -> None:
    sync = make_sync(2, 2, jobs=(indexed_job(2),))
    _, result = admit(sync, job_pod(0), "u0", local_refusal="no leader answered within 3s")
    assert result.outcome == "remote" and result.reason.endswith("but no leader answered within 3s")
    assert sync.cache.reservation_count == 0


def test_a_dry_run_reserves_and_remembers_nothing() -> None:
    sync = make_sync(2, 2, jobs=(indexed_job(2),))
    request = AdmissionRequest(
        uid="d", operation="CREATE", kind="Pod", group="", namespace="ns", dry_run=True, object=job_pod(0)
    )
    assert admission.admit(request, cache=sync.cache, policy=POLICY).outcome == "local"
    assert sync.cache.export_reservations() == [] and len(sync.cache.gang_index.book) == 0


def test_a_non_indexed_jobs_pods_are_decided_one_by_one() -> None:
    sync = make_sync(2, 2, jobs=())
    raw = job_pod(0)
    del raw["metadata"]["annotations"][gangs.ANNOTATION_COMPLETION_INDEX]
    results = [admit(sync, copy.deepcopy(raw), f"u{i}")[1].outcome for i in range(3)]
    assert results == ["local", "local", "remote"]


def test_a_pod_group_without_its_total_count_is_refused_with_what_to_fix() -> None:
    sync = make_sync(2)
    raw = group_pod("w0")
    raw["metadata"]["annotations"] = {}
    _, result = admit(sync, raw, "u0")
    assert result.outcome == "denied"
    message = result.response["response"]["status"]["message"]
    assert "lacks the kueue.x-k8s.io/pod-group-total-count annotation" in message


def test_the_job_watch_keeps_only_indexed_jobs_and_gates_readiness() -> None:
    clock = Clock()
    sync = CacheSync(
        ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60), clock=clock, kinds=KINDS_WITH_JOBS
    )
    for kind in ("nodes", "pods", "namespaces"):
        sync.apply_list(kind, [])
    assert sync.ready(stale_after=60) == (False, "waiting for the first full list of jobs")
    sync.apply_list(
        "jobs", [indexed_job(2), {"metadata": {"uid": "plain", "namespace": "ns", "name": "p"}, "spec": {}}]
    )
    assert sync.ready(stale_after=60) == (True, "ok")
    assert set(sync.cache.gang_index.jobs) == {JOB_UID}
    changed = indexed_job(2)
    changed["spec"]["completionMode"] = "NonIndexed"  # not allowed by the API, but never trusted either
    assert sync.apply_event("jobs", "MODIFIED", changed) is None
    assert sync.cache.gang_index.jobs == {}
    assert sync.apply_event("jobs", "ADDED", indexed_job(4)) is None
    assert sync.cache.gang_index.jobs[JOB_UID].gang_size == 4
    assert sync.apply_event("jobs", "DELETED", indexed_job(4)) is None
    assert sync.cache.gang_index.jobs == {}
    assert sync.apply_event("jobs", "ADDED", {"metadata": {}}) == "job ?: metadata.uid is missing"


A100 = "NVIDIA-A100-SXM4-80GB"
MODELS = gpu_models.ModelMap(machines={A100: ("ng4a",)})


def with_model(raw: dict[str, Any], model: str) -> dict[str, Any]:
    raw["spec"]["nodeSelector"] = {gpu_models.DEFAULT_MODEL_LABEL: model}
    return raw


def test_a_burst_gang_carries_its_gpu_models_machines_on_every_rank() -> None:
    sync = make_sync(2, jobs=(indexed_job(2),))
    policy = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi", gpu_model_map=MODELS)
    results = [admit(sync, with_model(job_pod(i), A100), f"u{i}", policy=policy) for i in range(2)]
    assert [r.outcome for _, r in results] == ["remote", "remote"]
    assert [env_of(p)["NIMBIX_BURST_ALLOWED_MACHINES"] for p, _ in results] == ["ng4a", "ng4a"]
    assert [env_of(p)["NIMBIX_BURST_GANG_RANK"] for p, _ in results] == ["0", "1"]


def test_a_gang_whose_gpu_model_no_machine_offers_is_kept_local_whole() -> None:
    sync = make_sync(2, jobs=(indexed_job(2),))
    policy = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi", gpu_model_map=MODELS)
    results = [admit(sync, with_model(job_pod(i), "Tesla-T4"), f"u{i}", policy=policy) for i in range(2)]
    assert [r.outcome for _, r in results] == ["local", "local"]
    assert all("not burst" in r.reason for _, r in results)
    assert sync.cache.remote_in_use("ns") == 0


# --- generations: a gang's retry is a gang of its own; a gang's budget lives with its rank 0 -------

GENERATION = "nimbix-burst.io/gang-generation"
REMOTE_GPUS = "nimbix-burst.io/remote-gpus"


def finish(sync: CacheSync, patched: dict[str, Any], uid: str, *, job_ended: bool) -> None:
    """The watch shows the pod Failed; `job_ended`: its runner said its JARVICE job no longer runs."""
    shown = copy.deepcopy(patched)
    shown["metadata"]["uid"] = uid
    shown["status"] = {"phase": "Failed"}
    if job_ended:
        shown["metadata"]["annotations"]["nimbix-burst.io/job-state"] = "ended"
    assert sync.apply_event("pods", "MODIFIED", shown) is None


def burst_generation(sync: CacheSync, prefix: str) -> list[dict[str, Any]]:
    """Both pods of the 2-rank Job admitted (remote) and shown by the watch."""
    admitted = [admit(sync, job_pod(i), f"{prefix}{i}") for i in range(2)]
    assert [r.outcome for _, r in admitted] == ["remote", "remote"]
    for i, (patched, _) in enumerate(admitted):
        appear(sync, patched, f"{prefix}-pod-{i}")
    return [patched for patched, _ in admitted]


def test_a_jobs_retry_after_its_burst_pods_failed_is_a_generation_of_its_own() -> None:
    clock = Clock()
    sync = make_sync(2, jobs=(indexed_job(2),), clock=clock)
    first = burst_generation(sync, "a")
    assert [p["metadata"]["annotations"][GANG] for p in first] == [JOB_UID, JOB_UID]
    assert [p["metadata"]["annotations"][GENERATION] for p in first] == ["1", "1"]
    finish(sync, first[0], "a-pod-0", job_ended=True)
    finish(sync, first[1], "a-pod-1", job_ended=True)
    clock.now += 5  # within the reservations' TTL: the first generation's record is still kept
    second = burst_generation(sync, "b")
    uids = {p["metadata"]["annotations"][GANG] for p in second}
    assert len(uids) == 1 and JOB_UID not in uids
    assert [p["metadata"]["annotations"][GENERATION] for p in second] == ["2", "2"]
    assert {env_of(p)["NIMBIX_BURST_GANG_UID"] for p in second} == uids
    # And a third, long after every reservation and record lapsed: the failed pods still tell.
    for i, patched in enumerate(second):
        finish(sync, patched, f"b-pod-{i}", job_ended=True)
    clock.now += 600
    third = burst_generation(sync, "c")
    assert [p["metadata"]["annotations"][GENERATION] for p in third] == ["3", "3"]
    assert {p["metadata"]["annotations"][GANG] for p in third}.isdisjoint(uids | {JOB_UID})


def test_a_rank_replaced_while_its_burst_generation_still_runs_starts_the_next_generation() -> None:
    sync = make_sync(2, jobs=(indexed_job(2),))
    first = burst_generation(sync, "a")
    finish(sync, first[1], "a-pod-1", job_ended=False)  # rank 1 failed; rank 0 still follows the job
    replacement, result = admit(sync, job_pod(1), "b1")
    assert result.outcome == "remote"
    notes = replacement["metadata"]["annotations"]
    assert (notes[GENERATION], notes[RANK]) == ("2", "1") and notes[GANG] != JOB_UID


def test_a_local_gangs_replacement_joins_its_gang() -> None:
    sync = make_sync(2, 2, jobs=(indexed_job(2),))
    admitted = [admit(sync, job_pod(i), f"u{i}") for i in range(2)]
    for i, (patched, _) in enumerate(admitted):
        appear(sync, patched, f"pod-{i}")
    finish(sync, admitted[1][0], "pod-1", job_ended=False)
    replacement, result = admit(sync, job_pod(1), "u9")
    assert result.outcome == "local"  # no JARVICE job to keep apart: the gang stays one
    assert replacement["metadata"]["annotations"][GANG] == JOB_UID


def test_the_next_leader_follows_a_new_generation_from_the_handed_over_reservations() -> None:
    leader = make_sync(2, jobs=(indexed_job(2),))
    first = burst_generation(leader, "a")
    for i, patched in enumerate(first):
        finish(leader, patched, f"a-pod-{i}", job_ended=True)
    second, _ = admit(leader, job_pod(0), "b0")
    successor = make_sync(8, jobs=(indexed_job(2),))  # room for both now: only the record keeps them remote
    for i, patched in enumerate(first):
        appear(successor, patched, f"a-pod-{i}")
        finish(successor, patched, f"a-pod-{i}", job_ended=True)
    successor.cache.adopt_reservations(leader.cache.export_reservations())
    follower, result = admit(successor, job_pod(1), "b1")
    assert result.outcome == "remote" and "recorded by the previous leader" in result.reason
    assert follower["metadata"]["annotations"][GANG] == second["metadata"]["annotations"][GANG]


def test_a_reused_pod_group_name_whose_old_burst_pods_remain_is_a_generation_of_its_own() -> None:
    sync = make_sync(1, jobs=())
    old = [admit(sync, group_pod(f"w{i}", total=2), f"u{i}")[0] for i in range(2)]
    for i, patched in enumerate(old):
        appear(sync, patched, f"pod-{i}")
        finish(sync, patched, f"pod-{i}", job_ended=True)
    new = [admit(sync, group_pod(f"v{i}", total=2), f"v{i}")[0] for i in range(2)]
    assert [p["metadata"]["annotations"][RANK] for p in new] == ["0", "1"]
    assert len({p["metadata"]["annotations"][GANG] for p in new}) == 1
    assert new[0]["metadata"]["annotations"][GANG] != old[0]["metadata"]["annotations"][GANG]


def test_a_gangs_rank_0_carries_the_whole_gangs_gpus_so_the_count_outlives_the_reservations() -> None:
    # Budget 8, a group of 8 one-GPU pods of which only rank 0 is ever created: its runner submits
    # one job of 8 nodes, so 8 GPUs stay counted for as long as that pod is there, not a TTL.
    clock = Clock()
    sync = make_sync(1, budget="8", clock=clock)
    rank0, result = admit(sync, group_pod("w0", total=8), "u0")
    assert result.outcome == "remote" and rank0["metadata"]["annotations"][REMOTE_GPUS] == "8"
    appear(sync, rank0, "pod-0")
    clock.now += 600
    sync.cache.expire_reservations()
    assert sync.cache.remote_in_use("ns") == 8
    burst = [admit(sync, pod(container(gpus=2), name=f"solo-{i}"), f"s{i}")[1] for i in range(7)]
    assert [r.outcome for r in burst] == ["local"] * 7 and all(r.over_budget for r in burst)


def test_a_gangs_other_ranks_count_nothing_of_their_own() -> None:
    sync = make_sync(1, jobs=(indexed_job(3),), budget="6")
    results = [admit(sync, job_pod(i), f"u{i}") for i in (2, 0, 1)]  # any order: rank 0 carries the gang
    assert [r.outcome for _, r in results] == ["remote"] * 3
    assert [p["metadata"]["annotations"][REMOTE_GPUS] for p, _ in results] == ["0", "6", "0"]
    for i, (patched, _) in enumerate(results):
        appear(sync, patched, f"pod-{i}")
    assert sync.cache.remote_in_use("ns") == 6 and sync.cache.reservation_count == 0


def test_a_rank_0_that_comes_after_its_reservation_lapsed_must_fit_the_budget_again() -> None:
    clock = Clock()
    sync = make_sync(1, jobs=(indexed_job(2),), budget="4", clock=clock)
    rank1, first = admit(sync, job_pod(1), "u1")  # decides the gang: rank 0's place holds the gang's 4 GPUs
    assert first.outcome == "remote"
    appear(sync, rank1, "pod-1")
    clock.now += 61
    sync.cache.expire_reservations()
    _, solo = admit(sync, pod(container(gpus=2), name="solo"), "s")
    assert solo.outcome == "remote"  # 2 of 4: rank 0's reservation no longer holds anything
    _, result = admit(sync, job_pod(0), "u0")
    assert result.outcome == "local" and result.over_budget  # its job would bring 6 GPUs on a budget of 4
    assert "the whole gang of 2 pods" in result.reason
    assert sync.cache.remote_in_use("ns") == 2


def admit_in_ns(sync: CacheSync, raw: dict[str, Any], uid: str) -> tuple[dict[str, Any], admission.Admission]:
    """Admitted in the capped namespace of tests.unit.webhook.test_spending."""
    result = admission.admit(spent.review(raw, uid), cache=sync.cache, policy=POLICY)
    return patched_by(raw, result), result


def test_a_gangs_rank_0_carries_the_whole_jobs_cost_against_the_caps_in_money() -> None:
    # Two 1-GPU ranks: one job of 2 nodes at 3.20 a node-hour (the dearest 1-GPU machine) is 6.40 an
    # hour. Only rank 0 is ever created: past the TTL the namespace still counts 6.40, so of two 1-GPU
    # pods (3.20 each) under a cap of 10 an hour one bursts, the other is kept.
    clock = Clock(spent.NOW)
    sync = spent.capped_cluster({spending.ANNOTATION_MAX_COST_PER_HOUR: "10"}, clock=clock)
    sync.cache.spend.set_record(spent.parsed(spent.record()))
    raw = pod(container(gpus=1), name="w0", namespace=NS, labels={"task-type": "Nimbix", gangs.LABEL_KUEUE_GROUP: "g"})
    raw["metadata"]["annotations"] = {gangs.ANNOTATION_KUEUE_TOTAL: "2"}
    rank0, result = admit_in_ns(sync, raw, "u0")
    assert result.outcome == "remote"
    assert rank0["metadata"]["annotations"][spending.ANNOTATION_COST_PER_HOUR] == "6.4"
    appear(sync, rank0, "pod-0")
    clock.now += 61
    sync.cache.expire_reservations()
    solo = [spent.admit(sync, f"s{i}")[0] for i in range(2)]
    assert [(r.outcome, r.over_budget) for r in solo] == [("remote", False), ("local", True)]


def test_a_gangs_other_ranks_carry_no_cost() -> None:
    sync = spent.capped_cluster({spending.ANNOTATION_MAX_COST_PER_HOUR: "10"}, clock=Clock(spent.NOW))
    sync.cache.spend.set_record(spent.parsed(spent.record()))
    labels = {"task-type": "Nimbix", gangs.LABEL_KUEUE_GROUP: "g"}
    costs = []
    for i in range(2):
        raw = pod(container(gpus=1), name=f"w{i}", namespace=NS, labels=labels)
        raw["metadata"]["annotations"] = {gangs.ANNOTATION_KUEUE_TOTAL: "2"}
        patched, result = admit_in_ns(sync, raw, f"u{i}")
        assert result.outcome == "remote"
        costs.append(patched["metadata"]["annotations"][spending.ANNOTATION_COST_PER_HOUR])
    assert costs == ["6.4", "0"]


def test_a_gang_whose_ranks_would_pass_the_namespaces_reservation_cap_bursts() -> None:
    # One pod of a pod group reserves a place per rank: the ranks count against the namespace's cap,
    # so one namespace cannot hold every node with admissions nobody follows.
    clock = Clock()
    cache = ClusterCache(
        gpu_resources=(GPU,), clock=clock, reservation_ttl=60, max_reservations=8, max_reservations_per_namespace=2
    )
    sync = CacheSync(cache, clock=clock, kinds=KINDS_WITH_JOBS)
    sync.apply_list("nodes", [node(f"n{i}", 1) for i in range(3)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [KUBE_SYSTEM, namespace("ns")])
    sync.apply_list("jobs", [])
    _, result = admit(sync, group_pod("ddp-0", total=3), "u0")
    assert result.outcome == "remote"
    assert "3 reservations" in result.reason and "cap 2" in result.reason, result.reason
    assert [cache.free(f"n{i}")[GPU] for i in range(3)] == [1, 1, 1]  # nothing held for it
