"""The webhook through the real kube-apiserver and kube-scheduler.

Nodes are cluster-wide and shared by the session, so each test labels its own nodes with a group
label and pins its pods there with a nodeSelector: decisions then only see that test's nodes.
The webhook runs with --strip-toleration-keys nvidia.com/gpu, as a cluster whose GPU nodes are
tainted would: a burst pod loses that toleration and can only land on CPU nodes.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devplatform import demo
from devplatform.cluster import addons
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.tcpproxy import CuttableProxy
from tests.support.at_once import run_at_once
from tests.support.gpus import GPU, GPU_TOLERATION
from tests.support.webhook_group import LEGACY, WEBHOOK_ARGS, Group, annotations_of, assert_remote, env

ADMISSION_LATENCIES_MS: list[float] = []
# The module's cap on a namespace's local admissions awaiting their pods: above the 10 local pods the
# thirty-pod test makes at once, so only the reservation-cap test reaches it.
RESERVATION_CAP = 12


def _proxied_kubeconfig(control_plane: ControlPlane, port: int, path: Path) -> Path:
    config = yaml.safe_load(control_plane.kubeconfig_path.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def proxy(control_plane: ControlPlane) -> Iterator[CuttableProxy]:
    host_port = control_plane.server_url.rsplit(":", 1)
    with CuttableProxy("127.0.0.1", int(host_port[1])) as p:
        yield p


@pytest.fixture(scope="module")
def webhook(control_plane: ControlPlane, proxy: CuttableProxy) -> Iterator[addons.WebhookProcess]:
    """The webhook watches the API server through a proxy the tests can cut."""
    run_dir = control_plane.run_dir / "webhook"
    run_dir.mkdir(exist_ok=True)
    kubeconfig = _proxied_kubeconfig(control_plane, proxy.port, run_dir / "kubeconfig")
    with addons.registered_webhook(
        control_plane,
        run_dir,
        name_suffix="-e2e",
        args=(*WEBHOOK_ARGS, "--max-reservations-per-namespace", str(RESERVATION_CAP)),
        kubeconfig=kubeconfig,
    ) as hook:
        yield hook
    _collect_latencies(hook.process.log_path)


def _collect_latencies(log_path: Path) -> None:
    for line in log_path.read_text().splitlines():
        if '"message": "admission"' in line:
            ADMISSION_LATENCIES_MS.append(json.loads(line)["latency_ms"])


@pytest.fixture(scope="module", autouse=True)
def _report_latency() -> Iterator[None]:
    yield
    if ADMISSION_LATENCIES_MS:
        values = sorted(ADMISSION_LATENCIES_MS)
        print(
            f"\nwebhook admission latency over {len(values)} e2e admissions: "
            f"median {statistics.median(values):.3f} ms, max {values[-1]:.3f} ms"
        )


@pytest.fixture
def group(
    control_plane: ControlPlane,
    core: Any,
    namespace: str,
    make_gpu_node: Callable[..., str],
    webhook: addons.WebhookProcess,
) -> Group:
    return Group(control_plane, core, namespace, make_gpu_node)


def test_gpu_pod_with_room_stays_local_and_binds_to_a_gpu_node(group: Group) -> None:
    gpu = group.gpu_node(4)
    group.cpu_node()
    body = group.pod(2)
    pod, stderr = group.create(body)
    assert annotations_of(pod)["nimbix-burst.io/decision"] == "local"
    assert pod["spec"]["containers"][0]["resources"]["limits"][GPU] == "2"
    assert "REMOTE" not in env(pod)
    assert "Warning" not in stderr
    assert group.bound_node(body["metadata"]["name"]) == gpu


def test_gpu_pod_without_room_bursts_and_binds_to_a_small_cpu_node(group: Group) -> None:
    group.gpu_node(2)
    cpu = group.cpu_node(cpu="2", memory="4Gi")
    body = group.pod(8)
    big = {"cpu": "32", "memory": "128Gi"}
    body["spec"]["containers"][0]["resources"] = {"limits": {GPU: "8", **big}, "requests": {GPU: "8", **big}}
    pod, stderr = group.create(body)
    assert_remote(pod, stderr, 8)
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert env(pod)["NUM_CPUS"] == "32"
    assert "needs 8 nvidia.com/gpu; best node" in annotations_of(pod)["nimbix-burst.io/reason"]
    audit = json.loads(annotations_of(pod)["nimbix-burst.io/original-resources"])
    assert audit["containers"]["app"]["limits"][GPU] == "8"
    assert audit["tolerations"] == [GPU_TOLERATION]
    assert group.bound_node(body["metadata"]["name"]) == cpu


def test_unlabeled_and_cpu_only_pods_are_untouched(group: Group) -> None:
    group.gpu_node(1)
    group.cpu_node()
    # First a pod the webhook does decide: the API server calls it from here on, so the pods below
    # were sent to it (or skipped by its selector) and left untouched, not merely never reviewed.
    control, _ = group.create(group.pod(1))
    assert annotations_of(control)["nimbix-burst.io/decision"] == "local"
    unlabeled, _ = group.create(group.pod(8, labeled=False))
    cpu_only, _ = group.create(group.pod(0))
    for pod in (unlabeled, cpu_only):
        assert "nimbix-burst.io/decision" not in annotations_of(pod)
        assert "env" not in pod["spec"]["containers"][0]
    assert unlabeled["spec"]["containers"][0]["resources"]["limits"][GPU] == "8"


def test_fragmented_free_gpus_do_not_count_as_one_node(group: Group) -> None:
    group.gpu_node(2)
    group.gpu_node(2)
    group.cpu_node()
    pod, stderr = group.create(group.pod(4))
    assert_remote(pod, stderr, 4)
    assert "has 2 free" in annotations_of(pod)["nimbix-burst.io/reason"]


def test_init_sidecar_and_multi_container_pods_use_the_effective_request(group: Group) -> None:
    group.gpu_node(3)
    group.cpu_node()

    def c(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
        return {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU: str(gpus)}}, **extra}

    # app 1+1, sidecar 1 => 3 (fits); an init container of 2 after the sidecar => max(3, 3) = 3.
    fits = group.pod(
        containers=[c("a", 1), c("b", 1)], initContainers=[c("side", 1, restartPolicy="Always"), c("init", 2)]
    )
    pod, _ = group.create(fits)
    assert annotations_of(pod)["nimbix-burst.io/decision"] == "local"
    group.bound_node(fits["metadata"]["name"])
    # Now 0 free: an init container asking for 4 alone is more than any node has.
    big_init = group.pod(containers=[c("a", 1)], initContainers=[c("init", 4)])
    pod, stderr = group.create(big_init)
    # The runner asks for the app container's own GPU; the init container runs here, without its GPUs.
    assert_remote(pod, stderr, 1)
    assert "REMOTE" not in {e["name"] for e in pod["spec"]["initContainers"][0].get("env", [])}
    assert json.loads(annotations_of(pod)["nimbix-burst.io/original-resources"])["initContainers"]["init"]


def test_legacy_resource_name_with_no_advertising_node_bursts(group: Group) -> None:
    group.gpu_node(8)
    group.cpu_node()
    pod, stderr = group.create(group.pod(1, resource=LEGACY))
    assert_remote(pod, stderr, 1)
    assert "no node advertises alpha.kubernetes.io/nvidia-gpu" in annotations_of(pod)["nimbix-burst.io/reason"]


def test_cordoned_tainted_and_wrong_model_nodes_do_not_count(group: Group) -> None:
    group.gpu_node(4, unschedulable=True)
    group.gpu_node(4, taints=[{"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}])
    group.gpu_node(1, labels={"gpu-model": "V100"})
    group.gpu_node(
        8, labels={"gpu-model": "T4"}, taints=[{"key": "dedicated", "value": "team-b", "effect": "NoExecute"}]
    )
    group.cpu_node()
    pod, stderr = group.create(group.pod(2))
    assert_remote(pod, stderr, 2)
    reason = annotations_of(pod)["nimbix-burst.io/reason"]
    assert "excluded by taints or selectors" in reason and "cordoned or not ready" in reason
    pod, stderr = group.create(group.pod(2, nodeSelector={"gpu-model": "V100"}))
    assert_remote(pod, stderr, 2)


def test_thirty_concurrent_pods_against_ten_free_gpus(group: Group) -> None:
    for _ in range(5):
        group.gpu_node(2)
    group.cpu_node(cpu="8", memory="16Gi")
    bodies = [group.pod(1) for _ in range(30)]
    results = [pod for pod, _stderr in group.create_all(bodies)]
    decisions = [annotations_of(p)["nimbix-burst.io/decision"] for p in results]
    assert decisions.count("local") == 10
    assert decisions.count("remote") == 20
    for body in bodies:  # kube-scheduler binds every one of them: none is stranded
        group.bound_node(body["metadata"]["name"])


def test_decisions_stay_correct_across_a_watch_interruption(
    group: Group, proxy: CuttableProxy, webhook: addons.WebhookProcess
) -> None:
    gpu = group.gpu_node(2)
    group.cpu_node()
    proxy.cut()
    try:
        # While the webhook is cut off, pods the scheduler binds (created unlabeled, so they bypass
        # the webhook) use up the GPUs; the webhook cannot know yet.
        fill = group.pod(2, labeled=False)
        group.create(fill)
        assert group.bound_node(fill["metadata"]["name"]) == gpu
        demo.wait_for(lambda: webhook.get("/readyz")[0] == 503, timeout=30, what="readyz to report the broken watch")
    finally:
        proxy.restore()
    demo.wait_for(lambda: webhook.get("/readyz")[0] == 200, timeout=60, what="the watch to recover")
    pod, stderr = group.create(group.pod(1))
    assert_remote(pod, stderr, 1)


def _gpu_quota_enforced(group: Group) -> bool:
    """The quota admission refuses only once the quota controller has written the quota's status."""
    quota = group.cp.read("resourcequotas", "no-gpus", namespace=group.namespace)
    return f"requests.{GPU}" in (quota.get("status") or {}).get("hard", {})


