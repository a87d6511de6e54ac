"""What the controller knows about a pod, parsed from its JSON once (pure).

Only the fields the decisions read are kept; the rest of a pod is never held in memory.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jarvice import contract, gangidentity
from jarvice.checkpoint import ANNOTATION_CHECKPOINT_DIR
from jarvice.model import parse_job_number
from kubeplumbing.disruptions import covers_moves_home, ignores_disruptions_first, moves_home_containers
from kubeplumbing.times import parse_time

LABEL_KEY, LABEL_VALUE = "task-type", "Nimbix"
ANNOTATION_DECISION = "nimbix-burst.io/decision"
# Set by the controller on a stranded pod it may not delete: when it became unschedulable. Its
# presence also means "already reported", so a pod gets one Event, not one per scan.
ANNOTATION_STRANDED_SINCE = "nimbix-burst.io/stranded-since"
# The webhook's note on a pod it kept local because its namespace's burst budget was spent.
ANNOTATION_BUDGET = "nimbix-burst.io/budget"
# The webhook's note on a pod it kept local because no JARVICE machine offers the GPU model it
# selects (on a burst pod: the model it selected).
ANNOTATION_GPU_MODEL = "nimbix-burst.io/gpu-model"


@dataclass(frozen=True, slots=True)
class Owner:
    """The pod's controller reference (`ownerReferences[?controller]`)."""

    api_version: str
    kind: str
    name: str
    uid: str

    def reference(self) -> dict[str, str]:
        """The owner as an Event's involvedObject (or, with `controller`, an ownerReference)."""
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}


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
    gang: str = ""  # the webhook's nimbix-burst.io/gang: the pods of one distributed job share it
    # Kept local because no JARVICE machine offers its GPU model: its replacement would be too.
    held_by_model: bool = False
    # Kept local to wait for a node until then (the webhook's burst-deadline, epoch s; None: not waiting).
    burst_deadline: float | None = None
    # Names a checkpoint directory (the checkpoint contract): only such a pod's running job may move home.
    checkpoints: bool = False
    # The JARVICE job the controller's move-home mark names (a move under way), None without one.
    moving_home: int | None = None


def pod_reference(pod: PodView) -> dict[str, str]:
    """The pod as an Event's involvedObject."""
    return {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}


def log_context(pod: PodView, **extra: object) -> dict[str, object]:
    """A log line's fields for what the controller did to `pod`."""
    return {"namespace": pod.namespace, "pod": pod.name, "uid": pod.uid, **extra}


def format_time(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner_of(metadata: Mapping[str, Any]) -> Owner | None:
    """The pod's controller reference, from its metadata (None when it has none)."""
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
        owner=owner_of(metadata),
        phase=str(status.get("phase") or ""),
        node_name=str(spec.get("nodeName") or ""),
        deleting=bool(metadata.get("deletionTimestamp")),
        scheduled_status=str(scheduled.get("status") or ""),
        scheduled_reason=str(scheduled.get("reason") or ""),
        scheduled_since=parse_time(scheduled.get("lastTransitionTime")),
        gang=str(annotations.get(contract.ANNOTATION_GANG) or ""),
        held_by_model=annotations.get(ANNOTATION_DECISION) == "local" and bool(annotations.get(ANNOTATION_GPU_MODEL)),
        burst_deadline=parse_time(annotations.get(contract.ANNOTATION_BURST_DEADLINE)),
        checkpoints=bool(annotations.get(ANNOTATION_CHECKPOINT_DIR)),
        moving_home=parse_job_number(annotations.get(contract.ANNOTATION_MOVE_HOME)),
    )


# A pod in one of these phases runs nothing any more (its containers will not be started again).
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# What restartPolicy means when a pod (or container) does not say.
DEFAULT_RESTART_POLICY = "Always"


