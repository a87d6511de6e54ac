"""A pod sees and acts on its own jobs only, and never sees the account's key."""

from __future__ import annotations

from gateway.scope import PodScope, find_label, own_jobs, pod_scope, scrub

UID = "0b5e1f52-5a4e-4c41-9a0e-2f6f3c1d9e01"
GANG = "7f0c8f8e-9d1d-4a0e-8a63-5a2c1b6e0f11"
OTHER = "1b5e1f52-5a4e-4c41-9a0e-2f6f3c1d9e01"
CLUSTER = "c1-0123456789ab"


def _pod(*envs: dict[str, str]) -> dict[str, object]:
    containers = [
        {"name": f"c{i}", "env": [{"name": k, "value": v} for k, v in env.items()]} for i, env in enumerate(envs)
    ]
    return {"metadata": {"uid": UID}, "spec": {"containers": containers}}


def test_a_pods_scope_is_its_uid_and_its_gangs_in_its_cluster() -> None:
    scope = pod_scope(_pod({"REMOTE": "1", "NIMBIX_BURST_CLUSTER": CLUSTER, "NIMBIX_BURST_GANG_UID": GANG}, {}))
    assert scope == PodScope(cluster=CLUSTER, uids=frozenset({UID, GANG}))
    assert scope.owns(f"k8s-{CLUSTER}.{GANG}-c0-1") and scope.owns(f"k8s-{CLUSTER}.{UID}-c0-2")
    assert not scope.owns(f"k8s-{CLUSTER}.{OTHER}-c0-1") and not scope.owns(f"k8s-x-cluster.{UID}-c0-1")
    assert not scope.owns(None)


def test_two_clusters_on_one_pod_own_nothing() -> None:
    scope = pod_scope(
        _pod({"REMOTE": "1", "NIMBIX_BURST_CLUSTER": CLUSTER}, {"REMOTE": "1", "NIMBIX_BURST_CLUSTER": "b-1"})
    )
    assert not scope.owns(f"k8s-{CLUSTER}.{UID}-c0-1")


def test_the_job_list_holds_the_pods_own_jobs_without_the_key() -> None:
    listing = {
        "1": {"job_label": f"k8s-{CLUSTER}.{UID}-c0-1", "job_api_submission": {"user": {"apikey": "KEY"}, "app": "a"}},
        "2": {"job_label": f"k8s-{CLUSTER}.{OTHER}-c0-1"},
        "3": {"job_label": None},
    }
    shown = own_jobs(listing, PodScope(cluster=CLUSTER, uids=frozenset({UID})))
    assert list(shown) == ["1"]
    assert "KEY" not in str(shown) and shown["1"]["job_api_submission"]["app"] == "a"
    assert "KEY" not in str(scrub({"job_api_submission": '{"user": {"apikey": "KEY"}}'}))


def test_a_selector_finds_its_label_by_number_or_name() -> None:
    listings = [{"7": {"job_name": "j7", "job_label": "L7"}}, {"8": {"job_name": "j8", "job_label": "L8"}}]
    assert find_label(listings, number="8", name=None) == "L8"
    assert find_label(listings, number=None, name="j7") == "L7"
    assert find_label(listings, number="9", name=None) is None
