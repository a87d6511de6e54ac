"""One admission: gather inputs from the review and the cache, decide, apply, build the response.

No I/O. The cache hands the decision one snapshot (ClusterCache.snapshot_for), the decision is pure
(webhook.decision.decide), and the cache applies what it chose in one call (ClusterCache.apply):
claim moves, then the reservation, in the same event-loop tick as the decision (never a
reservation for dry-run requests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from entrypoint import contract
from webhook import budget, mutation
from webhook import decision as decisions
from webhook.cache import ClusterCache
from webhook.model import ObjectError, check_pod_shape, parse_placement, pod_compute, pod_gpus
from webhook.review import AdmissionRequest, MalformedReview, build_denial, build_response
from webhook.types import Decision, Placement, PodNeeds, Requests

Outcome = Literal["local", "remote", "skipped", "error", "denied"]


@dataclass(frozen=True, slots=True)
class Admission:
    response: dict[str, Any]
    outcome: Outcome
    reason: str
    node: str = ""
    over_budget: bool = False  # stopped by its namespace's burst budget (left local, or denied)


def _skip(request: AdmissionRequest, reason: str) -> Admission:
    return Admission(response=build_response(request.uid), outcome="skipped", reason=reason)


def _mapping(value: object) -> Mapping[str, Any]:
    # dict, not the Mapping ABC: decoded JSON holds dicts, and the ABC check costs ten times more.
    return value if isinstance(value, dict) else {}


def admit(
    request: AdmissionRequest,
    *,
    cache: ClusterCache,
    policy: mutation.RewritePolicy,
    local_refusal: str = "",
    over_budget: budget.OverBudget = "local",
) -> Admission:
    """`local_refusal`: why no local promise may be made now (no leader among the replicas); a pod
    that would stay local bursts instead, with that reason. `over_budget`: what happens to a pod
    that would burst past its namespace's burst budget (left local, or denied)."""
    if request.kind != "Pod" or request.group != "" or request.operation != "CREATE":
        return _skip(request, f"not a pod CREATE ({request.group or 'core'}/{request.kind} {request.operation})")
    pod = request.object
    try:
        check_pod_shape(pod)
    except ObjectError as exc:
        raise MalformedReview(f"request.object: {exc}") from exc
    meta = _mapping(pod.get("metadata"))
    labels = _mapping(meta.get("labels"))
    if labels.get(contract.LABEL_TASK_TYPE) != contract.LABEL_TASK_TYPE_VALUE:
        return _skip(request, f"pod is not labeled {contract.LABEL_TASK_TYPE}={contract.LABEL_TASK_TYPE_VALUE}")
    annotations = _mapping(meta.get("annotations"))
    spec = _mapping(pod.get("spec"))
    # Reinvocation (a later webhook changed the pod), or a pod copied from one we rewrote: never
    # decide twice, but a burst pod must not keep GPUs someone added since.
    reinvoked = contract.ANNOTATION_DECISION in annotations
    if reinvoked and annotations[contract.ANNOTATION_DECISION] != contract.DECISION_REMOTE:
        return _skip(request, f"already decided: {annotations[contract.ANNOTATION_DECISION]}")
    try:
        gpus = pod_gpus(spec, policy.gpu_resources, checked=True)  # on reinvocation: what the patch reads
        placement = Placement() if reinvoked else parse_placement(spec)
        if not gpus and not reinvoked:
            return _skip(request, "pod requests no GPU")
        requests = gpus if reinvoked else {**gpus, **pod_compute(spec)}
    except ObjectError as exc:
        raise MalformedReview(f"request.object: {exc}") from exc
    needs = PodNeeds(gpus=gpus, requests=requests, placement=placement, namespace=request.namespace)
    verdict = decisions.decide(
        needs,
        cache.snapshot_for(request.namespace, cluster_name=policy.cluster_name),
        active_deadline=spec.get("activeDeadlineSeconds"),
        default_walltime_seconds=policy.default_walltime_seconds,
        local_refusal=local_refusal,
        over_budget=over_budget,
        reinvoked=reinvoked,
        pod=decisions.BurstAsk(spec=spec, annotations=annotations, policy=policy),
    )
    cache.apply(verdict, needs=needs, reservation_id="" if request.dry_run else request.uid)
    return _respond(request, verdict, needs=needs, policy=policy)


def decide_placement(requests: Requests, placement: Placement, cache: ClusterCache, *, namespace: str = "") -> Decision:
    """Where a pod would go as admit() decides it, its claim moves applied, nothing reserved: the
    placement step alone, for the tests and benchmarks that drive the cache as the watch does."""
    snapshot = cache.snapshot_for(namespace, cluster_name="")
    choice = decisions.choose(requests, placement, snapshot.view, reservation_refusal=snapshot.reservation_refusal)
    cache.move_claims(choice.moves)
    return choice.decision


def _respond(
    request: AdmissionRequest, verdict: decisions.Verdict, *, needs: PodNeeds, policy: mutation.RewritePolicy
) -> Admission:
    """The review's answer for the verdict (the cache has applied it)."""
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
        return _readmit(request, policy=policy, terms=mutation.BurstTerms(cluster=verdict.cluster, limit=verdict.limit))
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
    warnings += mutation.build_overreach_warnings(_mapping(request.object.get("spec")), policy=policy)
    if verdict.limit_warning:
        warnings.append(verdict.limit_warning)
    return Admission(build_response(request.uid, patch=patch, warnings=warnings), "remote", decision.reason)


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
        return _skip(request, f"already decided: {contract.DECISION_REMOTE}; no GPU request added since")
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


def build_error_response(uid: str) -> dict[str, Any]:
    """Fail open: a webhook bug must not block pod creation. The pod stays as submitted."""
    return build_response(
        uid, warnings=["nimbix-burst: internal webhook error; pod admitted unchanged (see webhook logs)"]
    )
