"""`python -m replay.export --kubeconfig K --out DIR`: a live cluster's nodes and pods as the
replay's CSVs (nodes.csv, pods.csv), best effort.

A cluster only remembers the pods it still has: deleted pods are gone, so the history starts at
the oldest pod alive, and pods still running get an empty deletion_time (the replay keeps them
until the end of its slice). Times are seconds from the oldest pod's creation. The GPU model
comes from a node label (default `nvidia.com/gpu.product`, set by NVIDIA GPU feature discovery).

Row building is pure (`build_node_row`, `build_pod_row`); `main` does the listing and writing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from replay import trace
from replay.history import CPU, MEMORY, ObjectError, parse_requests, to_units

DEFAULT_MODEL_LABEL = "nvidia.com/gpu.product"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
PAGE_SIZE = 500


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def parse_time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _seconds(moment: datetime | None, origin: datetime) -> float | None:
    return None if moment is None else max(0.0, (moment - origin).total_seconds())


def build_node_row(raw: Mapping[str, Any], *, gpu_resource: str, model_label: str) -> trace.NodeRow:
    meta = _map(raw.get("metadata"))
    allocatable = _map(_map(raw.get("status")).get("allocatable"))
    gpus = to_units(gpu_resource, allocatable.get(gpu_resource, 0))
    return trace.NodeRow(
        name=str(meta.get("name", "")),
        cpu_milli=to_units(CPU, allocatable.get(CPU, 0)),
        memory_mib=to_units(MEMORY, allocatable.get(MEMORY, 0)),
        gpus=gpus,
        model=str(_map(meta.get("labels")).get(model_label, "")) if gpus else "",
    )


def gpu_models(spec: Mapping[str, Any], model_label: str) -> tuple[str, ...]:
    """The models a pod is pinned to by nodeSelector or by required node affinity (first term)."""
    selected = _map(spec.get("nodeSelector")).get(model_label)
    if selected:
        return (str(selected),)
    required = _map(_map(_map(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ))  # fmt: skip
    for term in required.get("nodeSelectorTerms") or ():
        for expression in _map(term).get("matchExpressions") or ():
            e = _map(expression)
            if e.get("key") == model_label and e.get("operator") == "In":
                return tuple(str(v) for v in e.get("values") or ())
    return ()


def _scheduled_at(status: Mapping[str, Any]) -> datetime | None:
    for condition in status.get("conditions") or ():
        c = _map(condition)
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def build_pod_row(
    raw: Mapping[str, Any], *, index: int, origin: datetime, gpu_resource: str, model_label: str
) -> trace.PodRow:
    meta = _map(raw.get("metadata"))
    spec = _map(raw.get("spec"))
    status = _map(raw.get("status"))
    requests = parse_requests(spec)
    gpus = requests.get(gpu_resource, 0)
    created = _seconds(parse_time(meta.get("creationTimestamp")), origin)
    return trace.PodRow(
        index=index,
        name=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        cpu_milli=requests.get(CPU, 0),
        memory_mib=requests.get(MEMORY, 0),
        num_gpu=gpus,
        gpu_milli=1000 * gpus,
        gpu_models=gpu_models(spec, model_label),
        qos=str(status.get("qosClass", "")),
        phase=str(status.get("phase", "")),
        creation=created or 0.0,
        deletion=_seconds(parse_time(meta.get("deletionTimestamp")), origin),
        scheduled=_seconds(_scheduled_at(status), origin),
    )


def build_rows(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    gpu_resource: str,
    model_label: str,
    skip_namespaces: Sequence[str],
) -> tuple[list[trace.NodeRow], list[trace.PodRow]]:
    node_rows = [build_node_row(n, gpu_resource=gpu_resource, model_label=model_label) for n in nodes]
    kept = [p for p in pods if _map(p.get("metadata")).get("namespace") not in skip_namespaces]
    created = [parse_time(_map(p.get("metadata")).get("creationTimestamp")) for p in kept]
    stamps = [c for c in created if c is not None]
    if not stamps:
        return node_rows, []
    origin = min(stamps)
    rows = [
        build_pod_row(p, index=i, origin=origin, gpu_resource=gpu_resource, model_label=model_label)
        for i, p in enumerate(kept)
    ]
    return node_rows, sorted(rows, key=lambda r: r.creation)


def _list_all(call: Any) -> list[Mapping[str, Any]]:
    items: list[Mapping[str, Any]] = []
    token = ""
    while True:
        response = call(limit=PAGE_SIZE, _continue=token or None, _preload_content=False, _request_timeout=60)
        body = json.loads(response.data)
        items += body.get("items") or []
        token = (body.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replay.export", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True, help="kubeconfig of the cluster to export")
    parser.add_argument("--out", type=Path, required=True, help="directory for nodes.csv and pods.csv")
    parser.add_argument("--gpu-model-label", default=DEFAULT_MODEL_LABEL, help="node label holding the GPU model")
    parser.add_argument("--gpu-resource", default=DEFAULT_GPU_RESOURCE, help="extended resource counting GPUs")
    parser.add_argument("--skip-namespaces", default="kube-system", help="comma-separated namespaces to leave out")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    from kubernetes import client, config  # noqa: PLC0415 - only the exporter talks to a live cluster

    api = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
    try:
        nodes = _list_all(api.list_node)
        pods = _list_all(api.list_pod_for_all_namespaces)
        node_rows, pod_rows = build_rows(
            nodes,
            pods,
            gpu_resource=args.gpu_resource,
            model_label=args.gpu_model_label,
            skip_namespaces=[n.strip() for n in args.skip_namespaces.split(",") if n.strip()],
        )
    except (ObjectError, ValueError) as error:
        sys.stderr.write(f"replay.export: {error}\n")
        return 1
    finally:
        api.api_client.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "nodes.csv").write_text(trace.format_nodes(node_rows))
    (args.out / "pods.csv").write_text(trace.format_pods(pod_rows))
    sys.stdout.write(f"wrote {len(node_rows)} nodes and {len(pod_rows)} pods to {args.out}/nodes.csv, pods.csv\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
