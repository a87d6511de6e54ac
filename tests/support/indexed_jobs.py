"""Indexed Jobs of two pods on the real node, as the gang tests create them: the manifest, its pods by
completion index once they reach a phase, and the submissions the emulator received for a job label."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devplatform import demo
from devplatform.cluster import addons, controlplane

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
PODS = 2


def real_node_indexed_job(
    name: str, container: dict[str, Any], *, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Both pods at once, never retried, on the real node; `labels` on the pod template."""
    template: dict[str, Any] = {
        "spec": demo.build_real_node_placement({"restartPolicy": "Never", "containers": [container]})
    }
    if labels is not None:
        template["metadata"] = {"labels": dict(labels)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": PODS,
            "parallelism": PODS,
            "backoffLimit": 0,
            "template": template,
        },
    }


def wait_pods_by_index(
    plane: controlplane.ControlPlane, namespace: str, job: str, phases: set[str], *, timeout: float
) -> dict[int, dict[str, Any]]:
    """The Job's pods by completion index, once there are both and each is in one of `phases`."""

    def listed() -> dict[int, dict[str, Any]] | None:
        items = plane.read("pods", namespace=namespace, labels=f"{JOB_NAME_LABEL}={job}")["items"]
        pods = {int(p["metadata"]["annotations"][INDEX_ANNOTATION]): p for p in items}
        return pods if len(pods) == PODS and all(p["status"].get("phase") in phases for p in pods.values()) else None

    found: dict[int, dict[str, Any]] = demo.wait_for(listed, what=f"the pods of {job} {phases}", timeout=timeout)
    return found


def submissions(emulator: addons.EmulatorProcess, label: str) -> list[dict[str, Any]]:
    """The submit bodies the emulator received with this job label."""
    found: list[dict[str, Any]] = demo.fetch_emulator(emulator.url, f"/_emulator/submissions?job_label={label}")[
        "submissions"
    ]
    return found
