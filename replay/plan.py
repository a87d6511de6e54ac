"""What to replay: the slice of the history, the pods already running when it starts, the
background load, and the timed create/delete events (pure).

Why a background: the openb pod list is a *sample* of its cluster's pods. Replayed as it is, it
never asks for more than about 70 of the 6,212 GPUs at once, so nothing would ever burst. The
background stands for the rest of the cluster's work: one holder pod per GPU node, bound
directly, that keeps all but `free_gpus` GPUs of the cluster busy for the whole replay. The free
GPUs are left in fragments of 1, 2, 4 or 8 on randomly chosen nodes (seeded), the way a busy
cluster fragments (Weng et al., ATC 2023). Holders also use CPU and memory in proportion, at the
trace's median CPU and memory per GPU.
"""

from __future__ import annotations

import random
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from replay.gangs import Gang, group_gangs
from replay.trace import NodeRow, PodRow

# Sizes of the free-GPU fragments the background leaves, and how often each occurs. Mostly single
# GPUs, as in a packed cluster; now and then a whole 8-GPU node, so 8-GPU pods can sometimes stay.
FREE_FRAGMENTS: tuple[tuple[int, float], ...] = ((1, 0.5), (2, 0.25), (4, 0.15), (8, 0.10))
# Kubernetes object names are DNS-1123 labels here (63 characters); keep room for "-nimbix".
_NAME_OK = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 56

EventKind = Literal["create", "delete"]
PodRole = Literal["replay", "preload"]


class PlanError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Holder:
    """One background pod: it holds `gpus` GPUs (and some CPU and memory) of `node` throughout."""

    node: str
    gpus: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class PlannedPod:
    row: PodRow
    name: str  # the Kubernetes name
    role: PodRole
    node: str = ""  # preload pods are created bound to this node


@dataclass(frozen=True, slots=True)
class Event:
    at: float  # trace seconds
    kind: EventKind
    pod: str  # Kubernetes name


@dataclass(frozen=True, slots=True)
class Plan:
    nodes: tuple[NodeRow, ...]
    pods: Mapping[str, PlannedPod]  # replay and preload pods by Kubernetes name
    replay: tuple[str, ...]  # replay pod names in creation order
    preload: tuple[str, ...]
    background: tuple[Holder, ...]
    events: tuple[Event, ...]
    start: float  # trace time of the first replayed creation
    end: float  # trace time of the last replayed creation: the replay stops there
    total_gpus: int
    free_gpus: int  # GPUs the background leaves to the trace (all of them without background)
    preload_skipped: int  # running at the start but no room left for them
    gangs: tuple[Gang, ...] = ()  # replayed pods of one trace job, replayed as a pod group (replay.gangs)


def k8s_names(rows: Sequence[PodRow]) -> dict[int, str]:
    """Row index -> a valid, unique Kubernetes name: the trace name when it is one, else pod-<index>."""
    names: dict[int, str] = {}
    used: set[str] = set()
    for row in rows:
        slug = row.name.lower()
        name = slug if _NAME_OK.match(slug) and len(slug) <= MAX_NAME and slug not in used else f"pod-{row.index}"
        used.add(name)
        names[row.index] = name
    return names


def median_per_gpu(pods: Sequence[PodRow]) -> tuple[int, int]:
    """Median (cpu_milli, memory_mib) per requested GPU over the GPU pods of the trace."""
    gpu_pods = [p for p in pods if p.gpus > 0]
    if not gpu_pods:
        return 0, 0
    cpu = statistics.median(p.cpu_milli / p.gpus for p in gpu_pods)
    memory = statistics.median(p.memory_mib / p.gpus for p in gpu_pods)
    return int(cpu), int(memory)


