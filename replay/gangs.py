"""Which replayed pods are one distributed job, replayed as a gang (pure).

The openb trace has no job column. Its multi-instance jobs show as GPU pods created in the same
second with identical requests (CPU, memory, GPUs, GPU share and model constraint): 25 groups of 2-3
pods in the default slice, 86 in the whole list, where one-off coincidences of a second and five
identical figures are rare. Each such group is replayed the way a user runs one with nimbix-burst: a
Kueue plain-pod group (label `kueue.x-k8s.io/pod-group-name`, annotation
`kueue.x-k8s.io/pod-group-total-count`), which the webhook decides as one: all local or one
multi-node burst.

A burst gang is one JARVICE job holding all of its nodes until its last pod ends, so its GPU-time
is its GPUs x (the last member's end - the creation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from replay.trace import PodRow
from webhook.gangs import ANNOTATION_KUEUE_TOTAL, LABEL_KUEUE_GROUP

GROUP_PREFIX = "gang-"


@dataclass(frozen=True, slots=True)
class Gang:
    """One trace job of several pods: its group name and its pods' Kubernetes names, in trace order."""

    name: str
    members: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.members)


def _signature(row: PodRow) -> tuple[float, int, int, int, int, tuple[str, ...]]:
    return (row.creation, row.cpu_milli, row.memory_mib, row.num_gpu, row.gpu_milli, row.gpu_models)


def group_gangs(pods: Iterable[tuple[str, PodRow]]) -> tuple[Gang, ...]:
    """Gangs among (Kubernetes name, row) pairs: GPU pods with the same creation second and requests.
    A lone pod is no gang; CPU pods never are (the webhook decides only GPU pods)."""
    groups: dict[tuple[float, int, int, int, int, tuple[str, ...]], list[str]] = {}
    for name, row in pods:
        if row.gpus > 0:
            groups.setdefault(_signature(row), []).append(name)
    return tuple(
        Gang(name=GROUP_PREFIX + names[0], members=tuple(names)) for names in groups.values() if len(names) >= 2
    )


def membership(gangs: Sequence[Gang]) -> dict[str, Gang]:
    """Pod name -> its gang."""
    return {member: gang for gang in gangs for member in gang.members}


def pod_group_marks(gang: Gang) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations a pod of the gang carries."""
    # What a user's pod group carries (docs/distributed-training.md), as the webhook reads it.
    return {LABEL_KUEUE_GROUP: gang.name}, {ANNOTATION_KUEUE_TOTAL: str(gang.size)}


@dataclass(frozen=True, slots=True)
class GangOutcome:
    """What became of one gang in a run."""

    gangs: int = 0
    burst: int = 0  # every pod of the gang burst
    split: int = 0  # some pods burst and some not: a gang the webhook must never split
    gpu_hours: float = 0.0  # of the burst gangs, as jobs (see the module's docstring)


def job_hours(rows: Sequence[PodRow], *, end: float) -> float:
    """GPU-hours of one multi-node job made of these pods: all of its GPUs, from the creation until the
    last pod's trace deletion (as for a lone pod: PodRow.duration, `end` for a pod never deleted)."""
    begin = min(row.creation for row in rows)
    stop = max(row.creation + row.duration(end=end) for row in rows)
    return sum(row.gpus for row in rows) * max(stop - begin, 0.0) / 3600.0


def tally(gangs: Sequence[Gang], burst: Mapping[str, bool], rows: Mapping[str, PodRow], *, end: float) -> GangOutcome:
    """`burst`: pod name -> burst (pods not created are left out); `rows`: pod name -> its trace row."""
    outcome = GangOutcome()
    for gang in gangs:
        seen = [burst[m] for m in gang.members if m in burst]
        if not seen:
            continue
        everyone = all(seen) and len(seen) == gang.size
        outcome = GangOutcome(
            gangs=outcome.gangs + 1,
            burst=outcome.burst + everyone,
            split=outcome.split + (any(seen) and not all(seen)),
            gpu_hours=outcome.gpu_hours + (job_hours([rows[m] for m in gang.members], end=end) if everyone else 0.0),
        )
    return outcome
