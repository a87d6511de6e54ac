"""Caps in money, and the count from what JARVICE holds (docs/money-safety.md, "Caps in money").

Expected values are written from the rules, never by calling the code under test: a burst is priced
at the dearest machine of the smallest size with its GPUs per node (mc_price per node-hour, x nodes,
x walltime hours for the worst case); it may start only while live jobs and bursts decided, plus its
own price, stay within the namespace's max-cost-per-hour, and this month's recorded cost plus the worst
case of every live job and burst, plus its own, within max-cost-per-month. Per pod, the larger of what
the webhook counted and what the controller's record says JARVICE holds.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from jarvice import contract
from kubeplumbing import spendrecord
from kubeplumbing.spendrecord import NamespaceSpend, PodSpend
from tests.support.budgets import NS, namespace
from tests.support.clocks import Clock
from tests.support.reinvocation import env_of, patched_by
from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, node, pod
from webhook import admission, spending
from webhook.cache import ClusterCache
from webhook.review import AdmissionRequest
from webhook.rewrite_terms import RewritePolicy
from webhook.spending import CostCaps, InUse, OwnBurst, Price
from webhook.sync import CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
NOW = 1_800_000_000.0
# The emulator's catalogue, as /jarvice/machines prices it (per node-hour).
MACHINES = {"n1": (1, 2.10), "ng1": (1, 3.20), "ng4": (4, 9.0), "ng4x": (4, 12.0), "ng8": (8, 20.0)}


def entry(**figures: Any) -> dict[str, Any]:
    """A namespace's entry in the record: every figure the controller writes, 0 unless given."""
    return {"cost_per_hour": 0.0, "month_recorded": 0.0, "month_worst_case": 0.0, "pods": {}, **figures}


def parsed(document: dict[str, Any]) -> spendrecord.SpendRecord:
    return spendrecord.parse_spend_record(json.dumps(document))


def record(namespaces: dict[str, Any] | None = None, *, observed_at: float = NOW) -> dict[str, Any]:
    return {
        "version": 1,
        "observed_at": observed_at,
        "month": "2027-01",
        "machines": {name: {"gpus": gpus, "price": price} for name, (gpus, price) in MACHINES.items()},
        "namespaces": namespaces or {},
    }


RATES = spendrecord.parse_spend_record(json.dumps(record())).machines


# ----- the caps' values ----------------------------------------------------------------------------


def test_an_unreadable_cap_counts_as_zero_and_is_named() -> None:
    caps = spending.parse_caps({spending.ANNOTATION_MAX_COST_PER_HOUR: "lots"})
    assert caps is not None and caps.per_hour == 0.0 and caps.per_month is None
    assert caps.invalid == (f"{spending.ANNOTATION_MAX_COST_PER_HOUR} is 'lots', not a number >= 0 (treated as 0)",)
    assert spending.parse_caps({"other": "1"}) is None


# ----- the record ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.update(version=2), "version 2 is not 1"),
        (lambda r: r.update(month="January"), "month 'January' is not YYYY-MM"),
        (lambda r: r["machines"]["n1"].update(price=-1), "machines.n1.price is -1, not a number >= 0"),
        (lambda r: r["machines"]["n1"].update(gpus=1.5), "machines.n1.gpus is 1.5, not a whole number >= 0"),
        (lambda r: r.update(namespaces=[]), "namespaces is not an object"),
        (lambda r: r.update(observed_at="now"), "observed_at is 'now', not a number >= 0"),
    ],
)
def test_an_unusable_record_says_what_to_fix(change: Any, message: str) -> None:
    document = record()
    change(document)
    with pytest.raises(spendrecord.SpendRecordError, match=message):
        spendrecord.parse_spend_record(json.dumps(document))


# ----- pricing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "nodes", "hours", "allowed", "expected"),
    [
        (1, 1, 2, (), Price(3.20, 3.20, 6.40, ("n1", "ng1"))),  # the dearer of the two 1-GPU machines
        (1, 1, 1, ("n1",), Price(2.10, 2.10, 2.10, ("n1",))),  # the GPU model allows only n1
        (2, 1, 1, (), Price(12.0, 12.0, 12.0, ("ng4", "ng4x"))),  # no 2-GPU machine: the 4-GPU size
        (4, 3, 10, (), Price(12.0, 36.0, 360.0, ("ng4", "ng4x"))),  # a gang of three nodes
    ],
)
def test_a_burst_is_priced_at_the_dearest_machine_of_its_size(
    gpus: int, nodes: int, hours: int, allowed: tuple[str, ...], expected: Price
) -> None:
    seconds = hours * 3600
    priced = spending.price_burst(RATES, gpus_per_node=gpus, nodes=nodes, walltime_seconds=seconds, allowed=allowed)
    assert priced == expected


def test_no_machine_of_the_size_is_named() -> None:
    assert spending.price_burst(RATES, gpus_per_node=16, nodes=1, walltime_seconds=3600) == (
        "no machine in the spend record offers 16 GPU(s) per node"
    )


