"""No leader among the replicas: a review gets no local promise (admission.admit's local_refusal)."""

from __future__ import annotations

from tests.support.reinvocation import POLICY, make_cache, review
from tests.unit.webhook.builders import container, pod
from webhook import admission


def test_a_pod_that_would_stay_local_bursts_and_reserves_nothing_without_a_leader() -> None:
    cache = make_cache(free_gpus=4)
    result = admission.admit(
        review(pod(container(gpus=1)), "u1"), cache=cache, policy=POLICY, local_refusal="no leader answered within 3s"
    )
    assert result.outcome == "remote"
    assert result.reason.endswith("but no leader answered within 3s")
    assert cache.export_reservations() == []


def test_with_a_leader_the_same_pod_stays_local_and_reserves() -> None:
    cache = make_cache(free_gpus=4)
    result = admission.admit(review(pod(container(gpus=1)), "u1"), cache=cache, policy=POLICY)
    assert result.outcome == "local"
    assert [r.reservation_id for r in cache.export_reservations()] == ["u1"]
