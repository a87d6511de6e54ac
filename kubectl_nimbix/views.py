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

from jarvice import contract, gpubudget
from jarvice.exitcodes import EXIT_MOVED_HOME
from jarvice.gpubudget import NamespaceBudget
from jarvice.ledger import parse_ledger
from kubeplumbing import spendrecord
from kubeplumbing.spendrecord import SpendRecord

NONE: Final = "<none>"  # what kubectl prints for an empty cell
COLUMN_GAP: Final = 3  # kubectl's tabwriter padding
ANNOTATION_STRANDED_SINCE: Final = contract.ANNOTATION_PREFIX + "stranded-since"  # the controller's
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


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
    # submitted, queued, running, succeeded, failed, ended; "" before a job is known; a local pod
    # still waiting for a node before it bursts (burst-after): "waiting until <deadline>"; a burst pod
    # whose runner moves data: staging-in, copying-back
    state: str
    machine: str  # "ng4 x2"
    gpu_hours: str
    cost: str
    phase: str


# The controller's stages (controller.stages) in which the runner moves data rather than a job running:
# the STATE column shows them instead of the job's state.
DATA_STAGES: Final = frozenset({"staging-in", "copying-back"})


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
    phase = str((pod.get("status") or {}).get("phase") or "")
    state = job_state(annotations)
    stage = annotations.get(contract.ANNOTATION_STAGE, "")
    if stage in DATA_STAGES and phase not in ("Succeeded", "Failed"):  # the runner moves data: no job runs
        state = stage
    if annotations.get(contract.ANNOTATION_MOVE_HOME):  # the controller moves its running job home
        state = move_state(pod, phase) or state
    if phase in ("Succeeded", "Failed") and kept_in_vault(pod):  # the job's outputs wait in the vault
        state = "outputs in vault"
    deadline = annotations.get(contract.ANNOTATION_BURST_DEADLINE, "")
    if decision == contract.DECISION_LOCAL and deadline and phase in ("Pending", "") and not _node(pod):
        state = f"waiting until {deadline}"
    return StatusRow(
        namespace=_meta(pod, "namespace"),
        name=_meta(pod, "name"),
        decision=decision,
        job=annotations.get(contract.ANNOTATION_JOB_NUMBER, ""),
        state=state,
        machine=f"{machine} x{nodes}" if machine and nodes else machine,
        gpu_hours=annotations.get(contract.ANNOTATION_GPU_HOURS, ""),
        cost=annotations.get(contract.ANNOTATION_COST, ""),
        phase=phase,
    )


def move_state(pod: Mapping[str, Any], phase: str) -> str:
    """A marked pod's move home: `moving home` while it runs (its job asked for a checkpoint, then the
    checkpoint copied back), `moved home` once it left with the checkpoint; "" when it ended otherwise."""
    if phase not in ("Succeeded", "Failed"):
        return "moving home"
    codes = [
        (status.get("state") or {}).get("terminated", {}).get("exitCode")
        for status in (pod.get("status") or {}).get("containerStatuses") or ()
        if isinstance(status, Mapping)
    ]
    return "moved home" if EXIT_MOVED_HOME in codes else ""


def kept_in_vault(pod: Mapping[str, Any]) -> str:
    """What a burst container's copy-back left in the vault, from its runner's termination message
    (`kept_in_vault`): `<n> outputs the pod refused, in <vault dir> (first: <path>, ...)`; "" for none."""
    said = []
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        terminated = (status.get("state") or {}).get("terminated") if isinstance(status, Mapping) else None
        message = terminated.get("message") if isinstance(terminated, Mapping) else None
        try:
            payload = json.loads(message)[contract.TERMINATION_KEY] if isinstance(message, str) else None
        except (ValueError, TypeError, KeyError):
            continue  # not the runner's message: nothing to say
        kept = payload.get("kept_in_vault") if isinstance(payload, Mapping) else None
        if not isinstance(kept, Mapping):
            continue
        first = [str(path) for path in kept.get("first") or () if isinstance(path, str)]
        refused = kept.get("refused")
        what = f"{refused} outputs the pod refused" if isinstance(refused, int) and refused else "outputs not copied"
        said.append(f"{what}, in {kept.get('vault_dir', '?')}" + (f" (first: {', '.join(first)})" if first else ""))
    return "; ".join(said)