# ----- counting ------------------------------------------------------------------------------------


def test_per_pod_the_larger_count_and_jobs_only_jarvice_knows_of() -> None:
    own = {"a": OwnBurst(1, 3.2, 76.8), "b": OwnBurst(4, 12.0, 288.0)}
    spend = NamespaceSpend(
        pods={
            "a": PodSpend(gpus=1, cost_per_hour=2.1, worst_case=10.0),  # submitted on the cheaper machine
            "b": PodSpend(gpus=8, cost_per_hour=20.0, worst_case=100.0),  # holds more than it was counted for
            "gone": PodSpend(gpus=2, cost_per_hour=6.0, worst_case=50.0),  # its pod was deleted, its job runs
        },
        cost_per_hour=28.1,
        month_recorded=40.0,
        month_worst_case=200.0,
        gpus=11,
    )
    in_use = spending.reconcile(own, InUse(gpus=2, cost_per_hour=1.0, month=5.0), spend)
    assert in_use.gpus == 2 + 1 + 8 + 2
    assert in_use.cost_per_hour == pytest.approx(1.0 + 3.2 + 20.0 + 6.0)
    assert in_use.month == pytest.approx(5.0 + 200.0)  # every counted pod has its job in the record


def test_pods_not_submitted_yet_count_their_worst_case_for_the_month() -> None:
    in_use = spending.reconcile({"a": OwnBurst(1, 3.2, 76.8)}, InUse(), None)
    assert (in_use.gpus, in_use.cost_per_hour, in_use.month) == (1, 3.2, 76.8)


@pytest.mark.parametrize(
    ("caps", "in_use", "price", "named"),
    [
        (CostCaps(per_hour=5.0), InUse(cost_per_hour=0.0), Price(3.2, 3.2, 10.0, ()), ""),
        (CostCaps(per_hour=5.0), InUse(cost_per_hour=3.2), Price(3.2, 3.2, 10.0, ()), "max-cost-per-hour"),
        (CostCaps(per_hour=6.4), InUse(cost_per_hour=3.2), Price(3.2, 3.2, 10.0, ()), ""),  # exactly at the cap
        (CostCaps(per_month=100.0), InUse(month=95.0), Price(3.2, 3.2, 10.0, ()), "max-cost-per-month"),
        (CostCaps(per_month=100.0), InUse(month=90.0), Price(3.2, 3.2, 10.0, ()), ""),
        (CostCaps(per_hour=0.0, invalid=("x is 'y'",)), InUse(), Price(3.2, 3.2, 10.0, ()), "x is 'y'"),
    ],
)
def test_caps_table(caps: CostCaps, in_use: InUse, price: Price, named: str) -> None:
    reason = spending.over_caps(caps, namespace=NS, in_use=in_use, price=price)
    assert (named in reason and reason != "") if named else reason == ""


# ----- through the admission ---------------------------------------------------------------------


def review(raw: dict[str, Any], uid: str) -> AdmissionRequest:
    return AdmissionRequest(uid=uid, operation="CREATE", kind="Pod", group="", namespace=NS, dry_run=False, object=raw)


def capped_cluster(caps: dict[str, str], *, clock: Clock, max_remote: str | None = None) -> CacheSync:
    """No local GPU free; namespace NS with the given caps (and GPU budget)."""
    cache = ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60, wall_clock=clock)
    sync = CacheSync(cache, clock=clock)
    sync.apply_list("nodes", [node("gpu", 0), node("cpu", 0)])
    sync.apply_list("pods", [])
    raw_ns = namespace(NS, max_remote)
    raw_ns["metadata"]["annotations"].update(caps)
    sync.apply_list("namespaces", [raw_ns, KUBE_SYSTEM])
    return sync


def admit(sync: CacheSync, uid: str, gpus: int = 1) -> tuple[admission.Admission, dict[str, Any]]:
    raw = pod(container(gpus=gpus), namespace=NS, name=uid)
    result = admission.admit(review(raw, uid), cache=sync.cache, policy=POLICY)
    return result, patched_by(raw, result)


def test_three_one_gpu_pods_against_five_an_hour_one_bursts_and_the_others_name_the_cap() -> None:
    clock = Clock(NOW)
    sync = capped_cluster({spending.ANNOTATION_MAX_COST_PER_HOUR: "5"}, clock=clock)
    sync.cache.spend.set_record(parsed(record()))
    first, patched = admit(sync, "a")
    assert first.outcome == "remote"
    annotations = patched["metadata"]["annotations"]
    assert annotations[spending.ANNOTATION_COST_PER_HOUR] == "3.2"
    assert annotations[spending.ANNOTATION_WORST_CASE] == "76.8"  # 24 h, the default walltime
    assert env_of(patched["spec"]["containers"][0])[contract.ENV_MAX_PRICE] == "3.2"
    for uid in ("b", "c"):
        kept, kept_patch = admit(sync, uid)
        assert (kept.outcome, kept.over_budget) == ("local", True)
        reason = kept_patch["metadata"]["annotations"]["nimbix-burst.io/budget"]
        assert reason == (
            f"{spending.ANNOTATION_MAX_COST_PER_HOUR} of namespace {NS} is 5.00: its live jobs and bursts cost"
            " 3.20 an hour, and this pod may cost 3.20 an hour more"
        )


