"""One policy's recorded run as a file: gzip-compressed JSON lines, versioned (pure: bytes in and out).

`python -m replay --save-history` writes `history-<policy>.jsonl.gz`; `python -m replay.explain`
reads it. The file holds what the checker and `accounting.build_decisions` need to judge the run
again offline: every observation of the replay's watch, the pod outcomes, the webhook's views, and
the settings that change a judgement (model label, race window, compression). Not pickle: a file
must stay readable after the dataclasses change, and say so when it cannot.

Lines, in order: a header `{"format": FORMAT, "version": VERSION, "run": {...}, "settings": {...}}`;
then one line per item, `{"observation": {...}}`, `{"pod": {...}}` or `{"view": {...}}`; last
`{"end": {"observations": N, "pods": N, "views": N}}`, so a cut-off file is told from a short run.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast, get_args

from replay.accounting import POLICIES, PodOutcome, Policy, RunRecord
from replay.gangs import Gang
from replay.history import (
    AdmissionView,
    NodeSeen,
    Observation,
    ObservationKind,
    Placement,
    PodSeen,
    Requirement,
    Toleration,
)
from replay.trace import PodRow

FORMAT = "nimbix-burst-replay-history"
# Bump when a field changes meaning or a reader could not fill a dataclass from an older file.
VERSION = 1
_FIX = "re-run `python -m replay --save-history` with this checkout to write a file it reads"


class RecordFileError(ValueError):
    """A history file this code cannot read; the message says where and what to do."""


@dataclass(frozen=True, slots=True)
class SavedRun:
    """A policy's run and the settings its judgement depends on."""

    record: RunRecord
    model_label: str
    race_window: float


# -- encoding -------------------------------------------------------------------------------------


