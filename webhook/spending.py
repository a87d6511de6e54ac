"""Caps in money, and what JARVICE holds (pure).

A namespace may cap what its bursts cost, in the account's price unit:
- `nimbix-burst.io/max-cost-per-hour`: the sum of `mc_price` x nodes over its live jobs;
- `nimbix-burst.io/max-cost-per-month`: the cost recorded this calendar month (UTC) plus the worst
  case of every live job (price x nodes x its walltime: what it may cost in all).
A burst that would pass either stays local with a reason that names the cap and the figures (the
same path as the GPU budget: `--over-budget=deny` refuses it).

What is spent is counted from two records users cannot write:
- the webhook's own: every burst it decided carries, in annotations only the add-on may change
  (deploy/pod-marks-policy.yaml), the GPUs, the price per hour and the worst case it was counted for;
  decisions whose pod has not appeared yet are reservations;
- the controller's spend record (the ConfigMap `nimbix-burst-spend` in the add-on's namespace): what
  JARVICE's live job list says each pod's jobs hold, and the month's recorded cost. A job that runs
  is counted whatever its pod says, and after its pod is gone, until JARVICE says it ended.
Per pod, the larger of the two counts; a pod only JARVICE knows of counts as JARVICE says.

A burst is priced before it runs: the runner picks the smallest machine with enough GPUs (the
machines the pod's GPU model allows), so the pod is counted at the dearest machine of that size, and
the runner is told that price as a ceiling (`NIMBIX_BURST_MAX_PRICE`): it never submits to a
machine that costs more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from kubeplumbing import spendrecord
from kubeplumbing.spendrecord import MachineRate, NamespaceSpend

ANNOTATION_MAX_COST_PER_HOUR: Final = spendrecord.ANNOTATION_MAX_COST_PER_HOUR  # on the namespace
ANNOTATION_MAX_COST_PER_MONTH: Final = spendrecord.ANNOTATION_MAX_COST_PER_MONTH  # on the namespace
ANNOTATION_COST_PER_HOUR: Final = "nimbix-burst.io/cost-per-hour"  # on a burst pod: what it is counted for
ANNOTATION_WORST_CASE: Final = "nimbix-burst.io/worst-case-cost"  # on a burst pod: price x nodes x walltime
# A record older than this cannot vouch for what runs now: a namespace with a cost cap does not
# burst until a fresh one comes (the controller writes it every round).
DEFAULT_MAX_RECORD_AGE_SECONDS: Final = 300.0


@dataclass(frozen=True, slots=True)
class CostCaps:
    """A namespace's caps; None: that cap is not set. An unreadable value counts as 0 (a typo must
    not lift a cap), and the refusal names it."""

    per_hour: float | None = None
    per_month: float | None = None
    invalid: tuple[str, ...] = ()  # what is wrong with each unreadable cap


def parse_caps(annotations: Mapping[str, str]) -> CostCaps | None:
    """The namespace's caps from its annotations; None when it sets neither."""
    caps: dict[str, float] = {}
    invalid: list[str] = []
    for key in (ANNOTATION_MAX_COST_PER_HOUR, ANNOTATION_MAX_COST_PER_MONTH):
        raw = annotations.get(key)
        if raw is None:
            continue
        cap = spendrecord.parse_cost_cap(raw)
        if cap.invalid is not None:
            shown = raw if len(raw) <= 20 else raw[:17] + "..."
            invalid.append(f"{key} is {shown!r}, not a number >= 0 (treated as 0)")
        caps[key] = cap.limit
    if not caps:
        return None
    return CostCaps(
        per_hour=caps.get(ANNOTATION_MAX_COST_PER_HOUR),
        per_month=caps.get(ANNOTATION_MAX_COST_PER_MONTH),
        invalid=tuple(invalid),
    )


# ----- pricing a burst -----------------------------------------------------------------------------


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class Price:
    """What a burst is counted for: `per_node_hour`, the ceiling the runner honours; the job's cost
    per hour (x nodes), and its worst case over its walltime."""

    per_node_hour: Final[float]
    per_hour: Final[float]
    worst_case: Final[float]
    machines: Final[tuple[str, ...]]  # the machines of that size and price or less

    def __init__(self, per_node_hour: float, per_hour: float, worst_case: float, machines: tuple[str, ...]) -> None:
        self.per_node_hour = per_node_hour
        self.per_hour = per_hour
        self.worst_case = worst_case
        self.machines = machines


