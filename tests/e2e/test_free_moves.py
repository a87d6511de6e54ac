"""The Kubernetes mechanism every move of the product rests on, checked on the real control plane
(kube-apiserver, kube-controller-manager's Job controller and PodGC, as built): a pod evicted through
the Eviction API is marked DisruptionTarget, and a Job whose podFailurePolicy starts with the rule
ignoring that condition neither counts it against its backoffLimit nor fails: it creates the
replacement. Without the rule the same eviction fails a Job with backoffLimit 0, which is why the
controller moves only the pods of Jobs that have it (docs/controller.md, "Moves are free").

No add-on, no node: the Job's pod is Pending (its nodeSelector matches no node), as a pod waiting
for local GPUs (burst-after) is.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from devplatform import demo
from kubeplumbing.disruptions import DISRUPTION_TARGET, IGNORE_DISRUPTIONS

IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: no node takes the pod
# PodGC marks an unscheduled terminating pod Failed within its 20 s period; the Job controller acts then.
TIMEOUT_SECONDS = 120.0
IGNORE: dict[str, Any] = dict(IGNORE_DISRUPTIONS)
EXIT_FAILS_JOB = {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}


def _job(name: str, *, backoff_limit: int, rules: list[dict[str, Any]] | None, indexed: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "template": {
            "metadata": {"labels": {"task-type": "Nimbix"}},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"nimbix-burst.io/no-such-node": "true"},
                "containers": [{"name": "main", "image": IMAGE}],
            },
        },
    }
    if rules is not None:
        spec["podFailurePolicy"] = {"rules": rules}
    if indexed:
        spec.update(completionMode="Indexed", completions=2, parallelism=2)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _poll(what: str, check: Any) -> Any:
    return demo.wait_for(check, what=what, timeout=TIMEOUT_SECONDS)


def _pods(core: Any, namespace: str, job: str) -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items)


def _evict(core: Any, namespace: str, pod: Any) -> None:
    """As the controller evicts: the pod read right before, preconditions on its uid and resourceVersion;
    a 409 (the scheduler updated its status meanwhile) is read again and retried."""
    for _attempt in range(5):
        fresh = core.read_namespaced_pod(pod.metadata.name, namespace)
        preconditions = {"uid": fresh.metadata.uid, "resourceVersion": fresh.metadata.resource_version}
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.metadata.name, "namespace": namespace},
            "deleteOptions": {"preconditions": preconditions},
        }
        try:
            core.create_namespaced_pod_eviction(pod.metadata.name, namespace, body)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError(f"pod {pod.metadata.name} kept changing: not evicted")


def _failed_condition(batch: Any, namespace: str, job: str) -> str:
    status = batch.read_namespaced_job(job, namespace).status
    for condition in status.conditions or ():
        if condition.type == "Failed" and condition.status == "True":
            return str(condition.reason)
    return ""


@pytest.mark.parametrize(
    ("backoff_limit", "rules", "indexed"),
    [
        pytest.param(0, [IGNORE], False, id="backoffLimit-0"),
        pytest.param(6, [IGNORE], False, id="backoffLimit-6"),
        pytest.param(0, [IGNORE, EXIT_FAILS_JOB], True, id="indexed-with-the-users-own-rule-after"),
    ],
)
def test_an_evicted_pod_of_a_job_with_the_rule_is_replaced_and_costs_no_retry(
    core: Any, batch: Any, namespace: str, backoff_limit: int, rules: list[dict[str, Any]], indexed: bool
) -> None:
    batch.create_namespaced_job(namespace, _job("moved", backoff_limit=backoff_limit, rules=rules, indexed=indexed))
    first = _poll("the Job's pod", lambda: _pods(core, namespace, "moved"))[0]
    _evict(core, namespace, first)
    old_uids = {pod.metadata.uid for pod in _pods(core, namespace, "moved")}

    def replaced() -> list[Any]:
        pods = _pods(core, namespace, "moved")
        fresh = [p for p in pods if p.metadata.uid not in old_uids and not p.metadata.deletion_timestamp]
        gone = first.metadata.uid not in {p.metadata.uid for p in pods}
        return fresh if gone else []

    (replacement,) = _poll("the evicted pod's replacement", replaced)
    if indexed:  # the same index comes back
        key = "batch.kubernetes.io/job-completion-index"
        assert replacement.metadata.annotations[key] == first.metadata.annotations[key]
    status = batch.read_namespaced_job("moved", namespace).status
    assert _failed_condition(batch, namespace, "moved") == ""
    assert not status.failed, f"the eviction was counted: status.failed={status.failed}"


def test_without_the_rule_the_same_eviction_fails_a_job_with_backoff_limit_0(
    core: Any, batch: Any, namespace: str
) -> None:
    """What every move cost before (and still would, for a Job without the rule: the controller does
    not move its pods)."""
    batch.create_namespaced_job(namespace, _job("counted", backoff_limit=0, rules=None, indexed=False))
    first = _poll("the Job's pod", lambda: _pods(core, namespace, "counted"))[0]
    _evict(core, namespace, first)
    assert _poll("the Job Failed", lambda: _failed_condition(batch, namespace, "counted")) == "BackoffLimitExceeded"


def test_the_eviction_marks_the_pod_disruption_target_before_it_goes(core: Any, batch: Any, namespace: str) -> None:
    batch.create_namespaced_job(namespace, _job("marked", backoff_limit=0, rules=[IGNORE], indexed=False))
    first = _poll("the Job's pod", lambda: _pods(core, namespace, "marked"))[0]
    _evict(core, namespace, first)
    marked = core.read_namespaced_pod(first.metadata.name, namespace)  # kept by the Job's tracking finalizer
    conditions = {c.type: c for c in marked.status.conditions or ()}
    assert conditions[DISRUPTION_TARGET].status == "True"
    assert conditions[DISRUPTION_TARGET].reason == "EvictionByEvictionAPI"