def build_background(
    nodes: Sequence[NodeRow], *, free_gpus: int, seed: int, cpu_per_gpu: int, memory_per_gpu: int
) -> list[Holder]:
    """Holders for every GPU node, leaving `free_gpus` GPUs free in fragments (see FREE_FRAGMENTS)."""
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    rng = random.Random(seed)
    order = list(gpu_nodes)
    rng.shuffle(order)
    sizes = [size for size, _ in FREE_FRAGMENTS]
    weights = [weight for _, weight in FREE_FRAGMENTS]
    left = free_gpus
    free: dict[str, int] = {}
    for node in order:
        if left <= 0:
            break
        take = min(rng.choices(sizes, weights)[0], node.gpus, left)
        free[node.name] = take
        left -= take
    holders = []
    for node in gpu_nodes:
        held = node.gpus - free.get(node.name, 0)
        if held <= 0:
            continue
        holders.append(
            Holder(
                node=node.name,
                gpus=held,
                cpu_milli=min(node.cpu_milli * held // node.gpus, held * cpu_per_gpu),
                memory_mib=min(node.memory_mib * held // node.gpus, held * memory_per_gpu),
            )
        )
    return holders


@dataclass(slots=True)
class _Room:
    node: NodeRow
    gpus: int
    cpu: int
    memory: int


def place_preload(
    nodes: Sequence[NodeRow], background: Sequence[Holder], pods: Sequence[PodRow]
) -> tuple[dict[int, str], int]:
    """Best-fit placement (fewest free GPUs that still fit; CPU pods on the most free CPU) of the
    pods already running at the slice start. Returns {row index: node} and how many did not fit."""
    rooms = {n.name: _Room(n, n.gpus, n.cpu_milli, n.memory_mib) for n in nodes}
    for holder in background:
        room = rooms[holder.node]
        room.gpus -= holder.gpus
        room.cpu -= holder.cpu_milli
        room.memory -= holder.memory_mib
    placed: dict[int, str] = {}
    skipped = 0
    for pod in pods:
        fitting = [
            r
            for r in rooms.values()
            if r.gpus >= pod.gpus
            and r.cpu >= pod.cpu_milli
            and r.memory >= pod.memory_mib
            and (not pod.gpu_models or r.node.model in pod.gpu_models)
            and (pod.gpus > 0 or r.node.gpus == 0 or r.gpus == 0)  # CPU pods stay off free GPUs
        ]
        if not fitting:
            skipped += 1
            continue
        if pod.gpus > 0:
            best = min(fitting, key=lambda r: (r.gpus, r.node.name))
        else:
            best = max(fitting, key=lambda r: (r.cpu, r.node.name))
        best.gpus -= pod.gpus
        best.cpu -= pod.cpu_milli
        best.memory -= pod.memory_mib
        placed[pod.index] = best.node.name
    return placed, skipped


def build_events(planned: Sequence[PlannedPod], *, start: float, end: float) -> list[Event]:
    """Creations of replay pods, and deletions (of replay and preload pods) up to `end`.

    At equal times deletions come first (they free room), except a pod's own deletion, which
    always follows its creation.
    """
    keyed: list[tuple[float, int, int, Event]] = []
    for seq, pod in enumerate(planned):
        row = pod.row
        if pod.role == "replay":
            keyed.append((row.creation, 1, seq, Event(row.creation, "create", pod.name)))
        if row.deletion is not None and start <= row.deletion <= end:
            rank = 2 if pod.role == "replay" and row.deletion == row.creation else 0
            keyed.append((row.deletion, rank, seq, Event(row.deletion, "delete", pod.name)))
    keyed.sort(key=lambda item: item[:3])
    return [event for *_, event in keyed]


def build_plan(
    nodes: Sequence[NodeRow],
    pods: Sequence[PodRow],
    *,
    start_index: int,
    count: int,
    free_gpus: int | None,
    seed: int,
    background_gpus_only: bool = False,
    gangs: bool = True,
) -> Plan:
    """`free_gpus` None: no background (replaying a complete history of your own cluster).
    `background_gpus_only`: holders take GPUs but no CPU or memory (an experiment: what if only
    GPUs were ever scarce?). `gangs`: replay a multi-pod trace job as one gang (False: pod by pod)."""
    if not 0 <= start_index < len(pods):
        raise PlanError(f"--start-index {start_index} is outside the pod list (0..{len(pods) - 1})")
    if count < 1:
        raise PlanError("--count must be at least 1")
    chosen = list(pods[start_index : start_index + count])
    start, end = chosen[0].creation, chosen[-1].creation
    total_gpus = sum(n.gpus for n in nodes)
    background: list[Holder] = []
    if free_gpus is not None and free_gpus < total_gpus:
        cpu_per_gpu, memory_per_gpu = (0, 0) if background_gpus_only else median_per_gpu(pods)
        background = build_background(
            nodes, free_gpus=free_gpus, seed=seed, cpu_per_gpu=cpu_per_gpu, memory_per_gpu=memory_per_gpu
        )
    running = [
        p
        for p in pods[:start_index]
        if p.scheduled is not None and p.scheduled <= start and (p.deletion is None or p.deletion > start)
    ]
    placed, skipped = place_preload(nodes, background, running)
    names = k8s_names(list(pods))
    planned: list[PlannedPod] = [
        PlannedPod(row=p, name=names[p.index], role="preload", node=placed[p.index])
        for p in running
        if p.index in placed
    ]
    planned += [PlannedPod(row=p, name=names[p.index], role="replay") for p in chosen]
    return Plan(
        nodes=tuple(nodes),
        pods={p.name: p for p in planned},
        replay=tuple(p.name for p in planned if p.role == "replay"),
        preload=tuple(p.name for p in planned if p.role == "preload"),
        background=tuple(background),
        events=tuple(build_events(planned, start=start, end=end)),
        start=start,
        end=end,
        total_gpus=total_gpus,
        free_gpus=total_gpus - sum(h.gpus for h in background),
        preload_skipped=skipped,
        gangs=group_gangs((p.name, p.row) for p in planned if p.role == "replay") if gangs else (),
    )
