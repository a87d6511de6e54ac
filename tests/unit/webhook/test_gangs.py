"""Gangs, the pure rules: which pods form one, whether they all fit at once (webhook.placement.pack),
what their pods tell, which rank a pod group's next pod takes (webhook.gang_decision.free_rank)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from entrypoint.gang import parse_gang
from tests.unit.webhook.builders import GPU, node
from webhook import gang_decision, gangs, placement
from webhook.cache import ClusterCache
from webhook.gangs import GangError, GangMember, GangTerms, JobInfo
from webhook.model import parse_node
from webhook.types import Placement, PodInfo

JOB_UID = "11111111-2222-3333-4444-555555555555"
CLUSTER = "0f1e2d3c4b5a"


def job(parallelism: int | None = 3, completions: int | None = 3, mode: str | None = "Indexed") -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if mode is not None:
        spec["completionMode"] = mode
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"metadata": {"uid": JOB_UID, "namespace": "ns", "name": "train"}, "spec": spec}


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(job(), JobInfo(JOB_UID, "ns", "train", 3, 3), id="indexed"),
        pytest.param(job(mode="NonIndexed"), None, id="non-indexed"),
        pytest.param(job(mode=None), None, id="mode-defaults-to-non-indexed"),
        pytest.param(job(parallelism=None), JobInfo(JOB_UID, "ns", "train", 1, 3), id="parallelism-defaults-to-1"),
        pytest.param(job(completions=None), JobInfo(JOB_UID, "ns", "train", 3, None), id="no-completions"),
        pytest.param({"metadata": {}, "spec": {"completionMode": "Indexed"}}, None, id="no-uid"),
        pytest.param({"spec": []}, None, id="wrong-shape"),
    ],
)
def test_parse_job(raw: dict[str, Any], want: JobInfo | None) -> None:
    assert gangs.parse_job(raw) == want


@pytest.mark.parametrize(
    ("parallelism", "completions", "size"),
    [
        pytest.param(3, 3, 3, id="gang"),
        pytest.param(2, 2, 2, id="smallest-gang"),
        pytest.param(1, 1, None, id="one-pod"),
        pytest.param(2, 10, None, id="work-queue-of-indexes"),
        pytest.param(3, None, None, id="no-completions"),
    ],
)
def test_an_indexed_job_is_a_gang_when_completions_equal_parallelism(
    parallelism: int, completions: int | None, size: int | None
) -> None:
    assert JobInfo(JOB_UID, "ns", "train", parallelism, completions).gang_size == size


def job_pod_meta(index: str | None = "1", *, controller: bool = True, kind: str = "Job") -> dict[str, Any]:
    owner = {"apiVersion": "batch/v1", "kind": kind, "name": "train", "uid": JOB_UID, "controller": controller}
    annotations = {} if index is None else {gangs.ANNOTATION_COMPLETION_INDEX: index}
    return {"labels": {"task-type": "Nimbix"}, "annotations": annotations, "ownerReferences": [owner]}


def group_meta(total: str | None = "3", group: str = "ddp") -> dict[str, Any]:
    annotations = {} if total is None else {gangs.ANNOTATION_KUEUE_TOTAL: total}
    return {"labels": {"task-type": "Nimbix", gangs.LABEL_KUEUE_GROUP: group}, "annotations": annotations}


GROUP_UID = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{CLUSTER}/ns/ddp"))  # the contract's rule, by hand
KNOWN = {JOB_UID: JobInfo(JOB_UID, "ns", "train", 3, 3)}


@pytest.mark.parametrize(
    ("meta", "jobs", "want"),
    [
        pytest.param(job_pod_meta(), KNOWN, GangMember(JOB_UID, "job", "train", 3, 1), id="indexed-job-pod"),
        pytest.param(job_pod_meta(), {}, GangMember(JOB_UID, "job", "train", None, 1), id="job-not-seen-yet"),
        pytest.param(
            job_pod_meta(),
            {JOB_UID: JobInfo(JOB_UID, "ns", "train", 2, 8)},
            None,
            id="work-queue-decided-alone",
        ),
        pytest.param(job_pod_meta("3"), KNOWN, None, id="index-past-size"),
        pytest.param(job_pod_meta(None), KNOWN, None, id="non-indexed-job-pod"),
        pytest.param(job_pod_meta(controller=False), KNOWN, None, id="not-the-controller"),
        pytest.param(job_pod_meta(kind="CronJob"), KNOWN, None, id="other-owner"),
        pytest.param({"labels": {}}, KNOWN, None, id="bare-pod"),
        pytest.param(group_meta(), {}, GangMember(GROUP_UID, "pod-group", "ddp", 3, None), id="kueue-group"),
        pytest.param(group_meta(" 4 "), {}, GangMember(GROUP_UID, "pod-group", "ddp", 4, None), id="spaces"),
        pytest.param(group_meta("1"), {}, None, id="group-of-one"),
    ],
)
def test_find_member(meta: dict[str, Any], jobs: dict[str, JobInfo], want: GangMember | None) -> None:
    assert gangs.find_member(meta, namespace="ns", cluster=CLUSTER, jobs=jobs) == want


@pytest.mark.parametrize(
    ("meta", "jobs", "want"),
    [
        pytest.param(job_pod_meta(), {}, True, id="indexed-job-pod-before-its-job"),
        pytest.param(job_pod_meta(), KNOWN, False, id="job-in-the-cache"),
        pytest.param(job_pod_meta(None), {}, False, id="non-indexed-job-pod"),
        pytest.param(job_pod_meta("x"), {}, False, id="unreadable-index-decided-now"),
        pytest.param(job_pod_meta(controller=False), {}, False, id="not-the-controller"),
        pytest.param(job_pod_meta(kind="CronJob"), {}, False, id="other-owner"),
        pytest.param(group_meta(), {}, False, id="kueue-group-needs-no-job"),
        pytest.param({"labels": {}}, {}, False, id="bare-pod"),
        pytest.param({"labels": True}, {}, False, id="labels-not-a-map-decided-now"),
        pytest.param({**job_pod_meta(), "annotations": ["x"]}, {}, False, id="annotations-not-a-map"),
        pytest.param({**job_pod_meta(), "ownerReferences": 7}, {}, False, id="owners-not-a-list"),
    ],
)
def test_awaits_its_job(meta: dict[str, Any], jobs: dict[str, JobInfo], want: bool) -> None:
    """Which pods wait for their Job to reach the cache before they are decided (webhook.app)."""
    assert gang_decision.awaits_its_job(meta, jobs) == want


def test_a_pod_group_is_not_recognised_without_the_clusters_identity() -> None:
    assert gangs.find_member(group_meta(), namespace="ns", cluster="", jobs={}) is None


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        pytest.param(group_meta(None), "lacks the kueue.x-k8s.io/pod-group-total-count annotation", id="no-total"),
        pytest.param(group_meta("three"), "pod-group-total-count must be a whole number >= 1", id="not-a-number"),
        pytest.param(group_meta("0"), "must be a whole number >= 1, got '0'", id="zero"),
        pytest.param(job_pod_meta("-1"), "job-completion-index must be a whole number >= 0", id="negative-index"),
    ],
)
def test_unreadable_gang_annotations_say_what_to_fix(meta: dict[str, Any], says: str) -> None:
    with pytest.raises(GangError) as caught:
        gangs.find_member(meta, namespace="ns", cluster=CLUSTER, jobs=KNOWN)
    assert says in str(caught.value)


def view_of(*nodes: dict[str, Any]) -> ClusterCache:
    cache = ClusterCache(gpu_resources=(GPU,), clock=lambda: 0.0, reservation_ttl=60)
    cache.replace_nodes([parse_node(n, (GPU,)) for n in nodes])
    return cache


def gpu_node(name: str, gpus: int, *, cpu: str = "16", labels: dict[str, str] | None = None) -> dict[str, Any]:
    raw = node(name, gpus, labels=labels)
    raw["status"]["allocatable"]["cpu"] = cpu
    return raw


@pytest.mark.parametrize(
    ("nodes", "gpus", "cpu", "size", "placed"),
    [
        pytest.param([gpu_node("a", 2), gpu_node("b", 2)], 2, 1000, 3, ["a", "b"], id="3x2-on-2x2-free"),
        pytest.param([gpu_node("a", 2), gpu_node("b", 2)], 2, 1000, 2, ["a", "b"], id="2x2-on-2x2-free"),
        pytest.param([gpu_node("a", 2), gpu_node("b", 2)], 1, 1000, 4, ["a", "a", "b", "b"], id="never-twice"),
        pytest.param([gpu_node("a", 2), gpu_node("b", 2)], 1, 1000, 5, ["a", "a", "b", "b"], id="one-too-many"),
        pytest.param([gpu_node("a", 8), gpu_node("b", 1)], 1, 1000, 3, ["b", "a", "a"], id="best-fit-first"),
        pytest.param([gpu_node("a", 4), gpu_node("b", 4)], 1, 8000, 4, ["a", "a", "b", "b"], id="cpu-limits-a-node"),
        pytest.param([gpu_node("a", 3)], 4, 1000, 2, [], id="too-big-for-any-node"),
    ],
)
def test_pack_places_every_pod_or_says_how_many(
    nodes: list[dict[str, Any]], gpus: int, cpu: int, size: int, placed: list[str]
) -> None:
    cache = view_of(*nodes)
    packing = placement.pack(cache.view, {GPU: gpus, "cpu": cpu}, Placement(), size=size)
    assert list(packing.nodes) == placed
    assert packing.fits == (len(placed) == size)
    # A trial: the cache itself still has every GPU free.
    assert cache.free("a")[GPU] == int(nodes[0]["status"]["allocatable"][GPU])


def test_pack_honours_the_pods_placement() -> None:
    cache = view_of(gpu_node("a", 2, labels={"zone": "x"}), gpu_node("b", 2, labels={"zone": "y"}))
    packing = placement.pack(cache.view, {GPU: 1}, Placement(node_selector={"zone": "y"}), size=3)
    assert packing.nodes == ("b", "b")
    assert not packing.fits


def test_a_gang_too_large_to_pack_is_not_packed() -> None:
    cache = view_of(gpu_node("a", 8))
    packing = placement.pack(cache.view, {GPU: 1}, Placement(), size=placement.MAX_GANG_SIZE + 1)
    assert packing.nodes == () and not packing.fits


def member(
    rank: int, decision: str, *, terminal: bool = False, deleting: bool = False, succeeded: bool = False
) -> PodInfo:
    return PodInfo(
        uid=f"p{rank}",
        namespace="ns",
        name=f"p{rank}",
        node_name="",
        nominated_node="",
        requests={},
        terminal=terminal,
        placement=Placement(),
        reservation_id="",
        gang=JOB_UID,
        gang_rank=rank,
        decision=decision,
        deleting=deleting,
        succeeded=succeeded,
    )


@pytest.mark.parametrize(
    ("pods", "kind", "held"),
    [
        pytest.param([], None, set(), id="none"),
        pytest.param([member(1, "remote"), member(0, "remote")], "remote", {0, 1}, id="remote"),
        pytest.param([member(2, "local")], "local", {2}, id="local"),
        pytest.param([member(0, "local", terminal=True)], None, set(), id="finished-pods-tell-nothing"),
        pytest.param([member(0, "remote", deleting=True)], None, set(), id="going-pods-tell-nothing"),
        # its job ran for the whole gang: a late rank follows it, and a pod group's next pod takes another rank
        pytest.param([member(0, "remote", terminal=True, succeeded=True)], "remote", {0}, id="succeeded-burst-pod"),
        pytest.param([member(0, "remote", terminal=True)], None, set(), id="failed-burst-pod-tells-nothing"),
        pytest.param([member(1, "remote"), member(0, "local")], "local", {0, 1}, id="lowest-rank-first"),
        pytest.param([member(0, "")], None, {0}, id="undecided"),
    ],
)
def test_read_pods(pods: list[PodInfo], kind: str | None, held: set[int]) -> None:
    seen = gangs.read_pods(pods)
    assert (seen.kind, set(seen.held)) == (kind, held)


@pytest.mark.parametrize(
    ("held", "taken", "want"),
    [
        pytest.param([], [], 0, id="first"),
        pytest.param([0], [1], 2, id="after-held-and-taken"),
        pytest.param([1], [], 0, id="lowest-free"),
        pytest.param([0, 2], [1], None, id="all-used"),
    ],
)
def test_free_rank(held: list[int], taken: list[int], want: int | None) -> None:
    assert gang_decision.free_rank(3, held=held, taken=taken) == want


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        pytest.param(
            {"nimbix-burst.io/gang": "g", "nimbix-burst.io/gang-size": "2", "nimbix-burst.io/gang-rank": "1"},
            GangTerms("g", 2, 1),
            id="ours",
        ),
        pytest.param({}, None, id="none"),
        pytest.param({"nimbix-burst.io/gang": "g", "nimbix-burst.io/gang-rank": "1"}, None, id="no-size"),
        pytest.param(
            {"nimbix-burst.io/gang": "g", "nimbix-burst.io/gang-size": "2", "nimbix-burst.io/gang-rank": "2"},
            None,
            id="rank-past-size",
        ),
    ],
)
def test_parse_terms(annotations: dict[str, str], want: GangTerms | None) -> None:
    assert gangs.parse_terms(annotations) == want


def test_reservation_ids_of_a_rank_differ_before_and_after_its_pod_is_admitted() -> None:
    assert gangs.open_id("g", 1) == "gang.g.1"
    assert gangs.taken_id("g", 1) == "gang.g.1.pod"
    assert gangs.marker_id("g", "kept") == "gang.g.kept"


def test_a_generations_identity_is_the_gangs_for_the_first_and_its_own_for_each_later_one() -> None:
    later = [gangs.generation_uid(JOB_UID, n) for n in (2, 3)]
    assert gangs.generation_uid(JOB_UID, 1) == JOB_UID
    assert later == [gangs.generation_uid(JOB_UID, n) for n in (2, 3)]  # every replica computes the same
    assert len({JOB_UID, *later}) == 3
    assert later[0] == str(uuid.uuid5(uuid.UUID(JOB_UID), "generation/2"))  # the contract's rule
    for uid in later:  # what the runner accepts as a gang's identity
        env = {"NIMBIX_BURST_GANG_UID": uid, "NIMBIX_BURST_GANG_SIZE": "2", "NIMBIX_BURST_GANG_RANK": "0"}
        assert parse_gang(env, nodes=None)[1] == []
    assert gangs.generation_uid("not-a-uuid", 2) != gangs.generation_uid("not-a-uuid", 3)


def pod_of(
    generation: str, *, rank: int = 0, phase: str = "Running", deleting: bool = False, decision: str = "remote"
) -> PodInfo:
    return PodInfo("p", "ns", "p", "", "", {}, phase in ("Succeeded", "Failed"), Placement(), "", gang=generation,
                   gang_rank=rank, decision=decision, deleting=deleting, succeeded=phase == "Succeeded")  # fmt: skip


@pytest.mark.parametrize(
    ("pods", "over"),
    [
        pytest.param([pod_of("g"), pod_of("g", rank=1)], False, id="every-burst-pod-follows"),
        pytest.param([pod_of("g"), pod_of("g", rank=1, phase="Failed")], True, id="a-burst-pod-failed"),
        pytest.param([pod_of("g", deleting=True)], True, id="a-burst-pod-being-deleted"),
        pytest.param([pod_of("g", phase="Failed", decision="local")], False, id="a-local-pod-finished-no-job"),
        pytest.param([], False, id="no-pod"),
        # rank 0's job ran on every node and completed before rank 1's pod came: rank 1 follows it
        pytest.param([pod_of("g", phase="Succeeded")], False, id="a-burst-pod-succeeded-a-rank-to-come"),
        pytest.param([pod_of("g", phase="Succeeded"), pod_of("g", rank=1)], False, id="one-succeeded-one-follows"),
        # it ran to its end: a pod that comes now is a new run (a reused pod group name)
        pytest.param([pod_of("g", phase="Succeeded"), pod_of("g", rank=1, phase="Succeeded")], True, id="all-done"),
        pytest.param([pod_of("g", phase="Succeeded"), pod_of("g", rank=1, phase="Failed")], True, id="one-failed"),
        pytest.param([pod_of("g", phase="Succeeded", deleting=True)], True, id="a-succeeded-pod-being-deleted"),
    ],
)
def test_a_burst_generation_is_over_once_a_pod_failed_or_every_rank_succeeded(pods: list[PodInfo], over: bool) -> None:
    assert gangs.generation_over(pods, size=2) is over


def test_a_job_in_another_namespace_makes_no_gang() -> None:
    # A pod can name any Job as its controller; only a Job of its own namespace makes it a rank of that gang.
    elsewhere = {JOB_UID: JobInfo(JOB_UID, "victims", "train", 3, 3)}
    assert gangs.find_member(job_pod_meta(), namespace="ns", cluster=CLUSTER, jobs=elsewhere) is None


def test_pods_of_another_namespace_never_tell_a_gangs_decision_or_end_its_generation() -> None:
    # The gang of namespace "ns" (its Job known), and pods elsewhere annotated with its identity: a
    # finished "burst" pod (it would end the generation) and a "local" one (it would make the gang local).
    index = gangs.GangIndex()
    index.upsert_job(JobInfo(JOB_UID, "ns", "train", 3, 3))
    ours = PodInfo("p0", "ns", "p0", "", "", {}, False, Placement(), "", gang=JOB_UID, gang_rank=0, decision="remote")
    twins = [
        PodInfo("t1", "other", "t1", "", "", {}, True, Placement(), "", gang=JOB_UID, gang_rank=1, decision="remote"),
        PodInfo("t2", "other", "t2", "", "", {}, False, Placement(), "", gang=JOB_UID, gang_rank=0, decision="local"),
    ]
    index.replace_pods([ours, *twins])
    snap = index.snapshot(job_pod_meta("1"), namespace="ns", cluster=CLUSTER, now=0.0, ttl=60.0, hold=lambda _: None)
    assert snap is not None
    assert (snap.member.uid, snap.member.generation) == (JOB_UID, 1)  # the generation goes on
    assert (snap.seen.kind, set(snap.seen.held)) == ("remote", {0})  # only its own pod tells