def price_burst(
    machines: Mapping[str, MachineRate],
    *,
    gpus_per_node: int,
    nodes: int,
    walltime_seconds: int,
    allowed: Sequence[str] = (),
) -> Price | str:
    """The dearest machine of the smallest size with `gpus_per_node` GPUs (among `allowed`, when the
    pod's GPU model names machines), or why none is known (a string)."""
    offered = {n: r for n, r in machines.items() if r.gpus >= gpus_per_node and (not allowed or n in allowed)}
    if not offered:
        where = f" among {', '.join(allowed)}" if allowed else ""
        return f"no machine in the spend record offers {gpus_per_node} GPU(s) per node{where}"
    size = min(r.gpus for r in offered.values())
    same = {n: r for n, r in offered.items() if r.gpus == size}
    ceiling = max(r.price for r in same.values())
    per_hour = ceiling * nodes
    return Price(
        per_node_hour=ceiling,
        per_hour=per_hour,
        worst_case=per_hour * walltime_seconds / 3600.0,
        machines=tuple(sorted(same)),
    )


# ----- counting ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnBurst:
    """One burst pod as the webhook counted it (its annotations) — the record's pod may say more."""

    gpus: int
    cost_per_hour: float
    worst_case: float


@dataclass(init=False, unsafe_hash=True, slots=True)
class InUse:
    """What a namespace holds now: GPUs, cost per hour, the month's worst case."""

    gpus: Final[int]
    cost_per_hour: Final[float]
    month: Final[float]

    def __init__(self, gpus: int = 0, cost_per_hour: float = 0.0, month: float = 0.0) -> None:
        self.gpus = gpus
        self.cost_per_hour = cost_per_hour
        self.month = month


NOTHING_IN_USE: Final = InUse()


def reconcile(own: Mapping[str, OwnBurst], reserved: InUse, spend: NamespaceSpend | None) -> InUse:
    """The namespace's use: per pod the larger of what the webhook counted and what JARVICE holds
    (the record), pods only JARVICE knows of as it says, plus reservations (decisions whose pod has
    not appeared). The month: the record's recorded cost and live worst case, plus the worst case of
    every counted pod the record has no job for yet."""
    published = spend.pods if spend is not None else {}
    gpus, cost, pending_worst = reserved.gpus, reserved.cost_per_hour, reserved.month
    for uid, mine in own.items():
        theirs = published.get(uid)
        if theirs is None:
            gpus += mine.gpus
            cost += mine.cost_per_hour
            pending_worst += mine.worst_case
        else:
            gpus += max(mine.gpus, theirs.gpus)
            cost += max(mine.cost_per_hour, theirs.cost_per_hour)
    for uid, theirs in published.items():
        if uid not in own:
            gpus += theirs.gpus
            cost += theirs.cost_per_hour
    month = pending_worst + (spend.month_worst_case if spend is not None else 0.0)
    return InUse(gpus=gpus, cost_per_hour=cost, month=month)


def _money(value: float) -> str:
    return f"{value:.2f}"


def over_caps(caps: CostCaps, *, namespace: str, in_use: InUse, price: Price) -> str:
    """Why this burst would pass one of the namespace's caps ("" when it would not)."""
    if caps.invalid:
        return f"{'; '.join(caps.invalid)} in namespace {namespace}"
    if caps.per_hour is not None and in_use.cost_per_hour + price.per_hour > caps.per_hour + 1e-9:
        return (
            f"{ANNOTATION_MAX_COST_PER_HOUR} of namespace {namespace} is {_money(caps.per_hour)}: its live jobs and"
            f" bursts cost {_money(in_use.cost_per_hour)} an hour, and this pod may cost {_money(price.per_hour)}"
            f" an hour more"
        )
    if caps.per_month is not None and in_use.month + price.worst_case > caps.per_month + 1e-9:
        return (
            f"{ANNOTATION_MAX_COST_PER_MONTH} of namespace {namespace} is {_money(caps.per_month)}: this month's"
            f" recorded cost and the worst case of its live jobs come to {_money(in_use.month)}, and this pod may"
            f" cost up to {_money(price.worst_case)} more"
        )
    return ""
