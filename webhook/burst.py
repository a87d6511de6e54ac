"""A burst's terms (pure): what a pod that would burst runs with on JARVICE, or why it may not burst.

The decision's third step (webhook.decision.decide), the same for a pod alone and a gang's pod: the
cluster's identity (on every job it submits; none known, no burst), the machines its GPU model
allows (webhook.gpu_models; none offers it, no burst), the data its containers stage
(webhook.data_volumes; data that cannot follow it, no burst) and its time limit (webhook.walltime).
A pod decided remote before (a reinvocation) is given its cluster and time limit again, nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from jarvice import contract
from webhook import data_volumes, gpu_models, rewrite_terms, spending, walltime
from webhook import machine_terms as machine_terms_of
from webhook.gangs import GangTerms
from webhook.types import GpuCounts, PodNeeds, Snapshot


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class BurstAsk:
    """What of the pod a burst must honour beyond its GPUs: its data (volumes, staging annotations)
    and its GPU model (the policy's model label and map name the machines that have it)."""

    spec: Final[Mapping[str, Any]]
    annotations: Final[Mapping[str, Any]]
    policy: Final[rewrite_terms.RewritePolicy]
    bursting: Final[tuple[str, ...]]  # the app containers that would burst (resources.burst_container_names)
    data_key: Final[str]  # whose staged data it is (data_volumes.data_key): "" for the pod's own

    def __init__(
        self,
        spec: Mapping[str, Any],
        annotations: Mapping[str, Any],
        policy: rewrite_terms.RewritePolicy,
        bursting: tuple[str, ...],
        data_key: str = "",
    ) -> None:
        self.spec = spec
        self.annotations = annotations
        self.policy = policy
        self.bursting = bursting
        self.data_key = data_key


@dataclass(init=False, unsafe_hash=True, slots=True)
class Terms:
    burst: Final[rewrite_terms.BurstTerms]
    limit_warning: Final[str]  # why the namespace's default walltime was not used ("": it was, or none)
    remote_gpus: Final[int]  # what the burst counts against its namespace's budget (see remote_gpus)

    def __init__(self, burst: rewrite_terms.BurstTerms, limit_warning: str, remote_gpus: int) -> None:
        self.burst = burst
        self.limit_warning = limit_warning
        self.remote_gpus = remote_gpus


@dataclass(frozen=True, slots=True)
class NotBurst:
    """Why the pod may not burst whatever it needs (not its doing but the cluster's, or its data's)."""

    reason: str
    notes: Mapping[str, str]  # annotations beside the decision and reason
    warnings: tuple[str, ...] = ()  # what kubectl shows ((): one naming the reason)


def with_price(terms: Terms, price: spending.Price) -> Terms:
    """The terms of a priced burst: the runner's price ceiling, and its job's cost (a gang's: the whole
    job's, counted on the rank that submits it, as its GPUs are: webhook.verdict, webhook.mutation)."""
    burst = terms.burst
    # Built, not dataclasses.replace(): the module is compiled with mypyc.
    priced = rewrite_terms.BurstTerms(
        cluster=burst.cluster,
        limit=burst.limit,
        reinvoked=burst.reinvoked,
        gang=burst.gang,
        staging=burst.staging,
        gpu_model=burst.gpu_model,
        allowed_machines=burst.allowed_machines,
        max_price=price.per_node_hour,
        cost_per_hour=price.per_hour,
        worst_case=price.worst_case,
        app=burst.app,
        machine_order=burst.machine_order,
        max_remote_queue=burst.max_remote_queue,
        warnings=burst.warnings,
        data_key=burst.data_key,
        own_account=burst.own_account,
    )
    return Terms(priced, terms.limit_warning, terms.remote_gpus)


def remote_gpus(gpus: GpuCounts) -> int:
    """What a burst pod counts against its namespace's budget: its effective GPU request (the one the
    decision used), summed over GPU resources. Never less than what its JARVICE jobs use."""
    return sum(gpus.values())


def settle(
    needs: PodNeeds,
    snapshot: Snapshot,
    *,
    pod: BurstAsk | None,
    gang: GangTerms | None,
    active_deadline: int | None,
    default_walltime_seconds: int,
    reinvoked: bool,
) -> Terms | NotBurst:
    """The burst's terms. `pod`: what a burst must honour besides GPUs (None: no data to stage, no GPU
    model); `gang`: a gang's pod's terms (its runner is one rank of one multi-node job; a reinvoked
    pod's as it carries them); `active_deadline`: its spec.activeDeadlineSeconds (see
    walltime.decide_walltime); `default_walltime_seconds`: the webhook's --default-walltime."""
    model: gpu_models.ModelConstraint | None = None
    machines: gpu_models.AllowedMachines | gpu_models.NoMachineOffers | None = None
    staging: tuple[tuple[str, str, str], ...] = ()
    data_key = ""
    machine_terms = machine_terms_of.MachineTerms((), "", ())
    if not reinvoked and pod is not None:
        if gang is not None and len(pod.bursting) > 1:
            count = len(pod.bursting)
            return NotBurst(
                f"a gang's pod bursts as one rank of one job, and this one has {count} containers with GPUs", {}
            )
        model = gpu_models.parse_constraint(needs.placement, label=pod.policy.gpu_model_label)
        machines = gpu_models.resolve(model, pod.policy.gpu_model_map) if model is not None else None
        if isinstance(machines, gpu_models.NoMachineOffers):
            # Bursting would run it on a GPU it did not ask for: it waits here for a node with its model.
            return NotBurst(machines.reason, {contract.ANNOTATION_GPU_MODEL: machines.reason})
    if snapshot.cluster_unknown and not reinvoked:
        return NotBurst(snapshot.cluster_unknown, {})
    if not reinvoked and pod is not None:
        data = data_volumes.plan_data(pod.spec, pod.annotations, burst_containers=pod.bursting)
        if isinstance(data, data_volumes.DataRefusal):
            notes = {contract.ANNOTATION_DATA_NOT_STAGED: data.volumes} if data.volumes else {}
            return NotBurst(data.reason, notes, tuple(data.warnings))
        staging = tuple((c.container, c.env_value("in"), c.env_value("out")) for c in data.staging)
        data_key = pod.data_key if staging else ""
        machine_terms = machine_terms_of.decide_machine_terms(
            pod.annotations, snapshot.namespace_machines, namespace_name=needs.namespace
        )
    limit, limit_warning = walltime.decide_walltime(
        active_deadline,
        namespace=needs.namespace,
        namespace_default=snapshot.default_walltime,
        webhook_default=default_walltime_seconds,
    )
    terms = rewrite_terms.BurstTerms(
        cluster=snapshot.cluster,
        limit=limit,
        gang=gang,
        staging=staging,
        data_key=data_key,
        gpu_model=gpu_models.describe_constraint(model) if model is not None else "",
        allowed_machines=machines.machines if isinstance(machines, gpu_models.AllowedMachines) else (),
        app=snapshot.app or (pod.policy.default_app if pod is not None else ""),
        machine_order=machine_terms.order,
        max_remote_queue=machine_terms.max_remote_queue,
        warnings=machine_terms.warnings,
        own_account=snapshot.own_account,
    )
    return Terms(terms, limit_warning, remote_gpus(needs.gpus))
