"""A burst pod comes home while its JARVICE job is queued: the pure rules (controller.homecoming) as
tables, then Homecomer.round against a fake API and a fake JARVICE (what it deletes, terminates and
says). The rules are those of docs/controller.md ("Come home while still queued")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller import homecoming, stranding
from controller.homecomer import Homecomer
from controller.kube import PodChanged, PodGone
from controller.metrics import Metrics
from controller.model import PodView, parse_pod
from controller.store import PodStore
from jarvice.model import JobEntry
from tests.unit.controller.builders import JOB_UID, UID, job, job_owner, pod

CLUSTER = "dev-0f1e2d3c4b5a"


def burst(**kwargs: Any) -> dict[str, Any]:
    """A Job's pod the webhook burst: its runner runs here on a CPU node, its job on JARVICE."""
    kwargs.setdefault("phase", "Running")
    kwargs.setdefault("node_name", "cpu-1")
    kwargs.setdefault("scheduled", ("True", ""))
    return pod(decision="remote", **kwargs)


def entry(number: int = 4711, state: str = "SUBMITTED", *, uid: str = UID, started: int = 0) -> JobEntry:
    return JobEntry(
        number=number,
        name=f"job-{number}",
        state=state,
        label=f"k8s-{CLUSTER}.{uid}-app-1",
        exitcode=None,
        start_time=started,
    )


# ----- the rule, as a table ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "jobs", "before", "verdict"),
    [
        pytest.param(burst(), [entry()], False, "check", id="submitted"),
        pytest.param(burst(), [entry(state="SEQUENTIALLY QUEUED")], False, "check", id="queued"),
        pytest.param(burst(phase="Pending", node_name=""), [entry()], False, "check", id="runner-not-started"),
        # its job has started: it stays, whatever a local node could do
        pytest.param(burst(), [entry(state="PROCESSING STARTING")], False, "stay", id="running"),
        pytest.param(burst(), [entry(started=1_700_000_000)], False, "stay", id="submitted-with-a-start-time"),
        pytest.param(burst(), [entry(4711), entry(4712, "PROCESSING STARTING")], False, "stay", id="one-started"),
        # nothing to bring home
        pytest.param(burst(), [], False, "ignore", id="no-live-job"),
        pytest.param(burst(), [entry()], True, "ignore", id="its-job-came-home-once"),
        pytest.param(burst(owners=[]), [entry()], False, "ignore", id="bare-pod"),
        pytest.param(burst(owners=[job_owner(kind="ReplicaSet", api="apps/v1")]), [entry()], False, "ignore", id="rs"),
        pytest.param(burst(gang="g-1"), [entry()], False, "ignore", id="gang-pod"),
        pytest.param(burst(deleting=True), [entry()], False, "ignore", id="deleting"),
        pytest.param(burst(phase="Succeeded"), [entry()], False, "ignore", id="finished"),
        pytest.param(pod(), [entry()], False, "ignore", id="decided-local"),
        pytest.param(burst(labeled=False), [entry()], False, "ignore", id="unlabeled"),
    ],
)
def test_assess(body: dict[str, Any], jobs: list[JobEntry], before: bool, verdict: str) -> None:
    assert homecoming.assess(parse_pod(body), jobs, came_home_before=before).verdict == verdict


def decided(annotations: Mapping[str, str]) -> dict[str, Any]:
    return {"metadata": {"annotations": dict(annotations)}}


@pytest.mark.parametrize(
    ("answer", "fits"),
    [
        (decided({"nimbix-burst.io/decision": "local", "nimbix-burst.io/candidate-nodes": "1"}), True),
        # kept local without a node: a budget, a wait before bursting, an unknown cluster
        (decided({"nimbix-burst.io/decision": "local", "nimbix-burst.io/budget": "4 of 4"}), False),
        (decided({"nimbix-burst.io/decision": "local", "nimbix-burst.io/burst-deadline": "x"}), False),
        (decided({"nimbix-burst.io/decision": "remote"}), False),
        (decided({}), False),  # the webhook did not answer (failurePolicy Ignore)
        ({}, False),
    ],
)
def test_only_a_local_decision_on_a_node_fits(answer: dict[str, Any], fits: bool) -> None:
    assert homecoming.fits_locally(answer)[0] is fits


