"""The admission's answer (pure): a verdict, once the cache has applied it, as an AdmissionReview response.

One place builds every answer the webhook gives a review it decided, a single pod's (respond, from a
webhook.decision.Verdict) and a gang's pod's (respond_gang, from a webhook.gang_decision.GangVerdict):
the patch (webhook.mutation), the warnings kubectl shows, a denial's message, and the outcome the
metrics and the admission log count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from entrypoint import contract
from webhook import budget, mutation, overreach
from webhook.decision import Verdict
from webhook.gang_decision import GangVerdict
from webhook.review import AdmissionRequest, build_denial, build_response
from webhook.types import Decision, GpuCounts, PodNeeds

Outcome = Literal["local", "remote", "skipped", "error", "denied"]


@dataclass(frozen=True, slots=True)
class Admission:
    response: dict[str, Any]
    outcome: Outcome
    reason: str
    node: str = ""
    over_budget: bool = False  # stopped by its namespace's burst budget (left local, or denied)


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


def respond(
    request: AdmissionRequest, verdict: Verdict, *, needs: PodNeeds, policy: mutation.RewritePolicy
) -> Admission:
    """A single pod's answer for its verdict."""
    decision = verdict.decision
    if verdict.route == "local":
        patch = mutation.build_local_patch(request.object, decision=decision, reservation_id=request.uid)
        return Admission(build_response(request.uid, patch=patch), "local", decision.reason, decision.node)
    if verdict.route == "kept-local":
        return _kept_local(request, decision, verdict.refusal, notes=verdict.notes, warnings=verdict.warnings)
    if verdict.route == "over-budget":
        return _over_budget(request, decision, verdict.refusal, "deny" if verdict.deny else "local")
    if verdict.limit is None:
        raise AssertionError("a burst verdict carries its time limit")
    if verdict.route == "reinvoked":
        terms = mutation.BurstTerms(cluster=verdict.cluster, limit=verdict.limit, gang=verdict.gang)
        return _readmit(request, policy=policy, terms=terms)
    terms = mutation.BurstTerms(
        cluster=verdict.cluster,
        limit=verdict.limit,
        staging=verdict.staging,
        gpu_model=verdict.gpu_model,
        allowed_machines=verdict.allowed_machines,
    )
    patch = mutation.build_remote_patch(
        request.object,
        gpus=needs.gpus,
        decision=decision,
        policy=policy,
        terms=terms,
        remote_gpus=verdict.remote_gpus,
        reservation_id=request.uid if verdict.counted and not request.dry_run else "",
    )
    warnings = [f"nimbix-burst: this pod will run on Nimbix JARVICE: {decision.reason}"]
    warnings += overreach.build_overreach_warnings(_mapping(request.object.get("spec")), policy=policy)
    if verdict.limit_warning:
        warnings.append(verdict.limit_warning)
    return Admission(build_response(request.uid, patch=patch, warnings=warnings), "remote", decision.reason)


def _mapping(value: object) -> Mapping[str, Any]:
    # dict, not the Mapping ABC: decoded JSON holds dicts, and the ABC check costs ten times more.
    return value if isinstance(value, dict) else {}


def _kept_local(
    request: AdmissionRequest,
    decision: Decision,
    refusal: str,
    *,
    notes: Mapping[str, str] | None = None,
    warnings: Sequence[str] = (),
) -> Admission:
    """Would burst, but may not (no cluster identity, no JARVICE machine with its GPU model, data that
    could not follow it): it stays as submitted and waits for local GPUs (never refused: the webhook
    cannot burst it, that is all). `notes`: annotations beside the decision and reason; `warnings`:
    what kubectl shows (default: one naming the refusal)."""
    reason = f"{decision.reason}; not burst: {refusal}"
    patch = mutation.build_kept_local_patch(request.object, reason=reason, notes=notes)
    shown = list(warnings) or [f"nimbix-burst: kept local, not burst: {refusal}"]
    return Admission(build_response(request.uid, patch=patch, warnings=shown), "local", reason)


