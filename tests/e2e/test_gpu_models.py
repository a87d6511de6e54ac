"""GPU models on the real node: the webhook (a host process given the local install's mapping,
devplatform/overlay/gpu-models.yaml) reads the model a pod selects, the runner in a real container
bursts it to a machine with that model of the JARVICE emulator, and a pod whose model no machine
offers stays here, saying why. What a user sees: kubectl's warning, the pod's annotations and
status, and the job the emulator ran."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install, node
from tests.support.real_node_pods import WAIT_SECONDS, create, get_pod, gpu_pod, wait_finished

MAPPING = install.OVERLAY_DIR / "gpu-models.yaml"
LABEL = "nvidia.com/gpu.product"
A100 = "NVIDIA-A100-SXM4-80GB"
A100_MACHINES = "ng1a,ng4a,ng8"  # devplatform/overlay/gpu-models.yaml
UNKNOWN = "NVIDIA-H100-80GB-HBM3"  # no machine of the emulator carries it


# Every test's pods go through this module's webhook; `ns` (tests/e2e/conftest.py) holds the Secret.
pytestmark = pytest.mark.usefixtures("webhook")


@pytest.fixture(scope="module")
def webhook(control_plane: controlplane.ControlPlane, real_node: node.RealNode) -> Iterator[addons.WebhookProcess]:
    with addons.registered_webhook(
        control_plane,
        control_plane.run_dir / "gpu-models-webhook",
        name_suffix="-gpu-models",
        args=["--gpu-models-file", str(MAPPING)],
    ) as hook:
        yield hook


def model_pod(name: str, command: str, emulator: addons.EmulatorProcess, **placement: Any) -> dict[str, Any]:
    """One GPU, which the real node has free; what keeps the pod off it is the model it selects (the
    real node carries no model label)."""
    pod = gpu_pod(name, command, gpus=1, app_name=emulator.runner_env()["APP_NAME"])
    spec = pod["spec"]
    spec["nodeSelector"] = {**spec["nodeSelector"], **placement.pop("nodeSelector", {})}
    spec.update(placement)
    return pod


def submitted_machine(emulator: addons.EmulatorProcess, uid: str) -> list[Any]:
    submissions = demo.fetch_emulator(emulator.url, "/_emulator/submissions")["submissions"]
    return [s["body"]["machine"] for s in submissions if uid in s["job_label"]]


def test_a_pod_selecting_an_a100_runs_on_an_a100_machine(
    control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": LABEL, "operator": "In", "values": [A100]}]}]}
    create(
        control_plane,
        ns,
        model_pod("by-selector", "echo trained on an A100", node_emulator, nodeSelector={LABEL: A100}),
        model_pod(
            "by-affinity",
            "echo trained on an A100",
            node_emulator,
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}},
        ),
    )
    for name in ("by-selector", "by-affinity"):
        pod = wait_finished(control_plane, ns, name)
        annotations = pod["metadata"]["annotations"]
        assert annotations["nimbix-burst.io/decision"] == "remote", annotations
        assert annotations["nimbix-burst.io/allowed-machines"] == A100_MACHINES
        assert demo.read_exit_code(pod) == 0, control_plane.kubectl("logs", "-n", ns, name, check=False).stdout
        assert "trained on an A100" in control_plane.kubectl("logs", "-n", ns, name).stdout
        # The runner ran here, without the model constraint; the job ran on the smallest A100 machine.
        assert LABEL not in pod["spec"]["nodeSelector"]
        assert "affinity" not in pod["spec"]
        assert submitted_machine(node_emulator, pod["metadata"]["uid"]) == [{"type": "ng1a", "nodes": 1}]
        audit = json.loads(annotations["nimbix-burst.io/original-resources"])
        assert audit.get("nodeSelector") == {LABEL: A100} or audit.get("nodeAffinityRequired") == required


def test_a_pod_selecting_a_model_no_machine_offers_is_not_burst_and_says_why(
    control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str
) -> None:
    pod = model_pod("h100", "echo never", node_emulator, nodeSelector={LABEL: UNKNOWN})
    created = control_plane.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(pod))
    assert f"kept local, not burst: no JARVICE machine offers {LABEL}={UNKNOWN}" in created.stderr

    # It waits here for a node with its model: the scheduler finds none.
    waiting = demo.wait_for(
        lambda: (
            (p := get_pod(control_plane, ns, "h100"))
            and any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in p["status"].get("conditions", [])
            )
            and p
        ),
        what="h100 marked Unschedulable",
        timeout=WAIT_SECONDS,
    )
    annotations = waiting["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/decision"] == "local"
    assert f"not burst: no JARVICE machine offers {LABEL}={UNKNOWN}" in annotations["nimbix-burst.io/reason"]
    assert UNKNOWN in annotations["nimbix-burst.io/gpu-model"]
    assert waiting["spec"]["nodeSelector"][LABEL] == UNKNOWN
    assert waiting["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nimbix-burst.io/allowed-machines" not in annotations
    assert submitted_machine(node_emulator, waiting["metadata"]["uid"]) == []
