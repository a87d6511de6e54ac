"""The kube-scheduler filters that decide whether a node may host a pod at all (pure).

Only the filters that matter for GPU placement: taints/tolerations (NoSchedule, NoExecute),
nodeSelector, required node affinity, readiness and cordoning. Scoring is not modelled: the
question here is "can any node take it", not "which node is best".
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.types import NodeInfo, Placement, SelectorRequirement, SelectorTerm, Taint, Toleration

FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


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
    return all(any(tolerates(t, taint) for t in tolerations) for taint in taints)


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


def placement_allows(placement: Placement, node: NodeInfo) -> bool:
    """nodeSelector, required node affinity and taints: everything pod-specific."""
    labels = node.labels
    for key, value in placement.node_selector.items():
        if labels.get(key) != value:
            return False
    if placement.required_terms is not None and not any(term_matches(term, node) for term in placement.required_terms):
        return False
    return taints_tolerated(node.taints, placement.tolerations)
