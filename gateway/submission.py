"""A pod's submit, made to be exactly what the product decided for it (pure).

The runner builds its submit body from its environment, which is the pod's to write. The gateway
keeps what is the pod's own (the command, its parameters, the vault it stages through) and puts in
what the product decided: the nodes (1, or the gang's size), a machine within what the namespace's
budget and caps counted (the asked one when it is, else the cheapest that is), the walltime (never
longer than decided), the application. A submit that cannot be made so is refused with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.terms import ContainerTerms
from jarvice import contract
from jarvice.model import Machine


class SubmitNotAllowed(Exception):
    """The submit cannot be made within the pod's terms; the message says why."""


@dataclass(frozen=True, slots=True)
class Catalogue:
    """/jarvice/machines (a machine without mc_price has no price: never read as 0)."""

    machines: Mapping[str, Machine]

    def price(self, machine: Machine) -> float | None:
        return machine.price


@dataclass(frozen=True, slots=True)
class AdmittedSubmit:
    body: dict[str, Any]  # without the `user` block: the account's is added when it is sent
    label: str
    machine: str
    nodes: int
    gpus: int
    cost_per_hour: float | None  # None: the machine gives no price
    worst_case: float | None
    changes: tuple[str, ...]  # what was changed from what the pod asked, for its log and the gateway's


def format_walltime(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def _counted(terms: ContainerTerms) -> int:
    if terms.counted_gpus is not None:
        return terms.counted_gpus
    return terms.gpus_per_node * terms.nodes


def within_terms(machine: Machine, terms: ContainerTerms, catalogue: Catalogue) -> bool:
    nodes = terms.nodes
    price = catalogue.price(machine)
    return (
        (not terms.allowed_machines or machine.name in terms.allowed_machines)
        and machine.scale_min <= nodes <= machine.scale_max
        and machine.fewest_gpus_per_node(nodes) >= terms.gpus_per_node
        and machine.gpus_on(nodes) <= _counted(terms)
        and (terms.max_price is None or (price is not None and price <= terms.max_price))
    )


def _cheapest_within(terms: ContainerTerms, catalogue: Catalogue) -> Machine | None:
    fitting = [m for m in catalogue.machines.values() if within_terms(m, terms, catalogue)]
    if not fitting:
        return None
    # A machine without a price is never taken for a cheap one: it comes after every priced machine.
    return min(fitting, key=lambda m: (m.price is None, (m.price or 0.0) * terms.nodes, m.gpus, m.cores, m.name))


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SubmitNotAllowed(f"the submit body's {what} must be an object")
    return value


def _label(body: Mapping[str, Any], terms: ContainerTerms) -> str:
    label = body.get("job_label")
    if not isinstance(label, str) or not terms.owns_label(label):
        raise SubmitNotAllowed(
            f"job_label {label!r} is not a label of this pod's container {terms.container!r} in this cluster"
        )
    if terms.gang is not None and terms.gang.rank != contract.GANG_SUBMITTING_RANK:
        raise SubmitNotAllowed(f"rank {terms.gang.rank} of a gang follows rank 0's job: it submits none")
    return label


def admit_submit(body: Mapping[str, Any], terms: ContainerTerms, catalogue: Catalogue) -> AdmittedSubmit:
    """The body to send for the pod, or SubmitNotAllowed."""
    sent = {k: v for k, v in _object(body, "top level").items() if k != "user"}
    label = _label(sent, terms)
    changes: list[str] = []
    machine_body = dict(_object(sent.get("machine"), "machine"))
    asked_nodes = machine_body.get("nodes")
    if asked_nodes != terms.nodes:
        changes.append(f"nodes {asked_nodes!r} -> {terms.nodes} (what was counted)")
    asked = machine_body.get("type")
    machine = catalogue.machines.get(asked) if isinstance(asked, str) else None
    if machine is None or not within_terms(machine, terms, catalogue):
        machine = _cheapest_within(terms, catalogue)
        if machine is None:
            raise SubmitNotAllowed(
                f"no JARVICE machine is within what was counted for this pod ({_counted(terms)} GPU(s) on "
                f"{terms.nodes} node(s), {terms.gpus_per_node} per node"
                + (
                    f", at most {terms.max_price:g} per node-hour with a known price"
                    if terms.max_price is not None
                    else ""
                )
                + (f", one of {', '.join(terms.allowed_machines)}" if terms.allowed_machines else "")
                + ")"
            )
        changes.append(f"machine {asked!r} -> {machine.name!r} (the cheapest within what was counted)")
    sent["machine"] = {**machine_body, "type": machine.name, "nodes": terms.nodes}
    application = dict(_object(sent.get("application"), "application"))
    asked_walltime = application.get("walltime")
    asked_seconds = contract.parse_walltime_seconds(asked_walltime) if isinstance(asked_walltime, str) else None
    seconds = terms.walltime_seconds if asked_seconds is None else min(asked_seconds, terms.walltime_seconds)
    if asked_seconds != seconds:
        changes.append(f"walltime {asked_walltime!r} -> {format_walltime(seconds)} (what was decided)")
    application["walltime"] = format_walltime(seconds)
    sent["application"] = application
    if terms.app and sent.get("app") != terms.app:
        changes.append(f"app {sent.get('app')!r} -> {terms.app!r} (the pod's application)")
        sent["app"] = terms.app
    price = catalogue.price(machine)
    cost = None if price is None else price * terms.nodes
    return AdmittedSubmit(
        body=sent,
        label=label,
        machine=machine.name,
        nodes=terms.nodes,
        gpus=machine.gpus_on(terms.nodes),
        cost_per_hour=cost,
        worst_case=None if cost is None else cost * math.ceil(seconds) / 3600,
        changes=tuple(changes),
    )
