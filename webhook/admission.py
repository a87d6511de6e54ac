"""One admission, in four steps: gather, decide, apply, respond (no I/O).

gather: the review's pod read once (its GPUs, everything it takes from a node, its placement, the
containers a burst would run), and one snapshot from the cache (ClusterCache.snapshot_for; a gang's
pod also its gang's, ClusterCache.gang_snapshot_for). decide: pure over them, one pass for a pod
alone and a gang's pod (webhook.decision.decide). apply: the cache applies the verdict's effects in
one call (ClusterCache.apply: claim moves, then reservations), in the same event-loop tick as the
decision, never a reservation for a dry run. respond: webhook.responses turns the verdict into the
AdmissionReview response.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jarvice import contract
from webhook import budget, data_volumes, gangs, provenance, responses, rewrite_terms, waiting
from webhook import decision as decisions
from webhook.burst import BurstAsk
from webhook.cache import ClusterCache
from webhook.model import ObjectError, check_pod_shape, parse_placement, pod_compute, pod_gpus
from webhook.placement import choose
from webhook.resources import burst_container_names
from webhook.responses import Admission, build_error_response
from webhook.review import AdmissionRequest, MalformedReview
from webhook.types import Decision, Placement, PodNeeds, Requests

__all__ = ["Admission", "admit", "build_error_response", "decide_placement"]


def _mapping(value: object) -> Mapping[str, Any]:
    # dict, not the Mapping ABC: decoded JSON holds dicts, and the ABC check costs ten times more.
    return value if isinstance(value, dict) else {}


def admit(
    request: AdmissionRequest,
    *,
    cache: ClusterCache,
    policy: rewrite_terms.RewritePolicy,
    local_refusal: str = "",
    over_budget: budget.OverBudget = "local",
) -> Admission:
    """`local_refusal`: why no local promise may be made now (no leader among the replicas); a pod
    that would stay local bursts instead, with that reason. `over_budget`: what happens to a pod
    that would burst past its namespace's burst budget (left local, or denied)."""
    if request.kind != "Pod" or request.group != "" or request.operation != "CREATE":
        return responses.skip(
            request, f"not a pod CREATE ({request.group or 'core'}/{request.kind} {request.operation})"
        )
    pod = request.object
    try:
        check_pod_shape(pod)
    except ObjectError as exc:
        raise MalformedReview(f"request.object: {exc}") from exc
    meta = _mapping(pod.get("metadata"))
    labels = _mapping(meta.get("labels"))
    if labels.get(contract.LABEL_TASK_TYPE) != contract.LABEL_TASK_TYPE_VALUE:
        return responses.skip(
            request, f"pod is not labeled {contract.LABEL_TASK_TYPE}={contract.LABEL_TASK_TYPE_VALUE}"
        )
    annotations = _mapping(meta.get("annotations"))
    # The product's own reinvocation (a later webhook changed the pod we rewrote moments ago), proven
    # by our record of the admission's token, not by the pod: never decided twice, but a burst pod
    # must not keep GPUs someone added since. Any other pod carrying our marks (a copy of a decided
    # pod, a decision written by hand) has them cleared and is decided afresh (webhook.provenance).
    reinvoked = contract.ANNOTATION_DECISION in annotations and cache.issued.holds(
        str(annotations.get(contract.ANNOTATION_ADMISSION, ""))
    )
    if reinvoked and annotations[contract.ANNOTATION_DECISION] != contract.DECISION_REMOTE:
        return responses.skip(request, f"already decided: {annotations[contract.ANNOTATION_DECISION]}")
    cleared: provenance.Cleared | None = None
    if not reinvoked and (marks := provenance.carried_marks(pod)):
        cleared = provenance.clear(pod, marks)
        pod = cleared.pod
        # Built, not dataclasses.replace(): the module is compiled with mypyc.
        request = AdmissionRequest(
            uid=request.uid,
            operation=request.operation,
            kind=request.kind,
            group=request.group,
            namespace=request.namespace,
            dry_run=request.dry_run,
            object=pod,
        )
        meta = _mapping(pod.get("metadata"))
        annotations = _mapping(meta.get("annotations"))
    spec = _mapping(pod.get("spec"))
    try:
        gpus = pod_gpus(spec, policy.gpu_resources, checked=True)  # on reinvocation: what the patch reads
        placement = Placement() if reinvoked else parse_placement(spec)
        if not gpus and not reinvoked:
            if cleared is not None:
                return responses.cleared_only(request, cleared, "pod requests no GPU")
            return responses.skip(request, "pod requests no GPU")
        requests = gpus if reinvoked else {**gpus, **pod_compute(spec)}
        bursting = burst_container_names(spec, policy.gpu_resources)  # the containers a burst would run
    except ObjectError as exc:
        raise MalformedReview(f"request.object: {exc}") from exc
    needs = PodNeeds(gpus=gpus, requests=requests, placement=placement, namespace=request.namespace)
    if not request.dry_run and not reinvoked:  # the GPUs a pod of its Job came home to are its own
        cache.job_moves.take_over(waiting.controlling_job(meta))  # snapshot_for settles the ledger
    snapshot = cache.snapshot_for(request.namespace, cluster_name=policy.cluster_name)
    gang: gangs.GangSnapshot | None = None
    carried: gangs.GangTerms | None = None  # a reinvoked pod's gang, as its annotations carry it
    if reinvoked:
        carried = gangs.parse_terms(annotations)
    else:
        try:
            gang = cache.gang_snapshot_for(meta, namespace=request.namespace, cluster=snapshot.cluster)
        except gangs.GangError as unreadable:  # not `exc`: compiled, a name keeps the first type it was given
            return responses.refuse(request, str(unreadable))
    deadline = spec.get("activeDeadlineSeconds")  # the API server rejects anything but an integer later
    verdict = decisions.decide(
        needs,
        snapshot,
        gang,
        active_deadline=deadline if type(deadline) is int else None,
        default_walltime_seconds=policy.default_walltime_seconds,
        local_refusal=local_refusal,
        over_budget=over_budget,
        reinvoked=reinvoked,
        carried=carried,
        pod=BurstAsk(
            spec=spec,
            annotations=annotations,
            policy=policy,
            bursting=bursting,
            data_key=data_volumes.data_key(meta),
        ),
        uid=request.uid,
        dry_run=request.dry_run,
        wait=_wait_ask(meta, annotations, snapshot.burst_after, cache, spec),
    )
    cache.apply(verdict.effects)
    if not request.dry_run and verdict.route != "reinvoked":
        cache.issued.issue(request.uid)  # the token the patch writes: it proves a reinvocation
    return responses.respond(request, verdict, gpus=needs.gpus, policy=policy, cleared=cleared)


