"""The cluster description and pod history, as CSV in the Alibaba "openb" format (pure).

Nodes: ``sn, cpu_milli, memory_mib, gpu, model``. Pods: ``name, cpu_milli, memory_mib, num_gpu,
gpu_milli, creation_time, deletion_time`` plus the optional ``gpu_spec, qos, pod_phase,
scheduled_time``. Times are seconds from the start of the trace. replay/README.md documents every
column; `replay.export` writes the same format from a live cluster.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_REQUIRED_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time")
POD_OPTIONAL_COLUMNS = ("gpu_spec", "qos", "pod_phase", "scheduled_time")
POD_COLUMNS = POD_REQUIRED_COLUMNS[:5] + POD_OPTIONAL_COLUMNS[:3] + POD_REQUIRED_COLUMNS[5:] + POD_OPTIONAL_COLUMNS[3:]
# gpu_milli is the share of one GPU a pod used (GPU sharing). Kubernetes' nvidia.com/gpu has no
# fractions, so a fractional pod asks for one whole GPU: the same rule as the trace's README.
WHOLE_GPU_MILLI = 1000


class TraceError(ValueError):
    """A CSV row or header we cannot use; the message names the file line and the column."""


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str  # "" for CPU-only nodes (or GPU nodes of unknown model)


@dataclass(frozen=True, slots=True)
class PodRow:
    index: int  # position in the file (0-based): --start-index counts these
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_models: tuple[str, ...]  # gpu_spec split on "|": the pod may only use these models
    qos: str
    phase: str  # the pod's final phase in the source cluster (informational)
    creation: float  # seconds from the trace start
    deletion: float | None  # None: still running when the trace was taken
    scheduled: float | None  # None: never scheduled in the source cluster

    @property
    def gpus(self) -> int:
        """Whole nvidia.com/gpu devices to request: a fraction of a GPU becomes one GPU."""
        if self.num_gpu > 0:
            return self.num_gpu
        return 1 if self.gpu_milli > 0 else 0

    def duration(self, *, end: float) -> float:
        """Seconds the pod lived in the trace; pods never deleted count until `end`."""
        stop = self.deletion if self.deletion is not None else end
        return max(0.0, stop - self.creation)


def _rows(text: str, *, required: Sequence[str], what: str) -> Iterable[tuple[int, Mapping[str, str]]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or ()]
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(f"{what} CSV: missing column(s) {', '.join(missing)} (header: {', '.join(header) or 'empty'})")
    for row in reader:
        # Line numbers as an editor shows them: the header is line 1.
        yield reader.line_num, {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}


def _int(row: Mapping[str, str], column: str, line: int, *, what: str) -> int:
    text = row.get(column, "")
    try:
        value = int(float(text))
    except ValueError:
        raise TraceError(f"{what} CSV line {line}: {column}={text!r} is not a number") from None
    if value < 0:
        raise TraceError(f"{what} CSV line {line}: {column}={text!r} is negative")
    return value


def _time(row: Mapping[str, str], column: str, line: int) -> float | None:
    """Seconds, or None for an empty cell."""
    text = row.get(column, "")
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise TraceError(f"pods CSV line {line}: {column}={text!r} is not a number of seconds") from None


def parse_nodes(text: str) -> list[NodeRow]:
    nodes: list[NodeRow] = []
    seen: set[str] = set()
    for line, row in _rows(text, required=NODE_COLUMNS[:4], what="nodes"):
        name = row.get("sn", "")
        if not name:
            raise TraceError(f"nodes CSV line {line}: sn (the node name) is empty")
        if name in seen:
            raise TraceError(f"nodes CSV line {line}: node {name!r} appears twice")
        seen.add(name)
        nodes.append(
            NodeRow(
                name=name,
                cpu_milli=_int(row, "cpu_milli", line, what="nodes"),
                memory_mib=_int(row, "memory_mib", line, what="nodes"),
                gpus=_int(row, "gpu", line, what="nodes"),
                model=row.get("model", ""),
            )
        )
    return nodes


def parse_gpu_spec(text: str) -> tuple[str, ...]:
    """'V100M16|V100M32' -> ('V100M16', 'V100M32'); '' -> () meaning any model."""
    return tuple(part.strip() for part in text.split("|") if part.strip())


def parse_pods(text: str) -> list[PodRow]:
    """Every row, sorted by creation time (stable, so equal times keep file order)."""
    pods: list[PodRow] = []
    for position, (line, row) in enumerate(_rows(text, required=POD_REQUIRED_COLUMNS, what="pods")):
        name = row.get("name", "")
        if not name:
            raise TraceError(f"pods CSV line {line}: name is empty")
        creation = _time(row, "creation_time", line)
        if creation is None:
            raise TraceError(f"pods CSV line {line}: creation_time is empty")
        deletion = _time(row, "deletion_time", line)
        if deletion is not None and deletion < creation:
            raise TraceError(f"pods CSV line {line}: deletion_time {deletion:g} is before creation_time {creation:g}")
        pods.append(
            PodRow(
                index=position,
                name=name,
                cpu_milli=_int(row, "cpu_milli", line, what="pods"),
                memory_mib=_int(row, "memory_mib", line, what="pods"),
                num_gpu=_int(row, "num_gpu", line, what="pods"),
                gpu_milli=_int(row, "gpu_milli", line, what="pods"),
                gpu_models=parse_gpu_spec(row.get("gpu_spec", "")),
                qos=row.get("qos", ""),
                phase=row.get("pod_phase", ""),
                creation=creation,
                deletion=deletion,
                scheduled=_time(row, "scheduled_time", line),
            )
        )
    ordered = sorted(pods, key=lambda p: p.creation)
    return [_reindexed(p, i) for i, p in enumerate(ordered)] if ordered != pods else pods


def _reindexed(pod: PodRow, index: int) -> PodRow:
    return PodRow(
        index=index,
        name=pod.name,
        cpu_milli=pod.cpu_milli,
        memory_mib=pod.memory_mib,
        num_gpu=pod.num_gpu,
        gpu_milli=pod.gpu_milli,
        gpu_models=pod.gpu_models,
        qos=pod.qos,
        phase=pod.phase,
        creation=pod.creation,
        deletion=pod.deletion,
        scheduled=pod.scheduled,
    )


def _text(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def format_nodes(nodes: Iterable[NodeRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(NODE_COLUMNS)
    for n in nodes:
        writer.writerow([n.name, n.cpu_milli, n.memory_mib, n.gpus, n.model])
    return out.getvalue()


def format_pods(pods: Iterable[PodRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(POD_COLUMNS)
    for p in pods:
        writer.writerow(
            [
                p.name,
                p.cpu_milli,
                p.memory_mib,
                p.num_gpu,
                p.gpu_milli,
                "|".join(p.gpu_models),
                p.qos,
                p.phase,
                _text(p.creation),
                _text(p.deletion),
                _text(p.scheduled),
            ]
        )
    return out.getvalue()
