"""Cluster data for the benchmarks, as raw Kubernetes JSON (pure: no I/O but reading the trace CSVs).

Two sources, both fed to the webhook exactly as the API server would send them:
- synthetic clusters of N nodes with PODS_PER_NODE pods each (GPU pods on part of them), and
- the real 1,523-node Alibaba GPU cluster ("openb", data/alibaba-gpu-2023 in the checkout) with its pods.

And the AdmissionReview bodies the load generator sends: a real-looking pod of a few KB.
Everything is deterministic (seeded), so two processes generating the same cluster agree.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devplatform.cluster import nodes

GPU = "nvidia.com/gpu"
GPU_MODEL_LABEL = "nimbix-burst.bench/gpu-model"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
# Every cluster has it: the webhook bursts only once it knows its UID (the cluster identity in job labels).
KUBE_SYSTEM = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "kube-system", "uid": "6b1d0c8e-3f2a-4e7b-9c5d-1a2b3c4d5e6f"},
}
# What the DefaultTolerationSeconds admission plugin adds to every pod.
DEFAULT_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
)
# Kubernetes' scalability envelope is 5,000 nodes / 150,000 pods: 30 pods per node.
PODS_PER_NODE = 30
# A fixed-length token in every review body; the load generator swaps in a fresh UUID per request.
UID_PLACEHOLDER = "00000000-0000-4000-8000-000000000000"
# The trace ships with the checkout (data/alibaba-gpu-2023): `make bench` runs wherever it is cloned.
ALIBABA_DIR = Path(__file__).resolve().parents[1] / "data" / "alibaba-gpu-2023"
ALIBABA_NODES = "openb_node_list_all_node.csv"
ALIBABA_PODS = "openb_pod_list_default.csv"
_CREATED = "2025-01-06T09:00:00Z"

RawObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """A synthetic cluster: 3 nodes in 5 carry GPUS_PER_NODE GPUs (tainted, as GPU pools usually
    are), the rest are CPU-only. Every GPU node has 1..8 GPUs in use, so an 8-GPU pod never fits
    (it ends remote) while a 1-GPU pod always does (it ends local). One pod in PENDING_EVERY nodes'
    worth is an unbound GPU pod, which the cache holds as a claim (as the scheduler's queue would)."""

    nodes: int
    pods_per_node: int = PODS_PER_NODE
    gpus_per_node: int = 8
    pending_every: int = 10
    seed: int = 6

    def is_gpu_node(self, index: int) -> bool:
        return index % 5 < 3


@dataclass(frozen=True, slots=True)
class ClusterCounts:
    nodes: int
    gpu_nodes: int
    gpus: int
    pods: int
    gpu_pods: int
    gpus_in_use: int
    pending_gpu_pods: int


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def build_node(
    name: str,
    *,
    uid: str,
    gpus: int,
    cpu: str,
    memory: str,
    zone: str,
    model: str = "",
    tainted: bool = False,
) -> RawObject:
    resources = nodes.node_resources(gpus=gpus, cpu=cpu, memory=memory, pods=110, gpu_resource=GPU)
    resources["ephemeral-storage"] = "500Gi"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/zone": zone,
        "node.kubernetes.io/instance-type": f"gpu-{gpus}x" if gpus else "cpu",
    }
    if model:
        labels[GPU_MODEL_LABEL] = model
    node = nodes.build_fake_node(
        name, resources=resources, labels=labels, taints=[dict(GPU_TAINT)] if tainted else (), message="bench"
    )
    # What a watch cache sees from a real API server: identity, version, creation time, a pod CIDR.
    node["metadata"].update(uid=uid, resourceVersion="1", creationTimestamp=_CREATED)
    node["spec"]["podCIDR"] = "10.244.0.0/24"
    return node


@dataclass(frozen=True, slots=True)
class PodRecord:
    """The fields that vary between generated pods; `render_pod` turns one into API JSON."""

    name: str
    namespace: str
    uid: str
    node: str  # "" -> unbound
    gpus: int
    cpu: str
    memory: str
    phase: str
    app: str


