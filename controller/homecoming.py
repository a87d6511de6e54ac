"""Which burst pods come home: a JARVICE job not started yet, for a pod a local node could now run (pure).

A burst pod whose JARVICE job is still queued (SUBMITTED or SEQUENTIALLY QUEUED, no start time) has
cost nothing yet. When local GPUs free meanwhile, it is cheaper to run it here: the controller deletes
the pod (its Job recreates it, and the webhook decides the replacement afresh: local, as it now fits)
and terminates the job, which then ends without ever having run.

"Could run locally now" is exactly the webhook's rule, asked of the webhook itself: the controller
creates the pod its Job would create (the Job's template) with `dryRun=All`, the API server calls
the webhook as for any pod, the webhook decides it without reserving anything, and the answer says
`decision: local` with its candidate nodes, or not (`fits_locally`). No copy of the fit rule.

- Only a pod a Job controls (the Job recreates it) comes home; not a gang's pod (its ranks are one
  multi-node job), not a bare pod, not a ReplicaSet's.
- Never when its job has started (any of its live jobs running, or past the queue): it stays, and
  `started_note` says so on the pod once.
- Accounted: the webhook's dry run reserves nothing, so one round brings home at most one pod, the
  oldest queued (the lowest job number), and none while the last one's replacement has not bound to a
  node (from then on its GPUs are counted as used; `still_settling`).
- Never a pod with a scheduling rule the webhook's fit does not model (`unmodelled_rule`): it might not
  bind here, and would strand instead of running on Nimbix.
- Never a pod a step of which already ran (another burst container's job ended after running): it
  would run again here (`one_that_ran`).
- At most once per Job: the controller remembers the Jobs a pod came home for (in the leader's
  memory, as the re-burst count, shared with the re-burster), so a replacement that strands and bursts
  again stays remote; one that cannot bind goes back to its burst within a round
  (stranding.HOMECOMING_BIND_SECONDS), not after the stranded threshold.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from controller.model import PodView
from controller.stranding import NOT_FREE, may_reburst_owner
from jarvice import contract
from jarvice.model import STATUS_SEQUENTIALLY_QUEUED, STATUS_SUBMITTED, JobEntry, ended_without_running

# A job in one of these states, with no start time, has not run and has cost nothing.
NOT_STARTED: Final = frozenset({STATUS_SUBMITTED, STATUS_SEQUENTIALLY_QUEUED})
# Set by the controller on a burst pod that a local node could run but whose job had started.
ANNOTATION_HOMECOMING: Final = contract.ANNOTATION_PREFIX + "homecoming"

Verdict = Literal["ignore", "stay", "check"]


@dataclass(frozen=True, slots=True)
class Assessment:
    verdict: Verdict  # ignore; stay (its job started); check (ask the webhook whether it fits here)
    reason: str
    jobs: tuple[int, ...] = ()  # its live jobs' numbers (check: the ones to terminate)


def is_candidate(pod: PodView) -> bool:
    """A burst pod of a Job, not a gang's, not going away, not finished."""
    return (
        pod.labeled
        and pod.decision == contract.DECISION_REMOTE
        and not pod.deleting
        and pod.phase in ("Pending", "Running", "")
        and not pod.gang
        and may_reburst_owner(pod)
    )


def has_started(job: JobEntry) -> bool:
    return job.state.strip().upper() not in NOT_STARTED or job.start_time > 0


def assess(pod: PodView, jobs: Sequence[JobEntry], *, came_home_before: bool) -> Assessment:
    """What to do with a burst pod, from its live JARVICE jobs (those whose label carries its UID).
    `came_home_before`: its Job already had a pod come home (at most once per Job)."""
    if not is_candidate(pod):
        return Assessment("ignore", "not a Job's burst pod that is still live")
    if came_home_before:
        return Assessment("ignore", "its Job already had a pod come home")
    if not jobs:
        return Assessment("ignore", "no live JARVICE job (not submitted yet, or ended)")
    numbers = tuple(sorted(job.number for job in jobs))
    started = [job for job in jobs if has_started(job)]
    if started:
        job = min(started, key=lambda j: j.number)
        return Assessment("stay", f"its JARVICE job {job.number} has started ({job.state})", numbers)
    return Assessment("check", f"its JARVICE job{'s' if len(numbers) > 1 else ''} has not started", numbers)


