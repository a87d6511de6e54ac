"""Raw Kubernetes JSON (as the API server sends it) -> the typed values accounting needs (pure).

Used both for objects from the watch and for the pod inside an AdmissionReview. Anything of the
wrong shape raises ObjectError with a message naming the field, so a bad review is a clear 400.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from jarvice import contract, gpubudget
from kubeplumbing import spendrecord
from kubeplumbing.times import parse_time
from webhook import spending, waiting, walltime
from webhook.resources import (
    QuantityError,
    effective_gpus,
    effective_request,
    parse_device_count,
    parse_quantity,
    requested_resources,
)
from webhook.scheduling import FILTERING_EFFECTS
from webhook.types import (
    CPU_MILLI,
    POD_COUNT,
    NamespaceInfo,
    NamespaceMachines,
    NodeInfo,
    Placement,
    PodInfo,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    Toleration,
)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Taints the node-lifecycle controller sets; a node carrying them is not a candidate however the
# pod tolerates them, because the scheduler's NoSchedule variants are never tolerated by default.
NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
DEFAULT_SCHEDULER = "default-scheduler"  # the API server's default for spec.schedulerName


class ObjectError(ValueError):
    """A Kubernetes object whose shape we cannot use; the message names the field."""


# Checks use dict/list, not the Mapping/Sequence ABCs: decoded JSON only holds dicts and lists, and
# an ABC isinstance costs ten times more, which on a pod with many env vars was most of a request.


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ObjectError(f"{where} must be an object")
    return value


def _element(value: object, where: str) -> Mapping[str, Any]:
    """A list element: unlike an optional field, null is not "absent" here, it is wrong."""
    if not isinstance(value, dict):
        raise ObjectError(f"{where} must be an object")
    return value


def _sequence(value: object, where: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ObjectError(f"{where} must be a list")
    return value


def _string(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ObjectError(f"{where} must be a string")
    return value


# Messages name the field, so they are built only when a check fails: formatting one per label, env
# var and toleration on every review was a sixth of the checks' cost (issue 15).


def _check_string_map(value: object, where: str) -> Mapping[str, Any]:
    """A map whose values are strings or null (null reads as "")."""
    raw = _mapping(value, where)
    for key, item in raw.items():
        if item is not None and not isinstance(item, str):
            raise ObjectError(f"{where}.{key} must be a string")
    return raw


def _string_map(value: object, where: str) -> dict[str, str]:
    raw = _check_string_map(value, where)
    if None in raw.values():
        return {str(k): v or "" for k, v in raw.items()}
    return dict(raw)


_TOLERATION_FIELDS = ("key", "operator", "value", "effect")
_TEXT = (str, type(None))  # an optional string field: absent and null read as ""


def _reject_non_strings(item: Mapping[str, Any], names: tuple[str, ...], where: str, index: int) -> NoReturn:
    """Raise for the first of `item`'s fields `names` that is neither a string nor null; `item` is
    `where`[`index`]. Called once a fast check has found one."""
    for name in names:
        value = item.get(name)
        if value is not None and not isinstance(value, str):
            raise ObjectError(f"{where}[{index}].{name} must be a string")
    raise AssertionError(f"{where}[{index}]: no field of {names} is wrong")


def parse_requirement(raw: object, where: str) -> SelectorRequirement:
    item = _element(raw, where)
    values = tuple(_string(v, f"{where}.values") for v in _sequence(item.get("values"), f"{where}.values"))
    return SelectorRequirement(
        key=_string(item.get("key"), f"{where}.key"),
        operator=_string(item.get("operator"), f"{where}.operator"),
        values=values,
    )


def parse_placement(spec: Mapping[str, Any]) -> Placement:
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required_terms: tuple[SelectorTerm, ...] | None = None
    if required_raw is not None:
        where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        required = _mapping(required_raw, where)
        terms = []
        for i, term_raw in enumerate(_sequence(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")):
            term = _element(term_raw, f"{where}.nodeSelectorTerms[{i}]")
            terms.append(
                SelectorTerm(
                    match_expressions=tuple(
                        parse_requirement(r, f"nodeSelectorTerms[{i}].matchExpressions")
                        for r in _sequence(term.get("matchExpressions"), "matchExpressions")
                    ),
                    match_fields=tuple(
                        parse_requirement(r, f"nodeSelectorTerms[{i}].matchFields")
                        for r in _sequence(term.get("matchFields"), "matchFields")
                    ),
                )
            )
        required_terms = tuple(terms)
    tolerations = []
    for i, raw in enumerate(_sequence(spec.get("tolerations"), "spec.tolerations")):
        if not isinstance(raw, dict):
            raise ObjectError(f"spec.tolerations[{i}] must be an object")
        key, operator, value, effect = raw.get("key"), raw.get("operator"), raw.get("value"), raw.get("effect")
        text = isinstance(key, _TEXT) and isinstance(operator, _TEXT) and isinstance(value, _TEXT)
        if not (text and isinstance(effect, _TEXT)):
            _reject_non_strings(raw, _TOLERATION_FIELDS, "spec.tolerations", i)
        toleration = Toleration(key=key or "", operator=operator or "Equal", value=value or "", effect=effect or "")
        tolerations.append(toleration)
    return Placement(
        node_selector=_string_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        required_terms=required_terms,
        tolerations=tuple(tolerations),
        node_name=_string(spec.get("nodeName"), "spec.nodeName"),
    )


def _resources_problem(holder: Mapping[str, Any]) -> str:
    """ "" when `holder.resources` and its requests and limits are objects (or absent); else the
    field at fault, relative to `holder`, for the caller's message."""
    resources = holder.get("resources")
    if resources is None:
        return ""
    if not isinstance(resources, dict):
        return "resources"
    for source in ("requests", "limits"):
        values = resources.get(source)
        if values is not None and not isinstance(values, dict):
            return f"resources.{source}"
    return ""


