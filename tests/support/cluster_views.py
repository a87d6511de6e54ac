"""ClusterViews built by hand from plain data (no cache, no watch): what the cache would hold for a
few GPU nodes, for table tests of the fit search and of the decision."""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.types import CPU_MILLI, ClusterView, NodeInfo, Taint, empty_view

GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int
    used: int = 0  # GPUs used by bound pods
    cpu: int = 8000
    used_cpu: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    cordoned: bool = False


def view_of(*nodes: Node) -> ClusterView:
    """What the cache would hold for these nodes: free-count buckets, label index, cordoned aside."""
    view = empty_view((GPU,))
    for n in nodes:
        info = NodeInfo(n.name, n.labels, n.taints, n.cordoned, True, {GPU: n.gpus, CPU_MILLI: n.cpu})
        view.nodes[n.name] = info
        view.used[n.name] = {GPU: n.used, CPU_MILLI: n.used_cpu}
        view.max_allocatable[GPU] = max(view.max_allocatable[GPU], n.gpus)
        for item in n.labels.items():
            view.by_label.setdefault(item, {})[n.name] = None
        if n.cordoned:
            view.cordoned[n.name] = None
            view.unschedulable_gpu_nodes.add(n.name)
        else:
            view.buckets[GPU].setdefault(n.gpus - n.used, {})[n.name] = None
            view.bucket_of[GPU][n.name] = n.gpus - n.used
    return view
