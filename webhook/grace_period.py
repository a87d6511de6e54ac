"""A burst pod's grace period (pure): long enough for its runner to cancel the remote job (and copy its
data back) before the kubelet's SIGKILL; raised to `contract.MIN_TERMINATION_GRACE_SECONDS` when shorter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jarvice import contract
from webhook.json_patch import JsonPatchOp

_GRACE = "terminationGracePeriodSeconds"
DEFAULT_GRACE_SECONDS = 30  # what the API server gives a pod that sets none


def own_grace_seconds(spec: Mapping[str, Any]) -> int:
    """The grace period the pod asks for (the API server's default when it sets none)."""
    current = spec.get(_GRACE)
    return current if type(current) is int else DEFAULT_GRACE_SECONDS


def grace_seconds(spec: Mapping[str, Any]) -> int:
    """The grace period the pod has once admitted: its own, raised to the minimum (see grace_period_ops)."""
    return max(own_grace_seconds(spec), contract.MIN_TERMINATION_GRACE_SECONDS)


def grace_period_ops(spec: Mapping[str, Any]) -> tuple[list[JsonPatchOp], str]:
    """Raise a grace period too short for the runner to cancel its job before the kubelet's SIGKILL
    (see contract.MIN_TERMINATION_GRACE_SECONDS); the note says from what. Nothing when it is long enough."""
    current = spec.get(_GRACE)
    minimum = contract.MIN_TERMINATION_GRACE_SECONDS
    if type(current) is int and current >= minimum:
        return [], ""
    shown = str(current) if type(current) is int else f"{DEFAULT_GRACE_SECONDS} (the default)"
    op = {"op": "replace" if _GRACE in spec else "add", "path": f"/spec/{_GRACE}", "value": minimum}
    return [op], f"raised from {shown} to {minimum} so the runner can stop its job"
