"""Every burst container carries the cluster's identity (docs/decision.md, "What a burst pod looks like").

`NIMBIX_BURST_CLUSTER` = `<--cluster-name>-<first 12 hex digits of the kube-system namespace's UID>`
(the hex alone without a name), replacing any value the pod sets. The UID comes from the watch
cache; without kube-system in it the webhook does not burst: the pod is kept local, annotated, with
a warning. Expected values are worked out by hand from those rules.
"""

from __future__ import annotations

from typing import Any

import pytest

from jarvice import contract
from tests.support.clocks import Clock
from tests.support.reinvocation import patched_by, review
from tests.unit.webhook.builders import CLUSTER_ID, GPU, KUBE_SYSTEM, KUBE_SYSTEM_UID, container, namespace, node, pod
from webhook import admission
from webhook.cache import ClusterCache
from webhook.rewrite_terms import RewritePolicy
from webhook.settings import SettingsError, parse_settings
from webhook.sync import CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")


def make_sync(*namespaces: dict[str, Any]) -> CacheSync:
    clock = Clock()
    sync = CacheSync(ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60), clock=clock)
    sync.apply_list("nodes", [node("gpu", 1)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", list(namespaces))
    return sync


def admit(
    sync: CacheSync, raw: dict[str, Any], policy: RewritePolicy = POLICY
) -> tuple[admission.Admission, dict[str, Any]]:
    result = admission.admit(review(raw, "u1"), cache=sync.cache, policy=policy)
    return result, patched_by(raw, result)


def cluster_env(c: dict[str, Any]) -> list[Any]:
    return [e.get("value", e.get("valueFrom")) for e in c.get("env", []) if e["name"] == contract.ENV_CLUSTER]


@pytest.mark.parametrize(
    ("cluster_name", "expected"),
    [
        pytest.param("", CLUSTER_ID, id="uid-only"),
        pytest.param("prod-eu", "prod-eu-" + CLUSTER_ID, id="named"),
    ],
)
def test_every_burst_container_carries_the_cluster_identity(cluster_name: str, expected: str) -> None:
    policy = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi", cluster_name=cluster_name)
    raw = pod(
        container("a", gpus=2),
        container("b", gpus=2, env=[{"name": contract.ENV_CLUSTER, "value": "someone-else"}]),
        container("log"),
    )
    result, patched = admit(make_sync(KUBE_SYSTEM), raw, policy)
    assert result.outcome == "remote"
    a, b, log = patched["spec"]["containers"]
    assert cluster_env(a) == [expected]
    assert cluster_env(b) == [expected]  # replaced: a pod cannot pose as another cluster
    assert cluster_env(log) == []  # runs here: no job, no identity


@pytest.mark.parametrize(
    "namespaces",
    [
        pytest.param((), id="no-kube-system"),
        pytest.param((namespace("kube-system"),), id="kube-system-without-uid"),
        pytest.param((namespace("kube-system", uid="not-a-uuid"),), id="uid-not-a-uuid"),
    ],
)
def test_without_the_cluster_identity_a_pod_is_not_burst(namespaces: tuple[dict[str, Any], ...]) -> None:
    raw = pod(container(gpus=2))
    sync = make_sync(*namespaces)
    result, patched = admit(sync, raw)
    assert result.outcome == "local"
    assert "kube-system" in result.reason
    assert patched["spec"] == raw["spec"]  # kept as submitted: it waits for local GPUs
    annotations = patched["metadata"]["annotations"]
    assert annotations[contract.ANNOTATION_DECISION] == "local"
    assert "kube-system" in annotations[contract.ANNOTATION_REASON]
    assert contract.ANNOTATION_RESERVATION not in annotations  # nothing local was promised
    assert sync.cache.reservation_count == 0 and sync.cache.remote_reservation_count == 0
    (warning,) = result.response["response"]["warnings"]
    assert "kept local" in warning


def test_a_pod_that_fits_locally_does_not_need_the_identity() -> None:
    result, _ = admit(make_sync(), pod(container(gpus=1)))
    assert result.outcome == "local" and result.node == "gpu"


def test_the_cache_follows_the_kube_system_namespace() -> None:
    sync = make_sync(namespace("team"))
    assert sync.cache.kube_system_uid == ""
    assert sync.apply_event("namespaces", "ADDED", KUBE_SYSTEM) is None
    assert sync.cache.kube_system_uid == KUBE_SYSTEM_UID
    assert sync.apply_event("namespaces", "DELETED", namespace("team")) is None
    assert sync.cache.kube_system_uid == KUBE_SYSTEM_UID
    assert sync.apply_event("namespaces", "DELETED", KUBE_SYSTEM) is None
    assert sync.cache.kube_system_uid == ""
    sync.apply_list("namespaces", [namespace("team"), KUBE_SYSTEM])
    assert sync.cache.kube_system_uid == KUBE_SYSTEM_UID
    sync.apply_list("namespaces", [namespace("team")])
    assert sync.cache.kube_system_uid == ""


@pytest.mark.parametrize(
    ("argv", "env", "name"),
    [
        pytest.param([], {}, "", id="default-none"),
        pytest.param([], {"NIMBIX_BURST_CLUSTER_NAME": "prod"}, "prod", id="env"),
        pytest.param(["--cluster-name", "lab-2"], {"NIMBIX_BURST_CLUSTER_NAME": "prod"}, "lab-2", id="flag"),
        pytest.param(["--cluster-name", " prod "], {}, "prod", id="spaces"),
    ],
)
def test_the_cluster_name_setting(argv: list[str], env: dict[str, str], name: str) -> None:
    assert parse_settings(argv, env, check_files=False).policy.cluster_name == name


@pytest.mark.parametrize("bad", ["Prod", "-prod", "prod-", "prod_eu", "a" * 31])
def test_an_invalid_cluster_name_says_what_it_must_be(bad: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings([f"--cluster-name={bad}"], {}, check_files=False)
    (problem,) = caught.value.problems
    assert problem.startswith("--cluster-name") and "lowercase" in problem