def _validate_containers(spec: Mapping[str, Any]) -> None:
    if problem := _resources_problem(spec):
        raise ObjectError(f"spec.{problem} must be an object")
    for list_name in ("containers", "initContainers"):
        for i, container in enumerate(_sequence(spec.get(list_name), f"spec.{list_name}")):
            if not isinstance(container, dict):
                raise ObjectError(f"spec.{list_name}[{i}] must be an object")
            if problem := _resources_problem(container):
                raise ObjectError(f"spec.{list_name}[{i}].{problem} must be an object")
            env = container.get("env")
            if env is None:
                continue
            if not isinstance(env, list):
                raise ObjectError(f"spec.{list_name}[{i}].env must be a list")
            for j, variable in enumerate(env):
                if not isinstance(variable, dict):
                    raise ObjectError(f"spec.{list_name}[{i}].env[{j}] must be an object")


def check_pod_shape(pod: Mapping[str, Any]) -> None:
    """Every field the patch builders read has the type they expect (else ObjectError)."""
    meta = _mapping(pod.get("metadata"), "metadata")
    _check_string_map(meta.get("labels"), "metadata.labels")
    _check_string_map(meta.get("annotations"), "metadata.annotations")
    spec = _mapping(pod.get("spec"), "spec")
    _check_string_map(spec.get("nodeSelector"), "spec.nodeSelector")
    _string(spec.get("runtimeClassName"), "spec.runtimeClassName")
    _validate_containers(spec)


def pod_gpus(spec: Mapping[str, Any], gpu_resources: Sequence[str], *, checked: bool = False) -> dict[str, int]:
    """Effective GPU request per resource; raises ObjectError for malformed specs or quantities.
    `checked`: the caller already ran check_pod_shape, so the containers are not walked twice."""
    if not checked:
        _validate_containers(spec)
    _mapping(spec.get("overhead"), "spec.overhead")
    try:
        return effective_gpus(spec, gpu_resources)
    except QuantityError as exc:
        raise ObjectError(f"pod resources: {exc}") from exc


def pod_compute(spec: Mapping[str, Any]) -> dict[str, int]:
    """What the pod takes from a node besides GPUs, as NodeResourcesFit counts it: the effective
    request of every resource it names (CPU in millicores, the rest as whole units, rounded up like
    Quantity.Value()), zero ones omitted, plus one of the node's `pods`."""
    _mapping(spec.get("overhead"), "spec.overhead")
    amounts = {POD_COUNT: 1}
    try:
        for resource in requested_resources(spec):
            scale = 1000 if resource == CPU_MILLI else 1
            amount = math.ceil(effective_request(spec, resource) * scale)
            if amount > 0:
                amounts[resource] = amount
    except QuantityError as exc:
        raise ObjectError(f"pod resources: {exc}") from exc
    return amounts