def build_pod(record: PodRecord) -> RawObject:
    """A watched pod as the API server lists it (trimmed of fields nothing reads; ~1.2 KB as JSON)."""
    limits: RawObject = {"cpu": record.cpu, "memory": record.memory}
    if record.gpus:
        limits[GPU] = str(record.gpus)
    spec: RawObject = {
        "containers": [
            {
                "name": "main",
                "image": f"registry.example.com/{record.app}:1.4.2",
                "resources": {"requests": dict(limits), "limits": dict(limits)},
                "env": [{"name": "APP", "value": record.app}, {"name": "LOG_LEVEL", "value": "info"}],
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io"}],
            }
        ],
        "restartPolicy": "Always",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "tolerations": [*([GPU_TOLERATION] if record.gpus else []), *DEFAULT_TOLERATIONS],
        "volumes": [
            {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
        ],
    }
    if record.node:
        spec["nodeName"] = record.node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": record.name,
            "namespace": record.namespace,
            "uid": record.uid,
            "resourceVersion": "1",
            "creationTimestamp": _CREATED,
            "labels": {"app": record.app, "pod-template-hash": "7d9c4b8f6"},
        },
        "spec": spec,
        "status": {"phase": record.phase, "qosClass": "Guaranteed"},
    }


_MARK = "~~"  # appears nowhere in a generated pod, and JSON leaves it alone


def _split_template(*, gpu: bool, bound: bool) -> tuple[list[str], list[str]]:
    """JSON of a pod with a marked token in every varying field -> (constant texts, field names)."""

    def token(field_name: str) -> str:
        return f"{_MARK}{field_name}{_MARK}"

    record = PodRecord(
        name=token("name"),
        namespace=token("namespace"),
        uid=token("uid"),
        node=token("node") if bound else "",
        gpus=1 if gpu else 0,
        cpu=token("cpu"),
        memory=token("memory"),
        phase=token("phase"),
        app=token("app"),
    )
    text = json.dumps(build_pod(record), separators=(",", ":"))
    if gpu:
        text = text.replace(f'"{GPU}":"1"', f'"{GPU}":"{token("gpus")}"')
    parts = text.split(_MARK)
    return parts[0::2], parts[1::2]


_TEMPLATES = {(gpu, bound): _split_template(gpu=gpu, bound=bound) for gpu in (False, True) for bound in (False, True)}


def render_pod(record: PodRecord) -> bytes:
    """build_pod(record) as compact JSON, from a template (about 30x faster than json.dumps)."""
    constants, fields = _TEMPLATES[(record.gpus > 0, bool(record.node))]
    out = [constants[0]]
    for field_name, constant in zip(fields, constants[1:], strict=True):
        out.append(str(getattr(record, field_name)))
        out.append(constant)
    return "".join(out).encode()


def _uid(seed: int, serial: int) -> str:
    return f"{serial & 0xFFFFFFFF:08x}-{seed & 0xFFFF:04x}-4000-8000-{serial:012x}"


# ----- synthetic clusters -----------------------------------------------------------------------


def synthetic_nodes(spec: SyntheticSpec) -> Iterator[RawObject]:
    for i in range(spec.nodes):
        gpu = spec.is_gpu_node(i)
        yield build_node(
            node_name(i),
            uid=_uid(spec.seed, i),
            gpus=spec.gpus_per_node if gpu else 0,
            cpu="96" if gpu else "32",
            memory="768Gi" if gpu else "128Gi",
            zone=f"zone-{i % 3}",
            model="A100" if gpu else "",
            tainted=gpu,
        )


def _split_gpus(total: int, rng: random.Random) -> list[int]:
    parts = []
    while total:
        part = min(total, rng.choice((1, 1, 2, 4)))
        parts.append(part)
        total -= part
    return parts


def synthetic_pods(spec: SyntheticSpec) -> Iterator[PodRecord]:
    """PODS_PER_NODE pods per node: GPU pods using 1..8 GPUs on each GPU node, CPU pods elsewhere,
    and every `pending_every`-th node's last pod an unbound 1-GPU pod instead."""
    rng = random.Random(spec.seed)
    serial = 0
    for i in range(spec.nodes):
        node = node_name(i)
        gpu_parts = _split_gpus(rng.randint(1, spec.gpus_per_node), rng) if spec.is_gpu_node(i) else []
        for slot in range(spec.pods_per_node):
            serial += 1
            pending = slot == spec.pods_per_node - 1 and i % spec.pending_every == 0
            gpus = 1 if pending else (gpu_parts[slot] if slot < len(gpu_parts) else 0)
            app = f"train-{serial % 97:02d}" if gpus else f"svc-{serial % 89:02d}"
            yield PodRecord(
                name=f"{app}-7d9c4b8f6-{serial:07d}",
                namespace=f"team-{serial % 40:02d}",
                uid=_uid(spec.seed + 1, serial),
                node="" if pending else node,
                gpus=gpus,
                cpu="8" if gpus else "500m",
                memory="64Gi" if gpus else "1Gi",
                phase="Pending" if pending else "Running",
                app=app,
            )


# ----- the Alibaba GPU cluster ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int  # whole GPUs: a fraction (gpu_milli < 1000) counts as one
    phase: str


