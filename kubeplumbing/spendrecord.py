"""The spend record the controller writes and the cost caps namespaces set: names, and readers (pure).

The controller's leader writes the record, when it changed, to the ConfigMap `nimbix-burst-spend` in
the add-on's namespace (users cannot write it), data key `spend.json`; the webhook and `kubectl nimbix
budget` read it. Its schema (version 1) is in docs/money-safety.md. A namespace caps its spend with
the annotations `nimbix-burst.io/max-cost-per-hour` and `nimbix-burst.io/max-cost-per-month`
(decimal numbers >= 0, in the account's price unit): anything else counts as a cap of 0, as the GPU
budget does, so a typo never lifts a cap.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

CONFIGMAP_NAME: Final = "nimbix-burst-spend"
RECORD_KEY: Final = "spend.json"
RECORD_VERSION: Final = 1
ANNOTATION_MAX_COST_PER_HOUR: Final = "nimbix-burst.io/max-cost-per-hour"
ANNOTATION_MAX_COST_PER_MONTH: Final = "nimbix-burst.io/max-cost-per-month"
ANNOTATION_MAX_REMOTE_GPUS: Final = "nimbix-burst.io/max-remote-gpus"
# More characters than any real amount: a longer value is a mistake, not a cap.
_MAX_CAP_CHARS: Final = 20


@dataclass(frozen=True, slots=True)
class CostCap:
    limit: float
    invalid: str | None = None  # the annotation's text when it is not a number >= 0 (the limit is then 0)


def parse_cost_cap(value: str) -> CostCap:
    """A cost cap annotation's value: a decimal number >= 0 (`"5"`, `"12.50"`, spaces around
    allowed). Anything else is invalid and caps at 0."""
    text = value.strip()
    if text and len(text) <= _MAX_CAP_CHARS and text.isascii() and all(c.isdigit() or c == "." for c in text):
        try:
            limit = float(text)
        except ValueError:
            return CostCap(limit=0.0, invalid=value)
        if math.isfinite(limit):
            return CostCap(limit=limit)
    return CostCap(limit=0.0, invalid=value)


@dataclass(frozen=True, slots=True)
class PodSpend:
    """What one pod's live jobs hold, as JARVICE lists them."""

    gpus: int
    cost_per_hour: float
    worst_case: float  # price x nodes x the walltime they have left


@dataclass(frozen=True, slots=True)
class NamespaceSpend:
    cost_per_hour: float
    month_recorded: float
    month_worst_case: float
    gpus: int  # GPUs its live jobs hold (the sum over its pods)
    pods: Mapping[str, PodSpend] = field(default_factory=dict)  # by pod UID


@dataclass(frozen=True, slots=True)
class MachineRate:
    gpus: int  # per node (mc_gpus)
    price: float  # per node-hour (mc_price)


@dataclass(frozen=True, slots=True)
class SpendRecord:
    observed_at: int
    month: str
    namespaces: Mapping[str, NamespaceSpend]
    unattributed_jobs: int
    unattributed_cost_per_hour: float
    machines: Mapping[str, MachineRate] = field(default_factory=dict)


class SpendRecordError(ValueError):
    """The ConfigMap's spend.json cannot be read as a version 1 record."""


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise SpendRecordError(f"{RECORD_KEY}: {where} is {value!r}, not a number >= 0")
    return float(value)


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpendRecordError(f"{RECORD_KEY}: {where} is not an object")
    return value


def parse_spend_record(text: str) -> SpendRecord:
    """The record as the controller wrote it; raises SpendRecordError saying what is wrong (a
    reader then shows no spend rather than a wrong one)."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise SpendRecordError(f"{RECORD_KEY} is not JSON ({exc})") from exc
    raw = _object(raw, "the record")
    if raw.get("version") != RECORD_VERSION:
        raise SpendRecordError(f"{RECORD_KEY}: version {raw.get('version')!r} is not {RECORD_VERSION}")
    month = raw.get("month")
    if (
        not isinstance(month, str)
        or len(month) != len("YYYY-MM")
        or not (month[:4] + month[5:]).isdigit()
        or month[4] != "-"
    ):
        raise SpendRecordError(f"{RECORD_KEY}: month {month!r} is not YYYY-MM")
    namespaces: dict[str, NamespaceSpend] = {}
    for name, raw_entry in _object(raw.get("namespaces", {}), "namespaces").items():
        entry = _object(raw_entry, f"namespaces.{name}")
        pods = {
            str(uid): _pod_spend(_object(pod, f"namespaces.{name}.pods.{uid}"), f"namespaces.{name}.pods.{uid}")
            for uid, pod in _object(entry.get("pods", {}), f"namespaces.{name}.pods").items()
        }
        namespaces[name] = NamespaceSpend(
            cost_per_hour=_number(entry.get("cost_per_hour"), f"namespaces.{name}.cost_per_hour"),
            month_recorded=_number(entry.get("month_recorded"), f"namespaces.{name}.month_recorded"),
            month_worst_case=_number(entry.get("month_worst_case"), f"namespaces.{name}.month_worst_case"),
            gpus=sum(pod.gpus for pod in pods.values()),
            pods=pods,
        )
    machines = {
        str(name): MachineRate(
            gpus=_whole(_object(rate, f"machines.{name}").get("gpus"), f"machines.{name}.gpus"),
            price=_number(_object(rate, f"machines.{name}").get("price"), f"machines.{name}.price"),
        )
        for name, rate in _object(raw.get("machines", {}), "machines").items()
    }
    unattributed = _object(raw.get("unattributed", {}), "unattributed")
    return SpendRecord(
        observed_at=int(_number(raw.get("observed_at"), "observed_at")),
        month=month,
        namespaces=namespaces,
        unattributed_jobs=int(_number(unattributed.get("jobs", 0), "unattributed.jobs")),
        unattributed_cost_per_hour=_number(unattributed.get("cost_per_hour", 0.0), "unattributed.cost_per_hour"),
        machines=machines,
    )


def _whole(value: Any, where: str) -> int:
    number = _number(value, where)
    if not float(number).is_integer():
        raise SpendRecordError(f"{RECORD_KEY}: {where} is {value!r}, not a whole number >= 0")
    return int(number)


def _pod_spend(pod: Mapping[str, Any], where: str) -> PodSpend:
    return PodSpend(
        gpus=_whole(pod.get("gpus", 0), f"{where}.gpus"),
        cost_per_hour=_number(pod.get("cost_per_hour", 0.0), f"{where}.cost_per_hour"),
        worst_case=_number(pod.get("worst_case", 0.0), f"{where}.worst_case"),
    )
