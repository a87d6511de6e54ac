"""A burst pod's data: staging annotations checked against the bursting containers' mounts, and the
keep-local rule for data volumes that would not follow the job (webhook.data_volumes, admission)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.reinvocation import admit, make_cache
from tests.unit.webhook.builders import container, pod
from webhook import data_volumes
from webhook.data_volumes import ContainerStaging, DataPlan, DataRefusal

STAGE_IN = "nimbix-burst.io/stage-in"
STAGE_OUT = "nimbix-burst.io/stage-out"
REMOTE_DATA = "nimbix-burst.io/remote-data"
NOT_STAGED = "nimbix-burst.io/data-not-staged"

VOLUMES: list[dict[str, Any]] = [
    {"name": "training-data", "persistentVolumeClaim": {"claimName": "training-data"}},
    {"name": "config", "configMap": {"name": "train-config"}},
    {"name": "labels", "downwardAPI": {"items": []}},
    {"name": "token", "secret": {"secretName": "hub-token"}},
    {"name": "scratch", "emptyDir": {}},
    {"name": "host", "hostPath": {"path": "/srv/data"}},
]


def mounted(
    name: str = "app", *mounts: tuple[str, str] | tuple[str, str, bool], gpus: int | None = 1
) -> dict[str, Any]:
    c = container(name, gpus=gpus)
    c["volumeMounts"] = [
        {"name": m[0], "mountPath": m[1], **({"readOnly": True} if len(m) > 2 and m[2] else {})} for m in mounts
    ]
    return c


def plan(containers: list[dict[str, Any]], annotations: dict[str, str]) -> DataPlan | DataRefusal:
    spec = {"containers": containers, "volumes": VOLUMES}
    burst = [c["name"] for c in containers if "resources" in c]
    return data_volumes.plan_data(spec, annotations, burst_containers=burst)


PVC = ("training-data", "/workspace")
CONFIG = ("config", "/etc/train")


@pytest.mark.parametrize(
    ("containers", "annotations", "expected"),
    [
        pytest.param([mounted("app")], {}, DataPlan(()), id="no-volumes"),
        pytest.param([mounted("app", ("scratch", "/tmp/work"))], {}, DataPlan(()), id="emptydir-is-scratch-not-staged"),
        pytest.param(
            [mounted("app", CONFIG)],
            {},
            DataPlan((ContainerStaging("app", ("/etc/train",), ()),)),
            id="configmap-staged-automatically",
        ),
        pytest.param(
            [mounted("app", ("labels", "/etc/podinfo"))],
            {},
            DataPlan((ContainerStaging("app", ("/etc/podinfo",), ()),)),
            id="downwardapi-staged-automatically",
        ),
        pytest.param([mounted("app", ("token", "/etc/hub"))], {}, DataPlan(()), id="secret-never-staged-unnamed"),
        pytest.param(
            [mounted("app", ("token", "/etc/hub"))],
            {STAGE_IN: "/etc/hub/token"},
            DataPlan((ContainerStaging("app", ("/etc/hub/token",), ()),)),
            id="secret-staged-when-named",
        ),
        pytest.param(
            [mounted("app", PVC, CONFIG)],
            {STAGE_IN: " /workspace/data/ , /workspace/config.yaml,/workspace/data", STAGE_OUT: "/workspace/out"},
            DataPlan(
                (
                    ContainerStaging(
                        "app", ("/workspace/data", "/workspace/config.yaml", "/etc/train"), ("/workspace/out",)
                    ),
                )
            ),
            id="staged-pvc-normalised-deduplicated-config-added",
        ),
        pytest.param(
            [mounted("app", PVC)],
            {REMOTE_DATA: "none"},
            DataPlan(()),
            id="remote-data-none-bursts-without-staging",
        ),
        pytest.param(
            [mounted("app", PVC), mounted("sidecar", ("host", "/srv"), gpus=None)],
            {STAGE_OUT: "/workspace/out"},
            DataPlan((ContainerStaging("app", (), ("/workspace/out",)),)),
            id="local-sidecar-volumes-ignored",
        ),
        pytest.param(
            [mounted("a", PVC), mounted("b", ("host", "/workspace/data"))],
            {STAGE_IN: "/workspace/data/x"},
            DataPlan(
                (ContainerStaging("a", ("/workspace/data/x",), ()), ContainerStaging("b", ("/workspace/data/x",), ()))
            ),
            id="each-container-that-mounts-a-path-stages-it",
        ),
    ],
)
def test_plan(containers: list[dict[str, Any]], annotations: dict[str, str], expected: DataPlan) -> None:
    assert plan(containers, annotations) == expected


@pytest.mark.parametrize(
    ("containers", "annotations", "says"),
    [
        pytest.param(
            [mounted("train", PVC)],
            {},
            ["persistentVolumeClaim training-data (container train, mounted at /workspace)", STAGE_IN, REMOTE_DATA],
            id="pvc-without-staging",
        ),
        pytest.param(
            [mounted("train", ("host", "/srv/data"), CONFIG)],
            {},
            ["hostPath host (container train, mounted at /srv/data)"],
            id="hostpath-without-staging",
        ),
        pytest.param([mounted("app", PVC)], {STAGE_IN: "data/x"}, ["not absolute"], id="relative-path"),
        pytest.param([mounted("app", PVC)], {STAGE_IN: "/workspace/../etc"}, ["contains '..'"], id="dot-dot"),
        pytest.param([mounted("app", PVC)], {STAGE_IN: "/"}, ["'/' cannot be staged"], id="root"),
        pytest.param(
            [mounted("app", PVC)], {STAGE_IN: "/data/x"}, ["/data/x is under no volume mount"], id="unmounted"
        ),
        pytest.param(
            [mounted("app", PVC, CONFIG)], {STAGE_IN: "/etc"}, ["/etc is under no volume mount"], id="above-every-mount"
        ),
        pytest.param(
            [mounted("app", PVC, CONFIG)], {STAGE_OUT: "/etc/train/out"}, ["a configMap volume"], id="out-to-configmap"
        ),
        pytest.param(
            [mounted("app", ("training-data", "/workspace", True))],
            {STAGE_OUT: "/workspace/out"},
            ["mounted readOnly"],
            id="out-to-read-only-mount",
        ),
        pytest.param([mounted("app", PVC)], {REMOTE_DATA: "yes"}, ["the only value is 'none'"], id="remote-data-typo"),
        pytest.param([mounted("app", PVC)], {STAGE_IN: "/workspace/a\tb"}, ["control character"], id="tab-in-path"),
    ],
)
def test_refusal(containers: list[dict[str, Any]], annotations: dict[str, str], says: list[str]) -> None:
    result = plan(containers, annotations)
    assert isinstance(result, DataRefusal)
    for text in says:
        assert text in result.reason


def test_a_mount_inside_another_decides_what_a_path_is_on() -> None:
    # /workspace/cfg is a configMap inside a PVC mount: the deeper mount holds the path, so it cannot come back.
    result = plan([mounted("app", PVC, ("config", "/workspace/cfg"))], {STAGE_OUT: "/workspace/cfg/x"})
    assert isinstance(result, DataRefusal)
    assert "config (a configMap volume)" in result.reason


def _burst_pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    raw = pod(mounted("train", PVC, CONFIG, gpus=4), annotations=annotations)
    raw["spec"]["volumes"] = VOLUMES
    return raw


def test_admission_keeps_a_pvc_pod_without_staging_local_and_says_why() -> None:
    patched, result = admit(_burst_pod(), make_cache(free_gpus=1), "u1")
    assert result.outcome == "local"
    annotations = patched["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/decision"] == "local"
    assert annotations[NOT_STAGED] == "persistentVolumeClaim training-data (container train, mounted at /workspace)"
    warnings = result.response["response"]["warnings"]
    assert warnings == [
        "nimbix-burst: kept local, not burst: persistentVolumeClaim training-data would not follow the job",
        f"nimbix-burst: to burst, set {STAGE_IN} and stage-out, or {REMOTE_DATA}: none",
    ]
    assert "NIMBIX_BURST_STAGE_IN" not in str(patched["spec"])


def test_admission_bursts_a_staged_pod_and_tells_its_runner_the_paths() -> None:
    annotations = {STAGE_IN: "/workspace/data", STAGE_OUT: "/workspace/out"}
    patched, result = admit(_burst_pod(annotations), make_cache(free_gpus=1), "u1")
    assert result.outcome == "remote"
    env = {e["name"]: e.get("value") for e in patched["spec"]["containers"][0]["env"]}
    assert env["NIMBIX_BURST_STAGE_IN"] == "/workspace/data,/etc/train"
    assert env["NIMBIX_BURST_STAGE_OUT"] == "/workspace/out"


def test_a_pod_that_fits_locally_is_not_checked() -> None:
    patched, result = admit(_burst_pod({STAGE_IN: "relative"}), make_cache(free_gpus=4), "u1")
    assert result.outcome == "local"
    assert NOT_STAGED not in patched["metadata"]["annotations"]


JOB_UID = "0b5f6c1e-2a3b-4c5d-8e9f-a0b1c2d3e4f5"
INDEX = "batch.kubernetes.io/job-completion-index"


def owned(kind: str = "Job", *, uid: str = JOB_UID, controller: bool = True, api: str = "batch/v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": "train", "uid": uid, "controller": controller}


@pytest.mark.parametrize(
    ("meta", "key"),
    [
        pytest.param({"ownerReferences": [owned()]}, f"job-{JOB_UID}", id="a-job-s-pod-is-the-job-s-work"),
        pytest.param(
            {"ownerReferences": [owned()], "annotations": {INDEX: "3"}}, f"job-{JOB_UID}-3", id="indexed-job-per-index"
        ),
        pytest.param({"ownerReferences": [owned()], "annotations": {INDEX: "0"}}, f"job-{JOB_UID}-0", id="index-0"),
        pytest.param({}, "", id="a-bare-pod-is-its-own-work"),
        pytest.param({"ownerReferences": [owned("ReplicaSet", api="apps/v1")]}, "", id="another-controller"),
        pytest.param({"ownerReferences": [owned(controller=False)]}, "", id="a-job-that-does-not-control-it"),
        pytest.param(
            {"ownerReferences": [owned("ReplicaSet", api="apps/v1"), owned()]}, "", id="the-controller-decides"
        ),
        pytest.param({"ownerReferences": [owned(uid="not-a-uid")]}, "", id="an-owner-uid-that-is-no-uid"),
        pytest.param({"ownerReferences": [owned(uid=JOB_UID.upper())]}, "", id="an-upper-case-uid"),
        pytest.param(
            {"ownerReferences": [owned()], "annotations": {INDEX: "x1"}},
            "",
            id="an-index-the-job-controller-never-writes",
        ),
        pytest.param({"ownerReferences": [owned()], "annotations": {INDEX: "1" * 10}}, "", id="an-index-too-long"),
        pytest.param({"ownerReferences": "nonsense"}, "", id="owner-references-not-a-list"),
    ],
)
def test_data_key(meta: dict[str, Any], key: str) -> None:
    assert data_volumes.data_key(meta) == key


def test_a_job_s_staged_pod_tells_its_runner_whose_data_it_is() -> None:
    raw = _burst_pod({STAGE_IN: "/workspace/data"})
    raw["metadata"]["ownerReferences"] = [owned()]
    patched, result = admit(raw, make_cache(free_gpus=1), "u1")
    assert result.outcome == "remote"
    env = {e["name"]: e.get("value") for e in patched["spec"]["containers"][0]["env"]}
    assert env["NIMBIX_BURST_DATA_KEY"] == f"job-{JOB_UID}"


@pytest.mark.parametrize(("grace", "told"), [(None, "75"), (30, "75"), (600, "600")])
def test_a_staged_pod_tells_its_runner_its_grace_period(grace: int | None, told: str) -> None:
    """The copy-back after a signal may run as long as the pod's (raised) grace period allows."""
    raw = _burst_pod({STAGE_OUT: "/workspace/out"})
    if grace is not None:
        raw["spec"]["terminationGracePeriodSeconds"] = grace
    patched, result = admit(raw, make_cache(free_gpus=1), "u1")
    assert result.outcome == "remote"
    env = {e["name"]: e.get("value") for e in patched["spec"]["containers"][0]["env"]}
    assert env["NIMBIX_BURST_GRACE_SECONDS"] == told
    assert patched["spec"]["terminationGracePeriodSeconds"] == int(told)


def test_a_burst_that_stages_nothing_gets_no_data_key() -> None:
    raw = pod(container("train", gpus=4))
    raw["metadata"]["ownerReferences"] = [owned()]
    patched, result = admit(raw, make_cache(free_gpus=1), "u1")
    assert result.outcome == "remote"
    names = [e["name"] for e in patched["spec"]["containers"][0]["env"]]
    assert "NIMBIX_BURST_STAGE_IN" not in names
    assert "NIMBIX_BURST_DATA_KEY" not in names
    assert "NIMBIX_BURST_GRACE_SECONDS" not in names
