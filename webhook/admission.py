"""One admission: gather inputs from the review, decide, reserve, build the response.

No I/O. The only side effect is the GPU reservation in the cache, made in the same event-loop
tick as the decision (and never for dry-run requests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from entrypoint import contract
from webhook import budget, data_volumes, gpu_models, mutation, walltime
from webhook import decision as decisions
from webhook.cache import ClusterCache
from webhook.model import ObjectError, check_pod_shape, parse_placement, pod_compute, pod_gpus
from webhook.review import AdmissionRequest, MalformedReview, build_denial, build_response
from webhook.types import Decision

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
    if contract.ANNOTATION_DECISION in annotations:
        # Reinvocation (a later webhook changed the pod), or a pod copied from one we rewrote:
        # never decide twice, but a burst pod must not keep GPUs someone added since.
        terms = mutation.BurstTerms(
            cluster=_cluster_identity(cache, policy)[0], limit=_walltime(request, spec, cache, policy)[0]
        )
        return _readmit(request, spec, decided=annotations[contract.ANNOTATION_DECISION], policy=policy, terms=terms)
    try:
        gpus = pod_gpus(spec, policy.gpu_resources, checked=True)
        placement = parse_placement(spec)
    except ObjectError as exc:
        raise MalformedReview(f"request.object: {exc}") from exc
    if not gpus:
        return _skip(request, "pod requests no GPU")

    try:
        requests = {**gpus, **pod_compute(spec)}
    except ObjectError as exc:
        raise MalformedReview(f"request.object: {exc}") from exc
    cache.expire_reservations()
    decision: Decision = decisions.decide(requests, placement, cache, namespace=request.namespace)
    if decision.capped:
        cache.reservation_cap_hits += 1
    if decision.kind == "local" and local_refusal:
        decision = Decision(kind="remote", reason=f"{decision.reason}, but {local_refusal}")
    if decision.kind == "local":
        if not request.dry_run:
            cache.reserve(
                request.uid, node=decision.node, requests=requests, placement=placement, namespace=request.namespace
            )
        patch = mutation.build_local_patch(pod, decision=decision, reservation_id=request.uid)
        return Admission(build_response(request.uid, patch=patch), "local", decision.reason, decision.node)
    model = gpu_models.parse_constraint(placement, label=policy.gpu_model_label)
    machines = gpu_models.resolve(model, policy.gpu_model_map) if model is not None else None
    if isinstance(machines, gpu_models.NoMachineOffers):
        # Bursting would run it on a GPU it did not ask for: it waits here for a node with its model.
        return _kept_local(request, decision, machines.reason, notes={contract.ANNOTATION_GPU_MODEL: machines.reason})
    cluster, unknown = _cluster_identity(cache, policy)
    if unknown:
        return _kept_local(request, decision, unknown)
    data = data_volumes.plan_data(
        spec, annotations, burst_containers=mutation.burst_container_names(spec, policy=policy)
    )
    if isinstance(data, data_volumes.DataRefusal):
        notes = {contract.ANNOTATION_DATA_NOT_STAGED: data.volumes} if data.volumes else {}
        return _kept_local(request, decision, data.reason, notes=notes, warnings=data.warnings)
    namespace = request.namespace
    refusal = decisions.budget_refusal(gpus, cache, namespace=namespace)
    if not refusal and local_refusal and cache.budget(namespace) is not None:
        # Only the leader counts remote reservations: without one, the budget cannot be held.
        refusal = f"{local_refusal}, so no burst can be counted against the budget of namespace {namespace}"
        over_budget = "local"  # a failover is not the user's doing: never refuse the pod for it
    if refusal:
        return _over_budget(request, decision, refusal, over_budget)
    need = decisions.remote_gpus(gpus)
    reservation_id = ""
    if cache.budget(namespace) is not None and not request.dry_run:
        cache.reserve_remote(request.uid, namespace=namespace, gpus=need)
        reservation_id = request.uid
    limit, limit_warning = _walltime(request, spec, cache, policy)
    terms = mutation.BurstTerms(
        cluster=cluster,
        limit=limit,
        staging=tuple((c.container, c.env_value("in"), c.env_value("out")) for c in data.staging),
        gpu_model=gpu_models.describe_constraint(model) if model is not None else "",
        allowed_machines=machines.machines if machines is not None else (),
    )
    patch = mutation.build_remote_patch(
        pod, gpus=gpus, decision=decision, policy=policy, terms=terms, remote_gpus=need, reservation_id=reservation_id
    )
    warnings = [f"nimbix-burst: this pod will run on Nimbix JARVICE: {decision.reason}"]
    warnings += mutation.build_overreach_warnings(spec, policy=policy)
    if limit_warning:
        warnings.append(limit_warning)
    return Admission(build_response(request.uid, patch=patch, warnings=warnings), "remote", decision.reason)


def _cluster_identity(cache: ClusterCache, policy: mutation.RewritePolicy) -> tuple[str, str]:
    """(the cluster's identity, "") or ("", why it is unknown). Every job a burst pod submits carries
    it, so the reaper of this cluster, and only that one, may stop the job: no identity, no burst."""
    uid = cache.kube_system_uid
    if not uid:
        return "", "the kube-system namespace is not in the webhook's cache, so the cluster's identity is unknown"
    try:
        return contract.cluster_identity(uid, policy.cluster_name), ""
    except ValueError as exc:
        return "", f"the cluster's identity is unknown: {exc}"


def _walltime(
    request: AdmissionRequest, spec: Mapping[str, Any], cache: ClusterCache, policy: mutation.RewritePolicy
) -> tuple[walltime.Walltime, str]:
    return walltime.decide_walltime(
        spec.get("activeDeadlineSeconds"),
        namespace=request.namespace,
        namespace_default=cache.default_walltime(request.namespace),
        webhook_default=policy.default_walltime_seconds,
    )


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


def _readmit(
    request: AdmissionRequest,
    spec: Mapping[str, Any],
    *,
    decided: str,
    policy: mutation.RewritePolicy,
    terms: mutation.BurstTerms,
) -> Admission:
    """A pod decided local keeps what it has; one decided remote gets new GPU requests stripped."""
    if decided != contract.DECISION_REMOTE:
        return _skip(request, f"already decided: {decided}")
    try:
        pod_gpus(spec, policy.gpu_resources, checked=True)  # the quantities the patch reads are valid
    except ObjectError as exc:
        raise MalformedReview(f"request.object: {exc}") from exc
    stripped = mutation.build_reinvocation_patch(request.object, policy=policy, terms=terms)
    grace = mutation.build_grace_patch(request.object)
    if not stripped and not grace:
        return _skip(request, f"already decided: {decided}; no GPU request added since")
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