def test_a_job_whose_pod_is_gone_still_counts_until_jarvice_says_it_ended() -> None:
    clock = Clock(NOW)
    sync = capped_cluster({spending.ANNOTATION_MAX_COST_PER_HOUR: "5"}, clock=clock, max_remote="4")
    running = {
        NS: entry(pods={"deleted-pod": {"gpus": 4, "cost_per_hour": 3.0, "worst_case": 10.0}}, cost_per_hour=3.0)
    }
    sync.cache.spend.set_record(parsed(record(running)))
    kept, patched = admit(sync, "a")
    # Its GPUs fill the GPU budget too: 4 of 4 held on JARVICE by a pod the cluster no longer has.
    assert kept.over_budget
    assert "4 of 4 remote GPUs in use" in patched["metadata"]["annotations"]["nimbix-burst.io/budget"]
    sync.cache.spend.set_record(parsed(record()))  # JARVICE says it ended
    assert admit(sync, "b")[0].outcome == "remote"


def test_without_a_fresh_record_a_capped_namespace_does_not_burst_and_is_never_denied() -> None:
    clock = Clock(NOW)
    sync = capped_cluster({spending.ANNOTATION_MAX_COST_PER_MONTH: "100"}, clock=clock)
    kept, patched = admit(sync, "a")
    assert kept.over_budget and "has not been read yet" in patched["metadata"]["annotations"]["nimbix-burst.io/budget"]
    sync.cache.spend.set_record(parsed(record(observed_at=NOW - 301)))
    result = admission.admit(
        review(pod(container(gpus=1), namespace=NS, name="b"), "b"), cache=sync.cache, policy=POLICY, over_budget="deny"
    )
    assert result.outcome == "local" and "301 s old" in result.reason  # not the user's doing: never denied
    sync.cache.spend.set_record(parsed(record(observed_at=NOW)))
    assert admit(sync, "c")[0].outcome == "remote"


def test_the_month_cap_counts_the_worst_case_of_each_burst() -> None:
    clock = Clock(NOW)
    sync = capped_cluster({spending.ANNOTATION_MAX_COST_PER_MONTH: "100"}, clock=clock)
    sync.cache.spend.set_record(parsed(record({NS: entry(month_recorded=20.0, month_worst_case=20.0)})))
    assert admit(sync, "a")[0].outcome == "remote"  # 20 + 76.8 (3.20 x 24 h) <= 100
    kept, patched = admit(sync, "b")
    assert kept.over_budget
    assert "come to 96.80" in patched["metadata"]["annotations"]["nimbix-burst.io/budget"]


def test_a_burst_pod_counts_what_it_was_priced_at_once_it_appears() -> None:
    clock = Clock(NOW)
    sync = capped_cluster({spending.ANNOTATION_MAX_COST_PER_HOUR: "7"}, clock=clock)
    sync.cache.spend.set_record(parsed(record()))
    _, patched = admit(sync, "a")
    stored = copy.deepcopy(patched)
    stored["metadata"]["uid"] = "uid-a"
    assert sync.apply_event("pods", "ADDED", stored) is None
    assert admit(sync, "b")[0].outcome == "remote"  # 3.2 + 3.2 <= 7
    assert admit(sync, "c")[0].over_budget  # 9.6 > 7


def test_a_gangs_job_in_the_record_meets_its_submitting_ranks_count() -> None:
    """JARVICE's label names a gang's job by the gang's identity, not a pod's: the record's entry and the
    submitting rank's own count are one job, counted once (the larger of the two)."""
    clock = Clock(NOW)
    sync = capped_cluster({spending.ANNOTATION_MAX_COST_PER_HOUR: "100"}, clock=clock, max_remote="10")
    rank0 = pod(
        container(requests={"cpu": "100m"}),
        annotations={
            contract.ANNOTATION_DECISION: "remote",
            "nimbix-burst.io/remote-gpus": "8",
            contract.ANNOTATION_GANG: "gang-uid-g2",
            contract.ANNOTATION_GANG_SIZE: "2",
            contract.ANNOTATION_GANG_RANK: "0",
        },
        uid="pod-0",
        name="w0",
        namespace=NS,
        node_name="cpu",
        phase="Running",
    )
    assert sync.apply_event("pods", "ADDED", rank0) is None
    job = {"gpus": 8, "cost_per_hour": 6.4, "worst_case": 10.0}
    sync.cache.spend.set_record(parsed(record({NS: entry(pods={"gang-uid-g2": job}, cost_per_hour=6.4)})))
    kept, patched = admit(sync, "a", gpus=4)
    assert kept.over_budget  # 8 (one job) + 4 > 10; counted twice it would say 16
    assert "8 of 10 remote GPUs in use" in patched["metadata"]["annotations"]["nimbix-burst.io/budget"]