@dataclass(frozen=True, slots=True)
class ReapView:
    """What the orphan reaper needs of a pod, kept for every pod: whether a container of it can
    still follow a JARVICE job, and (for burst pods) whether the end of its job is recorded."""

    uid: str
    namespace: str
    name: str
    terminal: bool  # phase Succeeded or Failed
    # metadata.deletionTimestamp (epoch seconds): the API server sets it to "now + grace period",
    # so past it the kubelet has SIGKILLed the runner, or the pod's node is gone.
    deletion_deadline: float | None
    # The app containers that can still follow a job: all but those that exited for good under
    # their restart policy (terminated under Never; terminated with exit code 0 under OnFailure).
    following: tuple[str, ...]
    burst: bool  # the webhook decided remote
    job_ended: bool  # carries nimbix-burst.io/job-state: ended (recorded by the controller)
    # A gang's pod (nimbix-burst.io/gang): its gang's one JARVICE job carries the gang's UID, not the pod's.
    # What the pod says; `gang_claim` is what its own fields make of it (see member_of).
    gang: str = ""
    gang_claim: GangClaim | None = None
    # The product decided it: the task-type label (the webhook saw it) and the remote decision. A job of
    # any other pod (a copy made without the label, a pod decided local) is one nothing accounts for.
    decided: bool = True


@dataclass(frozen=True, slots=True)
class GangClaim:
    """What a gang pod's own fields say its gang is (jarvice.gangidentity.claim_holds)."""

    generation: int  # nimbix-burst.io/gang-generation (1 when absent; 0 when unreadable)
    group: str  # its Kueue pod group label ("" when none)
    job_uid: str  # the UID of the Job that controls it ("" when none)


def member_of(pod: ReapView, *, cluster: str) -> str:
    """The gang `pod` is a member of: its `nimbix-burst.io/gang` only when the product decided the pod
    (its label and the remote decision) and the identity is the one its own namespace and owner make; else "" (any
    pod can be created carrying any annotation, and must never stand for another namespace's gang)."""
    claim = pod.gang_claim
    if not pod.gang or not (pod.burst and pod.decided) or claim is None:
        return ""
    holds = gangidentity.claim_holds(
        pod.gang,
        generation=claim.generation,
        namespace=pod.namespace,
        group=claim.group,
        job_uid=claim.job_uid,
        cluster=cluster,
    )
    return pod.gang if holds else ""


def _exited_for_good(status: Mapping[str, Any], *, restart_policy: str) -> bool:
    terminated = (status.get("state") or {}).get("terminated")
    if not isinstance(terminated, Mapping):
        return False
    if restart_policy == "Never":
        return True
    return restart_policy == "OnFailure" and terminated.get("exitCode") == 0