def read_trace_nodes(path: Path) -> list[TraceNode]:
    with path.open(newline="") as handle:
        return [
            TraceNode(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"]), row["model"])
            for row in csv.DictReader(handle)
        ]


def read_trace_pods(path: Path) -> list[TracePod]:
    pods = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            gpus = int(row["num_gpu"])
            if gpus == 0 and int(row["gpu_milli"] or 0) > 0:
                gpus = 1
            pods.append(TracePod(row["name"], int(row["cpu_milli"]), int(row["memory_mib"]), gpus, row["pod_phase"]))
    return pods


def place_first_fit(nodes: Sequence[TraceNode], pods: Sequence[TracePod]) -> dict[str, str]:
    """Pod name -> node for the Running pods: GPU pods first-fit by free GPUs in node order, CPU pods
    round-robin over the CPU-only nodes. Pending, Failed and Succeeded pods stay unbound."""
    free = [n.gpus for n in nodes]
    cpu_nodes = [n.name for n in nodes if n.gpus == 0] or [n.name for n in nodes]
    first_nonfull = 0  # every node before this one has no free GPU left
    placed: dict[str, str] = {}
    cpu_turn = 0
    for pod in pods:
        if pod.phase != "Running":
            continue
        if pod.gpus == 0:
            placed[pod.name] = cpu_nodes[cpu_turn % len(cpu_nodes)]
            cpu_turn += 1
            continue
        while first_nonfull < len(free) and free[first_nonfull] == 0:
            first_nonfull += 1
        for index in range(first_nonfull, len(free)):
            if free[index] >= pod.gpus:
                free[index] -= pod.gpus
                placed[pod.name] = nodes[index].name
                break
    return placed


def alibaba_nodes(data_dir: Path = ALIBABA_DIR) -> Iterator[RawObject]:
    for i, node in enumerate(read_trace_nodes(data_dir / ALIBABA_NODES)):
        yield build_node(
            node.name,
            uid=_uid(2023, i),
            gpus=node.gpus,
            cpu=f"{node.cpu_milli}m",
            memory=f"{node.memory_mib}Mi",
            zone=f"zone-{i % 3}",
            model=node.model,
        )


def alibaba_pods(data_dir: Path = ALIBABA_DIR) -> Iterator[PodRecord]:
    nodes = read_trace_nodes(data_dir / ALIBABA_NODES)
    pods = read_trace_pods(data_dir / ALIBABA_PODS)
    placed = place_first_fit(nodes, pods)
    for i, pod in enumerate(pods):
        yield PodRecord(
            name=pod.name,
            namespace=f"team-{i % 40:02d}",
            uid=_uid(2024, i),
            node=placed.get(pod.name, ""),
            gpus=pod.gpus,
            cpu=f"{max(pod.cpu_milli, 1)}m",
            memory=f"{max(pod.memory_mib, 1)}Mi",
            phase=pod.phase,
            app="openb-gpu" if pod.gpus else "openb-cpu",
        )


# ----- clusters by name -------------------------------------------------------------------------


def cluster_sources(name: str) -> tuple[Iterator[RawObject], Iterator[PodRecord]]:
    """ "synthetic:<nodes>" or "alibaba" -> (raw nodes, pod records), both lazy."""
    if name == "alibaba":
        return alibaba_nodes(), alibaba_pods()
    kind, _, size = name.partition(":")
    if kind != "synthetic" or not size.isdigit():
        raise ValueError(f"unknown cluster {name!r}: use synthetic:<nodes> or alibaba")
    spec = SyntheticSpec(nodes=int(size))
    return synthetic_nodes(spec), synthetic_pods(spec)


def cluster_json(name: str) -> tuple[list[bytes], list[bytes]]:
    """Every node and pod of a cluster as compact JSON, one bytes object per item."""
    nodes, pods = cluster_sources(name)
    return [json.dumps(n, separators=(",", ":")).encode() for n in nodes], [render_pod(p) for p in pods]


def parse_pages(items: Sequence[bytes], *, page_size: int = 500) -> list[RawObject]:
    """JSON items -> dicts, a page at a time as the watcher decodes list responses."""
    parsed: list[RawObject] = []
    for start in range(0, len(items), page_size):
        parsed.extend(json.loads(b"[" + b",".join(items[start : start + page_size]) + b"]"))
    return parsed


def count_cluster(nodes: Sequence[RawObject], pods: Sequence[PodRecord]) -> ClusterCounts:
    gpu_nodes = [n for n in nodes if GPU in n["status"]["allocatable"]]
    gpu_pods = [p for p in pods if p.gpus]
    return ClusterCounts(
        nodes=len(nodes),
        gpu_nodes=len(gpu_nodes),
        gpus=sum(int(n["status"]["allocatable"][GPU]) for n in gpu_nodes),
        pods=len(pods),
        gpu_pods=len(gpu_pods),
        gpus_in_use=sum(p.gpus for p in gpu_pods if p.node and p.phase == "Running"),
        pending_gpu_pods=sum(1 for p in gpu_pods if not p.node and p.phase == "Pending"),
    )


# ----- AdmissionReview bodies -------------------------------------------------------------------


REVIEW_NAMESPACE = "ml-team"  # where the reviewed pod is created (no budget, no caps)


def build_review_pod(
    *, gpus: int, name: str = "trainer-7f9c4b8d6-x2k9q", namespace: str = REVIEW_NAMESPACE
) -> RawObject:
    """A pod as the API server hands it to a mutating webhook: defaulted, with the service-account
    volume, default tolerations, several env vars, volumes, labels and annotations (~3 KB)."""
    limits = {"cpu": "8", "memory": "64Gi", GPU: str(gpus)}
    env = [
        {"name": "MODEL_NAME", "value": "resnet152"},
        {"name": "DATASET_PATH", "value": "/data/imagenet"},
        {"name": "CHECKPOINT_DIR", "value": "/checkpoints/run-2025-01-06"},
        {"name": "EPOCHS", "value": "90"},
        {"name": "BATCH_SIZE", "value": "256"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "OMP_NUM_THREADS", "value": "8"},
        {"name": "WANDB_PROJECT", "value": "vision-baselines"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "trainer-secrets", "key": "api-token"}}},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "namespace": namespace,
            "labels": {
                "task-type": "Nimbix",
                "app.kubernetes.io/name": "trainer",
                "app.kubernetes.io/instance": "resnet152-run-42",
                "app.kubernetes.io/part-of": "vision-baselines",
                "pod-template-hash": "7f9c4b8d6",
                "team": "ml-research",
            },
            "annotations": {
                "kubectl.kubernetes.io/default-container": "trainer",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "example.com/owner": "ml-research@example.com",
                "example.com/cost-center": "cc-4711",
                # Its checkpoints PVC follows a burst job (without it the pod would stay local).
                "nimbix-burst.io/stage-out": "/checkpoints",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "trainer-7f9c4b8d6",
                    "uid": "6b3f9c2e-1d4a-4c8b-9e7f-2a5d8c1b3e4f",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "initContainers": [
                {
                    "name": "fetch-dataset",
                    "image": "registry.example.com/tools/fetch:2.3.1",
                    "command": ["sh", "-c", "fetch --to /data imagenet"],
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "512Mi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example.com/ml/trainer:2025.01.3",
                    "command": ["python", "-m", "trainer"],
                    "args": ["--config", "/etc/trainer/config.yaml"],
                    "ports": [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                    "env": env,
                    "resources": {"requests": dict(limits), "limits": dict(limits)},
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/data"},
                        {"name": "config", "mountPath": "/etc/trainer", "readOnly": True},
                        {"name": "checkpoints", "mountPath": "/checkpoints"},
                        {"name": "dshm", "mountPath": "/dev/shm"},
                        {
                            "name": "kube-api-access-7xk2p",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        },
                    ],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 9090, "scheme": "HTTP"},
                        "periodSeconds": 10,
                        "timeoutSeconds": 1,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                    "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
                }
            ],
            "volumes": [
                {"name": "data", "emptyDir": {"sizeLimit": "200Gi"}},
                {"name": "config", "configMap": {"name": "trainer-config", "defaultMode": 420}},
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "trainer-checkpoints"}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                {
                    "name": "kube-api-access-7xk2p",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                        }
                                    ]
                                }
                            },
                        ],
                    },
                },
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "trainer",
            "serviceAccount": "trainer",
            "securityContext": {"fsGroup": 1000},
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [GPU_TOLERATION, *DEFAULT_TOLERATIONS],
        },
        "status": {"phase": "Pending", "qosClass": "Guaranteed"},
    }


def build_review(pod: Mapping[str, Any], *, uid: str = UID_PLACEHOLDER, dry_run: bool) -> RawObject:
    """The AdmissionReview v1 the API server POSTs for a pod CREATE."""
    meta = pod.get("metadata") or {}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "4f2d1c3b-8a9e-4b7c-a6d5-1e2f3a4b5c6d",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def review_body(*, gpus: int, dry_run: bool) -> bytes:
    """The request body the load generator sends (it replaces UID_PLACEHOLDER per request)."""
    return json.dumps(build_review(build_review_pod(gpus=gpus), dry_run=dry_run)).encode()
