"""Which stranded pods to re-burst, which to report, and which to leave alone (pure).

A pod is *stranded* when the webhook decided `local` for it (some node had its GPUs at admission)
and the scheduler has since found no node for it (`PodScheduled=False`, reason `Unschedulable`)
for at least `threshold` seconds, counted from the condition's lastTransitionTime. The GPUs may
have gone (a node failed or lost its devices), or the pod may need something the webhook does
not model (inter-pod affinity, topology spread, ...).

- Owned by a Job (which recreates a deleted pod): evict it, so its replacement is decided
  afresh by the webhook (with no free GPUs left it bursts). At most `cap` times per Job, so a
  pod that strands for a reason the webhook cannot see is not moved forever. Only when the Job's
  podFailurePolicy ignores the eviction (`check_owner`): a move never costs the Job a retry;
  otherwise the pod is reported, as below.
- Kept local by its namespace's burst budget (the webhook's `budget` annotation): waiting for local
  GPUs is what the budget decided, so report it, as below; a Job's pod is then looked at again
  ("recheck": the webhook is asked whether it would burst the Job's next pod now, as homecoming asks)
  and moved once the budget allows it, one pod per namespace at a time (the spend record fresh again
  after an outage, the spend down, the cap raised).
- Kept local because no JARVICE machine offers the GPU model it selects (the webhook's `gpu-model`
  annotation on a local pod): its replacement would be kept local again; report it, as below.
- Anything else (a bare pod, a ReplicaSet's, a StatefulSet's, or a Job whose cap is spent): report
  it once, with an Event and the `stranded-since` annotation; never delete it.
- One pod of a gang (the pods of one distributed job, decided together: `nimbix-burst.io/gang`) is
  never re-burst alone: its replacement would follow the gang's decision, and a rank burst apart from
  its peers could never reach them. The whole gang is re-burst instead (`assess_gang`: every pod of
  it deleted, so that the webhook decides the gang afresh) when one Job owns all of its pods; otherwise
  the stranded pods are reported.

A pod the webhook kept local to *wait* for a node before bursting (its `burst-deadline` annotation,
from the user's `burst-after`) is not judged by the threshold: it may wait, unschedulable, until its
deadline; if no node has taken it by then, it is evicted as a re-burst evicts (its Job recreates it,
and the webhook bursts the replacement at once). No cap bounds it: a Job waits once (a pod admitted
after its deadline bursts at once), so every pod of a parallel Job is moved, once. A gang waits as one (all its
pods carry the same deadline): at the deadline, if any of its pods is still pending, the whole gang is
deleted as above, its pods a node took meanwhile too (a gang runs as one: never some ranks here and the
others on Nimbix), and its replacements burst as one job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from controller.model import OwnerState, PodView

# Owners that recreate a deleted pod and whose pods are batch work that may run on JARVICE. See the
# docs/controller.md ("Which owners") for why ReplicaSets and StatefulSets are not on the list.
REBURST_OWNERS = frozenset({("batch/v1", "Job")})

# Why a Job's pod is not moved: the move would cost the Job a retry (docs/controller.md, "Moves are free").
NOT_FREE = (
    "its Job's podFailurePolicy does not start with a rule ignoring DisruptionTarget, so moving the pod would"
    " count against its backoffLimit (the webhook adds that rule to a Job whose pods have restartPolicy Never,"
    " at its creation)"
)

# How long a local pod of a Job that came home may stay unschedulable before it goes back to its burst:
# it came home on the webhook's word that a node can take it now, so the scheduler binds it within
# seconds or not at all (a rule the fit does not model, or the GPUs taken meanwhile).
HOMECOMING_BIND_SECONDS = 10.0

# How often the webhook is asked again whether it would now burst a Job's pod its namespace's budget kept
# local, and at most one such pod moved per namespace in that time (the dry run reserves nothing).
BUDGET_RECHECK_SECONDS = 30.0

Verdict = Literal["ignore", "wait", "reburst", "note", "cap-hit", "gang", "recheck"]


@dataclass(frozen=True, slots=True)
class Policy:
    threshold: float  # seconds a local pod may stay unschedulable before it is stranded
    cap: int  # re-bursts per owner


@dataclass(frozen=True, slots=True)
class Assessment:
    verdict: Verdict
    reason: str
    stranded_since: float | None = None  # epoch seconds, for reburst/note/cap-hit
    due_at: float | None = None  # epoch seconds, for wait


def is_stranded_candidate(pod: PodView) -> bool:
    """Decided local, not bound, not going away, and marked Unschedulable by the scheduler."""
    return (
        pod.labeled
        and pod.decision == "local"
        and not pod.deleting
        and not pod.node_name
        and pod.phase in ("Pending", "")
        and pod.scheduled_status == "False"
        and pod.scheduled_reason == "Unschedulable"
    )


def may_reburst_owner(pod: PodView) -> bool:
    return pod.owner is not None and (pod.owner.api_version, pod.owner.kind) in REBURST_OWNERS


def is_waiting(pod: PodView) -> bool:
    """Kept local to wait for a node until its burst deadline, not bound, not going away."""
    return (
        pod.burst_deadline is not None
        and pod.labeled
        and pod.decision == "local"
        and not pod.deleting
        and not pod.node_name
        and pod.phase in ("Pending", "")
    )


def _assess_waiting(pod: PodView, deadline: float, *, now: float) -> Assessment:
    """A waiting pod: left alone until its deadline (bound or not, the scheduler may still place
    it), then burst through its Job, or reported when nothing would recreate it."""
    if now < deadline:
        return Assessment("wait", "waits for a local node until its burst deadline", due_at=deadline)
    if pod.stranded_since:
        return Assessment("ignore", "already reported as stranded")
    if pod.gang:
        return Assessment("gang", "one pod of a gang: burst only with all of its pods", stranded_since=deadline)
    if not may_reburst_owner(pod):
        owner = "no owner" if pod.owner is None else f"owner {pod.owner.kind} does not recreate it for us"
        return Assessment("note", owner, stranded_since=deadline)
    # Not capped: a Job waits once (its replacements burst at once), so each of its pods is moved once.
    return Assessment("reburst", "no node took it by its burst deadline; its Job recreates it", deadline)


def assess(pod: PodView, *, now: float, policy: Policy, rebursts: int, came_home: bool = False) -> Assessment:
    """What to do with `pod` now; `rebursts` is how many times its owner's pods were re-burst;
    `came_home`: a pod of its Job came home (it is judged by HOMECOMING_BIND_SECONDS, not the threshold)."""
    if pod.burst_deadline is not None and is_waiting(pod):
        return _assess_waiting(pod, pod.burst_deadline, now=now)
    if not is_stranded_candidate(pod):
        return Assessment("ignore", "not a local pod marked Unschedulable")
    if pod.scheduled_since is None:
        return Assessment("ignore", "PodScheduled has no lastTransitionTime")
    came_home = came_home and may_reburst_owner(pod)
    due = pod.scheduled_since + (min(policy.threshold, HOMECOMING_BIND_SECONDS) if came_home else policy.threshold)
    if now < due:
        return Assessment("wait", "unschedulable for less than the threshold", due_at=due)
    since = pod.scheduled_since
    if pod.held_by_budget and may_reburst_owner(pod) and not pod.gang:
        # Reported once, then asked again: the budget may allow it later (a fresh spend record after an
        # outage of the controller or JARVICE, the namespace's spend down, its cap raised).
        return Assessment("recheck", "kept local by its namespace's burst budget", stranded_since=since)
    if pod.stranded_since:
        return Assessment("ignore", "already reported as stranded")
    if pod.held_by_budget:
        return Assessment("note", "kept local by its namespace's burst budget", stranded_since=since)
    if pod.held_by_model:
        return Assessment("note", "kept local: no JARVICE machine offers its GPU model", stranded_since=since)
    if pod.gang:
        return Assessment("gang", "one pod of a gang: re-burst only with all of its pods", stranded_since=since)
    if not may_reburst_owner(pod):
        owner = "no owner" if pod.owner is None else f"owner {pod.owner.kind} does not recreate it for us"
        return Assessment("note", owner, stranded_since=since)
    if rebursts >= policy.cap:
        return Assessment(
            "cap-hit",
            f"its {pod.owner.kind if pod.owner else 'owner'} was re-burst {rebursts} times (cap {policy.cap})",
            stranded_since=since,
        )
    if came_home:
        return Assessment("reburst", "its Job came home and a node did not take it; its Job recreates it", since)
    return Assessment("reburst", "owned by a Job, which recreates it", stranded_since=since)


def assess_gang(pods: Sequence[PodView], *, stranded_since: float, policy: Policy, rebursts: int) -> Assessment:
    """What to do with a gang one of whose pods is stranded (`pods`: every pod of the gang the watch
    shows): re-burst it whole when one Job owns every pod (it recreates them all), else report."""
    owners = {pod.owner for pod in pods}
    owner = next(iter(owners)) if len(owners) == 1 else None
    if owner is None or not may_reburst_owner(pods[0]):
        return Assessment("note", "a gang whose pods one Job does not own all", stranded_since=stranded_since)
    if any(pod.held_by_budget for pod in pods):
        return Assessment("note", "a gang kept local by its namespace's burst budget", stranded_since=stranded_since)
    if rebursts >= policy.cap:
        reason = f"its {owner.kind} was re-burst {rebursts} times (cap {policy.cap})"
        return Assessment("cap-hit", reason, stranded_since=stranded_since)
    return Assessment("reburst", f"a gang of {len(pods)} pods owned by a Job", stranded_since=stranded_since)


def gang_to_delete(pods: Sequence[PodView]) -> list[PodView]:
    """The pods a whole-gang re-burst deletes: every one not finished and not already going."""
    return [pod for pod in pods if pod.phase not in ("Succeeded", "Failed") and not pod.deleting]


def check_owner(pod: PodView, owner: OwnerState) -> str:
    """ "" when the owner will recreate the pod we delete; otherwise why not."""
    if not owner.exists:
        return "owner not found"
    if pod.owner is not None and owner.uid != pod.owner.uid:
        return "owner was replaced (uid differs)"
    if owner.finished:
        return "owner has finished"
    if owner.suspended:
        return "owner is suspended"
    if not owner.free_moves:
        return NOT_FREE
    return ""


def build_reburst_message(pod: PodView, *, waited: float, count: int, cap: int) -> str:
    return (
        f"pod {pod.name} was decided local but stayed unschedulable for {waited:.0f}s; deleted so that its "
        f"replacement is decided again (re-burst {count} of {cap})"
    )


def build_burst_after_message(pod: PodView, *, waited: float) -> str:
    return (
        f"pod {pod.name} waited {waited:.0f}s for a local node (burst-after) and none took it by its deadline;"
        " evicted so that its replacement bursts to Nimbix (the eviction costs the Job no retry)"
    )


def build_budget_allows_message(pod: PodView) -> str:
    return (
        f"pod {pod.name} was kept local by its namespace's burst budget; the webhook would burst it now (the"
        " budget allows it); evicted so that its replacement bursts to Nimbix (the eviction costs the Job no retry)"
    )


def build_gang_reburst_message(pod: PodView, *, size: int, count: int, cap: int) -> str:
    return (
        f"pod {pod.name} of a gang of {size} pods was decided local but stayed unschedulable; every pod of the gang"
        f" was deleted so that the gang is decided again as one (re-burst {count} of {cap})"
    )


def build_gang_burst_after_message(pod: PodView, *, size: int) -> str:
    return (
        f"pod {pod.name} of a gang of {size} pods waited for local nodes (burst-after) until its deadline and none"
        f" took it; every pod of the gang was evicted (those scheduled here meanwhile too: a gang runs as one), so"
        f" that its replacements burst to Nimbix as one job (the evictions cost the Job no retry)"
    )


def build_note_message(pod: PodView, *, waited: float, reason: str) -> str:
    return (
        f"pod {pod.name} was decided local but has been unschedulable for {waited:.0f}s; not deleted ({reason}): "
        "delete it to have it decided again, or free GPUs for it"
    )
