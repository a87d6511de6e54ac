"""The cache's indexes (free-count buckets, label index) against a linear scan of the cache's own
state, on random clusters (hypothesis). This checks the index only: it reuses the cache's free() and
placement_allows(). The accounting and the filters are checked against an independent oracle written
from Kubernetes' rules in test_cache_oracle.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.webhook.builders import GPU, container, node, pod
from webhook.cache import CANDIDATE_CAP, ClusterCache
from webhook.model import parse_placement
from webhook.scheduling import placement_allows
from webhook.sync import CacheSync

MODELS = ["V100", "T4", "A10"]

nodes_strategy = st.lists(
    st.tuples(
        st.integers(0, 8),  # GPUs
        st.sampled_from(MODELS),
        st.booleans(),  # tainted
        st.booleans(),  # cordoned
    ),
    min_size=1,
    max_size=25,
)
selector_strategy = st.one_of(
    st.just({}),
    st.sampled_from(MODELS).map(lambda m: {"nodeSelector": {"model": m}}),
    st.lists(st.sampled_from(MODELS), min_size=1, max_size=2).map(
        lambda ms: {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "model", "operator": "In", "values": ms}]}]
                    }
                }
            }
        }
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    cluster=nodes_strategy,
    usage=st.lists(st.tuples(st.integers(0, 24), st.integers(1, 4), st.booleans()), max_size=30),
    need=st.integers(1, 8),
    spec=selector_strategy,
    tolerate=st.booleans(),
)
def test_find_fit_matches_brute_force(
    cluster: list[tuple[int, str, bool, bool]],
    usage: list[tuple[int, int, bool]],
    need: int,
    spec: dict[str, object],
    tolerate: bool,
) -> None:
    cache = ClusterCache(gpu_resources=(GPU,), clock=lambda: 0.0, reservation_ttl=60)
    sync = CacheSync(cache, clock=lambda: 0.0)
    raw_nodes = [
        node(
            f"n{i}",
            gpus,
            labels={"model": model},
            taints=[{"key": "k", "effect": "NoSchedule"}] if tainted else [],
            unschedulable=cordoned,
        )
        for i, (gpus, model, tainted, cordoned) in enumerate(cluster)
    ]
    sync.apply_list("nodes", raw_nodes)
    for j, (index, gpus, bound) in enumerate(usage):
        raw = pod(container(gpus=gpus), name=f"p{j}", node_name=f"n{index % len(cluster)}" if bound else "")
        raw["metadata"]["uid"] = f"u{j}"
        sync.apply_event("pods", "ADDED", raw)
    if tolerate:
        spec = {**spec, "tolerations": [{"key": "k", "operator": "Exists"}]}
    placement = parse_placement(spec)

    eligible = [n for n in cache.nodes() if n.schedulable and GPU in n.allocatable and placement_allows(placement, n)]
    free = {n.name: max(cache.free(n.name).get(GPU, 0), 0) for n in eligible}
    fitting = [n.name for n in eligible if free[n.name] >= need]

    fit = cache.find_fit({GPU: need}, placement)
    if not fitting:
        assert fit.node is None
    else:
        assert fit.node is not None and fit.node.name in fitting
        assert free[fit.node.name] == min(free[name] for name in fitting)  # best fit
        assert fit.candidates == min(len(fitting), CANDIDATE_CAP)

    partial = cache.best_partial_fit(GPU, placement)
    if not eligible:
        assert partial is None
    else:
        assert partial is not None
        assert partial[1] == max(free.values())


@settings(max_examples=200, deadline=None)
@given(
    cluster=nodes_strategy,
    events=st.lists(
        st.tuples(
            st.sampled_from(["pod", "delete-pod", "delete-node", "cordon"]),
            st.integers(0, 24),  # which node or pod
            st.integers(1, 4),  # GPUs
            st.booleans(),  # bound
        ),
        max_size=40,
    ),
)
def test_claim_room_index_matches_a_scan(
    cluster: list[tuple[int, str, bool, bool]], events: list[tuple[str, int, int, bool]]
) -> None:
    """Making room asks the index whether any node with claims would fit the pod with them gone: after
    any sequence of pod and node changes it says what a scan of the claims' nodes says."""
    cache = ClusterCache(gpu_resources=(GPU,), clock=lambda: 0.0, reservation_ttl=60)
    sync = CacheSync(cache, clock=lambda: 0.0)
    sync.apply_list("nodes", [node(f"n{i}", gpus, labels={"model": m}) for i, (gpus, m, _, _) in enumerate(cluster)])
    for j, (what, index, gpus, bound) in enumerate(events):
        name = f"n{index % len(cluster)}"
        if what == "pod":
            raw = pod(container(gpus=gpus), name=f"p{j}", node_name=name if bound else "")
            raw["metadata"]["uid"] = f"u{j}"
            sync.apply_event("pods", "ADDED", raw)
        elif what == "delete-pod":
            sync.apply_event("pods", "DELETED", {"metadata": {"uid": f"u{index}", "name": f"p{index}"}})
        elif what == "delete-node":
            sync.apply_event("nodes", "DELETED", {"metadata": {"name": name}})
        else:
            sync.apply_event("nodes", "MODIFIED", node(name, gpus, unschedulable=True))
        view = cache.view
        scan: dict[str, int] = {}
        for claimed_node in view.claims_on:
            info = view.nodes.get(claimed_node)
            if info is not None and GPU in info.allocatable:
                scan[claimed_node] = info.allocatable[GPU] - view.used.get(claimed_node, {}).get(GPU, 0)
        assert view.claim_room.get(GPU, {}) == scan
        counts: dict[int, int] = {}
        for room in scan.values():
            counts[room] = counts.get(room, 0) + 1
        assert view.claim_room_counts.get(GPU, {}) == counts