def test_creates_refused_after_admission_fill_the_namespaces_reservation_cap_and_the_next_pod_bursts(
    group: Group, webhook: addons.WebhookProcess
) -> None:
    """Reviews no pod follows (here a ResourceQuota refuses, after the webhook admitted them local, every
    pod that keeps a GPU) hold at most the namespace's cap of places: the next pod that would fit bursts,
    naming the cap, and is created (a burst pod keeps no GPU for the quota to refuse); once the places
    lapse, a pod that fits is local again."""
    group.gpu_node(RESERVATION_CAP + 4)
    group.cpu_node()
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-gpus", "namespace": group.namespace},
        "spec": {"hard": {f"requests.{GPU}": "0"}},
    }
    group.cp.kubectl("apply", "-f", "-", input=json.dumps(quota))
    demo.wait_for(lambda: _gpu_quota_enforced(group), timeout=60, what="the quota controller to write the quota")
    hits_before = _metric(webhook, "nimbix_burst_reservation_cap_hits_total")
    # All at once: their reservations (15 s) must be outstanding together.
    refused, errors = run_at_once(group.create, [group.pod(1) for _ in range(RESERVATION_CAP)], barrier=True)
    assert refused == [] and len(errors) == RESERVATION_CAP, refused
    assert all("exceeded quota" in str(error) for error in errors), errors[:1]
    pod, stderr = group.create(group.pod(1))
    assert_remote(pod, stderr, 1)
    reason = annotations_of(pod)["nimbix-burst.io/reason"]
    cap = RESERVATION_CAP
    expected = f"{cap} local admissions in namespace {group.namespace} await their pods (cap {cap})"
    assert expected in reason, reason
    assert _metric(webhook, "nimbix_burst_reservation_cap_hits_total") == hits_before + 1
    # No pod ever claims them: they lapse after --reservation-ttl-seconds (15 s), and their GPUs are free again.
    # (A dry run, which reserves nothing, and without the quota, which would refuse a local one.)
    group.cp.kubectl("-n", group.namespace, "delete", "resourcequota", "no-gpus")
    probe = group.pod(RESERVATION_CAP)  # more than the 4 GPUs the held places leave free

    def decided_local() -> bool:
        done = group.cp.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe), check=False
        )
        return done.returncode == 0 and annotations_of(json.loads(done.stdout))["nimbix-burst.io/decision"] == "local"

    demo.wait_for(decided_local, timeout=60, what="the unclaimed reservations to lapse")


def _metric(webhook: addons.WebhookProcess, name: str) -> float:
    status, text = webhook.get("/metrics")
    assert status == 200, text
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"{name} ")]
    assert len(values) == 1, f"{name} not in /metrics"
    return values[0]
