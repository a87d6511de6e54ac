"""A node's place in the cluster view's indexes, as the watch shows it (pure: writes the view's own
structures in place): its labels (by_label), the most any node has of each GPU resource, and whether
it is a GPU node the scheduler cannot use (unschedulable_gpu_nodes) or a Ready one that is cordoned
(cordoned). What it holds and what is free on it is the ClaimLedger's (webhook.accounting)."""

from __future__ import annotations

from webhook.types import ClusterView, NodeInfo


def index_node(view: ClusterView, node: NodeInfo) -> None:
    """File `node` (already in view.nodes) under its labels and GPU states."""
    for item in node.labels.items():
        view.by_label.setdefault(item, {})[node.name] = None
    has_gpus = False
    for resource in view.gpu_resources:
        if resource in node.allocatable:
            has_gpus = True
            view.max_allocatable[resource] = max(view.max_allocatable[resource], node.allocatable[resource])
    if has_gpus and not node.schedulable:
        view.unschedulable_gpu_nodes.add(node.name)
    else:
        view.unschedulable_gpu_nodes.discard(node.name)
    if has_gpus and node.ready and node.unschedulable:
        view.cordoned[node.name] = None
    else:
        view.cordoned.pop(node.name, None)


def unindex_labels(view: ClusterView, node: NodeInfo) -> None:
    """Take `node` out of the label index (before it is filed again, or gone)."""
    by_label = view.by_label
    for item in node.labels.items():
        names = by_label[item]
        del names[node.name]
        if not names:
            del by_label[item]


def unindex_node(view: ClusterView, name: str) -> None:
    """Take a node that is gone out of the GPU states (its labels: unindex_labels)."""
    view.unschedulable_gpu_nodes.discard(name)
    view.cordoned.pop(name, None)