def _blocked_elsewhere(status: Mapping[str, Any], gpu_resources: Sequence[str]) -> bool:
    """The scheduler tried and found no node for a reason that is not a GPU shortage (e.g. "0/5 nodes
    are available: 5 Insufficient cpu"): until that changes the pod takes no GPU, so it claims none."""
    for raw in _sequence(status.get("conditions"), "status.conditions"):
        condition = _element(raw, "status.conditions[]")
        if condition.get("type") == "PodScheduled":
            if condition.get("status") != "False" or condition.get("reason") != "Unschedulable":
                return False
            message = _string(condition.get("message"), "status.conditions[].message")
            return not any(resource in message for resource in gpu_resources)
    return False


_NO_PLACEMENT = Placement()


def parse_pod(raw: Mapping[str, Any], gpu_resources: Sequence[str]) -> PodInfo | None:
    """A watched pod, or None when it holds nothing accounting needs: a pod without GPUs matters
    only while it is bound and not terminal (its CPU and memory)."""
    spec = _mapping(raw.get("spec"), "spec")
    gpus = pod_gpus(spec, gpu_resources)
    status = _mapping(raw.get("status"), "status")
    terminal = _string(status.get("phase"), "status.phase") in TERMINAL_PHASES
    node_name = _string(spec.get("nodeName"), "spec.nodeName")
    meta = _mapping(raw.get("metadata"), "metadata")
    if not gpus:
        remote_gpus = gpubudget.burst_gpus(meta, gpu_resources)
        if remote_gpus is not None:
            if not terminal:
                return _burst_pod(meta, spec, remote_gpus)
            if remote_gpus and not gpubudget.burst_job_gone(meta, spec, status):
                # Finished, but its JARVICE job may still run (a runner killed before it could cancel
                # it): the budget keeps counting it until the job is known to be gone.
                return _burst_pod(meta, spec, remote_gpus, terminal=True, succeeded=_succeeded(status))
            if _is_gang_pod(meta):
                # Counts nothing, but tells whether its gang's generation is over (webhook.gangs).
                return _burst_pod(meta, spec, 0, terminal=True, succeeded=_succeeded(status))
    if not gpus and (terminal or not node_name):
        return None
    compute = pod_compute(spec)
    if not gpus:
        # Only what it takes from its node matters. A large cluster has ~30 such pods per node:
        # keep the record small (no names, the shared empty placement, one string per node name).
        uid = _string(meta.get("uid"), "metadata.uid")
        return PodInfo(uid, "", "", sys.intern(node_name), "", compute, False, _NO_PLACEMENT, "")
    annotations = _string_map(meta.get("annotations"), "metadata.annotations")
    pod = PodInfo(
        uid=_string(meta.get("uid"), "metadata.uid"),
        namespace=_string(meta.get("namespace"), "metadata.namespace"),
        name=_string(meta.get("name"), "metadata.name"),
        node_name=node_name,
        nominated_node=_string(status.get("nominatedNodeName"), "status.nominatedNodeName"),
        requests={**gpus, **compute},
        terminal=terminal,
        placement=parse_placement(spec),
        reservation_id=annotations.get(contract.ANNOTATION_RESERVATION, ""),
        admission=annotations.get(contract.ANNOTATION_ADMISSION, ""),
        scheduler_name=_string(spec.get("schedulerName"), "spec.schedulerName") or DEFAULT_SCHEDULER,
        gated=bool(_sequence(spec.get("schedulingGates"), "spec.schedulingGates")),
        blocked_elsewhere=_blocked_elsewhere(status, gpu_resources),
    )
    return _with_gang(pod, meta, annotations, succeeded=_succeeded(status))


def _succeeded(status: Mapping[str, Any]) -> bool:
    return status.get("phase") == "Succeeded"


