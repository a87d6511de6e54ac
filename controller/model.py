"""What the controller knows about a pod, parsed from its JSON once (pure).

Only the fields the decisions read are kept; the rest of a pod is never held in memory.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LABEL_KEY, LABEL_VALUE = "task-type", "Nimbix"
ANNOTATION_DECISION = "nimbix-burst.io/decision"
# Set by the controller on a stranded pod it may not delete: when it became unschedulable. Its
# presence also means "already reported", so a pod gets one Event, not one per scan.
ANNOTATION_STRANDED_SINCE = "nimbix-burst.io/stranded-since"
# The webhook's note on a pod it kept local because its namespace's burst budget was spent.
ANNOTATION_BUDGET = "nimbix-burst.io/budget"


@dataclass(frozen=True, slots=True)
class Owner:
    """The pod's controller reference (`ownerReferences[?controller]`)."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PodView:
    uid: str
    namespace: str
    name: str
    resource_version: str
    labeled: bool  # carries task-type: Nimbix
    decision: str  # the webhook's annotation, "" when absent
    stranded_since: str  # our annotation, "" when absent
    held_by_budget: bool  # kept local by the burst budget: waiting for local GPUs is what was decided
    owner: Owner | None
    phase: str
    node_name: str
    deleting: bool
    # PodScheduled condition: status ("True"/"False"/""), reason, and lastTransitionTime (epoch s).
    scheduled_status: str
    scheduled_reason: str
    scheduled_since: float | None


def parse_time(text: object) -> float | None:
    """An RFC 3339 timestamp as the API server writes it ("2026-01-02T03:04:05Z") -> epoch seconds."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()


def format_time(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner(metadata: Mapping[str, Any]) -> Owner | None:
    for ref in metadata.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return Owner(
                api_version=str(ref.get("apiVersion") or ""),
                kind=str(ref.get("kind") or ""),
                name=str(ref.get("name") or ""),
                uid=str(ref.get("uid") or ""),
            )
    return None


def parse_pod(obj: Mapping[str, Any]) -> PodView:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    scheduled: Mapping[str, Any] = {}
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            scheduled = condition
    return PodView(
        uid=str(metadata.get("uid") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        labeled=labels.get(LABEL_KEY) == LABEL_VALUE,
        decision=str(annotations.get(ANNOTATION_DECISION) or ""),
        stranded_since=str(annotations.get(ANNOTATION_STRANDED_SINCE) or ""),
        held_by_budget=bool(annotations.get(ANNOTATION_BUDGET)),
        owner=_owner(metadata),
        phase=str(status.get("phase") or ""),
        node_name=str(spec.get("nodeName") or ""),
        deleting=bool(metadata.get("deletionTimestamp")),
        scheduled_status=str(scheduled.get("status") or ""),
        scheduled_reason=str(scheduled.get("reason") or ""),
        scheduled_since=parse_time(scheduled.get("lastTransitionTime")),
    )


@dataclass(frozen=True, slots=True)
class OwnerState:
    """What the controller checks on a Job before deleting one of its pods."""

    exists: bool
    uid: str = ""
    finished: bool = False  # a Complete or Failed condition is True: it would not recreate the pod
    suspended: bool = False  # spec.suspend: it would not recreate the pod now


def parse_job(obj: Mapping[str, Any] | None) -> OwnerState:
    if obj is None:
        return OwnerState(exists=False)
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    finished = any(
        isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return OwnerState(
        exists=True, uid=str(metadata.get("uid") or ""), finished=finished, suspended=spec.get("suspend") is True
    )
