"""Pod and Job JSON as the API server returns them, for the controller's unit tests."""

from __future__ import annotations

from typing import Any

UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
JOB_UID = "11111111-2222-3333-4444-555555555555"
T0 = 1_700_000_000.0  # the condition's lastTransitionTime, epoch seconds
T0_TEXT = "2023-11-14T22:13:20Z"  # the same instant as the API server writes it


def job_owner(*, uid: str = JOB_UID, name: str = "train", kind: str = "Job", api: str = "batch/v1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}


def pod(
    *,
    uid: str = UID,
    name: str = "train-abcde",
    decision: str | None = "local",
    labeled: bool = True,
    owners: list[dict[str, Any]] | None = None,
    node_name: str = "",
    phase: str = "Pending",
    scheduled: tuple[str, str] | None = ("False", "Unschedulable"),
    since: str = T0_TEXT,
    deleting: bool = False,
    stranded_since: str = "",
    resource_version: str = "42",
    budget: str = "",
    gang: str = "",
    gpu_model: str = "",
    burst_deadline: str = "",
) -> dict[str, Any]:
    annotations = {}
    if burst_deadline:  # the webhook's: kept local to wait for a node until then (burst-after)
        annotations["nimbix-burst.io/burst-deadline"] = burst_deadline
    if gang:  # the webhook's: the pods of one distributed job share it
        annotations["nimbix-burst.io/gang"] = gang
    if decision is not None:
        annotations["nimbix-burst.io/decision"] = decision
    if budget:  # the webhook's note on a pod it kept local because of the namespace's burst budget
        annotations["nimbix-burst.io/budget"] = budget
    if gpu_model:  # the webhook's note: kept local (no JARVICE machine offers the model), or the model burst to
        annotations["nimbix-burst.io/gpu-model"] = gpu_model
    if stranded_since:
        annotations["nimbix-burst.io/stranded-since"] = stranded_since
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "uid": uid,
        "resourceVersion": resource_version,
        "labels": {"task-type": "Nimbix"} if labeled else {"app": "x"},
        "annotations": annotations,
        "ownerReferences": [job_owner()] if owners is None else owners,
    }
    if deleting:
        metadata["deletionTimestamp"] = "2023-11-14T22:20:00Z"
    conditions = []
    if scheduled is not None:
        conditions.append(
            {"type": "PodScheduled", "status": scheduled[0], "reason": scheduled[1], "lastTransitionTime": since}
        )
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "x"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase, "conditions": conditions}}


# The rule the webhook puts first in a Job's podFailurePolicy at its creation (kubeplumbing.disruptions).
IGNORE_DISRUPTIONS = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def job(
    *,
    uid: str = JOB_UID,
    conditions: list[dict[str, str]] | None = None,
    suspend: bool | None = None,
    rules: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Job as the API server returns it; `rules`: its podFailurePolicy's (default: the webhook's rule alone)."""
    spec: dict[str, Any] = {
        "template": {},
        "podFailurePolicy": {"rules": [IGNORE_DISRUPTIONS] if rules is None else rules},
    }
    if not spec["podFailurePolicy"]["rules"]:
        del spec["podFailurePolicy"]
    if suspend is not None:
        spec["suspend"] = suspend
    return {
        "metadata": {"name": "train", "namespace": "team", "uid": uid},
        "spec": spec,
        "status": {"conditions": conditions or []},
    }