def test_the_dry_run_pod_is_the_jobs_next_pod_under_a_name_of_its_own() -> None:
    template = {
        "metadata": {"labels": {"task-type": "Nimbix"}, "annotations": {"a": "b"}, "name": "x"},
        "spec": {"containers": [{"name": "app", "image": "train"}], "restartPolicy": "Never"},
    }
    body = homecoming.dry_run_pod({**job(), "spec": {"template": template}}, parse_pod(burst()))
    assert body["metadata"] == {
        "labels": {"task-type": "Nimbix"},
        "annotations": {"a": "b"},
        "generateName": "train-homecoming-",
        "namespace": "team",
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB_UID, "controller": True}
        ],
    }
    assert body["spec"] == template["spec"]


@pytest.mark.parametrize(
    ("extra", "unmodelled"),
    [
        ({}, ""),
        ({"nodeSelector": {"gpu": "a100"}}, ""),  # the webhook models node selection
        ({"affinity": {"nodeAffinity": {"x": 1}}}, ""),
        ({"affinity": {"podAntiAffinity": {"x": 1}}}, "pod anti-affinity"),
        ({"affinity": {"podAffinity": {"x": 1}}}, "pod affinity"),
        ({"topologySpreadConstraints": [{"maxSkew": 1}]}, "topology spread constraints"),
        (
            {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "zonal"}}]},
            "a persistentVolumeClaim (zonal) whose volume may be tied to some nodes",
        ),
        ({"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "nfs"}}]}, ""),  # mounts anywhere
        ({"volumes": [{"name": "d", "emptyDir": {}}]}, ""),
    ],
)
def test_a_rule_the_webhook_does_not_model_keeps_the_pod_from_coming_home(
    extra: dict[str, Any], unmodelled: str
) -> None:
    """The webhook's 'fits' cannot see these: a pod brought home might not bind, and strand here."""
    spec = {"containers": [{"name": "app", "image": "train"}], "restartPolicy": "Never", **extra}
    assert homecoming.unmodelled_rule(spec, pinned_claims={"zonal"}) == unmodelled


BOUND = {"status": {"phase": "Bound"}, "spec": {"volumeName": "pv-1"}}
ZONE = {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}


@pytest.mark.parametrize(
    ("claim", "volume", "pins"),
    [
        pytest.param(BOUND, {"spec": {"nfs": {"server": "x", "path": "/"}}}, False, id="bound-mounts-anywhere"),
        pytest.param(BOUND, {"spec": {"hostPath": {"path": "/d"}}}, False, id="bound-hostpath-without-affinity"),
        pytest.param(BOUND, {"spec": {"nodeAffinity": ZONE}}, True, id="bound-zonal"),
        pytest.param({"status": {"phase": "Pending"}, "spec": {}}, None, True, id="not-bound-yet"),
        pytest.param(None, None, True, id="claim-not-found"),
        pytest.param(BOUND, None, True, id="volume-not-found"),
    ],
)
def test_a_claim_keeps_a_pod_away_only_when_its_volume_may_be_tied_to_some_nodes(
    claim: dict[str, Any] | None, volume: dict[str, Any] | None, pins: bool
) -> None:
    assert homecoming.volume_pins_nodes(claim, volume) is pins


def test_the_claims_a_spec_names_once_each() -> None:
    spec = {
        "volumes": [
            {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "b", "emptyDir": {}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "d", "persistentVolumeClaim": {"claimName": "ckpt"}},
        ]
    }
    assert homecoming.claim_names(spec) == ("data", "ckpt")


def test_a_pod_with_a_rule_the_webhook_does_not_model_stays_burst_and_says_so_once() -> None:
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice)
    template = {"metadata": {}, "spec": {"containers": [{"name": "app"}], "topologySpreadConstraints": [{}]}}
    kube.jobs["train"]["spec"]["template"] = template
    homecomer.round()
    homecomer.round()
    assert (kube.dry_runs, kube.deleted, jarvice.terminated) == ([], [], [])
    ((_, ops),) = kube.patched
    assert ops[0]["value"].startswith("never brought home: its pods have topology spread constraints")


