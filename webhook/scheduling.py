"""The filters that decide whether a node may host a pod at all, resources aside (pure).

kube-scheduler's TaintToleration (NoSchedule, NoExecute), NodeAffinity (nodeSelector and required
node affinity, including matchFields on metadata.name), NodeName and NodeUnschedulable, plus
readiness (the not-ready/unreachable taints, see model.NOT_READY_TAINTS). A pod created with
spec.nodeName never meets the scheduler: the kubelet admits it, checking node affinity, resources
and NoExecute taints only, and it runs on a cordoned node. Scoring is not modelled: the question
is "can any node take it", not "which node is best". Resources are checked by the fit search
(webhook.fitting), which reads a pod's rules as an Eligibility built here once per pod: it never
calls back into this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MethodType

from webhook.types import Eligibility, NodeInfo, Placement, SelectorRequirement, SelectorTerm, Taint, Toleration

FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# The taint NodeUnschedulable checks a cordoned node against (v1.TaintNodeUnschedulable).
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", value="", effect="NoSchedule")


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """corev1 Toleration.ToleratesTaint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    # Equal (the default). An empty key with Equal is invalid in the API, so it never matches.
    return bool(toleration.key) and toleration.value == taint.value


def taints_tolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> bool:
    # Plain loops, not all(any(...)): this runs for every candidate node of every decision, and the
    # two generators cost more than the comparisons (issue 15).
    for taint in taints:
        for toleration in tolerations:
            if tolerates(toleration, taint):
                break
        else:
            return False
    return True


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(requirement: SelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = requirement.key in labels
    value = labels.get(requirement.key, "")
    match requirement.operator:
        case "In":
            return present and value in requirement.values
        case "NotIn":
            return not present or value not in requirement.values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt":
            if not present or len(requirement.values) != 1:
                return False
            left, right = _int_or_none(value), _int_or_none(requirement.values[0])
            if left is None or right is None:
                return False
            return left > right if requirement.operator == "Gt" else left < right
        case _:
            return False  # an unknown operator matches nothing, as in the scheduler


def term_matches(term: SelectorTerm, node: NodeInfo) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # an empty term matches no objects (API semantics)
    fields = {"metadata.name": node.name}
    return all(requirement_matches(r, node.labels) for r in term.match_expressions) and all(
        requirement_matches(r, fields) for r in term.match_fields
    )


def affinity_allows(placement: Placement, node: NodeInfo) -> bool:
    """nodeSelector and required node affinity (NodeAffinity filter; the kubelet checks it too)."""
    labels = node.labels
    for key, value in placement.node_selector.items():
        if labels.get(key) != value:
            return False
    return placement.required_terms is None or any(term_matches(term, node) for term in placement.required_terms)


def tolerates_unschedulable(placement: Placement) -> bool:
    """NodeUnschedulable lets a pod onto a cordoned node if it tolerates this one taint."""
    return any(tolerates(t, UNSCHEDULABLE_TAINT) for t in placement.tolerations)


def placement_allows(placement: Placement, node: NodeInfo) -> bool:
    """Every filter but resources: may this pod run on this node?"""
    if not node.ready:
        return False
    if placement.node_name:
        # Bound at creation: the kubelet admits it (no cordon check; only NoExecute taints evict).
        if node.name != placement.node_name or not affinity_allows(placement, node):
            return False
        no_execute = tuple(taint for taint in node.taints if taint.effect == "NoExecute")
        return taints_tolerated(no_execute, placement.tolerations)
    if node.unschedulable and not tolerates_unschedulable(placement):
        return False
    return affinity_allows(placement, node) and taints_tolerated(node.taints, placement.tolerations)


def eligibility(placement: Placement) -> Eligibility:
    """The pod's placement rules, applied once: the per-node filter and whether cordoned nodes may
    host it, for the fit search (webhook.fitting) to ask. Each is a rule bound to the placement as a
    method: the interpreter calls it as directly as the function (a functools.partial would cost a
    C-level call per node checked)."""
    return Eligibility(
        placement, MethodType(placement_allows, placement), MethodType(tolerates_unschedulable, placement)
    )
