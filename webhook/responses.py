"""The admission's answer (pure): a verdict, once the cache has applied it, as an AdmissionReview response.

One place builds every answer the webhook gives a review it decided (respond, from a
webhook.verdict.Verdict, a pod alone's or a gang's pod's): the patch (webhook.mutation), the warnings
kubectl shows, a denial's message, and the outcome the metrics and the admission log count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from jarvice import contract, gpubudget
from webhook import mutation, overreach, rewrite_terms, spending
from webhook.provenance import Cleared
from webhook.review import AdmissionRequest, build_denial, build_response
from webhook.types import GpuCounts
from webhook.verdict import Verdict

Outcome = Literal["local", "remote", "skipped", "error", "denied"]


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class Admission:
    response: Final[dict[str, Any]]
    outcome: Final[Outcome]
    reason: Final[str]
    node: Final[str]
    over_budget: Final[bool]  # stopped by its namespace's burst budget (left local, or denied)

    def __init__(
        self,
        response: dict[str, Any],
        outcome: Outcome,
        reason: str,
        node: str = "",
        over_budget: bool = False,
    ) -> None:
        self.response = response
        self.outcome = outcome
        self.reason = reason
        self.node = node
        self.over_budget = over_budget


def skip(request: AdmissionRequest, reason: str) -> Admission:
    """Not ours to decide (not a pod CREATE, not labeled, no GPU, decided before): admitted unchanged."""
    return Admission(response=build_response(request.uid), outcome="skipped", reason=reason)


def refuse(request: AdmissionRequest, reason: str) -> Admission:
    """A pod whose annotations cannot be used: refused, with what to fix."""
    return Admission(build_denial(request.uid, f"nimbix-burst: {reason}"), "denied", reason)


def build_error_response(uid: str) -> dict[str, Any]:
    """Fail open: a webhook bug must not block pod creation. The pod stays as submitted."""
    return build_response(
        uid, warnings=["nimbix-burst: internal webhook error; pod admitted unchanged (see webhook logs)"]
    )


def cleared_only(request: AdmissionRequest, cleared: Cleared, reason: str) -> Admission:
    """A pod that carried the product's marks but is not ours to decide now (it asks for no GPU):
    admitted with the marks removed, so nothing it says is counted or run remotely."""
    response = build_response(request.uid, patch=list(cleared.ops), warnings=[cleared.warning])
    return Admission(response, "skipped", f"{reason}; removed the burst marks it carried")


def respond(
    request: AdmissionRequest,
    verdict: Verdict,
    *,
    gpus: GpuCounts,
    policy: rewrite_terms.RewritePolicy,
    cleared: Cleared | None = None,
) -> Admission:
    """The answer for a pod's verdict (a pod alone's or a gang's pod's). `cleared`: the pod carried
    marks only the product writes and was decided afresh: `request.object` is the pod without them,
    and their removal goes first in the patch."""
    pod = request.object
    route, decision, gang = verdict.route, verdict.decision, verdict.gang
    if route in ("remote", "reinvoked") and verdict.burst is None:
        raise AssertionError("a burst verdict carries its terms")
    if route == "reinvoked" and verdict.burst is not None:
        return _readmit(request, policy=policy, terms=verdict.burst)
    if verdict.deny:
        return Admission(
            build_denial(request.uid, _denial(request, verdict)), "denied", verdict.reason, over_budget=True
        )
    outcome: Outcome = "local"
    warnings: list[str] = []
    if route == "local":
        patch = mutation.build_local_patch(
            pod,
            decision=decision,
            reservation_id=verdict.reservation_id,
            notes=verdict.notes,
            admission=request.uid,
            gpu_resources=policy.gpu_resources,
        )
    elif route == "remote" and verdict.burst is not None:
        patch = mutation.build_remote_patch(
            pod,
            gpus=gpus,
            decision=decision,
            policy=policy,
            terms=verdict.burst,
            remote_gpus=verdict.remote_gpus,
            reservation_id=verdict.reservation_id,
            admission=request.uid,
            notes=verdict.burst_notes,
        )
        outcome = "remote"
        where = f" as rank {gang.rank} of {gang.size} of one multi-node job" if gang is not None else ""
        warnings = [f"nimbix-burst: this pod will run on Nimbix JARVICE{where}: {verdict.reason}"]
        warnings += overreach.build_overreach_warnings(_mapping(pod.get("spec")), policy=policy)
        if verdict.limit_warning:
            warnings.append(verdict.limit_warning)
        if verdict.burst is not None:
            warnings += verdict.burst.warnings
    else:  # kept local (a budget's doing or not): it waits for local GPUs as submitted
        patch = mutation.build_kept_local_patch(
            pod, reason=verdict.reason, notes=verdict.notes, admission=request.uid, gpu_resources=policy.gpu_resources
        )
        warnings = list(verdict.warnings)
    if cleared is not None:
        patch = [*cleared.ops, *patch]
        warnings = [cleared.warning, *warnings]
    response = build_response(request.uid, patch=patch, warnings=warnings)
    return Admission(
        response, outcome, verdict.reason, decision.node if route == "local" else "", route == "over-budget"
    )


def _mapping(value: object) -> Mapping[str, Any]:
    # dict, not the Mapping ABC: decoded JSON holds dicts, and the ABC check costs ten times more.
    return value if isinstance(value, dict) else {}


def _denial(request: AdmissionRequest, verdict: Verdict) -> str:
    """Why a pod over its namespace's budget (--over-budget=deny) is refused, and what to do about it."""
    namespace, limit = request.namespace, gpubudget.ANNOTATION_MAX_REMOTE_GPUS
    if verdict.gang is not None:
        return (
            f"nimbix-burst: the burst budget of namespace {namespace} does not allow this pod's gang:"
            f" {verdict.refusal or verdict.reason}. Delete the gang and create it again when burst pods in"
            f" {namespace} have finished, use fewer pods or GPUs, or ask an administrator to raise the"
            f" namespace's {limit} annotation"
        )
    return (
        f"nimbix-burst: the burst budget of namespace {namespace} does not allow this pod: {verdict.refusal}, "
        f"and no local node can host it now ({verdict.decision.reason}). Create it again when burst pods in "
        f"{namespace} have finished, ask for fewer GPUs, or ask an administrator to raise (or fix) "
        f"the namespace's {limit} annotation (or its cost caps, {spending.ANNOTATION_MAX_COST_PER_HOUR} and "
        f"{spending.ANNOTATION_MAX_COST_PER_MONTH})"
    )


def _readmit(
    request: AdmissionRequest, *, policy: rewrite_terms.RewritePolicy, terms: rewrite_terms.BurstTerms
) -> Admission:
    """A pod decided remote before gets GPU requests added since stripped, its grace period raised."""
    stripped = mutation.build_reinvocation_patch(request.object, policy=policy, terms=terms)
    grace = mutation.build_grace_patch(request.object)
    if not stripped and not grace:
        return skip(request, f"already decided: {contract.DECISION_REMOTE}; no GPU request added since")
    reasons, warnings = [], []
    if stripped:
        reasons.append("stripped GPU requests added after the decision")
        warnings.append("nimbix-burst: removed GPU requests added after this pod was burst (see original-resources)")
    if grace:
        reasons.append("raised terminationGracePeriodSeconds shortened after the decision")
        warnings.append(
            f"nimbix-burst: terminationGracePeriodSeconds raised to {contract.MIN_TERMINATION_GRACE_SECONDS} again"
            " so the runner can stop its job"
        )
    reason = "already decided: remote; " + "; ".join(reasons)
    return Admission(build_response(request.uid, patch=stripped + grace, warnings=warnings), "remote", reason)