@pytest.mark.parametrize(
    ("volume", "comes_home"),
    [
        pytest.param({"spec": {"nfs": {"server": "x", "path": "/"}}}, True, id="a-volume-any-node-mounts"),
        pytest.param({"spec": {"nodeAffinity": ZONE}}, False, id="a-zonal-volume"),
    ],
)
def test_a_pod_with_its_data_on_a_claim_comes_home_when_the_volume_mounts_anywhere(
    volume: dict[str, Any], comes_home: bool
) -> None:
    """Data staged from a claim is the usual shape of a pod that bursts with its data (and of one that
    moves home from its checkpoint): its claim keeps it away only when its volume may be tied to nodes."""
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice)
    spec = {"containers": [{"name": "app"}], "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    kube.jobs["train"]["spec"]["template"] = {"metadata": {}, "spec": spec}
    kube.claims["data"] = (BOUND, volume)
    homecomer.round()
    assert (len(kube.dry_runs), len(kube.deleted)) == ((1, 1) if comes_home else (0, 0))
    if not comes_home:
        ((_, ops),) = kube.patched
        assert "a persistentVolumeClaim (data) whose volume may be tied to some nodes" in ops[0]["value"]


# ----- Homecomer.round against fakes -------------------------------------------------------------

LOCAL = decided(
    {
        "nimbix-burst.io/decision": "local",
        "nimbix-burst.io/candidate-nodes": "1",
        "nimbix-burst.io/reason": "fits gpu-1",
    }
)


@dataclass
class FakeJarvice:
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    then: dict[int, JobEntry] | None = None  # what the second listing shows (None: the same)
    terminated: list[int] = field(default_factory=list)
    listings: int = 0
    ended: dict[int, JobEntry] = field(default_factory=dict)  # what the completed listing shows

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        if completed:
            return self.ended
        self.listings += 1
        return self.then if self.listings > 1 and self.then is not None else self.jobs

    def terminate(self, number: int, *, deadline: float | None = None) -> None:
        self.terminated.append(number)


@dataclass
class FakeKube:
    pods: dict[str, dict[str, Any]]
    answer: dict[str, Any]
    jobs: dict[str, dict[str, Any]] = field(default_factory=lambda: {"train": job()})
    dry_runs: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    patched: list[tuple[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    delete_conflict: bool = False
    claims: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = field(default_factory=dict)

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        if name not in self.pods:
            raise PodGone(name)
        return self.pods[name]

    def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.jobs.get(name)

    def dry_run_create_pod(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.dry_runs.append(dict(body))
        return self.answer

    def read_claim_and_volume(
        self, namespace: str, claim: str
    ) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        return self.claims.get(claim, (None, None))

    def evict_pod(self, pod: PodView) -> None:
        if self.delete_conflict:
            raise PodChanged("409")
        self.deleted.append((pod.name, pod.resource_version))

    def patch_pod_json(self, namespace: str, name: str, ops: Any) -> None:
        self.patched.append((name, ops))

    def record_event(
        self, *, namespace: str, involved: Mapping[str, str], reason: str, message: str, event_type: str = "Warning"
    ) -> None:
        self.events.append((involved["kind"], involved["name"], reason))


def make(
    body: dict[str, Any], jarvice: FakeJarvice, *, answer: dict[str, Any] = LOCAL, leader: bool = True
) -> tuple[Homecomer, FakeKube, Metrics]:
    store = PodStore(clock=lambda: 0.0)
    store.replace([body])
    kube = FakeKube(pods={body["metadata"]["name"]: body}, answer=answer)
    metrics = Metrics(is_leader=lambda: leader)
    homecomer = Homecomer(
        store=store, jarvice=jarvice, kube=kube, metrics=metrics, is_leader=lambda: leader, interval=10, stale_after=60
    )
    return homecomer, kube, metrics


def test_a_queued_burst_pod_that_fits_here_is_deleted_its_job_terminated_and_the_job_told() -> None:
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, metrics = make(burst(), jarvice)
    assert homecomer.round() == 10
    assert kube.dry_runs[0]["metadata"]["generateName"] == "train-homecoming-"
    assert kube.deleted == [("train-abcde", "42")]
    assert jarvice.terminated == [4711]
    assert kube.events == [("Job", "train", "NimbixCameHome")]
    assert metrics.registry.get_sample_value("nimbix_burst_controller_homecomings_total") == 1.0


def test_a_pod_comes_home_at_most_once_per_job() -> None:
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice)
    homecomer.round()
    replacement = burst(uid="22222222-3333-4444-5555-666666666666", name="train-fghij")
    homecomer._store.replace([replacement])  # the replacement strands, bursts again, queues again
    jarvice.jobs = {4800: entry(4800, uid=replacement["metadata"]["uid"])}
    homecomer.round()
    assert kube.deleted == [("train-abcde", "42")]
    assert jarvice.terminated == [4711]


def test_a_pod_that_does_not_fit_here_stays_and_nothing_is_terminated() -> None:
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice, answer=decided({"nimbix-burst.io/decision": "remote"}))
    homecomer.round()
    assert len(kube.dry_runs) == 1
    assert kube.deleted == []
    assert jarvice.terminated == []


def test_a_job_that_starts_before_the_second_look_keeps_its_pod() -> None:
    jarvice = FakeJarvice({4711: entry()}, then={4711: entry(state="PROCESSING STARTING", started=1)})
    homecomer, kube, _ = make(burst(), jarvice)
    homecomer.round()
    assert kube.deleted == []
    assert jarvice.terminated == []


def test_a_pod_changed_before_the_delete_keeps_its_job() -> None:
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice)
    kube.delete_conflict = True
    homecomer.round()
    assert jarvice.terminated == []
    assert homecomer.came_home == set()


def test_a_started_job_keeps_its_pod_and_the_pod_says_so_once() -> None:
    jarvice = FakeJarvice({4711: entry(state="PROCESSING STARTING", started=1)})
    homecomer, kube, _ = make(burst(), jarvice)
    homecomer.round()
    homecomer.round()
    assert kube.deleted == []
    assert jarvice.terminated == []
    assert len(kube.dry_runs) == 1
    ((name, ops),) = kube.patched
    assert name == "train-abcde"
    assert ops[0]["path"] == "/metadata/annotations/nimbix-burst.io~1homecoming"
    assert ops[0]["value"].startswith("stays on Nimbix: its JARVICE job 4711 has started")


@pytest.mark.parametrize(
    "the_job",
    [None, job(uid="another-uid"), job(suspend=True), job(conditions=[{"type": "Complete", "status": "True"}])],
)
def test_a_job_that_would_not_recreate_the_pod_keeps_it_burst(the_job: dict[str, Any] | None) -> None:
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice)
    kube.jobs = {"train": the_job} if the_job is not None else {}
    homecomer.round()
    assert kube.dry_runs == []
    assert kube.deleted == []