# Metadata a dry-run create may not carry over from a template, or that the API server sets itself.
_DROPPED_METADATA: Final = ("name", "uid", "resourceVersion", "creationTimestamp", "generateName", "ownerReferences")


def dry_run_pod(job: Mapping[str, Any], pod: PodView) -> dict[str, Any]:
    """The pod `job` would create next (its template), for the webhook to decide with `dryRun=All`.
    Controlled by the Job as the real one would be (the webhook reads that), under a name of its own."""
    template = (job.get("spec") or {}).get("template") or {}
    meta = {k: v for k, v in dict(template.get("metadata") or {}).items() if k not in _DROPPED_METADATA}
    assert pod.owner is not None  # is_candidate(): a Job controls it
    owner = {**pod.owner.reference(), "controller": True}
    meta.update(generateName=f"{pod.owner.name}-homecoming-", namespace=pod.namespace, ownerReferences=[owner])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": dict(template.get("spec") or {})}


def fits_locally(decided: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the webhook decided the dry-run pod local on a node (True, its reason), or not (False,
    why). A pod kept local without a node (a budget, a wait before bursting) does not fit: only a
    local decision names candidate nodes."""
    annotations = (decided.get("metadata") or {}).get("annotations") or {}
    decision = annotations.get(contract.ANNOTATION_DECISION, "")
    reason = str(annotations.get(contract.ANNOTATION_REASON, ""))
    if decision == contract.DECISION_LOCAL and annotations.get(contract.ANNOTATION_CANDIDATES):
        return True, reason
    if not decision:
        return False, "the webhook did not decide it (not installed, or it skipped the pod)"
    return False, reason or f"decided {decision}"


def coming_home_mark(pod: PodView) -> list[dict[str, Any]]:
    """The JSON patch marking a pod the controller is about to evict to bring it home (a test op on its
    uid: never another pod of the same name)."""
    return [
        {"op": "test", "path": "/metadata/uid", "value": pod.uid},
        {
            "op": "add",
            "path": "/metadata/annotations/" + contract.ANNOTATION_COMING_HOME.replace("/", "~1"),
            "value": "true",
        },
    ]


def would_burst(decided: Mapping[str, Any]) -> bool:
    """Whether the webhook decided the dry-run pod remote (it would burst now)."""
    annotations = (decided.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(contract.ANNOTATION_DECISION) == contract.DECISION_REMOTE)


def build_message(pod: PodView, *, jobs: Sequence[int], reason: str) -> str:
    numbers = ", ".join(str(n) for n in jobs)
    return (
        f"pod {pod.name} came home: its JARVICE job {numbers} had not started and a local node can run it now"
        f" ({reason}); the pod was deleted so that its replacement runs here, and the job terminated"
    )


def started_note(assessment: Assessment, *, reason: str) -> str:
    """The pod's homecoming annotation when a local node could run it but its job had started."""
    return f"stays on Nimbix: {assessment.reason} (a local node could run it now: {reason})"


def not_free_note() -> str:
    """The pod's homecoming annotation when its Job would count its eviction against its backoffLimit."""
    return f"never brought home: {NOT_FREE}"


# How long a homecoming's replacement may take to bind before it stops holding other pods back (the
# Job controller creates it once the evicted pod is gone; the scheduler binds it within seconds).
SETTLE_SECONDS: Final = 300.0


@dataclass(frozen=True, slots=True)
class Settling:
    """A pod of `job_uid` came home at `since`; its replacement is any pod of that Job not in `before`."""

    job_uid: str
    before: frozenset[str]
    since: float


def settling(job_uid: str, pods: Iterable[PodView], *, now: float) -> Settling:
    return Settling(job_uid, frozenset(p.uid for p in pods if p.owner is not None and p.owner.uid == job_uid), now)


def still_settling(current: Settling | None, pods: Iterable[PodView], *, now: float) -> Settling | None:
    """The homecoming still to settle (None: none). It settles when its replacement is bound to a node
    (its GPUs counted as used from then on), or bursts after all (it holds none), or after SETTLE_SECONDS."""
    if current is None or now - current.since >= SETTLE_SECONDS:
        return None
    for pod in pods:
        if pod.owner is None or pod.owner.uid != current.job_uid or pod.uid in current.before:
            continue
        if pod.node_name or pod.decision == contract.DECISION_REMOTE:
            return None
    return current


def queue_order(jobs: Sequence[JobEntry]) -> int:
    """Oldest queued first: the lowest JARVICE job number of a pod's live jobs (numbers grow with time)."""
    return min((job.number for job in jobs), default=sys.maxsize)


def one_that_ran(ended: Sequence[JobEntry]) -> JobEntry | None:
    """The first of a pod's ended jobs that ran (not one that ended queued, moved or brought home)."""
    ran = [job for job in ended if not ended_without_running(job.state, job.start_time)]
    return min(ran, key=lambda job: job.number) if ran else None


def ran_note(job: JobEntry) -> str:
    """The pod's homecoming annotation when a step of it already ran on Nimbix: coming home would run it again."""
    return f"stays on Nimbix: its JARVICE job {job.number} already ran ({job.state}); coming home would run it again"


def claim_names(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The persistentVolumeClaims a pod spec's volumes name, in order, each once."""
    names: list[str] = []
    for volume in spec.get("volumes") or ():
        claim = volume.get("persistentVolumeClaim") if isinstance(volume, Mapping) else None
        name = claim.get("claimName") if isinstance(claim, Mapping) else None
        if isinstance(name, str) and name and name not in names:
            names.append(name)
    return tuple(names)


def volume_pins_nodes(claim: Mapping[str, Any] | None, volume: Mapping[str, Any] | None) -> bool:
    """Whether a claim's volume may keep the pod off some nodes: the claim or its volume not found, the
    claim not bound yet (the scheduler would bind it by topology), or a volume with node affinity (a zonal
    disk, a local volume). A bound volume without node affinity (NFS, a hostPath, most file shares) mounts
    on any node, so the webhook's fit holds for a pod using it."""
    if claim is None or volume is None:
        return True
    status = claim.get("status") or {}
    if not isinstance(status, Mapping) or status.get("phase") != "Bound":
        return True
    spec = volume.get("spec") or {}
    return not isinstance(spec, Mapping) or bool(spec.get("nodeAffinity"))


def unmodelled_rule(spec: Mapping[str, Any], *, pinned_claims: Collection[str]) -> str:
    """A scheduling rule in a pod spec that the webhook's fit does not model ("": none). A pod with one
    is never brought home: the webhook could say it fits where the scheduler would not place it, and
    it would strand here instead of running on Nimbix. `pinned_claims`: the pod's claims whose volumes
    may keep it off some nodes (`volume_pins_nodes`); a claim on a volume any node mounts is modelled."""
    affinity = spec.get("affinity") or {}
    if isinstance(affinity, Mapping) and affinity.get("podAntiAffinity"):
        return "pod anti-affinity"
    if isinstance(affinity, Mapping) and affinity.get("podAffinity"):
        return "pod affinity"
    if spec.get("topologySpreadConstraints"):
        return "topology spread constraints"
    for name in claim_names(spec):
        if name in pinned_claims:
            return f"a persistentVolumeClaim ({name}) whose volume may be tied to some nodes"
    return ""


def unmodelled_note(rule: str) -> str:
    """The pod's homecoming annotation when its spec has a rule the webhook's fit does not model."""
    return (
        f"never brought home: its pods have {rule}, which the webhook's fit does not model, so a local node"
        " it fits might not take it"
    )