def _with_gang(pod: PodInfo, meta: Mapping[str, Any], annotations: Mapping[str, str], *, succeeded: bool) -> PodInfo:
    """A gang pod's record gets its gang, rank, decision and deletion (see webhook.gangs); any other
    pod's stays as small as before. A rank we cannot read is -1: the pod still tells the gang's decision."""
    gang = annotations.get(contract.ANNOTATION_GANG, "")
    if not gang:
        return pod
    rank_text = annotations.get(contract.ANNOTATION_GANG_RANK, "")
    rank = int(rank_text) if rank_text.isascii() and rank_text.isdigit() and len(rank_text) < 10 else -1
    return PodInfo(
        uid=pod.uid,
        namespace=pod.namespace,
        name=pod.name,
        node_name=pod.node_name,
        nominated_node=pod.nominated_node,
        requests=pod.requests,
        terminal=pod.terminal,
        placement=pod.placement,
        reservation_id=pod.reservation_id,
        admission=pod.admission,
        scheduler_name=pod.scheduler_name,
        gated=pod.gated,
        blocked_elsewhere=pod.blocked_elsewhere,
        remote_gpus=pod.remote_gpus,
        remote_cost=pod.remote_cost,
        remote_worst_case=pod.remote_worst_case,
        job_uid=pod.job_uid,
        coming_home=pod.coming_home,
        gang=gang,
        gang_rank=rank,
        decision=annotations.get(contract.ANNOTATION_DECISION, ""),
        deleting=bool(meta.get("deletionTimestamp")),
        succeeded=succeeded,
        created=parse_time(meta.get("creationTimestamp")) or 0.0,
        waiting=contract.ANNOTATION_BURST_DEADLINE in annotations,
    )


def _is_gang_pod(meta: Mapping[str, Any]) -> bool:
    annotations = meta.get("annotations")
    return isinstance(annotations, dict) and bool(annotations.get(contract.ANNOTATION_GANG))


def _burst_pod(
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    remote_gpus: int,
    *,
    terminal: bool = False,
    succeeded: bool = False,
) -> PodInfo:
    """A burst pod: its namespace's budget counts it; bound and not finished, it also holds its
    runner's CPU and memory."""
    node_name = "" if terminal else _string(spec.get("nodeName"), "spec.nodeName")
    annotations = _string_map(meta.get("annotations"), "metadata.annotations")
    pod = PodInfo(
        uid=_string(meta.get("uid"), "metadata.uid"),
        namespace=_string(meta.get("namespace"), "metadata.namespace"),
        name=_string(meta.get("name"), "metadata.name"),
        node_name=sys.intern(node_name),
        nominated_node="",
        requests=pod_compute(spec) if node_name else {},
        terminal=terminal,
        placement=_NO_PLACEMENT,
        reservation_id=annotations.get(contract.ANNOTATION_RESERVATION, ""),
        admission=annotations.get(contract.ANNOTATION_ADMISSION, ""),
        remote_gpus=remote_gpus,
        remote_cost=_money(annotations.get(spending.ANNOTATION_COST_PER_HOUR)),
        remote_worst_case=_money(annotations.get(spending.ANNOTATION_WORST_CASE)),
        job_uid=waiting.controlling_job(meta),
        coming_home=_coming_home(meta, annotations),
    )
    return _with_gang(pod, meta, annotations, succeeded=succeeded)


