"""A burst's machine order and its max-remote-queue: from the pod's and its namespace's annotations to
the runner's NIMBIX_BURST_MACHINES and NIMBIX_BURST_MAX_REMOTE_QUEUE; an unreadable one is warned about."""

from __future__ import annotations

from typing import Any

import pytest

from jarvice import contract
from tests.support.clocks import Clock
from tests.support.deadlines import HANG_SECONDS
from tests.support.reinvocation import patched_by, review
from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, namespace, node, pod
from webhook import admission
from webhook.cache import ClusterCache
from webhook.machine_terms import MachineTerms, decide_machine_terms
from webhook.rewrite_terms import RewritePolicy
from webhook.sync import CacheSync
from webhook.types import NamespaceMachines

pytestmark = pytest.mark.timeout(HANG_SECONDS)

QUEUE = contract.ANNOTATION_MAX_REMOTE_QUEUE
MACHINES = contract.ANNOTATION_MACHINES
POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")


@pytest.mark.parametrize(
    ("pod_annotations", "ns", "order", "queue", "warned"),
    [
        pytest.param({}, None, (), "", (), id="neither: the runner's defaults"),
        pytest.param({QUEUE: "30s"}, None, (), "30s", (), id="pod"),
        pytest.param({}, NamespaceMachines(max_remote_queue="2m"), (), "120s", (), id="namespace default"),
        pytest.param({QUEUE: "0"}, NamespaceMachines(max_remote_queue="2m"), (), "0s", (), id="the pod's wins"),
        pytest.param(
            {QUEUE: "soon"}, NamespaceMachines(max_remote_queue="2m"), (), "120s", ("of the pod",), id="bad pod"
        ),
        pytest.param({}, NamespaceMachines(max_remote_queue="1d"), (), "", ("of namespace team",), id="bad ns"),
        pytest.param({QUEUE: "200h"}, None, (), "", ("at most 168h",), id="over a week"),
        pytest.param({QUEUE: 30}, None, (), "30s", (), id="a number the API would refuse is read as written"),
        pytest.param({}, NamespaceMachines(machines="ng4v, ng4"), ("ng4v", "ng4"), "", (), id="order"),
        pytest.param({}, NamespaceMachines(machines="ng4;ng4v"), (), "", (MACHINES,), id="bad order"),
    ],
)
def test_the_terms(
    pod_annotations: dict[str, Any],
    ns: NamespaceMachines | None,
    order: tuple[str, ...],
    queue: str,
    warned: tuple[str, ...],
) -> None:
    terms = decide_machine_terms(pod_annotations, ns, namespace_name="team")
    assert (terms.order, terms.max_remote_queue) == (order, queue)
    assert len(terms.warnings) == len(warned)
    for warning, needle in zip(terms.warnings, warned, strict=True):
        assert needle in warning and "nimbix-burst:" in warning


def test_no_annotations_no_terms() -> None:
    assert decide_machine_terms({}, None, namespace_name="team") == MachineTerms((), "", ())


# --- through admission: the namespace follows the watch ---------------------------------------------


def make_sync(*namespaces: dict[str, Any]) -> CacheSync:
    clock = Clock()
    sync = CacheSync(ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60), clock=clock)
    sync.apply_list("nodes", [node("gpu", 1)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [KUBE_SYSTEM, *namespaces])
    return sync


def admit(sync: CacheSync, raw: dict[str, Any]) -> tuple[admission.Admission, dict[str, Any]]:
    result = admission.admit(review(raw, "u1", namespace="team"), cache=sync.cache, policy=POLICY)
    return result, patched_by(raw, result)


def env_of(raw: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in raw["spec"]["containers"][0].get("env", [])}


def test_a_burst_pod_carries_its_namespaces_order_and_its_own_queue_limit() -> None:
    team = namespace("team", annotations={MACHINES: "ng4v,ng4", QUEUE: "5m"})
    sync = make_sync(team)
    raw = pod(container(gpus=2))
    raw["metadata"]["annotations"] = {QUEUE: "30s"}
    result, patched = admit(sync, raw)
    assert result.outcome == "remote"
    env = env_of(patched)
    assert (env[contract.ENV_MACHINES], env[contract.ENV_MAX_REMOTE_QUEUE]) == ("ng4v,ng4", "30s")
    # The namespace's annotations go with the watch.
    assert sync.apply_event("namespaces", "MODIFIED", namespace("team")) is None
    _, patched = admit(sync, pod(container(gpus=2)))
    assert contract.ENV_MACHINES not in env_of(patched) and contract.ENV_MAX_REMOTE_QUEUE not in env_of(patched)


def test_an_unreadable_annotation_is_warned_about_and_left_out() -> None:
    sync = make_sync(namespace("team", annotations={MACHINES: "ng4 ng4v"}))
    raw = pod(container(gpus=2))
    raw["metadata"]["annotations"] = {QUEUE: "ten minutes"}
    result, patched = admit(sync, raw)
    assert result.outcome == "remote"
    assert contract.ENV_MACHINES not in env_of(patched) and contract.ENV_MAX_REMOTE_QUEUE not in env_of(patched)
    warnings = result.response["response"]["warnings"]
    assert f"nimbix-burst: {QUEUE} 'ten minutes' of the pod ignored: write 30s, 10m or 0" in warnings
    assert f"nimbix-burst: {MACHINES} 'ng4 ng4v' of namespace team ignored: write e.g. ng4,ng4v" in warnings


def test_a_container_setting_its_own_keeps_it() -> None:
    sync = make_sync(namespace("team", annotations={QUEUE: "5m"}))
    raw = pod(container(gpus=2, env=[{"name": contract.ENV_MAX_REMOTE_QUEUE, "value": "1h"}]))
    _, patched = admit(sync, raw)
    assert env_of(patched)[contract.ENV_MAX_REMOTE_QUEUE] == "1h"


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param({"requests": {"memory": "64Gi"}}, "64", id="GiB"),
        pytest.param({"requests": {"memory": "100G"}}, "94", id="decimal GB rounded up to GiB"),
        pytest.param({"limits": {"memory": "1Mi"}}, "1", id="from the limit, at least one"),
        pytest.param({}, None, id="no request: any RAM"),
    ],
)
def test_the_runner_is_told_the_containers_memory_request(resources: dict[str, Any], expected: str | None) -> None:
    raw = pod(container(gpus=2, requests=resources.get("requests"), limits=resources.get("limits")))
    _, patched = admit(make_sync(), raw)
    assert env_of(patched).get(contract.ENV_MEMORY_GB) == expected
