"""`deploy/examples/job.yaml` as a user writes it (the label, the image, the command, the GPU request; no
env, no volumes) bursts and runs on the installed add-on, in a namespace that has the `jarvice-credentials`
Secret: the webhook writes the machine's size, the credentials mount, the application (the overlay's
default, as an administrator sets `WEBHOOK_DEFAULT_APP`) and the endpoint (the Secret's `url` key).

Two local-only changes, each a fact of this platform, not of the example: the image is the example app
imported into the node's containerd (no registry here, so never pulled), with the real node's placement;
and the command is one the JARVICE emulator can run (it runs commands on this host, not in the image, so
the image's train.py is not there: docs/emulator.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from devplatform import demo, images, manifests
from devplatform.cluster import addons, controlplane, install
from jarvice import contract
from tests.support.installed_controller import annotations_of, app_container, pod_body, wait_admitted_as

WAIT_SECONDS = 180.0


@pytest.fixture
def no_local_gpus(
    installed_addon: install.Installed,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> str:
    gpus_gone()
    probe = pod_body("seen-probe", app_container(node_emulator, "echo probe", gpus=1), gated=False)
    wait_admitted_as(control_plane, ns, probe, decision="remote", what="the real node without GPUs")
    return ns


def test_the_example_job_bursts_and_runs_with_only_what_a_user_decides(
    no_local_gpus: str, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess
) -> None:
    ns = no_local_gpus
    (job,) = manifests.parse_manifests((manifests.DEPLOY_DIR / "examples" / "job.yaml").read_text())
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert set(container) == {"name", "image", "args", "resources"}  # what a user decides, nothing more
    container.update(image=images.EXAMPLE_APP, imagePullPolicy="Never")
    container["args"] = ["python3", "-c", "print('epoch 1/1 loss=0.5'); print('saved model')"]
    job["spec"]["template"]["spec"] = demo.build_real_node_placement(spec)
    control_plane.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(job))

    def finished() -> dict[str, object] | None:
        pods = control_plane.read("pods", namespace=ns, labels=f"job-name={job['metadata']['name']}")["items"]
        done = [p for p in pods if p["status"].get("phase") in ("Succeeded", "Failed")]
        return done[0] if done else None

    pod = demo.wait_for(finished, what="the example Job's pod finished", timeout=WAIT_SECONDS)
    assert annotations_of(pod)[contract.ANNOTATION_DECISION] == "remote", annotations_of(pod)
    logs = control_plane.kubectl("-n", ns, "logs", pod["metadata"]["name"]).stdout
    assert "saved model" in logs, logs
    assert pod["status"]["phase"] == "Succeeded" and demo.read_exit_code(pod) == 0, pod["status"]
    (remote,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"])
    assert remote["status"] == "COMPLETED", remote
