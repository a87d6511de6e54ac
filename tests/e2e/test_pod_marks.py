"""What a pod cannot say, on the real node with the installed add-on, through kubectl as a namespace user
with the `edit` role (impersonated: `kubectl --as`), the way anyone on a team can act.

- Copies of a running burst pod (`kubectl get pod -o json | kubectl create -f -`) and a pod written with a
  forged decision and counted GPUs are decided afresh: the namespace's budget holds, nothing is submitted
  for them.
- The product's annotations on an existing pod cannot be changed by such a user: the API server refuses
  with a message that names the annotation (deploy/pod-marks-policy.yaml).
Each case is a row of the money-safety fault matrix.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install
from jarvice import contract
from tests.support.fault_matrix import FaultMatrix, Row
from tests.support.installed_controller import (
    BUDGET,
    annotations_of,
    app_container,
    create_pod,
    find_pod,
    pod_body,
    wait_admitted_as,
)
from tests.support.real_node_pods import wait_log

USER = "dev"
LIVE = ("SUBMITTED", "PROCESSING STARTING")  # JARVICE job_status values of a job not ended
WAIT_SECONDS = 120.0


@pytest.fixture
def as_editor(installed_addon: install.Installed, control_plane: controlplane.ControlPlane, ns: str) -> list[str]:
    """kubectl arguments that act as a ServiceAccount of the namespace bound to the built-in `edit` role."""
    control_plane.kubectl("-n", ns, "create", "serviceaccount", USER)
    control_plane.kubectl(
        "-n", ns, "create", "rolebinding", f"{USER}-edit", "--clusterrole=edit", f"--serviceaccount={ns}:{USER}"
    )
    return ["--as", f"system:serviceaccount:{ns}:{USER}", "-n", ns]


def _kubectl(
    plane: controlplane.ControlPlane, args: list[str], *more: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return plane.kubectl(*args, *more, input=stdin or None, check=False)


def _live_jobs(emulator: addons.EmulatorProcess, pod_uid: str) -> list[dict[str, Any]]:
    return [job for job in demo.fetch_emulator_jobs(emulator.url, pod_uid=pod_uid) if job["status"] in LIVE]


def _copy_of(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """What `kubectl get pod -o json` gives, fed back to `kubectl create` under a new name."""
    meta = {
        k: v
        for k, v in pod["metadata"].items()
        if k not in ("uid", "resourceVersion", "creationTimestamp", "managedFields")
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": name}, "spec": pod["spec"]}


def _running_burst(
    plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str, name: str
) -> dict[str, Any]:
    create_pod(
        plane, ns, pod_body(name, app_container(emulator, f'echo "{name} started"; sleep 600', gpus=1), gated=False)
    )
    wait_log(plane, ns, name, f"{name} started")
    pod = find_pod(plane, ns, name)
    assert pod is not None and annotations_of(pod)[contract.ANNOTATION_DECISION] == "remote", pod
    assert len(_live_jobs(emulator, pod["metadata"]["uid"])) == 1
    return pod


def _budget_one_and_no_gpus(
    plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str, gpus_gone: Callable[[], None]
) -> None:
    plane.kubectl("annotate", "namespace", ns, f"{BUDGET}=1", "--overwrite")
    gpus_gone()
    one = pod_body("seen-probe", app_container(emulator, "echo probe", gpus=1), gated=False)
    wait_admitted_as(plane, ns, one, decision="remote", what="the real node without GPUs")
    two = pod_body("seen-probe", app_container(emulator, "echo probe", gpus=2), gated=False)
    wait_admitted_as(plane, ns, two, decision="local", warning="kept local by the burst budget", what="the budget of 1")


def test_copies_of_a_running_burst_pod_never_pass_the_budget(
    as_editor: list[str],
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> None:
    _budget_one_and_no_gpus(control_plane, node_emulator, ns, gpus_gone)
    original = _running_burst(control_plane, node_emulator, ns, "original")
    submitted = 0
    for i in range(3):
        copied = _kubectl(
            control_plane, as_editor, "create", "-f", "-", stdin=json.dumps(_copy_of(original, f"copy-{i}"))
        )
        assert copied.returncode == 0, copied.stderr
        assert "carried marks only nimbix-burst writes" in copied.stderr, copied.stderr
        pod = find_pod(control_plane, ns, f"copy-{i}")  # kubectl create returns once it is stored
        assert pod is not None
        annotations = annotations_of(pod)
        assert contract.ANNOTATION_DECISION not in annotations, annotations  # it asks for no GPU: not ours to decide
        env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env", [])}
        assert contract.ENV_REMOTE not in env and contract.ENV_COUNTED_GPUS not in env, env
        submitted += len(demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"]))
    live = _live_jobs(node_emulator, original["metadata"]["uid"])
    row = fault_matrix.record(
        Row(
            "three copies of a running burst pod's YAML, by an edit-role user (budget 1)",
            submitted=len(live),  # the original's one job; the copies' jobs are counted in over_budget
            completed=0,
            billing_late=0,
            over_budget=submitted,  # each copy's job would hold 1 GPU past the budget
            note=f"{submitted} job(s) for the 3 copies; the copies ran here without REMOTE",
        )
    )
    assert len(live) == 1 and row.over_budget == 0, row


def test_a_forged_decision_with_counted_gpus_is_decided_afresh(
    as_editor: list[str],
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> None:
    _budget_one_and_no_gpus(control_plane, node_emulator, ns, gpus_gone)
    _running_burst(control_plane, node_emulator, ns, "holder")  # the budget of 1 is full
    container = app_container(node_emulator, "echo forged", gpus=8)
    container["env"] += [
        {"name": contract.ENV_REMOTE, "value": "1"},
        {"name": contract.ENV_COUNTED_GPUS, "value": "64"},
        {"name": "NUM_GPUS", "value": "8"},
        {"name": "JARVICE_NODES", "value": "8"},
    ]
    body = pod_body("forged", container, gated=False)
    body["metadata"]["annotations"] = {contract.ANNOTATION_DECISION: "remote", "nimbix-burst.io/remote-gpus": "0"}
    created = _kubectl(control_plane, as_editor, "create", "-f", "-", stdin=json.dumps(body))
    assert created.returncode == 0, created.stderr
    pod = find_pod(control_plane, ns, "forged")
    assert pod is not None
    annotations = annotations_of(pod)
    assert annotations[contract.ANNOTATION_DECISION] == "local", annotations
    assert "1 of 1 remote GPUs in use" in annotations["nimbix-burst.io/budget"], annotations
    env = {e["name"] for e in pod["spec"]["containers"][0].get("env", [])}
    assert contract.ENV_REMOTE not in env and contract.ENV_COUNTED_GPUS not in env, env
    submitted = len(demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"]))
    row = fault_matrix.record(
        Row(
            "a pod created with a forged decision and 64 counted GPUs (budget 1, full)",
            submitted=submitted,
            completed=0,
            billing_late=0,
            over_budget=8 * submitted,
        )
    )
    assert row.submitted == 0, row


@pytest.mark.parametrize("annotation", ["nimbix-burst.io/remote-gpus", contract.ANNOTATION_JOB_STATE])
def test_a_user_cannot_change_the_products_annotations_on_a_running_burst_pod(
    annotation: str,
    as_editor: list[str],
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> None:
    _budget_one_and_no_gpus(control_plane, node_emulator, ns, gpus_gone)
    pod = _running_burst(control_plane, node_emulator, ns, "running")
    value = "0" if annotation.endswith("remote-gpus") else "ended"
    refused = _kubectl(control_plane, as_editor, "annotate", "pod", "running", f"{annotation}={value}", "--overwrite")
    assert refused.returncode != 0
    assert f"the annotation {annotation} is written by nimbix-burst only" in refused.stderr, refused.stderr
    removed = _kubectl(control_plane, as_editor, "annotate", "pod", "running", f"{contract.ANNOTATION_DECISION}-")
    assert removed.returncode != 0 and contract.ANNOTATION_DECISION in removed.stderr, removed.stderr
    allowed = _kubectl(control_plane, as_editor, "annotate", "pod", "running", "team.example/owner=alice")
    assert allowed.returncode == 0, allowed.stderr  # other annotations stay the user's
    # The count held: a second 1-GPU pod is kept local by the budget.
    second = pod_body("second", app_container(node_emulator, "echo second", gpus=1), gated=False)
    wait_admitted_as(
        control_plane,
        ns,
        second,
        decision="local",
        warning="kept local by the burst budget",
        what="the budget still full",
    )
    fault_matrix.record(
        Row(
            f"a user annotating a running burst pod's {annotation.split('/')[1]}",
            submitted=len(demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"])),
            completed=0,
            billing_late=0,
            over_budget=0,
        )
    )


def test_a_user_cannot_add_or_remove_the_opt_in_label_on_an_existing_pod(
    as_editor: list[str], control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    """A copy of a burst pod made without `task-type` never reached the webhook: labelled afterwards it
    would carry a decision no webhook made and no budget counted. And a burst pod unlabelled would leave
    its namespace's count. The API server refuses both."""
    body = pod_body("plain", app_container(node_emulator, "sleep 30", gpus=0), gated=True)
    del body["metadata"]["labels"]["task-type"]
    created = _kubectl(control_plane, as_editor, "create", "-f", "-", stdin=json.dumps(body))
    assert created.returncode == 0, created.stderr
    added = _kubectl(control_plane, as_editor, "label", "pod", "plain", "task-type=Nimbix")
    assert added.returncode != 0 and "the label task-type cannot be added" in added.stderr, added.stderr
    labelled = pod_body("labelled", app_container(node_emulator, "sleep 30", gpus=0), gated=True)
    assert _kubectl(control_plane, as_editor, "create", "-f", "-", stdin=json.dumps(labelled)).returncode == 0
    removed = _kubectl(control_plane, as_editor, "label", "pod", "labelled", "task-type-")
    assert removed.returncode != 0 and "the label task-type cannot be added" in removed.stderr, removed.stderr
    other = _kubectl(control_plane, as_editor, "label", "pod", "labelled", "team=ml")
    assert other.returncode == 0, other.stderr  # other labels stay the user's