def _coming_home(meta: Mapping[str, Any], annotations: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """The GPUs a burst pod the controller is evicting to bring it home ran remotely (from the audit of
    its original resources); () for any other pod."""
    if contract.ANNOTATION_COMING_HOME not in annotations or not meta.get("deletionTimestamp"):
        return ()
    try:
        audit = json.loads(annotations.get(contract.ANNOTATION_ORIGINAL_RESOURCES, "{}"))
    except ValueError:
        return ()
    gpus = audit.get("gpus") if isinstance(audit, dict) else None
    if not isinstance(gpus, dict):
        return ()
    return tuple(sorted((str(r), n) for r, n in gpus.items() if type(n) is int and n > 0))


def _money(value: str | None) -> float:
    """A burst pod's cost annotation (written by the webhook; 0 when absent or unreadable)."""
    if value is None:
        return 0.0
    parsed = spendrecord.parse_cost_cap(value)
    return parsed.limit if parsed.invalid is None else 0.0


def parse_namespace(raw: Mapping[str, Any]) -> NamespaceInfo:
    """A watched namespace: its name, UID and burst budget (None: no `max-remote-gpus` annotation)."""
    meta = _mapping(raw.get("metadata"), "metadata")
    name = _string(meta.get("name"), "metadata.name")
    if not name:
        raise ObjectError("metadata.name is missing")
    uid = _string(meta.get("uid"), "metadata.uid")
    annotations = _mapping(meta.get("annotations"), "metadata.annotations")
    value = annotations.get(gpubudget.ANNOTATION_MAX_REMOTE_GPUS)
    ns_budget = None if value is None else gpubudget.parse_budget(value if isinstance(value, str) else repr(value))
    default_walltime = annotations.get(walltime.ANNOTATION_DEFAULT_WALLTIME)
    if default_walltime is not None and not isinstance(default_walltime, str):
        default_walltime = repr(default_walltime)  # kept to be named in the warning, as a budget is
    caps = spending.parse_caps({k: v if isinstance(v, str) else repr(v) for k, v in annotations.items()})
    app = annotations.get(contract.ANNOTATION_JARVICE_APP)
    burst_after = annotations.get(contract.ANNOTATION_BURST_AFTER)
    if burst_after is not None and not isinstance(burst_after, str):
        burst_after = repr(burst_after)  # kept to be named in the pod's note, as a budget is
    machines = NamespaceMachines(
        machines=_annotation_text(annotations.get(contract.ANNOTATION_MACHINES)),
        max_remote_queue=_annotation_text(annotations.get(contract.ANNOTATION_MAX_REMOTE_QUEUE)),
    )
    return NamespaceInfo(
        name=name,
        uid=uid,
        budget=ns_budget,
        default_walltime=default_walltime,
        cost_caps=caps,
        app=app.strip() if isinstance(app, str) else "",
        burst_after=burst_after,
        machines=None if machines == NamespaceMachines() else machines,
        own_account=annotations.get(contract.ANNOTATION_JARVICE_ACCOUNT) == contract.JARVICE_ACCOUNT_OWN,
    )


def _annotation_text(value: object) -> str | None:
    """An annotation as written; a value that is no string kept as its repr, to be named in a warning."""
    if value is None or isinstance(value, str):
        return value
    return repr(value)


def _node_ready(status: Mapping[str, Any]) -> bool:
    for raw in _sequence(status.get("conditions"), "status.conditions"):
        condition = _element(raw, "status.conditions[]")
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def parse_node(raw: Mapping[str, Any], gpu_resources: Sequence[str]) -> NodeInfo:
    meta = _mapping(raw.get("metadata"), "metadata")
    spec = _mapping(raw.get("spec"), "spec")
    status = _mapping(raw.get("status"), "status")
    allocatable_raw = _mapping(status.get("allocatable"), "status.allocatable")
    allocatable: dict[str, int] = {}
    for resource, value in allocatable_raw.items():
        try:
            if resource in gpu_resources:
                count = parse_device_count(value)
                if count > 0:  # a GPU resource at zero is not advertised
                    allocatable[resource] = count
            else:
                # Every resource a pod may request: NodeResourcesFit checks each one the pod names.
                scale = 1000 if resource == CPU_MILLI else 1
                allocatable[sys.intern(str(resource))] = math.ceil(parse_quantity(value) * scale)
        except QuantityError as exc:
            raise ObjectError(f"status.allocatable[{resource}]: {exc}") from exc
    taints = []
    not_ready_tainted = False
    for i, taint_raw in enumerate(_sequence(spec.get("taints"), "spec.taints")):
        item = _element(taint_raw, f"spec.taints[{i}]")
        effect = _string(item.get("effect"), f"spec.taints[{i}].effect")
        key = _string(item.get("key"), f"spec.taints[{i}].key")
        not_ready_tainted |= key in NOT_READY_TAINTS
        if effect in FILTERING_EFFECTS:
            taints.append(Taint(key=key, value=_string(item.get("value"), "value"), effect=effect))
    return NodeInfo(
        name=_string(meta.get("name"), "metadata.name"),
        labels=_string_map(meta.get("labels"), "metadata.labels"),
        taints=tuple(taints),
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=_node_ready(status) and not not_ready_tainted,
        allocatable=allocatable,
    )