def _node(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


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
    # From the controller's spend record (JARVICE's live jobs); "" when there is no record.
    jarvice_gpus: str = ""  # GPUs the namespace's live JARVICE jobs hold
    cost_per_hour: str = ""  # what they cost per hour
    cap_per_hour: str = ""  # nimbix-burst.io/max-cost-per-hour: "none", the cap, or the invalid value
    month_cost: str = ""  # this month's worst case: ended jobs' cost + live jobs' price x nodes x walltime
    cap_per_month: str = ""  # nimbix-burst.io/max-cost-per-month
    spend_age_seconds: int | None = None  # how old the spend record is (None: no record)


def _cap(annotations: Mapping[str, str], key: str) -> str:
    if key not in annotations:
        return "none"
    cap = spendrecord.parse_cost_cap(annotations[key])
    if cap.invalid is not None:
        shown = cap.invalid if len(cap.invalid) <= 20 else cap.invalid[:17] + "..."
        return f"{shown!r} (invalid: 0)"
    return _amount(cap.limit)


def _object(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value


def _text(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string")
    return value


def read_namespace_budget(raw: Mapping[str, Any]) -> tuple[str, NamespaceBudget | None]:
    """A namespace's name and GPU budget (None: no `max-remote-gpus` annotation), read as the webhook
    reads them; ValueError naming the field for an object of the wrong shape."""
    meta = _object(raw.get("metadata"), "metadata")
    name = _text(meta.get("name"), "metadata.name")
    if not name:
        raise ValueError("metadata.name is missing")
    annotations = _object(meta.get("annotations"), "metadata.annotations")
    value = annotations.get(gpubudget.ANNOTATION_MAX_REMOTE_GPUS)
    return name, None if value is None else gpubudget.parse_budget(value if isinstance(value, str) else repr(value))


def read_counted_gpus(raw: Mapping[str, Any], gpu_resources: Sequence[str]) -> tuple[str, int]:
    """A pod's namespace and the GPUs the webhook counts against its budget (0: none): a burst pod's,
    a finished one's until its JARVICE jobs are known to be gone. ValueError naming the field for a
    pod of the wrong shape."""
    meta = _object(raw.get("metadata"), "metadata")
    spec = _object(raw.get("spec"), "spec")
    status = _object(raw.get("status"), "status")
    if not isinstance(spec.get("containers") or [], list):
        raise ValueError("spec.containers must be a list")
    namespace = _text(meta.get("namespace"), "metadata.namespace")
    terminal = _text(status.get("phase"), "status.phase") in _TERMINAL_PHASES
    gpus = gpubudget.burst_gpus(meta, gpu_resources) or 0
    if gpus and terminal and gpubudget.burst_job_gone(meta, spec, status):
        return namespace, 0
    return namespace, gpus


def _amount(value: float) -> str:
    return f"{value:.2f}"


def build_budget_rows(
    namespaces: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    gpu_resources: Sequence[str],
    spend: SpendRecord | None = None,
    now: float = 0.0,
) -> tuple[list[BudgetRow], list[str]]:
    """Each namespace with a budget, a cost cap, burst pods counted or spend recorded, and the
    problems met (pods or namespaces the webhook could not read either). In use is what the webhook
    counts from pods (jarvice.gpubudget): a finished burst pod stays counted while its job may still
    run. The webhook also counts admissions whose pod has not appeared yet; no object shows those.
    `spend`: the controller's record (JARVICE's live and ended jobs), None when it could not be
    read; `now`: Unix seconds, for its age."""
    problems: list[str] = []
    budgets: dict[str, NamespaceBudget] = {}
    caps: dict[str, Mapping[str, str]] = {}
    cap_keys = (spendrecord.ANNOTATION_MAX_COST_PER_HOUR, spendrecord.ANNOTATION_MAX_COST_PER_MONTH)
    for raw in namespaces:
        try:
            name, ns_budget = read_namespace_budget(raw)
        except ValueError as exc:
            problems.append(f"namespace {_meta(raw, 'name')}: {exc}")
            continue
        if ns_budget is not None:
            budgets[name] = ns_budget
        annotations = _annotations(raw)
        if any(key in annotations for key in cap_keys):
            caps[name] = annotations
    in_use: dict[str, int] = {}
    counted: dict[str, int] = {}
    for raw in pods:
        try:
            pod_namespace, remote_gpus = read_counted_gpus(raw, gpu_resources)
        except ValueError as exc:
            problems.append(f"pod {_meta(raw, 'namespace')}/{_meta(raw, 'name')}: {exc}")
            continue
        if remote_gpus > 0:
            in_use[pod_namespace] = in_use.get(pod_namespace, 0) + remote_gpus
            counted[pod_namespace] = counted.get(pod_namespace, 0) + 1
    spent = spend.namespaces if spend is not None else {}
    age = None if spend is None else max(0, int(now) - spend.observed_at)
    rows = []
    for namespace in sorted(set(budgets) | set(in_use) | set(caps) | set(spent)):
        limit = budgets.get(namespace)
        used = in_use.get(namespace, 0)
        shown = "none" if limit is None else str(limit.limit)
        if limit is not None and limit.invalid is not None:
            shown = f"{limit.invalid!r} (invalid: 0)"
        figures = spent.get(namespace)
        annotations = caps.get(namespace, {})
        if spend is not None and figures is None:
            figures = spendrecord.NamespaceSpend(cost_per_hour=0.0, month_recorded=0.0, month_worst_case=0.0, gpus=0)
        rows.append(
            BudgetRow(
                namespace=namespace,
                budget=shown,
                in_use=used,
                free="" if limit is None else str(max(0, limit.limit - used)),
                burst_pods=counted.get(namespace, 0),
                jarvice_gpus="" if figures is None else str(figures.gpus),
                cost_per_hour="" if figures is None else _amount(figures.cost_per_hour),
                cap_per_hour=_cap(annotations, spendrecord.ANNOTATION_MAX_COST_PER_HOUR),
                month_cost="" if figures is None else _amount(figures.month_worst_case),
                cap_per_month=_cap(annotations, spendrecord.ANNOTATION_MAX_COST_PER_MONTH),
                spend_age_seconds=age,
            )
        )
    return rows, problems


def format_budget(rows: Sequence[BudgetRow], *, spend: SpendRecord | None = None, spend_problem: str = "") -> str:
    """The table, then where the spend figures come from and how old they are."""
    cells = [
        [
            row.namespace,
            row.budget,
            str(row.in_use),
            row.free or NONE,
            str(row.burst_pods),
            row.jarvice_gpus or NONE,
            row.cost_per_hour or NONE,
            row.cap_per_hour,
            row.month_cost or NONE,
            row.cap_per_month,
        ]
        for row in rows
    ]
    headers = ["NAMESPACE", "BUDGET", "IN-USE", "FREE", "BURST-PODS", "JARVICE-GPUS", "COST/H", "CAP/H"]
    table = format_table([*headers, "MONTH", "CAP/MONTH"], cells)
    if spend is None:
        return table + f"Spend: no record ({spend_problem or 'not read'}).\n"
    age = rows[0].spend_age_seconds if rows else None
    when = f"{age}s ago" if age is not None else "at an unknown time"
    return table + f"Spend as JARVICE listed it {when} (month {spend.month} UTC, MONTH = worst case).\n"


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
        ("Budget", annotations.get(gpubudget.ANNOTATION_BUDGET, "")),
        ("Remote GPUs counted", annotations.get(gpubudget.ANNOTATION_REMOTE_GPUS, "")),
        ("Walltime", annotations.get(contract.ANNOTATION_WALLTIME, "")),
        ("Termination grace", annotations.get(contract.ANNOTATION_GRACE, "")),
        ("Stranded since", annotations.get(ANNOTATION_STRANDED_SINCE, "")),
        ("Bursts at", annotations.get(contract.ANNOTATION_BURST_DEADLINE, "")),
        ("Did not wait", annotations.get(contract.ANNOTATION_BURST_AFTER_IGNORED, "")),
        ("Moving home from job", annotations.get(contract.ANNOTATION_MOVE_HOME, "")),
        ("JARVICE job", annotations.get(contract.ANNOTATION_JOB_NUMBER, "")),
        ("Job state", job_state(annotations)),
        ("Machine", row.machine if row is not None else ""),
        ("GPU-hours", annotations.get(contract.ANNOTATION_GPU_HOURS, "")),
        ("Cost", annotations.get(contract.ANNOTATION_COST, "")),
        ("Jobs", annotations.get(contract.ANNOTATION_JOB_LEDGER, "")),
        ("Kept in the vault", kept_in_vault(pod)),
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
