"""A gang waits before bursting as one (`nimbix-burst.io/burst-after` on an Indexed Job's pods).

Expected values are written from the rules in docs/decision.md ("Waiting before bursting"), never by
calling the code under test: an Indexed Job gang that would burst waits until the Job's creation + the
setting, the same deadline at each of its pods whenever it is admitted; nothing is reserved or remembered
for it, so each pod decides again (a gang that fits now is local, as one); a pod admitted after the
deadline bursts the gang as one; a Kueue pod group bursts at once and says why.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from jarvice import contract
from tests.support.clocks import Clock
from tests.support.reinvocation import patched_by, review
from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, namespace, node, pod
from webhook import admission, gangs, waiting
from webhook.cache import ClusterCache
from webhook.rewrite_terms import RewritePolicy
from webhook.sync import KINDS_WITH_JOBS, CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
JOB_UID = "11111111-2222-3333-4444-555555555555"
CREATED = "2026-09-21T14:13:00Z"  # the Job's creationTimestamp
CREATED_EPOCH = 1_789_999_980.0
START = CREATED_EPOCH + 20  # its first pod is admitted 20 s later
DEADLINE = "2026-09-21T14:14:00.000Z"  # CREATED + 60 s


# ----- the rule, as a table ----------------------------------------------------------------------

NOW = 5000.0


def ask(setting: str | None = "60s", *, ns: str | None = None, job: str = "job-1") -> waiting.WaitAsk:
    # A gang's deadline comes from its Job's creation: what the single pods' memory holds is not read.
    return waiting.WaitAsk(setting, ns, job, NOW, {"job-1": NOW + 5}, "Never")


@pytest.mark.parametrize(
    ("the_ask", "since", "expected"),
    [
        # the Job's creation + the setting, the pod's or else its namespace's; never remembered (key "")
        (ask("60s"), NOW - 20, waiting.Wait("", NOW + 40, 60, "pod")),
        (ask(None, ns="5m"), NOW - 20, waiting.Wait("", NOW + 280, 300, "namespace")),
        (ask("60s"), NOW - 59.5, waiting.Wait("", NOW + 0.5, 60, "pod")),
        # its Job's creation unknown: the deadline remembered for the Job, as for a Job's pods alone
        (ask("60s"), None, waiting.Wait("job-1", NOW + 5, 60, "pod")),
        # 0, or nothing asked: at once, nothing to say
        (ask("0"), NOW - 20, waiting.NO_WAIT),
        (ask(None), NOW - 20, waiting.NO_WAIT),
    ],
)
def test_a_gangs_wait(the_ask: waiting.WaitAsk, since: float | None, expected: waiting.Wait | waiting.NoWait) -> None:
    assert waiting.decide(the_ask, gang=True, gang_since=since) == expected


@pytest.mark.parametrize(
    ("since", "job", "says"),
    [
        (NOW - 60, "job-1", "its gang's wait ended at 1970-01-01T01:23:20.000Z (its Job's creation + 60s)"),
        (NOW - 3600, "job-1", "its gang's wait ended at 1970-01-01T00:24:20.000Z"),
        (None, "", "only a gang whose pods a Job controls can wait"),
    ],
)
def test_a_gang_that_bursts_at_once_says_why(since: float | None, job: str, says: str) -> None:
    decided = waiting.decide(ask("60s", job=job), gang=True, gang_since=since)
    assert isinstance(decided, waiting.NoWait)
    assert says in decided.reason


def test_a_waiting_gangs_reason_names_the_gang_and_the_jobs_creation() -> None:
    reason = waiting.Wait("", NOW + 40, 60, "pod").reason()
    assert "its gang waits for local nodes until 1970-01-01T01:24:00.000Z" in reason
    assert "its Job's creation + nimbix-burst.io/burst-after 60s, from the pod" in reason
    assert reason.endswith("then bursts as one")


def test_an_indexed_jobs_creation_is_what_its_gang_waits_from() -> None:
    job = gangs.parse_job(indexed_job(2))
    assert job is not None and job.created == CREATED_EPOCH
    unreadable = indexed_job(2)
    unreadable["metadata"]["creationTimestamp"] = "yesterday"
    parsed = gangs.parse_job(unreadable)
    assert parsed is not None and parsed.created is None


# ----- through admit() ---------------------------------------------------------------------------


def indexed_job(size: int) -> dict[str, Any]:
    return {
        "metadata": {"uid": JOB_UID, "namespace": "ns", "name": "train", "creationTimestamp": CREATED},
        "spec": {"completionMode": "Indexed", "parallelism": size, "completions": size},
    }


def make_sync(*gpus_per_node: int, size: int = 2) -> tuple[CacheSync, Clock]:
    clock, wall = Clock(), Clock(START)
    cache = ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60, wall_clock=wall)
    sync = CacheSync(cache, clock=clock, kinds=KINDS_WITH_JOBS)
    sync.apply_list("nodes", [node(f"n{i}", gpus) for i, gpus in enumerate(gpus_per_node)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [KUBE_SYSTEM, namespace("ns")])
    sync.apply_list("jobs", [indexed_job(size)])
    assert sync.ready(stale_after=60) == (True, "ok")
    return sync, wall


def job_pod(index: int, *, setting: str = "60s") -> dict[str, Any]:
    raw = pod(container(gpus=1), name=f"train-{index}-{setting}")
    raw["spec"]["restartPolicy"] = "Never"  # a Job's pods that may wait (webhook.job_policy)
    raw["metadata"]["annotations"] = {
        gangs.ANNOTATION_COMPLETION_INDEX: str(index),
        contract.ANNOTATION_BURST_AFTER: setting,
    }
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB_UID, "controller": True}
    ]
    return raw


def admit(sync: CacheSync, raw: dict[str, Any], uid: str) -> tuple[dict[str, Any], admission.Admission]:
    result = admission.admit(review(raw, uid), cache=sync.cache, policy=POLICY)
    return patched_by(raw, result), result


def appear(sync: CacheSync, patched: dict[str, Any], uid: str, **changes: Any) -> None:
    """The watch shows the created pod (`changes`: to its metadata, e.g. a deletionTimestamp)."""
    shown = copy.deepcopy(patched)
    shown["metadata"].update(uid=uid, **changes)
    assert sync.apply_event("pods", "ADDED", shown) is None


def notes_of(patched: dict[str, Any]) -> dict[str, str]:
    return dict(patched["metadata"].get("annotations") or {})


def test_a_gang_on_a_full_cluster_waits_as_one_until_its_jobs_creation_plus_the_setting() -> None:
    sync, wall = make_sync(0)
    first, first_result = admit(sync, job_pod(0), "u0")
    appear(sync, first, "pod-0")
    wall.now = START + 15  # the next rank comes later, and decides again: the same deadline
    second, second_result = admit(sync, job_pod(1), "u1")
    assert (first_result.outcome, second_result.outcome) == ("local", "local")
    for rank, patched in enumerate((first, second)):
        notes = notes_of(patched)
        assert notes[contract.ANNOTATION_DECISION] == "local"
        assert notes[contract.ANNOTATION_BURST_DEADLINE] == DEADLINE
        assert (notes[contract.ANNOTATION_GANG], notes[contract.ANNOTATION_GANG_RANK]) == (JOB_UID, str(rank))
        assert notes[contract.ANNOTATION_GANG_SIZE] == "2"
        assert f"its gang waits for local nodes until {DEADLINE}" in notes[contract.ANNOTATION_REASON]
        assert patched["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"  # as submitted: it waits here
    assert any("kept local for now" in w for w in second_result.response["response"]["warnings"])
    assert sync.cache.reservation_count == 0  # nothing reserved, here or against a budget
    assert sync.cache.job_moves.waits == {}  # nothing remembered: the deadline is the Job's creation + 60 s


def test_a_waiting_gang_pod_admitted_again_gets_the_same_deadline() -> None:
    sync, wall = make_sync(0)
    first, _ = admit(sync, job_pod(0), "u0")
    wall.now = START + 30  # a reinvocation, or another replica deciding it after a restart: nothing was kept
    again, result = admit(sync, job_pod(0), "u0-again")
    assert result.outcome == "local"
    assert notes_of(again)[contract.ANNOTATION_BURST_DEADLINE] == notes_of(first)[contract.ANNOTATION_BURST_DEADLINE]


def test_the_gangs_replacements_after_the_deadline_burst_as_one_multi_node_job() -> None:
    sync, wall = make_sync(0)
    waited = [admit(sync, job_pod(rank), f"u{rank}")[0] for rank in range(2)]
    for rank, patched in enumerate(waited):  # the controller deleted both at the deadline
        appear(sync, patched, f"pod-{rank}", deletionTimestamp="2026-09-21T14:14:01Z")
    wall.now = CREATED_EPOCH + 61
    replacements = [admit(sync, job_pod(rank), f"r{rank}") for rank in range(2)]
    assert [result.outcome for _, result in replacements] == ["remote", "remote"]
    lead, follower = replacements
    assert (
        "its gang's wait ended at 2026-09-21T14:14:00.000Z"
        in notes_of(lead[0])[contract.ANNOTATION_BURST_AFTER_IGNORED]
    )
    assert "as decided at its first pod" in follower[1].reason
    for rank, (patched, _) in enumerate(replacements):
        notes = notes_of(patched)
        assert contract.ANNOTATION_BURST_DEADLINE not in notes
        assert (notes[contract.ANNOTATION_GANG], notes[contract.ANNOTATION_GANG_RANK]) == (JOB_UID, str(rank))
        env = {e["name"]: e.get("value") for e in patched["spec"]["containers"][0]["env"]}
        assert (env["NIMBIX_BURST_GANG_SIZE"], env["NIMBIX_BURST_GANG_RANK"]) == ("2", str(rank))


def test_a_waiting_gangs_next_pod_stays_local_with_the_same_deadline_when_gpus_free() -> None:
    """Its earlier pod is pending here and claims its GPU: the next stays local too, the scheduler places
    both where the GPUs freed, and the controller replaces the gang at the deadline only if it did not."""
    sync, wall = make_sync(0, 0)
    first, _ = admit(sync, job_pod(0), "u0")
    appear(sync, first, "pod-0")
    for name in ("n0", "n1"):  # local GPUs freed within the wait: one for each rank
        assert sync.apply_event("nodes", "MODIFIED", node(name, 1)) is None
    wall.now = START + 10
    second, result = admit(sync, job_pod(1), "u1")
    assert result.outcome == "local"
    assert notes_of(second)[contract.ANNOTATION_BURST_DEADLINE] == DEADLINE
    assert notes_of(second)[contract.ANNOTATION_GANG_RANK] == "1"


def test_a_gang_that_fits_runs_here_whatever_its_setting() -> None:
    sync, _ = make_sync(1, 1)
    results = [admit(sync, job_pod(rank), f"u{rank}") for rank in range(2)]
    assert [result.outcome for _, result in results] == ["local", "local"]
    assert not any(contract.ANNOTATION_BURST_DEADLINE in notes_of(patched) for patched, _ in results)


def test_a_gang_without_the_setting_bursts_at_once_as_before() -> None:
    sync, _ = make_sync(0)
    patched, result = admit(sync, job_pod(0, setting="0"), "u0")
    assert result.outcome == "remote"
    assert not {contract.ANNOTATION_BURST_DEADLINE, contract.ANNOTATION_BURST_AFTER_IGNORED} & set(notes_of(patched))


def test_a_pod_group_bursts_at_once_and_says_why() -> None:
    sync, _ = make_sync(0)
    raw = pod(container(gpus=1), name="ddp-0", labels={"task-type": "Nimbix", gangs.LABEL_KUEUE_GROUP: "ddp"})
    raw["metadata"]["annotations"] = {gangs.ANNOTATION_KUEUE_TOTAL: "2", contract.ANNOTATION_BURST_AFTER: "60s"}
    patched, result = admit(sync, raw, "g0")
    assert result.outcome == "remote"
    assert (
        "only a gang whose pods a Job controls can wait" in notes_of(patched)[contract.ANNOTATION_BURST_AFTER_IGNORED]
    )


def finish(sync: CacheSync, patched: dict[str, Any], uid: str, phase: str) -> None:
    """The watch shows the pod `uid` ended (`phase`: Succeeded, Failed)."""
    shown = copy.deepcopy(patched)
    shown["metadata"]["uid"] = uid
    shown["status"] = {"phase": phase}
    assert sync.apply_event("pods", "MODIFIED", shown) is None


@pytest.mark.parametrize(
    ("phase", "generation"),
    [
        # its job ran for the whole gang: the late rank follows it, in its generation
        pytest.param("Succeeded", 1, id="rank-0-succeeded"),
        # its job is not wanted any more: the Job retries index 0, and both ranks are the next generation's
        pytest.param("Failed", 2, id="rank-0-failed"),
    ],
)
def test_a_rank_replaced_after_rank_0_ended_joins_the_generation_its_end_leaves(phase: str, generation: int) -> None:
    """The Job recreates the evicted ranks apart (its back-off counts each failure as it sees it): rank 0's
    replacement bursts and submits the gang's job, which runs on every node, and its pod ends before rank
    1's replacement is created. Succeeded, rank 1 is that generation's rank, not a new one's: no other rank
    0 will ever come (the Job's index 0 succeeded), and its job ran for the whole gang."""
    sync, wall = make_sync(0)
    waited = [admit(sync, job_pod(rank), f"u{rank}")[0] for rank in range(2)]
    for rank, patched in enumerate(waited):  # the controller evicted both at the deadline
        appear(sync, patched, f"pod-{rank}", deletionTimestamp="2026-09-21T14:14:01Z", creationTimestamp=CREATED)
    wall.now = CREATED_EPOCH + 61
    lead, _ = admit(sync, job_pod(0), "r0")
    appear(sync, lead, "pod-r0", creationTimestamp="2026-09-21T14:14:01Z")
    finish(sync, lead, "pod-r0", phase)
    wall.now = CREATED_EPOCH + 71
    late, result = admit(sync, job_pod(1), "r1")
    assert result.outcome == "remote"
    notes = notes_of(late)
    uid = JOB_UID if generation == 1 else str(uuid.uuid5(uuid.UUID(JOB_UID), f"generation/{generation}"))
    assert (notes[contract.ANNOTATION_GANG], notes[contract.ANNOTATION_GANG_GENERATION]) == (uid, str(generation))
    assert notes[contract.ANNOTATION_GANG_RANK] == "1"
    # Its runner follows the job that may have ended before it starts: from when its generation began (the
    # creation of its earliest pod the watch showed; the waiting pods were generation 1's too). A new
    # generation began with this pod: its runner counts from its own start.
    env = {e["name"]: e.get("value") for e in late["spec"]["containers"][0]["env"]}
    assert env.get(contract.ENV_GANG_SINCE) == (str(int(CREATED_EPOCH)) if generation == 1 else None)
