"""The burst budget per namespace through the real kube-apiserver and kube-scheduler.

A host webhook (fake nodes, like test_webhook.py) watches the namespace's
`nimbix-burst.io/max-remote-gpus` annotation; pods are created with kubectl, so warnings and
denials are seen as a user sees them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from devplatform import demo
from devplatform.cluster import addons
from devplatform.cluster.controlplane import ControlPlane
from tests.support.gpus import GPU
from tests.support.webhook_group import Group, assert_remote

BUDGET = "nimbix-burst.io/max-remote-gpus"
WEBHOOK_ARGS = ["--strip-toleration-keys", GPU, "--watch-stale-seconds", "5"]


def pod_annotations(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


@contextmanager
def running_webhook(control_plane: ControlPlane, *args: str, suffix: str) -> Iterator[addons.WebhookProcess]:
    run_dir = control_plane.run_dir / f"webhook{suffix}"
    with addons.registered_webhook(control_plane, run_dir, name_suffix=suffix, args=[*WEBHOOK_ARGS, *args]) as hook:
        yield hook


def set_budget(group: Group, hook: addons.WebhookProcess, value: str) -> None:
    """Annotate the namespace and wait until the webhook's watch has it (its budget gauge)."""
    group.core.patch_namespace(group.namespace, {"metadata": {"annotations": {BUDGET: value}}})

    def seen() -> bool:
        status, text = hook.get("/metrics", timeout=2)
        return status == 200 and "nimbix_burst_budgeted_namespaces 1.0" in text

    demo.wait_for(seen, timeout=15, what="the webhook to see the namespace's budget")


def wait_until_seen(hook: addons.WebhookProcess, kind: str, changed: Any) -> None:
    """Wait until the webhook's watch of `kind` has got to the changed object's resourceVersion."""
    version = int(changed.metadata.resource_version)
    pattern = re.compile(rf'^nimbix_burst_cache_resource_version{{kind="{kind}"}} (\S+)$', re.MULTILINE)

    def seen() -> bool:
        status, text = hook.get("/metrics", timeout=2)
        found = pattern.search(text) if status == 200 else None
        return found is not None and float(found.group(1)) >= version

    demo.wait_for(seen, timeout=15, what=f"the webhook's {kind} watch to reach resourceVersion {version}")


def test_a_budget_of_four_bursts_four_gpus_and_the_next_pod_stays_local(
    control_plane: ControlPlane, core: Any, namespace: str, make_gpu_node: Callable[..., str]
) -> None:
    group = Group(control_plane, core, namespace, make_gpu_node)
    gpu = group.gpu_node(1)
    group.cpu_node(cpu="8", memory="16Gi")
    with running_webhook(control_plane, suffix="-budget") as hook:
        set_budget(group, hook, "4")
        first = group.pod(1)
        pod, _ = group.create(first)
        assert pod_annotations(pod)["nimbix-burst.io/decision"] == "local"  # a local pod does not count
        assert group.bound_node(first["metadata"]["name"]) == gpu
        # Six at once: the remote reservations keep concurrent admissions within the budget.
        results = group.create_all([group.pod(1) for _ in range(6)])
        remote = [(p, err) for p, err in results if pod_annotations(p)["nimbix-burst.io/decision"] == "remote"]
        kept = [(p, err) for p, err in results if pod_annotations(p)["nimbix-burst.io/decision"] == "local"]
        assert (len(remote), len(kept)) == (4, 2)
        for pod, stderr in remote:
            assert_remote(pod, stderr, 1)
            assert pod_annotations(pod)["nimbix-burst.io/remote-gpus"] == "1"
        note = f"4 of 4 remote GPUs in use in namespace {namespace}; this pod needs 1"
        for pod, stderr in kept:
            assert pod_annotations(pod)["nimbix-burst.io/budget"] == note
            assert pod["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"  # unchanged: waits here
            assert "Warning: nimbix-burst: kept local by the burst budget" in stderr

        # A burst pod turns terminal with no word from its runner (killed: its job may run on): its GPU
        # stays counted. Then its runner's termination message says the job ended: free again.
        done = remote[0][0]
        failed = core.patch_namespaced_pod_status(done["metadata"]["name"], namespace, {"status": {"phase": "Failed"}})
        wait_until_seen(hook, "pods", failed)
        assert pod_annotations(group.create(group.pod(1))[0]).get("nimbix-burst.io/budget") == note
        message = json.dumps({"nimbix_burst": {"job": 7, "job_may_run": False, "exit_code": 0}})
        terminated = {"exitCode": 0, "reason": "Completed", "message": message}
        container = done["spec"]["containers"][0]
        status = {"name": container["name"], "image": container["image"], "imageID": "", "ready": False}
        status |= {"restartCount": 0, "state": {"terminated": terminated}}
        core.patch_namespaced_pod_status(
            done["metadata"]["name"], namespace, {"status": {"phase": "Succeeded", "containerStatuses": [status]}}
        )

        def one_more_bursts() -> bool:
            pod, _ = group.create(group.pod(1))
            return pod_annotations(pod)["nimbix-burst.io/decision"] == "remote"

        demo.wait_for(one_more_bursts, timeout=15, what="a pod to burst after a burst pod finished")
        assert pod_annotations(group.create(group.pod(1))[0]).get("nimbix-burst.io/budget") == note

        # Turned off: remove the annotation.
        core.patch_namespace(namespace, {"metadata": {"annotations": {BUDGET: None}}})
        demo.wait_for(one_more_bursts, timeout=15, what="a pod to burst with the budget removed")
        _status, metrics = hook.get("/metrics", timeout=2)
        counted = re.search(r'nimbix_burst_over_budget_total\{action="local"\} ([0-9.]+)', metrics)
        assert counted is not None and float(counted.group(1)) >= 3, metrics  # 2 + 1, and any retry above


def test_with_over_budget_deny_the_create_is_refused_with_what_to_do(
    control_plane: ControlPlane, core: Any, namespace: str, make_gpu_node: Callable[..., str]
) -> None:
    group = Group(control_plane, core, namespace, make_gpu_node)
    group.gpu_node(1)
    group.cpu_node(cpu="8", memory="16Gi")
    with running_webhook(control_plane, "--over-budget", "deny", suffix="-budget-deny") as hook:
        set_budget(group, hook, "4")
        for _ in range(2):
            pod, stderr = group.create(group.pod(2))
            assert_remote(pod, stderr, 2)
        refused = control_plane.kubectl("create", "-o", "json", "-f", "-", check=False, input=json.dumps(group.pod(2)))
        assert refused.returncode != 0
        message = refused.stderr
        assert "denied the request" in message, message
        assert f"4 of 4 remote GPUs in use in namespace {namespace}; this pod needs 2" in message
        assert BUDGET in message and "fewer GPUs" in message
        listed = control_plane.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout.split()
        assert len(listed) == 2  # the refused pod was not created
