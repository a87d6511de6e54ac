"""The GPU model a pod asks for, and the JARVICE machines that offer it (pure).

A pod constrains the model with `nodeSelector` or required node affinity on one node label
(`nvidia.com/gpu.product`, what NVIDIA GPU feature discovery sets; `--gpu-model-label`). The
mapping (`--gpu-models-file`, a ConfigMap) says which JARVICE machine types carry each model. A
machine of the mapping is read as a node labelled with its model, and the pod's constraint on
the label is evaluated against it the way the scheduler evaluates a node: the machines it
allows are the remote choice; none, and the pod is not burst. See docs/gpu-models.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from jarvice import contract
from webhook.scheduling import requirement_matches
from webhook.types import Placement, SelectorRequirement

# What NVIDIA GPU feature discovery labels a node with (e.g. NVIDIA-A100-SXM4-80GB).
DEFAULT_MODEL_LABEL = "nvidia.com/gpu.product"
# A label value (Kubernetes validation): what the mapping's keys must be to ever match a node.
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
MAX_LABEL_VALUE = 63
# How many known models a refusal names (a mapping of a large fleet would swamp the message).
_SHOWN_MODELS = 6
EXAMPLE = "NVIDIA-A100-SXM4-80GB: [ng4a, ng8]"


class ModelMapError(ValueError):
    """The mapping cannot be used; every problem, each saying what to fix."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True, slots=True)
class ModelMap:
    """GPU model (a value of the model label) -> the JARVICE machine types that carry it."""

    machines: Mapping[str, tuple[str, ...]]


def parse_model_map(document: object, *, source: str) -> ModelMap:
    """The mapping from its decoded document (YAML or JSON): a map of model -> list of machine types.
    A machine is listed under one model only (a machine has one GPU). Raises ModelMapError."""
    if not isinstance(document, dict):
        raise ModelMapError(
            [f"{source}: must be a map of GPU model -> list of JARVICE machine types, e.g. {EXAMPLE!r} ({{}} for none)"]
        )
    problems: list[str] = []
    owner: dict[str, str] = {}
    machines: dict[str, tuple[str, ...]] = {}
    for model, listed in document.items():
        if not isinstance(model, str) or len(model) > MAX_LABEL_VALUE or not model or not _LABEL_VALUE.match(model):
            problems.append(
                f"{source}: {model!r} is not a label value (at most {MAX_LABEL_VALUE} letters, digits, '-', '_', '.',"
                " as GPU feature discovery writes it, e.g. NVIDIA-A100-SXM4-80GB; quote it if YAML reads a number)"
            )
            continue
        if not isinstance(listed, list) or not listed:
            problems.append(f"{source}: {model}: give a non-empty list of JARVICE machine types, e.g. [ng4a, ng8]")
            continue
        names: list[str] = []
        for name in listed:
            if not isinstance(name, str) or not contract.is_machine_name(name):
                problems.append(
                    f"{source}: {model}: {name!r} is not a JARVICE machine type (as /jarvice/machines names it)"
                )
            elif owner.setdefault(name, model) != model:
                problems.append(
                    f"{source}: machine {name} is listed under {owner[name]} and {model}: a machine has one model"
                )
            elif name not in names:
                names.append(name)
        machines[model] = tuple(sorted(names))
    if problems:
        raise ModelMapError(problems)
    return ModelMap(machines=machines)


@dataclass(frozen=True, slots=True)
class ModelConstraint:
    """What a pod says about the model label."""

    label: str
    selected: str | None  # nodeSelector[label]; None when the selector does not name it
    # Required node affinity: per term (terms are ORed; empty terms, which match nothing, left out),
    # its requirements on the label, ANDed; () for a term that leaves the model free. None: no term
    # names the label.
    terms: tuple[tuple[SelectorRequirement, ...], ...] | None


def parse_constraint(placement: Placement, *, label: str) -> ModelConstraint | None:
    """The pod's constraint on `label`, or None when neither its nodeSelector nor a required
    affinity term names it (any model will do)."""
    selected = placement.node_selector.get(label)
    terms: tuple[tuple[SelectorRequirement, ...], ...] | None = None
    required = placement.required_terms or ()
    if any(r.key == label for term in required for r in term.match_expressions):
        terms = tuple(
            tuple(r for r in term.match_expressions if r.key == label)
            for term in required
            if term.match_expressions or term.match_fields
        )
    if selected is None and terms is None:
        return None
    return ModelConstraint(label=label, selected=selected, terms=terms)


def _describe_requirement(requirement: SelectorRequirement) -> str:
    if requirement.operator in ("Exists", "DoesNotExist"):
        return f"{requirement.key} {requirement.operator}"
    return f"{requirement.key} {requirement.operator} ({', '.join(requirement.values)})"


def describe_constraint(constraint: ModelConstraint) -> str:
    """For annotations and reasons, e.g. 'nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB' or
    'nvidia.com/gpu.product In (Tesla-T4, Tesla-V100-SXM2-16GB)'."""
    parts = []
    if constraint.selected is not None:
        parts.append(f"{constraint.label}={constraint.selected}")
    if constraint.terms is not None:
        terms = [" and ".join(_describe_requirement(r) for r in term) or "any model" for term in constraint.terms]
        parts.append(" or ".join(terms) if terms else "no model (empty node affinity)")
    return "; ".join(parts)


def allows(constraint: ModelConstraint, model: str) -> bool:
    """Would a node labelled `label=model` satisfy the pod's constraint on the label?"""
    if constraint.selected is not None and constraint.selected != model:
        return False
    if constraint.terms is None:
        return True
    labels = {constraint.label: model}
    return any(all(requirement_matches(r, labels) for r in term) for term in constraint.terms)


@dataclass(frozen=True, slots=True)
class AllowedMachines:
    machines: tuple[str, ...]  # sorted
    models: tuple[str, ...]  # the models of the mapping the constraint allows, sorted


@dataclass(frozen=True, slots=True)
class NoMachineOffers:
    reason: str  # why the pod is not burst, for its annotations and the admission warning


def resolve(constraint: ModelConstraint, models: ModelMap | None) -> AllowedMachines | NoMachineOffers:
    """The machine types the constraint allows (a machine outside the mapping has no known model,
    so it is never allowed), or why none is. `models` None: no mapping configured."""
    wanted = describe_constraint(constraint)
    if models is None:
        return NoMachineOffers(
            f"it selects GPU model {wanted}, and no GPU model mapping is configured (--gpu-models-file)"
        )
    allowed = sorted(model for model in models.machines if allows(constraint, model))
    machines = sorted({name for model in allowed for name in models.machines[model]})
    if not machines:
        known = sorted(models.machines)
        shown = ", ".join(known[:_SHOWN_MODELS]) + (
            f" and {len(known) - _SHOWN_MODELS} more" if len(known) > _SHOWN_MODELS else ""
        )
        return NoMachineOffers(f"no JARVICE machine offers {wanted} (GPU models mapped: {shown or 'none'})")
    return AllowedMachines(machines=tuple(machines), models=tuple(allowed))