def _wait_ask(
    meta: Mapping[str, Any],
    annotations: Mapping[str, Any],
    namespace_setting: str | None,
    cache: ClusterCache,
    pod_spec: Mapping[str, Any],
) -> waiting.WaitAsk | None:
    """What the pod's wait before bursting is decided from (None: neither it nor its namespace asks)."""
    setting = annotations.get(contract.ANNOTATION_BURST_AFTER)
    if setting is None and namespace_setting is None:
        return None
    return waiting.WaitAsk(
        setting=setting if setting is None or isinstance(setting, str) else repr(setting),
        namespace_setting=namespace_setting,
        job_uid=waiting.controlling_job(meta),
        now=cache.wall_now(),
        deadlines=cache.job_moves.burst_deadlines(),
        restart_policy=str(_mapping(pod_spec).get("restartPolicy") or ""),
        burst_before=cache.job_moves.burst_before(waiting.controlling_job(meta)),
    )


def decide_placement(requests: Requests, placement: Placement, cache: ClusterCache, *, namespace: str = "") -> Decision:
    """Where a pod would go as admit() decides it, its claim moves applied, nothing reserved: the
    placement step alone, for the tests and benchmarks that drive the cache as the watch does."""
    snapshot = cache.snapshot_for(namespace, cluster_name="")
    choice = choose(requests, placement, snapshot.view, reservation_refusal=snapshot.reservation_refusal)
    cache.move_claims(choice.moves)
    return choice.decision