def _placement(p: Placement) -> dict[str, Any]:
    return {
        "node_selector": dict(p.node_selector),
        "terms": None
        if p.terms is None
        else [[{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in term] for term in p.terms],
        "tolerations": [
            {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect} for t in p.tolerations
        ],
    }


def _observation(o: Observation) -> dict[str, Any]:
    node = o.node
    pod = o.pod
    return {
        "at": o.at,
        "kind": o.kind,
        "name": o.name,
        "version": o.version,
        "node": None
        if node is None
        else {
            "name": node.name,
            "labels": dict(node.labels),
            "allocatable": dict(node.allocatable),
            "taints": [list(t) for t in node.taints],
            "unschedulable": node.unschedulable,
        },
        "pod": None
        if pod is None
        else {
            "key": pod.key,
            "node": pod.node,
            "requests": dict(pod.requests),
            "terminal": pod.terminal,
            "placement": _placement(pod.placement),
            "unschedulable_message": pod.unschedulable_message,
            "decision": pod.decision,
        },
    }


def _outcome(p: PodOutcome) -> dict[str, Any]:
    row = p.row
    return {
        "name": p.name,
        "key": p.key,
        "row": {
            "index": row.index,
            "name": row.name,
            "cpu_milli": row.cpu_milli,
            "memory_mib": row.memory_mib,
            "num_gpu": row.num_gpu,
            "gpu_milli": row.gpu_milli,
            "gpu_models": list(row.gpu_models),
            "qos": row.qos,
            "phase": row.phase,
            "creation": row.creation,
            "deletion": row.deletion,
            "scheduled": row.scheduled,
        },
        **{
            name: getattr(p, name)
            for name in (
                "create_sent",
                "create_done",
                "create_error",
                "decision",
                "reason",
                "burst_seen",
                "burst_done",
                "burst_key",
                "burst_error",
                "deleted",
                "budget",
                "cost_per_hour",
            )
        },
    }


def encode_lines(saved: SavedRun) -> list[str]:
    r = saved.record
    header = {
        "format": FORMAT,
        "version": VERSION,
        "run": {
            "policy": r.policy,
            "namespace": r.namespace,
            "compression": r.compression,
            "trace_start": r.trace_start,
            "trace_end": r.trace_end,
            "wall_start": r.wall_start,
            "wall_end": r.wall_end,
            "replay_wall_seconds": r.replay_wall_seconds,
            "create_latencies_ms": list(r.create_latencies_ms),
            "admission_latencies_ms": list(r.admission_latencies_ms),
            "max_lag_seconds": r.max_lag_seconds,
            "truncated": r.truncated,
            "preload_pods": r.preload_pods,
            "notes": list(r.notes),
            "burst_after": r.burst_after,
            "cost_cap": r.cost_cap,
            "gangs": [{"name": g.name, "members": list(g.members)} for g in r.gangs],
        },
        "settings": {"model_label": saved.model_label, "race_window": saved.race_window},
    }
    lines = [json.dumps(header)]
    lines += [json.dumps({"observation": _observation(o)}) for o in r.history]
    lines += [json.dumps({"pod": _outcome(p)}) for p in r.pods]
    lines += [
        json.dumps({"view": {"key": key, "pods": v.pods, "nodes": v.nodes, "sequence": v.sequence}})
        for key, v in r.views.items()
    ]
    counts = {"observations": len(r.history), "pods": len(r.pods), "views": len(r.views)}
    lines.append(json.dumps({"end": counts}))
    return lines


def encode(saved: SavedRun) -> bytes:
    """The file's bytes (mtime 0: the same run gives the same file)."""
    return gzip.compress(("\n".join(encode_lines(saved)) + "\n").encode("utf-8"), mtime=0)


# -- decoding -------------------------------------------------------------------------------------


class _Shape(Exception):
    """A field missing or of the wrong type (turned into a RecordFileError naming the line)."""


def _get(raw: object, name: str, kind: type | tuple[type, ...]) -> Any:
    value = raw.get(name) if isinstance(raw, Mapping) else None
    # bool is an int to isinstance; a number field holding true/false is garbled, not a number.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _types(kind)):
        raise _Shape(f"field {name!r} missing or not {_names(kind)}")
    return value


def _types(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in _types(kind))


_NUMBER = (int, float)
_OPTIONAL_NUMBER = (int, float, type(None))


def _number(raw: Mapping[str, Any], name: str) -> float:
    return float(_get(raw, name, _NUMBER))


def _optional_number(raw: Mapping[str, Any], name: str) -> float | None:
    value = _get(raw, name, _OPTIONAL_NUMBER)
    return None if value is None else float(value)


def _str_map(raw: Mapping[str, Any], name: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _get(raw, name, dict).items()}


def _int_map(raw: Mapping[str, Any], name: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in _get(raw, name, dict).items()}


def _decode_placement(raw: Mapping[str, Any]) -> Placement:
    terms_raw = _get(raw, "terms", (list, type(None)))
    terms = (
        None
        if terms_raw is None
        else tuple(
            tuple(
                Requirement(_get(r, "key", str), _get(r, "operator", str), tuple(_get(r, "values", list))) for r in term
            )
            for term in terms_raw
        )
    )
    tolerations = tuple(
        Toleration(_get(t, "key", str), _get(t, "operator", str), _get(t, "value", str), _get(t, "effect", str))
        for t in _get(raw, "tolerations", list)
    )
    return Placement(node_selector=_str_map(raw, "node_selector"), terms=terms, tolerations=tolerations)


def _decode_observation(raw: Mapping[str, Any]) -> Observation:
    kind = _get(raw, "kind", str)
    if kind not in get_args(ObservationKind):
        raise _Shape(f"unknown observation kind {kind!r}")
    node_raw = _get(raw, "node", (dict, type(None)))
    pod_raw = _get(raw, "pod", (dict, type(None)))
    node = None
    if node_raw is not None:
        taints = tuple((str(k), str(v), str(e)) for k, v, e in _get(node_raw, "taints", list))
        node = NodeSeen(
            name=_get(node_raw, "name", str),
            labels=_str_map(node_raw, "labels"),
            allocatable=_int_map(node_raw, "allocatable"),
            taints=taints,
            unschedulable=_get(node_raw, "unschedulable", bool),
        )
    pod = None
    if pod_raw is not None:
        pod = PodSeen(
            key=_get(pod_raw, "key", str),
            node=_get(pod_raw, "node", str),
            requests=_int_map(pod_raw, "requests"),
            terminal=_get(pod_raw, "terminal", bool),
            placement=_decode_placement(_get(pod_raw, "placement", dict)),
            unschedulable_message=_get(pod_raw, "unschedulable_message", str),
            decision=_get(pod_raw, "decision", str),
        )
    return Observation(
        at=_number(raw, "at"),
        kind=cast(ObservationKind, kind),
        name=_get(raw, "name", str),
        node=node,
        pod=pod,
        version=_get(raw, "version", int),
    )


def _decode_outcome(raw: Mapping[str, Any]) -> PodOutcome:
    row = _get(raw, "row", dict)
    return PodOutcome(
        name=_get(raw, "name", str),
        key=_get(raw, "key", str),
        row=PodRow(
            index=_get(row, "index", int),
            name=_get(row, "name", str),
            cpu_milli=_get(row, "cpu_milli", int),
            memory_mib=_get(row, "memory_mib", int),
            num_gpu=_get(row, "num_gpu", int),
            gpu_milli=_get(row, "gpu_milli", int),
            gpu_models=tuple(str(m) for m in _get(row, "gpu_models", list)),
            qos=_get(row, "qos", str),
            phase=_get(row, "phase", str),
            creation=_number(row, "creation"),
            deletion=_optional_number(row, "deletion"),
            scheduled=_optional_number(row, "scheduled"),
        ),
        create_sent=_optional_number(raw, "create_sent"),
        create_done=_optional_number(raw, "create_done"),
        create_error=_get(raw, "create_error", str),
        decision=_get(raw, "decision", str),
        reason=_get(raw, "reason", str),
        burst_seen=_optional_number(raw, "burst_seen"),
        burst_done=_optional_number(raw, "burst_done"),
        burst_key=_get(raw, "burst_key", str),
        burst_error=_get(raw, "burst_error", str),
        deleted=_optional_number(raw, "deleted"),
        # Files written before the cost caps took part lack these two: nothing held back, nothing priced.
        budget=str(raw.get("budget", "")),
        cost_per_hour=float(raw.get("cost_per_hour", 0.0)),
    )


def _decode_gang(raw: object) -> Gang:
    if not isinstance(raw, dict):
        raise _Shape(f"a gang is {type(raw).__name__}, not an object")
    return Gang(name=_get(raw, "name", str), members=tuple(str(m) for m in _get(raw, "members", list)))


def _decode_header(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    if raw.get("format") != FORMAT:
        raise RecordFileError(f"not a replay history file (line 1 has format {raw.get('format')!r}); {_FIX}")
    if raw.get("version") != VERSION:
        raise RecordFileError(
            f"history file format version {raw.get('version')!r}, this checkout reads version {VERSION}; {_FIX}"
        )
    return _get(raw, "run", dict), _get(raw, "settings", dict)


def decode_lines(lines: Iterable[str]) -> SavedRun:
    """The inverse of `encode_lines`; RecordFileError names the first line it cannot use."""
    header: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None
    history: list[Observation] = []
    pods: list[PodOutcome] = []
    views: dict[str, AdmissionView] = {}
    end: Mapping[str, Any] | None = None
    number = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if end is not None:
            raise RecordFileError(f"history file line {number}: data after the end line (garbled); {_FIX}")
        try:
            raw = json.loads(line)
            if not isinstance(raw, dict):
                raise _Shape("not a JSON object")
            if header is None:
                header = _decode_header(raw)
            elif "observation" in raw:
                history.append(_decode_observation(_get(raw, "observation", dict)))
            elif "pod" in raw:
                pods.append(_decode_outcome(_get(raw, "pod", dict)))
            elif "view" in raw:
                v = _get(raw, "view", dict)
                views[_get(v, "key", str)] = AdmissionView(
                    _get(v, "pods", int), _get(v, "nodes", int), _get(v, "sequence", int)
                )
            elif "end" in raw:
                end = _get(raw, "end", dict)
            else:
                raise _Shape(f"unknown item {sorted(raw)}")
        except (ValueError, _Shape, TypeError, AttributeError) as error:
            if isinstance(error, RecordFileError):
                raise
            raise RecordFileError(f"history file line {number}: garbled or truncated ({error}); {_FIX}") from error
    if header is None:
        raise RecordFileError(f"history file is empty; {_FIX}")
    counts = {"observations": len(history), "pods": len(pods), "views": len(views)}
    if end is None or dict(end) != counts:
        raise RecordFileError(
            f"history file is truncated after line {number} (holds {counts}, its end line says {end}); {_FIX}"
        )
    return _build(header, history=history, pods=pods, views=views)


def _build(
    header: tuple[Mapping[str, Any], Mapping[str, Any]],
    *,
    history: Sequence[Observation],
    pods: Sequence[PodOutcome],
    views: Mapping[str, AdmissionView],
) -> SavedRun:
    run, settings = header
    try:
        policy = _get(run, "policy", str)
        if policy not in POLICIES:
            raise _Shape(f"unknown policy {policy!r}")
        record = RunRecord(
            policy=cast(Policy, policy),
            namespace=_get(run, "namespace", str),
            compression=_number(run, "compression"),
            trace_start=_number(run, "trace_start"),
            trace_end=_number(run, "trace_end"),
            wall_start=_number(run, "wall_start"),
            wall_end=_number(run, "wall_end"),
            replay_wall_seconds=_number(run, "replay_wall_seconds"),
            pods=list(pods),
            history=list(history),
            create_latencies_ms=[float(v) for v in _get(run, "create_latencies_ms", list)],
            admission_latencies_ms=[float(v) for v in _get(run, "admission_latencies_ms", list)],
            max_lag_seconds=_number(run, "max_lag_seconds"),
            truncated=_get(run, "truncated", bool),
            preload_pods=_get(run, "preload_pods", int),
            notes=tuple(str(n) for n in _get(run, "notes", list)),
            views=dict(views),
            # Files written before these were recorded: no setting, no cap, no gangs.
            burst_after=_optional_number(run, "burst_after") if "burst_after" in run else None,
            cost_cap=_optional_number(run, "cost_cap") if "cost_cap" in run else None,
            gangs=tuple(_decode_gang(g) for g in run.get("gangs", [])),
        )
        return SavedRun(
            record=record, model_label=_get(settings, "model_label", str), race_window=_number(settings, "race_window")
        )
    except (_Shape, TypeError, ValueError) as error:
        raise RecordFileError(f"history file line 1: garbled header ({error}); {_FIX}") from error


def decode(data: bytes) -> SavedRun:
    """The inverse of `encode`. A cut-off gzip stream is decompressed as far as it goes, so the
    error names the last line it holds."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing
    try:
        text = inflater.decompress(data)
    except zlib.error as error:
        raise RecordFileError(f"not a gzip-compressed history file ({error}); {_FIX}") from error
    pieces = text.split(b"\n")
    if not inflater.eof and len(pieces) > 1:
        pieces = pieces[:-1]  # cut in the middle of a line: decode_lines then reports the truncation
    try:
        lines = [piece.decode("utf-8") for piece in pieces]
    except UnicodeDecodeError as error:
        raise RecordFileError(f"history file is garbled (not UTF-8 text: {error}); {_FIX}") from error
    return decode_lines(lines)
