"""What `kubectl nimbix` prints, built from pods and namespaces as the API server returns them (pure).

Every value comes from the objects: the webhook's decision annotations, the controller's job
annotations, and each namespace's budget annotation. Tables are laid out as kubectl lays out its
own (upper-case headers, columns three spaces apart); `-o json` gets the same rows as objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from controller.jobrecords import parse_ledger
from jarvice import contract
from webhook import budget, model, walltime
from webhook.types import NamespaceBudget

NONE: Final = "<none>"  # what kubectl prints for an empty cell
COLUMN_GAP: Final = 3  # kubectl's tabwriter padding
ANNOTATION_STRANDED_SINCE: Final = contract.ANNOTATION_PREFIX + "stranded-since"  # the controller's


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    raw = (pod.get("metadata") or {}).get("annotations") or {}
    return {str(key): str(value) for key, value in raw.items()} if isinstance(raw, Mapping) else {}


def _meta(pod: Mapping[str, Any], key: str) -> str:
    return str((pod.get("metadata") or {}).get(key) or "")


def format_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns, each as wide as its widest cell plus the gap; no trailing spaces."""
    table = [list(headers), *[list(row) for row in rows]]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    lines = ["".join(cell.ljust(widths[i] + COLUMN_GAP) for i, cell in enumerate(row)).rstrip() for row in table]
    return "\n".join(lines) + "\n"


def format_json(rows: Sequence[Any]) -> str:
    return json.dumps([asdict(row) for row in rows], indent=2) + "\n"


# --- status ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatusRow:
    namespace: str
    name: str
    decision: str
    job: str  # the latest JARVICE job number, "" before one is known
    state: str  # submitted, queued, running, succeeded, failed, ended; "" before a job is known
    machine: str  # "ng4 x2"
    gpu_hours: str
    cost: str
    phase: str


def job_state(annotations: Mapping[str, str]) -> str:
    """The latest job's stage from the controller's ledger; `ended` (no live job carries the pod) only
    when the ledger does not say how it ended."""
    ledger, _ = parse_ledger(annotations.get(contract.ANNOTATION_JOB_LEDGER, ""))
    number = annotations.get(contract.ANNOTATION_JOB_NUMBER, "")
    stage = ledger.get(int(number)) if number.isascii() and number.isdigit() else None
    return stage or annotations.get(contract.ANNOTATION_JOB_STATE, "")


def build_status_row(pod: Mapping[str, Any]) -> StatusRow | None:
    """A pod the webhook decided (local or remote); None for any other pod."""
    annotations = _annotations(pod)
    decision = annotations.get(contract.ANNOTATION_DECISION, "")
    if not decision:
        return None
    machine = annotations.get(contract.ANNOTATION_JOB_MACHINE, "")
    nodes = annotations.get(contract.ANNOTATION_JOB_NODES, "")
    return StatusRow(
        namespace=_meta(pod, "namespace"),
        name=_meta(pod, "name"),
        decision=decision,
        job=annotations.get(contract.ANNOTATION_JOB_NUMBER, ""),
        state=job_state(annotations),
        machine=f"{machine} x{nodes}" if machine and nodes else machine,
        gpu_hours=annotations.get(contract.ANNOTATION_GPU_HOURS, ""),
        cost=annotations.get(contract.ANNOTATION_COST, ""),
        phase=str((pod.get("status") or {}).get("phase") or ""),
    )


def build_status_rows(pods: Iterable[Mapping[str, Any]], *, remote_only: bool = False) -> list[StatusRow]:
    rows = [row for row in map(build_status_row, pods) if row is not None]
    if remote_only:
        rows = [row for row in rows if row.decision == contract.DECISION_REMOTE]
    return sorted(rows, key=lambda row: (row.namespace, row.name))


def format_status(rows: Sequence[StatusRow], *, all_namespaces: bool) -> str:
    headers = ["NAME", "DECISION", "JOB", "STATE", "MACHINE", "GPU-HOURS", "COST", "PHASE"]
    cells = [
        [row.name, row.decision, row.job, row.state, row.machine, row.gpu_hours, row.cost, row.phase] for row in rows
    ]
    if all_namespaces:
        headers = ["NAMESPACE", *headers]
        cells = [[row.namespace, *cell] for row, cell in zip(rows, cells, strict=True)]
    return format_table(headers, [[cell or NONE for cell in row] for row in cells])


# --- budget ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetRow:
    namespace: str
    budget: str  # the limit, "none" without the annotation, or the invalid value (counted as 0)
    in_use: int  # GPUs the webhook counts for the namespace's burst pods
    free: str  # budget - in use ("" without a budget)
    burst_pods: int  # the pods counted


