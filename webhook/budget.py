"""A namespace's burst budget: how many GPUs its pods may run on JARVICE at once (pure).

The annotations and how they read are jarvice.gpubudget's (the kubectl plugin reads them too).

Set on the namespace: `nimbix-burst.io/max-remote-gpus: "4"`. A pod that would burst past it stays
local (or is denied, with --over-budget=deny). GPUs in use are counted by the cache from the burst
pods it watches (their `nimbix-burst.io/remote-gpus` annotation; a finished pod until its jobs are
known to be gone) plus remote decisions whose pod has not appeared yet (reservations), so concurrent
admissions cannot overshoot it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from jarvice.gpubudget import ANNOTATION_MAX_REMOTE_GPUS, NamespaceBudget

OverBudget = Literal["local", "deny"]
OVER_BUDGET_ACTIONS: Final = ("local", "deny")


def over_budget(budget: NamespaceBudget | None, *, namespace: str, in_use: int, need: int) -> str:
    """Why bursting `need` more GPUs would break the namespace's budget ("" when it would not, or
    the namespace has none). `in_use`: burst GPUs of its running pods plus outstanding remote
    reservations."""
    if budget is None:
        return ""
    if budget.invalid is not None:
        shown = budget.invalid if len(budget.invalid) <= 20 else budget.invalid[:17] + "..."
        return (
            f"{ANNOTATION_MAX_REMOTE_GPUS} of namespace {namespace} is {shown!r}, not a whole number >= 0 "
            f"(treated as 0); this pod needs {need}"
        )
    if in_use + need <= budget.limit:
        return ""
    return f"{in_use} of {budget.limit} remote GPUs in use in namespace {namespace}; this pod needs {need}"


@dataclass(frozen=True, slots=True)
class BudgetRefusal:
    reason: str  # the budget that stops the burst
    may_deny: bool  # False when it is not the user's doing (a failover): the pod is never refused for it


def check(
    budget: NamespaceBudget | None, *, namespace: str, in_use: int, need: int, gang_size: int, local_refusal: str
) -> BudgetRefusal | None:
    """Whether a burst of `need` GPUs may start now (None: it may): `need` is a pod's GPUs, or a
    gang's first pod's whole gang's (`gang_size` pods; 0 for a pod alone). `local_refusal`: why no
    local promise may be made now (no leader among the replicas): only the leader counts remote
    reservations, so a namespace with a budget cannot burst then."""
    refusal = over_budget(budget, namespace=namespace, in_use=in_use, need=need)
    if refusal:
        whole = f" (the whole gang of {gang_size} pods)" if gang_size else ""
        return BudgetRefusal(refusal + whole, may_deny=True)
    if local_refusal and budget is not None:
        reason = f"{local_refusal}, so no burst can be counted against the budget of namespace {namespace}"
        return BudgetRefusal(reason, may_deny=False)
    return None
