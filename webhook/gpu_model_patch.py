"""JSONPatch ops that take a burst pod's GPU model constraint off its required node affinity (pure).

On burst the model becomes the remote machine choice (webhook.gpu_models); the runner itself runs
on any node, so a requirement on the model label would leave it Pending forever. The nodeSelector
key is removed by mutation.build_remote_patch with the other stripped selector keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_REQUIRED_PATH = f"/spec/affinity/nodeAffinity/{_REQUIRED}"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def build_affinity_ops(spec: Mapping[str, Any], *, label: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(ops, the required node affinity as it was) when a required term names `label`; ([], None)
    otherwise. Every expression on `label` leaves its term. A term left with nothing at all matched
    only on the model, so now matches every node, and so does the whole requirement (terms are
    ORed): it is removed, and with it a nodeAffinity or affinity left empty. Otherwise the terms
    are replaced by what is left of them (other keys, matchFields and empty terms as they were)."""
    affinity = _mapping(spec.get("affinity"))
    node_affinity = _mapping(affinity.get("nodeAffinity"))
    required = _mapping(node_affinity.get(_REQUIRED))
    terms = [_mapping(term) for term in required.get("nodeSelectorTerms") or ()]
    if not any(_mapping(e).get("key") == label for term in terms for e in term.get("matchExpressions") or ()):
        return [], None
    kept_terms: list[dict[str, Any]] = []
    matches_every_node = False
    for term in terms:
        expressions = list(term.get("matchExpressions") or ())
        kept = [e for e in expressions if _mapping(e).get("key") != label]
        if len(kept) < len(expressions) and not kept and not term.get("matchFields"):
            matches_every_node = True
        new_term = {k: v for k, v in term.items() if k != "matchExpressions"}
        if kept:
            new_term["matchExpressions"] = kept
        kept_terms.append(new_term)
    if not matches_every_node:
        return [{"op": "replace", "path": f"{_REQUIRED_PATH}/nodeSelectorTerms", "value": kept_terms}], dict(required)
    if len(node_affinity) > 1:
        path = _REQUIRED_PATH
    elif len(affinity) > 1:
        path = "/spec/affinity/nodeAffinity"
    else:
        path = "/spec/affinity"
    return [{"op": "remove", "path": path}], dict(required)
