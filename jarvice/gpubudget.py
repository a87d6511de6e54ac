"""A namespace's GPU burst budget, and the burst pods counted against it (pure).

Set on the namespace: `nimbix-burst.io/max-remote-gpus: "4"`: how many GPUs its pods may run on
JARVICE at once. A burst pod counts its `nimbix-burst.io/remote-gpus` until its JARVICE jobs are
known to be gone. The webhook enforces it (webhook.budget, counting in its cache) and `kubectl nimbix
budget` shows it, both reading the objects with these rules. A namespace sets its cost caps the
same way (kubeplumbing.spendrecord); this lives in jarvice because a burst pod is told by the
contract's annotations (its decision, the runner's termination message, the controller's job-state).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from jarvice import contract

ANNOTATION_MAX_REMOTE_GPUS: Final = "nimbix-burst.io/max-remote-gpus"  # on the namespace
ANNOTATION_REMOTE_GPUS: Final = "nimbix-burst.io/remote-gpus"  # on a burst pod: GPUs counted against the budget
ANNOTATION_BUDGET: Final = "nimbix-burst.io/budget"  # on a pod left local because of the budget
# More digits than any real GPU count: a longer value is a mistake, not a budget.
_MAX_DIGITS = 9


@dataclass(frozen=True, slots=True)
class NamespaceBudget:
    """A namespace's `nimbix-burst.io/max-remote-gpus`: how many GPUs its pods may burst at once."""

    limit: int
    invalid: str | None = None  # the annotation's value when it is not a whole number >= 0 (then limit is 0)


def parse_budget(value: str) -> NamespaceBudget:
    """The annotation's value. Anything but a whole number >= 0 (surrounding spaces allowed) is
    invalid and counts as a budget of 0: the annotation is there to cap spending, and a typo must
    not lift the cap. The pods' warnings and annotations name the bad value."""
    text = value.strip()
    if text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS:
        return NamespaceBudget(limit=int(text))
    return NamespaceBudget(limit=0, invalid=value)


def parse_remote_gpus(value: str) -> int:
    """A burst pod's `nimbix-burst.io/remote-gpus`; -1 when absent or unreadable (the caller falls
    back to the audit annotation's `gpus`)."""
    text = value.strip()
    if text.isascii() and text.isdigit() and len(text) <= _MAX_DIGITS:
        return int(text)
    return -1


def burst_gpus(meta: Mapping[str, Any], gpu_resources: Sequence[str]) -> int | None:
    """A burst pod's GPUs counted against its namespace's budget; None for a pod that is not burst.
    The explicit `remote-gpus` annotation (a whole number, cheap to read on every event) is preferred;
    pods burst by a version without it fall back to the audit annotation's effective `gpus`."""
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or annotations.get(contract.ANNOTATION_DECISION) != contract.DECISION_REMOTE:
        return None
    explicit = annotations.get(ANNOTATION_REMOTE_GPUS)
    if isinstance(explicit, str) and (count := parse_remote_gpus(explicit)) >= 0:
        return count
    audit_text = annotations.get(contract.ANNOTATION_ORIGINAL_RESOURCES)
    try:
        audit = json.loads(audit_text) if isinstance(audit_text, str) else None
    except ValueError:
        audit = None
    gpus = audit.get("gpus") if isinstance(audit, dict) else None
    if not isinstance(gpus, dict):
        return 0
    return sum(v for r, v in gpus.items() if r in gpu_resources and type(v) is int and v > 0)


def parse_job_may_run(message: object) -> bool:
    """Whether the runner's termination message (a burst container's `state.terminated.message`)
    leaves its JARVICE job possibly running. Only `{"nimbix_burst": {"job": N|null, "job_may_run":
    false, ...}}` says it does not; anything else (no message, a log tail, another shape) may run."""
    if not isinstance(message, str) or not message:
        return True
    try:
        decoded = orjson.loads(message)  # refuses deep nesting itself; the kubelet caps messages at 4 KiB
    except orjson.JSONDecodeError:
        return True
    payload = decoded.get(contract.TERMINATION_KEY) if isinstance(decoded, dict) else None
    if not isinstance(payload, dict):
        return True
    job = payload.get("job")
    job_known = job is None or (type(job) is int and job >= 0)
    return not (job_known and payload.get("job_may_run") is False)


def _runner_names(spec: Mapping[str, Any]) -> list[str]:
    """The app containers the rewrite made runners (`REMOTE=1`, which it sets on each of them)."""
    names = []
    containers = spec.get("containers")
    for raw in containers if isinstance(containers, list) else ():
        if not isinstance(raw, dict):
            continue
        for variable in raw.get("env") or ():
            if isinstance(variable, dict) and variable.get("name") == contract.ENV_REMOTE:
                if variable.get("value") == "1":
                    names.append(str(raw.get("name", "")))
                break
    return names


def burst_job_gone(meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """A finished burst pod's JARVICE jobs are known to be gone: the controller recorded it (the
    job-state annotation), or every runner's termination message says so. Read defensively: whatever
    cannot be read means a job may run, and the GPUs stay counted."""
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and annotations.get(contract.ANNOTATION_JOB_STATE) == contract.JOB_STATE_ENDED:
        return True
    runners = _runner_names(spec)
    if not runners:
        return False
    messages: dict[str, object] = {}
    statuses = status.get("containerStatuses")
    for raw in statuses if isinstance(statuses, list) else ():
        state = raw.get("state") if isinstance(raw, dict) else None
        terminated = state.get("terminated") if isinstance(state, dict) else None
        if isinstance(terminated, dict):
            messages[str(raw.get("name", ""))] = terminated.get("message")
    ended = [name for name in runners if name in messages and not parse_job_may_run(messages[name])]
    return len(ended) == len(runners)
