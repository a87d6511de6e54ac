"""The cache against an independent oracle (k8s_oracle: Kubernetes' rules over raw JSON, no webhook
code), through random sequences of watch events: nodes added, changed (allocatable drops, cordon,
taints, readiness), deleted; pods added, bound, resized in place, finished, deleted, ungated;
relists; admissions that reserve and the pods that then appear.

After every event: per node, free == allocatable - used (oracle) - claims; the set of claims is the
set of pods the scheduler is placing plus outstanding reservations, each sized as the oracle sizes
its pod and placed on a node the pod may use; and for a query pod, "can some node host it, and
which" agrees (the best fit is one of the oracle's nodes, with the fewest free GPUs among them).
Where claims sit is the cache's choice (best fit when they arrive); the oracle checks that choice is
legal, then takes it as given.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.webhook import k8s_oracle as oracle
from webhook.admission import decide_placement
from webhook.cache import CANDIDATE_CAP, ClusterCache
from webhook.model import parse_placement, pod_compute, pod_gpus
from webhook.sync import CacheSync

GPU = oracle.GPU
FPGA = "example.com/fpga"
NODE_NAMES = ["n0", "n1", "n2", "n3"]
MODELS = ["V100", "T4"]
TAINTS = [
    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    {"key": "evict", "value": "", "effect": "NoExecute"},
    {"key": "soft", "value": "", "effect": "PreferNoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "value": "", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"},
]
TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    {"key": "evict", "operator": "Exists"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists"},
]
MESSAGES = [
    "0/4 nodes are available: 4 Insufficient cpu.",
    "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) were unschedulable.",
]


def _mostly(usual: Any, *rare: Any) -> st.SearchStrategy[Any]:
    """Usually `usual`: every node refusing every pod would leave nothing to compare."""
    return st.sampled_from([usual, usual, usual, *rare])


node_strategy = st.fixed_dictionaries(
    {
        "gpus": st.integers(0, 8),
        "cpu": _mostly("16", "2", "3500m"),
        "memory": _mostly("64Gi", "8Gi"),
        "pods": _mostly(None, "2", "4", "110"),
        "ephemeral": _mostly(None, "10Gi", "100Gi"),
        "fpga": _mostly("2", "0", "1", None),
        "model": st.sampled_from(MODELS),
        "taints": st.one_of(
            st.just([]), st.just([]), st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=lambda t: t["key"])
        ),
        "unschedulable": _mostly(False, True),
        "ready": _mostly(True, False),
    }
)


def build_node(name: str, d: dict[str, Any]) -> dict[str, Any]:
    allocatable = {"cpu": d["cpu"], "memory": d["memory"], GPU: str(d["gpus"])}
    for key, value in (("pods", d["pods"]), ("ephemeral-storage", d["ephemeral"]), (FPGA, d["fpga"])):
        if value is not None:
            allocatable[key] = value
    return {
        "metadata": {"name": name, "labels": {"model": d["model"], "kubernetes.io/hostname": name}},
        "spec": {"taints": d["taints"], **({"unschedulable": True} if d["unschedulable"] else {})},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if d["ready"] else "False"}],
        },
    }


def _affinity(term: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


placement_strategy = st.one_of(
    st.just({}),
    st.just({}),
    st.just({}),
    st.sampled_from(MODELS).map(lambda m: {"nodeSelector": {"model": m}}),
    st.lists(st.sampled_from(MODELS), min_size=1, max_size=2).map(
        lambda ms: {"affinity": _affinity({"matchExpressions": [{"key": "model", "operator": "In", "values": ms}]})}
    ),
    st.sampled_from(NODE_NAMES).map(
        lambda n: {"affinity": _affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]})}
    ),
)

pod_strategy = st.fixed_dictionaries(
    {
        "gpus": st.integers(0, 4),
        "split": st.sampled_from(["one", "two", "init", "sidecar"]),
        "cpu": _mostly("1", "100m", "4", "12", None),
        "memory": _mostly(None, "1Gi", "32Gi"),
        "ephemeral": _mostly(None, "1Gi", "50Gi"),
        "fpga": _mostly(None, "1", "2"),
        "pod_level_cpu": _mostly(None, "2", "14"),
        "overhead_cpu": _mostly(None, "250m"),
        "placement": placement_strategy,
        "tolerations": st.one_of(st.just([]), st.lists(st.sampled_from(TOLERATIONS), max_size=2)),
        "scheduler": _mostly(None, "default-scheduler", "volcano"),
        "gated": _mostly(False, True),
        "message": _mostly(None, *MESSAGES),
        "nominated": _mostly(None, *NODE_NAMES),
    }
)


def build_pod(uid: str, d: dict[str, Any], *, node_name: str = "", phase: str = "Pending") -> dict[str, Any]:
    def container(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
        requests: dict[str, str] = {}
        if gpus:
            requests[GPU] = str(gpus)
        for key, value in (("cpu", d["cpu"]), ("memory", d["memory"]), ("ephemeral-storage", d["ephemeral"])):
            if value is not None:
                requests[key] = value
        if d["fpga"] is not None:
            requests[FPGA] = d["fpga"]
        limits = {k: v for k, v in requests.items() if k in (GPU, FPGA)}  # the API server's defaulting
        return {"name": name, "image": "x", "resources": {"requests": requests, "limits": limits}, **extra}

    gpus = d["gpus"]
    spec: dict[str, Any] = {**d["placement"], "tolerations": list(d["tolerations"])}
    if d["split"] == "one":
        spec["containers"] = [container("a", gpus)]
    elif d["split"] == "two":
        spec["containers"] = [container("a", gpus // 2), container("b", gpus - gpus // 2)]
    elif d["split"] == "init":  # a regular init container needing more than the app
        spec["containers"] = [container("a", max(gpus - 1, 0))]
        spec["initContainers"] = [container("i", gpus)]
    else:  # a native sidecar adds to the app
        spec["containers"] = [container("a", gpus // 2)]
        spec["initContainers"] = [container("s", gpus - gpus // 2, restartPolicy="Always")]
    if d["pod_level_cpu"] is not None:
        spec["resources"] = {"requests": {"cpu": d["pod_level_cpu"]}}
    if d["overhead_cpu"] is not None:
        spec["overhead"] = {"cpu": d["overhead_cpu"]}
    if d["scheduler"] is not None:
        spec["schedulerName"] = d["scheduler"]
    if d["gated"]:
        spec["schedulingGates"] = [{"name": "example.com/gate"}]
    if node_name:
        spec["nodeName"] = node_name
    status: dict[str, Any] = {"phase": phase}
    if d["message"] is not None and not node_name:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": d["message"]}
        ]
    if d["nominated"] is not None and not node_name:
        status["nominatedNodeName"] = d["nominated"]
    meta = {"name": uid, "namespace": "ns", "uid": uid, "annotations": {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


event_strategy = st.one_of(
    st.tuples(st.just("node"), st.sampled_from(NODE_NAMES), node_strategy),
    st.tuples(st.just("delete-node"), st.sampled_from(NODE_NAMES)),
    st.tuples(st.just("pod"), pod_strategy, st.sampled_from(["", *NODE_NAMES])),
    st.tuples(st.just("bind"), st.integers(0, 20), st.sampled_from(NODE_NAMES)),
    st.tuples(st.just("resize"), st.integers(0, 20), st.sampled_from(["500m", "2", "8", "15"])),
    st.tuples(st.just("finish"), st.integers(0, 20)),
    st.tuples(st.just("delete-pod"), st.integers(0, 20)),
    st.tuples(st.just("ungate"), st.integers(0, 20)),
    st.tuples(st.just("admit"), pod_strategy, st.sampled_from(["", *NODE_NAMES])),
    st.tuples(st.just("appear"), st.integers(0, 20), st.sampled_from(["", *NODE_NAMES])),
    st.tuples(st.just("relist")),
)


class World:
    """The raw objects as the API server holds them, applied to the cache as watch events."""

    def __init__(self) -> None:
        self.cache = ClusterCache(gpu_resources=(GPU,), clock=lambda: 0.0, reservation_ttl=1e9)
        self.sync = CacheSync(self.cache, clock=lambda: 0.0)
        self.sync.apply_list("nodes", [])
        self.sync.apply_list("pods", [])
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.reserved: dict[str, dict[str, Any]] = {}  # reservation id -> the admitted pod
        self.serial = 0

    def _pick(self, index: int) -> dict[str, Any] | None:
        if not self.pods:
            return None
        return self.pods[sorted(self.pods)[index % len(self.pods)]]

    def _modified(self, pod: dict[str, Any]) -> None:
        assert self.sync.apply_event("pods", "MODIFIED", pod) is None

    def apply(self, event: tuple[Any, ...]) -> None:
        kind = event[0]
        if kind == "node":
            name, raw = event[1], build_node(event[1], event[2])
            assert self.sync.apply_event("nodes", "MODIFIED" if name in self.nodes else "ADDED", raw) is None
            self.nodes[name] = raw
        elif kind == "delete-node" and event[1] in self.nodes:
            self.sync.apply_event("nodes", "DELETED", self.nodes.pop(event[1]))
        elif kind == "pod":
            self.serial += 1
            raw = build_pod(f"p{self.serial}", event[1], node_name=event[2])
            self.pods[raw["metadata"]["uid"]] = raw
            assert self.sync.apply_event("pods", "ADDED", raw) is None
        elif kind in ("bind", "resize", "finish", "ungate") and (pod := self._pick(event[1])) is not None:
            if kind == "bind" and not pod["spec"].get("nodeName"):
                pod["spec"]["nodeName"] = event[2]
                pod["status"].pop("nominatedNodeName", None)
                pod["status"].pop("conditions", None)
                pod["spec"].pop("schedulingGates", None)
            elif kind == "resize":  # InPlacePodVerticalScaling: only cpu/memory of containers change
                pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = event[2]
            elif kind == "finish":
                pod["status"]["phase"] = "Succeeded"
            elif kind == "ungate":
                pod["spec"].pop("schedulingGates", None)
            self._modified(pod)
        elif kind == "delete-pod" and (pod := self._pick(event[1])) is not None:
            del self.pods[pod["metadata"]["uid"]]
            self.sync.apply_event("pods", "DELETED", pod)
        elif kind == "admit":
            self.serial += 1
            raw = build_pod(f"r{self.serial}", event[1], node_name=event[2])
            spec = raw["spec"]
            requests = {**pod_gpus(spec, (GPU,)), **pod_compute(spec)}
            decision = decide_placement(requests, parse_placement(spec), self.cache, namespace="ns")
            if decision.kind == "local":
                reservation = f"res-{self.serial}"
                self.cache.reserve(
                    reservation, node=decision.node, requests=requests, placement=parse_placement(spec), namespace="ns"
                )
                raw["metadata"]["annotations"]["nimbix-burst.io/reservation"] = reservation
                self.reserved[reservation] = raw
        elif kind == "appear" and self.reserved:
            reservation = sorted(self.reserved)[event[1] % len(self.reserved)]
            raw = self.reserved.pop(reservation)
            if event[2] and not raw["spec"].get("nodeName"):
                raw["spec"]["nodeName"] = event[2]
            self.pods[raw["metadata"]["uid"]] = raw
            assert self.sync.apply_event("pods", "ADDED", raw) is None
        elif kind == "relist":
            self.sync.apply_list("nodes", [copy.deepcopy(n) for n in self.nodes.values()])
            self.sync.apply_list("pods", [copy.deepcopy(p) for p in self.pods.values()])

    # ----- the comparison --------------------------------------------------------------------------

    def check(self, query: dict[str, Any]) -> None:
        claims = self.cache.claims()
        expected_ids = {"pod:" + uid for uid, pod in self.pods.items() if oracle.claims_gpus(pod)}
        expected_ids |= {"res:" + reservation for reservation in self.reserved}
        assert set(claims) == expected_ids
        claimed: dict[str, dict[str, int]] = {}
        for claim_id, claim in claims.items():
            raw = self.pods[claim_id[4:]] if claim_id.startswith("pod:") else self.reserved[claim_id[4:]]
            assert dict(claim.requests) == oracle.pod_requests(raw), claim_id
            if not claim.node:
                continue
            nominated = raw["status"].get("nominatedNodeName")
            assert claim.node in self.nodes, claim_id
            assert claim.node == nominated or oracle.passes_filters(raw, self.nodes[claim.node]), claim_id
            for resource, value in claim.requests.items():
                claimed.setdefault(claim.node, {})
                claimed[claim.node][resource] = claimed[claim.node].get(resource, 0) + value

        taken: dict[str, dict[str, int]] = {}
        for name, node in self.nodes.items():
            allocatable = oracle.node_allocatable(node)
            used = oracle.used(self.pods, name)
            taken[name] = {r: used.get(r, 0) + claimed.get(name, {}).get(r, 0) for r in {*used, *claimed.get(name, {})}}
            expected_free = {r: total - taken[name].get(r, 0) for r, total in allocatable.items()}
            assert self.cache.free(name) == expected_free, name

        request = oracle.pod_requests(query)
        hosts = [
            name
            for name, node in self.nodes.items()
            if oracle.passes_filters(query, node) and oracle.fits(request, oracle.node_allocatable(node), taken[name])
        ]
        spec = query["spec"]
        requests = {**pod_gpus(spec, (GPU,)), **pod_compute(spec)}
        fit = self.cache.find_fit(requests, parse_placement(spec))
        if not hosts:
            assert fit.node is None, (fit.node, request)
            return
        assert fit.node is not None and fit.node.name in hosts, (hosts, fit)
        free_gpus = {n: oracle.node_allocatable(self.nodes[n])[GPU] - taken[n].get(GPU, 0) for n in hosts}
        assert free_gpus[fit.node.name] == min(free_gpus.values())
        assert fit.candidates == min(len(hosts), CANDIDATE_CAP)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=st.lists(st.tuples(st.just("node"), st.sampled_from(NODE_NAMES), node_strategy), min_size=1, max_size=4),
    workload=st.lists(st.tuples(st.just("pod"), pod_strategy, st.sampled_from(["", "", *NODE_NAMES])), max_size=8),
    events=st.lists(event_strategy, min_size=1, max_size=25),
    queries=st.lists(
        st.tuples(pod_strategy.filter(lambda d: d["gpus"] > 0), st.sampled_from(["", "", "n0"])), max_size=3
    ),
)
def test_cache_agrees_with_the_kubernetes_oracle(
    cluster: list[tuple[Any, ...]],
    workload: list[tuple[Any, ...]],
    events: list[tuple[Any, ...]],
    queries: list[tuple[dict[str, Any], str]],
) -> None:
    world = World()
    query_pods = [build_pod("q", d, node_name=n) for d, n in queries] or [build_pod("q", _PLAIN)]
    for event in [*cluster, *workload, *events]:
        world.apply(event)
        for query in query_pods:
            world.check(query)


_PLAIN: dict[str, Any] = {
    "gpus": 1,
    "split": "one",
    "cpu": None,
    "memory": None,
    "ephemeral": None,
    "fpga": None,
    "pod_level_cpu": None,
    "overhead_cpu": None,
    "placement": {},
    "tolerations": [],
    "scheduler": None,
    "gated": False,
    "message": None,
    "nominated": None,
}