def _following(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[str, ...]:
    pod_policy = str(spec.get("restartPolicy") or DEFAULT_RESTART_POLICY)
    statuses = {
        str(s.get("name")): s for s in status.get("containerStatuses") or () if isinstance(s, Mapping) and s.get("name")
    }
    following: list[str] = []
    for container in spec.get("containers") or ():
        if not isinstance(container, Mapping) or not container.get("name"):
            continue
        name = str(container["name"])
        policy = str(container.get("restartPolicy") or pod_policy)  # a container's own policy wins (1.34+)
        if not _exited_for_good(statuses.get(name) or {}, restart_policy=policy):
            following.append(sys.intern(name))  # the same few names across many pods: kept once
    return tuple(following)


def owner_namespaces(views: Iterable[ReapView], *, cluster: str) -> dict[str, str]:
    """The namespace of every UID a job label may carry: each pod's own, and each gang's from its
    members (member_of) when they are all in one namespace. A pod's own UID is never taken from
    another pod's annotation, and a gang claimed in two namespaces is left to the spend ledger, which
    keeps the namespace it saw first: no annotation moves spend between namespaces."""
    views = list(views)
    owners = {view.uid: view.namespace for view in views if view.uid}
    gangs: dict[str, set[str]] = {}
    for view in views:
        if gang := member_of(view, cluster=cluster):
            gangs.setdefault(gang, set()).add(view.namespace)
    for gang, namespaces in gangs.items():
        if gang not in owners and len(namespaces) == 1:
            owners[gang] = next(iter(namespaces))
    return owners


def _generation(text: object) -> int:
    value = text.strip() if isinstance(text, str) else ""
    return int(value) if value.isascii() and value.isdigit() and len(value) < 10 else 0


def _gang_claim(metadata: Mapping[str, Any], annotations: Mapping[str, Any]) -> GangClaim | None:
    if not annotations.get(contract.ANNOTATION_GANG):
        return None
    labels = metadata.get("labels") or {}
    owner = owner_of(metadata)
    job_uid = owner.uid if owner is not None and owner.kind == "Job" and owner.api_version == "batch/v1" else ""
    return GangClaim(
        generation=_generation(annotations.get(contract.ANNOTATION_GANG_GENERATION, "1")),
        group=str(labels.get(gangidentity.KUEUE_GROUP_LABEL) or ""),
        job_uid=job_uid,
    )


def parse_reap_view(obj: Mapping[str, Any]) -> ReapView:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    annotations = metadata.get("annotations") or {}
    return ReapView(
        uid=str(metadata.get("uid") or ""),
        namespace=sys.intern(str(metadata.get("namespace") or "")),
        name=str(metadata.get("name") or ""),
        terminal=status.get("phase") in TERMINAL_PHASES,
        deletion_deadline=parse_time(metadata.get("deletionTimestamp")),
        following=_following(spec, status),
        burst=annotations.get(contract.ANNOTATION_DECISION) == contract.DECISION_REMOTE,
        job_ended=annotations.get(contract.ANNOTATION_JOB_STATE) == contract.JOB_STATE_ENDED,
        gang=sys.intern(str(annotations.get(contract.ANNOTATION_GANG) or "")),
        gang_claim=_gang_claim(metadata, annotations),
        decided=(metadata.get("labels") or {}).get(contract.LABEL_TASK_TYPE) == contract.LABEL_TASK_TYPE_VALUE
        and annotations.get(contract.ANNOTATION_DECISION) == contract.DECISION_REMOTE,
    )


@dataclass(frozen=True, slots=True)
class OwnerState:
    """What the controller checks on a Job before deleting one of its pods."""

    exists: bool
    uid: str = ""
    finished: bool = False  # a Complete or Failed condition is True: it would not recreate the pod
    suspended: bool = False  # spec.suspend: it would not recreate the pod now
    # Its podFailurePolicy ignores a pod marked DisruptionTarget first: a pod the controller evicts
    # costs it no retry (kubeplumbing.disruptions).
    free_moves: bool = False
    # ...and then a move home's exit of these containers right after (None: of any container, the rule of
    # Jobs created before the rules named theirs): its running burst pod may move home (controller.moving).
    moves_home_of: frozenset[str] | None = frozenset()
    parallelism: int = 1  # pods run at once (spec.parallelism)
    indexed: bool = False  # completionMode Indexed: a replacement comes back with its pod's index

    def moves_home(self, containers: Sequence[str]) -> bool:
        """Whether the Job ignores a move home's exit of each of a pod's burst `containers`."""
        return covers_moves_home(self.moves_home_of, containers)


def _pods_at_once(spec: Mapping[str, Any]) -> int:
    """The most pods a Job runs at once: its parallelism, never more than its completions."""
    parallelism, completions = spec.get("parallelism", 1), spec.get("completions")
    at_once = parallelism if isinstance(parallelism, int) else 1
    return min(at_once, completions) if isinstance(completions, int) else at_once


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
        exists=True,
        uid=str(metadata.get("uid") or ""),
        finished=finished,
        suspended=spec.get("suspend") is True,
        free_moves=ignores_disruptions_first(spec.get("podFailurePolicy")),
        moves_home_of=moves_home_containers(spec.get("podFailurePolicy")),
        parallelism=_pods_at_once(spec),
        indexed=spec.get("completionMode") == "Indexed",
    )


def burst_containers(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The containers of a pod the webhook made runners of remote jobs (their env's REMOTE=1): the ones
    whose exit 81 is a move home's."""
    return tuple(
        str(container.get("name", ""))
        for container in (pod.get("spec") or {}).get("containers") or ()
        if isinstance(container, Mapping)
        and any(
            isinstance(item, Mapping) and item.get("name") == contract.ENV_REMOTE and item.get("value") == "1"
            for item in container.get("env") or ()
        )
    )