def _over_budget(request: AdmissionRequest, decision: Decision, refusal: str, action: budget.OverBudget) -> Admission:
    """No node fits, and bursting would break the namespace's budget: the pod waits for local GPUs
    (annotated, with a warning), or with --over-budget=deny is refused with what to do about it."""
    reason = f"{decision.reason}; not burst: {refusal}"
    if action == "deny":
        message = (
            f"nimbix-burst: the burst budget of namespace {request.namespace} does not allow this pod: {refusal}, "
            f"and no local node can host it now ({decision.reason}). Create it again when burst pods in "
            f"{request.namespace} have finished, ask for fewer GPUs, or ask an administrator to raise (or fix) "
            f"the namespace's {budget.ANNOTATION_MAX_REMOTE_GPUS} annotation"
        )
        return Admission(build_denial(request.uid, message), "denied", reason, over_budget=True)
    patch = mutation.build_over_budget_patch(request.object, reason=reason, budget_note=refusal)
    warning = f"nimbix-burst: kept local by the burst budget: {refusal}"
    return Admission(build_response(request.uid, patch=patch, warnings=[warning]), "local", reason, over_budget=True)


def _readmit(request: AdmissionRequest, *, policy: mutation.RewritePolicy, terms: mutation.BurstTerms) -> Admission:
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


def respond_gang(
    request: AdmissionRequest, verdict: GangVerdict, *, gpus: GpuCounts, policy: mutation.RewritePolicy
) -> Admission:
    """A gang's pod's answer for its verdict."""
    pod = request.object
    if verdict.kind == "denied":
        message = (
            f"nimbix-burst: the burst budget of namespace {request.namespace} does not allow this pod's gang:"
            f" {verdict.budget_note or verdict.reason}. Delete the gang and create it again when burst pods in"
            f" {request.namespace} have finished, use fewer pods or GPUs, or ask an administrator to raise the"
            f" namespace's {budget.ANNOTATION_MAX_REMOTE_GPUS} annotation"
        )
        return Admission(build_denial(request.uid, message), "denied", verdict.reason, over_budget=True)
    if verdict.kind == "kept":
        notes = dict(verdict.notes)
        if verdict.budget_note:
            notes[budget.ANNOTATION_BUDGET] = verdict.budget_note
        patch = mutation.build_kept_local_patch(pod, reason=verdict.reason, notes=notes)
        warning = f"nimbix-burst: kept local, not burst: {verdict.reason}"
        response = build_response(request.uid, patch=patch, warnings=[warning])
        return Admission(response, "local", verdict.reason, over_budget=bool(verdict.budget_note))
    if verdict.kind == "local":
        decision = Decision(kind="local", reason=verdict.reason, node=verdict.node, candidates=verdict.candidates)
        patch = mutation.build_local_patch(
            pod, decision=decision, reservation_id=verdict.reservation_id, notes=verdict.notes
        )
        return Admission(build_response(request.uid, patch=patch), "local", verdict.reason, verdict.node)
    if verdict.burst is None:
        raise AssertionError("a gang's burst verdict carries its terms")
    patch = mutation.build_remote_patch(
        pod,
        gpus=gpus,
        decision=Decision(kind="remote", reason=verdict.reason),
        policy=policy,
        terms=verdict.burst,
        remote_gpus=verdict.remote_gpus,
        reservation_id=verdict.reservation_id,
    )
    shown = f"rank {verdict.terms.rank} of {verdict.terms.size}" if verdict.terms is not None else "a rank"
    warnings = [f"nimbix-burst: this pod will run on Nimbix JARVICE as {shown} of one multi-node job: {verdict.reason}"]
    warnings += overreach.build_overreach_warnings(_mapping(pod.get("spec")), policy=policy)
    if verdict.limit_warning:
        warnings.append(verdict.limit_warning)
    return Admission(build_response(request.uid, patch=patch, warnings=warnings), "remote", verdict.reason)