def build_budget_rows(
    namespaces: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], *, gpu_resources: Sequence[str]
) -> tuple[list[BudgetRow], list[str]]:
    """Each namespace with a budget or with burst pods counted, and the problems met (pods or
    namespaces the webhook could not read either). In use is what the webhook counts from pods
    (model.parse_pod): a finished burst pod stays counted while its job may still run. The webhook
    also counts admissions whose pod has not appeared yet; no object shows those."""
    problems: list[str] = []
    budgets: dict[str, NamespaceBudget] = {}
    for raw in namespaces:
        try:
            info = model.parse_namespace(raw)
        except model.ObjectError as exc:
            problems.append(f"namespace {_meta(raw, 'name')}: {exc}")
            continue
        if info.budget is not None:
            budgets[info.name] = info.budget
    in_use: dict[str, int] = {}
    counted: dict[str, int] = {}
    for raw in pods:
        try:
            pod = model.parse_pod(raw, gpu_resources)
        except model.ObjectError as exc:
            problems.append(f"pod {_meta(raw, 'namespace')}/{_meta(raw, 'name')}: {exc}")
            continue
        if pod is not None and pod.remote_gpus > 0:
            in_use[pod.namespace] = in_use.get(pod.namespace, 0) + pod.remote_gpus
            counted[pod.namespace] = counted.get(pod.namespace, 0) + 1
    rows = []
    for namespace in sorted(set(budgets) | set(in_use)):
        limit = budgets.get(namespace)
        used = in_use.get(namespace, 0)
        shown = "none" if limit is None else str(limit.limit)
        if limit is not None and limit.invalid is not None:
            shown = f"{limit.invalid!r} (invalid: 0)"
        rows.append(
            BudgetRow(
                namespace=namespace,
                budget=shown,
                in_use=used,
                free="" if limit is None else str(max(0, limit.limit - used)),
                burst_pods=counted.get(namespace, 0),
            )
        )
    return rows, problems


def format_budget(rows: Sequence[BudgetRow]) -> str:
    cells = [[row.namespace, row.budget, str(row.in_use), row.free or NONE, str(row.burst_pods)] for row in rows]
    return format_table(["NAMESPACE", "BUDGET", "IN-USE", "FREE", "BURST-PODS"], cells)


# --- explain --------------------------------------------------------------------------------------


def _original_gpus(text: str) -> str:
    """The GPUs the pod asked for, from the webhook's audit annotation (`{"gpus": {...}, ...}`)."""
    try:
        audit = json.loads(text)
    except ValueError:
        return ""
    gpus = audit.get("gpus") if isinstance(audit, dict) else None
    if not isinstance(gpus, dict):
        return ""
    return ", ".join(f"{count} {resource}" for resource, count in sorted(gpus.items()))


def explain_pod(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Why the pod was decided as it was, as (field, text) pairs in reading order; fields without a
    value are left out. A pod the webhook never saw says so, with what makes it see one."""
    annotations = _annotations(pod)
    labels = (pod.get("metadata") or {}).get("labels") or {}
    row = build_status_row(pod)
    fields: list[tuple[str, str]] = [("Pod", f"{_meta(pod, 'namespace')}/{_meta(pod, 'name')}")]
    decision = annotations.get(contract.ANNOTATION_DECISION, "")
    if not decision:
        why = (
            "it does not carry the label task-type=Nimbix"
            if labels.get(contract.LABEL_TASK_TYPE) != contract.LABEL_TASK_TYPE_VALUE
            else "it asked for no GPU, its namespace is excluded, or it was created while the webhook was not"
            " installed (failurePolicy Ignore admits it undecided)"
        )
        return [*fields, ("Decision", "none: the webhook did not decide this pod"), ("Why", why)]
    fields.append(("Decision", decision))
    pairs = [
        ("Reason", annotations.get(contract.ANNOTATION_REASON, "")),
        ("Asked for", _original_gpus(annotations.get(contract.ANNOTATION_ORIGINAL_RESOURCES, ""))),
        ("Candidate nodes", annotations.get(contract.ANNOTATION_CANDIDATES, "")),
        ("Budget", annotations.get(budget.ANNOTATION_BUDGET, "")),
        ("Remote GPUs counted", annotations.get(budget.ANNOTATION_REMOTE_GPUS, "")),
        ("Walltime", annotations.get(walltime.ANNOTATION_WALLTIME, "")),
        ("Termination grace", annotations.get(contract.ANNOTATION_GRACE, "")),
        ("Stranded since", annotations.get(ANNOTATION_STRANDED_SINCE, "")),
        ("JARVICE job", annotations.get(contract.ANNOTATION_JOB_NUMBER, "")),
        ("Job state", job_state(annotations)),
        ("Machine", row.machine if row is not None else ""),
        ("GPU-hours", annotations.get(contract.ANNOTATION_GPU_HOURS, "")),
        ("Cost", annotations.get(contract.ANNOTATION_COST, "")),
        ("Jobs", annotations.get(contract.ANNOTATION_JOB_LEDGER, "")),
    ]
    fields += [(name, value) for name, value in pairs if value]
    if labels.get(contract.LABEL_DECISION) != decision:
        fields.append(("Label", f"{contract.LABEL_DECISION} is not set (a pod admitted by an older webhook)"))
    return fields


def format_explain(fields: Sequence[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in fields) + 1
    return "".join(f"{(name + ':').ljust(width + 1)}{value}\n" for name, value in fields)


def explain_json(fields: Sequence[tuple[str, str]]) -> str:
    return json.dumps(dict(fields), indent=2) + "\n"