def test_a_follower_does_nothing() -> None:
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice, leader=False)
    homecomer.round()
    assert jarvice.listings == 0
    assert kube.deleted == []


def test_a_pod_whose_job_would_count_the_move_stays_burst_and_says_so_once() -> None:
    """A Job without the rule ignoring evictions: bringing its pod home would cost it a retry (with
    backoffLimit 0, the Job itself), so the pod stays on Nimbix, its job queued, and the pod says why."""
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice)
    kube.jobs = {"train": job(rules=[])}
    homecomer.round()
    homecomer.round()
    assert (kube.dry_runs, kube.deleted, jarvice.terminated) == ([], [], [])
    ((name, ops),) = kube.patched
    assert name == "train-abcde"
    assert ops[0]["path"] == "/metadata/annotations/nimbix-burst.io~1homecoming"
    assert ops[0]["value"] == f"never brought home: {stranding.NOT_FREE}"


# ----- accounted: one round brings home what the freed GPUs take, oldest queued first ----------

OTHER_JOB = "99999999-8888-7777-6666-555555555555"
OLD_UID, NEW_UID = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002"


def two_queued() -> tuple[Homecomer, FakeKube, FakeJarvice, list[float]]:
    """Two Jobs' burst pods, both queued and both fitting the one GPU a node freed (the webhook's dry
    run reserves nothing, so each alone fits): the older (the lower JARVICE job number) is `old`."""
    new = burst(uid=NEW_UID, name="late-abcde", owners=[job_owner(uid=OTHER_JOB, name="late")])
    old = burst(uid=OLD_UID, name="train-abcde")
    jarvice = FakeJarvice({4800: entry(4800, uid=NEW_UID), 4711: entry(4711, uid=OLD_UID)})
    store = PodStore(clock=lambda: 0.0)
    store.replace([new, old])
    kube = FakeKube(pods={"late-abcde": new, "train-abcde": old}, answer=LOCAL)
    kube.jobs["late"] = job(uid=OTHER_JOB)
    now = [1000.0]
    homecomer = Homecomer(
        store=store,
        jarvice=jarvice,
        kube=kube,
        metrics=Metrics(is_leader=lambda: True),
        is_leader=lambda: True,
        interval=10,
        stale_after=60,
        clock=lambda: now[0],
    )
    return homecomer, kube, jarvice, now


def test_one_round_brings_home_one_pod_the_oldest_queued() -> None:
    homecomer, kube, jarvice, _ = two_queued()
    homecomer.round()
    assert kube.deleted == [("train-abcde", "42")]
    assert jarvice.terminated == [4711]


def test_no_other_pod_comes_home_until_the_replacement_holds_its_gpus_by_binding() -> None:
    homecomer, kube, jarvice, now = two_queued()
    homecomer.round()
    later = burst(uid=NEW_UID, name="late-abcde", owners=[job_owner(uid=OTHER_JOB, name="late")])
    replacement = pod(uid="cccccccc-0000-0000-0000-000000000003", name="train-fghij", scheduled=None)
    homecomer._store.replace([later, replacement])  # admitted local, not bound yet
    now[0] += 60
    homecomer.round()
    assert kube.deleted == [("train-abcde", "42")]  # the GPU it was admitted for is not free for another
    bound = pod(
        uid="cccccccc-0000-0000-0000-000000000003",
        name="train-fghij",
        node_name="gpu-1",
        phase="Running",
        scheduled=("True", ""),
    )
    homecomer._store.replace([later, bound])  # bound: the node's GPUs are counted as used from now on
    now[0] += 10
    homecomer.round()  # the webhook's answer (here: still fits) decides the next one
    assert kube.deleted == [("train-abcde", "42"), ("late-abcde", "42")]
    assert jarvice.terminated == [4711, 4800]


def test_a_replacement_that_never_binds_stops_holding_other_pods_back_after_a_while() -> None:
    homecomer, kube, _, now = two_queued()
    homecomer.round()
    later = burst(uid=NEW_UID, name="late-abcde", owners=[job_owner(uid=OTHER_JOB, name="late")])
    homecomer._store.replace([later])
    now[0] += 10
    homecomer.round()
    assert len(kube.deleted) == 1
    now[0] += 600
    homecomer.round()
    assert len(kube.deleted) == 2


def test_a_pod_one_of_whose_jobs_already_ran_stays_and_never_runs_that_step_again() -> None:
    """Two burst containers: one's job completed (it ran, it was billed), the other's is queued. Coming
    home would run both here again: the pod stays, its queued job too, and the pod says why."""
    done = JobEntry(
        number=4700,
        name="job-4700",
        state="COMPLETED",
        label=f"k8s-{CLUSTER}.{UID}-prep-1",
        exitcode=0,
        start_time=1_700_000_000,
        end_time=1_700_000_100,
    )
    jarvice = FakeJarvice({4711: entry()}, ended={4700: done})
    homecomer, kube, _ = make(burst(), jarvice)
    homecomer.round()
    assert (kube.deleted, jarvice.terminated) == ([], [])
    ((name, ops),) = kube.patched
    assert name == "train-abcde"
    assert ops[0]["value"].startswith("stays on Nimbix: its JARVICE job 4700 already ran (COMPLETED)")


def test_a_job_of_it_that_ended_without_running_does_not_keep_it_away() -> None:
    moved = JobEntry(number=4700, name="job-4700", state="CANCELED", label=f"k8s-{CLUSTER}.{UID}-app-1", exitcode=-15)
    jarvice = FakeJarvice({4711: entry()}, ended={4700: moved})
    homecomer, kube, _ = make(burst(), jarvice)
    homecomer.round()
    assert kube.deleted == [("train-abcde", "42")]


def test_the_pod_is_marked_coming_home_before_its_eviction_so_the_webhook_holds_its_gpus() -> None:
    jarvice = FakeJarvice({4711: entry()})
    homecomer, kube, _ = make(burst(), jarvice)
    evictions_seen_marked: list[bool] = []
    evict = kube.evict_pod

    def evict_after_the_mark(pod: PodView) -> None:
        evictions_seen_marked.append(any(name == pod.name for name, _ops in kube.patched))
        evict(pod)

    kube.evict_pod = evict_after_the_mark  # type: ignore[method-assign]
    homecomer.round()
    uid = burst()["metadata"]["uid"]
    assert kube.patched == [
        (
            "train-abcde",
            [
                {"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "add", "path": "/metadata/annotations/nimbix-burst.io~1coming-home", "value": "true"},
            ],
        )
    ]
    assert evictions_seen_marked == [True]


def test_a_pod_whose_job_started_is_never_marked_coming_home() -> None:
    jarvice = FakeJarvice({4711: entry()}, then={4711: entry(state="PROCESSING STARTING", started=1)})
    homecomer, kube, _ = make(burst(), jarvice)
    homecomer.round()
    assert kube.patched == [] and kube.deleted == []
