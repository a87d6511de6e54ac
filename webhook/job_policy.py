"""A Job whose pods may burst gets a failure policy under which the product's moves are free (pure).

The product moves a Job's pod (the burst-after deadline, homecoming, a re-burst) by evicting it: the
API server marks the pod `DisruptionTarget` before deleting it. Under the rule this module puts first
in the Job's `podFailurePolicy` (`{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}`) the
Job controller then neither counts the pod against `backoffLimit` nor lets another rule fail the Job
for it: it creates the replacement, whatever `backoffLimit` (0 included).

Only at the Job's creation (the API server refuses a later change of `podFailurePolicy`), only for
a Job whose pod template carries `task-type: Nimbix`, and only when its pods' `restartPolicy` is
`Never` (the only one a `podFailurePolicy` allows). A user's own rules are kept, after ours.

The next rules (`{action: Ignore, onExitCodes: {containerName: <c>, operator: In, values: [81]}}`, one per
container of the template that asks for GPUs: the containers a burst makes runners) serve a running burst
job's move home: its runner exits 81 once the checkpoint is copied back (controller.moving), and the Job
creates the replacement, which resumes from the checkpoint. The runner never exits 81 otherwise: a
program's own 81 is reported as 1. Each rule names its container: another container's 81 (a sidecar's,
an init container's) counts as any failure, never a free retry. (A local pod leaving with its checkpoint,
entrypoint.leaving, exits 143: the first rule makes its preemption or drain free, the API server's
condition, not the pod's word.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jarvice import contract
from kubeplumbing.disruptions import (
    IGNORE_DISRUPTIONS,
    ignore_moved_home,
    ignores_disruptions_first,
    ignores_moves_home,
)
from webhook.resources import burst_container_names
from webhook.responses import Admission
from webhook.review import AdmissionRequest, build_response

MAX_RULES: Final = 20  # the API server's limit on spec.podFailurePolicy.rules


@dataclass(frozen=True, slots=True)
class JobPatch:
    """What the webhook does to a Job at its creation: `ops` (JSON patch, empty: nothing), and why."""

    ops: tuple[dict[str, Any], ...]
    reason: str
    warning: str = ""  # shown by kubectl when the Job's pods will not be moved for free


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def plan(job: Mapping[str, Any], gpu_resources: Sequence[str]) -> JobPatch:
    """The patch that makes the product's moves free for `job` (a batch/v1 Job as created); `gpu_resources`:
    the resource names that are GPUs (the webhook's setting)."""
    spec = _dict(job.get("spec"))
    template = _dict(spec.get("template"))
    labels = _dict(_dict(template.get("metadata")).get("labels"))
    if labels.get(contract.LABEL_TASK_TYPE) != contract.LABEL_TASK_TYPE_VALUE:
        return JobPatch(
            (), f"its pod template is not labeled {contract.LABEL_TASK_TYPE}={contract.LABEL_TASK_TYPE_VALUE}"
        )
    restart = _dict(template.get("spec")).get("restartPolicy")
    if restart != "Never":
        return JobPatch(
            (),
            f"its pods' restartPolicy is {restart or 'unset'}, not Never",
            warning=(
                f"nimbix-burst: restartPolicy {restart or 'unset'}: this Job's pods burst at once, never come home"
                " (only Never makes moves free)"
            ),
        )
    burst = burst_container_names(_dict(template.get("spec")), gpu_resources)
    policy = _dict(spec.get("podFailurePolicy"))
    if ignores_moves_home(policy, burst) or (not burst and ignores_disruptions_first(policy)):
        return JobPatch((), "its podFailurePolicy already ignores DisruptionTarget and a move home's exit first")
    moves = tuple(ignore_moved_home(name) for name in burst)
    rules = policy.get("rules")
    # The API server defaulted podReplacementPolicy before this webhook (TerminatingOrFailed without a
    # podFailurePolicy) and allows only Failed with one: the replacement waits for the old pod's end.
    replacement = (
        ({"op": "add", "path": "/spec/podReplacementPolicy", "value": "Failed"},)
        if spec.get("podReplacementPolicy", "Failed") != "Failed"
        else ()
    )
    if not isinstance(rules, list) or not policy:
        value = {"rules": [dict(IGNORE_DISRUPTIONS), *moves]}
        return JobPatch(
            ({"op": "add", "path": "/spec/podFailurePolicy", "value": value}, *replacement),
            "added a podFailurePolicy that ignores the product's evictions and a move home's exit",
        )
    if ignores_disruptions_first(policy):
        if len(rules) + len(moves) > MAX_RULES:
            return JobPatch((), "its podFailurePolicy ignores DisruptionTarget first; no room for a move home's rules")
        # Each added at 1 in reverse order: they end in the template's order, right after the evictions' rule.
        return JobPatch(
            tuple({"op": "add", "path": "/spec/podFailurePolicy/rules/1", "value": move} for move in reversed(moves)),
            "put rules ignoring a move home's exit after the one ignoring the product's evictions",
        )
    if len(rules) >= MAX_RULES:
        return JobPatch(
            (),
            f"its podFailurePolicy has {len(rules)} rules, the most a Job may have",
            warning=(
                f"nimbix-burst: {len(rules)} podFailurePolicy rules, no room for ours: this Job's pods are never"
                " moved (see docs)"
            ),
        )
    first = {"op": "add", "path": "/spec/podFailurePolicy/rules/0", "value": dict(IGNORE_DISRUPTIONS)}
    if len(rules) + 1 + len(moves) > MAX_RULES:  # room for one rule: evictions stay free, jobs never move home
        return JobPatch((first, *replacement), "put a rule ignoring the product's evictions before the Job's own")
    # Each added at 0 in reverse order: the evictions' rule ends first, the moves' after it in order.
    added = tuple({"op": "add", "path": "/spec/podFailurePolicy/rules/0", "value": move} for move in reversed(moves))
    return JobPatch(
        (*added, first, *replacement),
        "put rules ignoring the product's evictions and a move home's exit before the Job's own",
    )


def admit(request: AdmissionRequest, gpu_resources: Sequence[str]) -> Admission:
    """A Job CREATE's answer: admitted, with the patch (if any) and the warning (if any)."""
    if request.operation != "CREATE":
        return Admission(build_response(request.uid), "skipped", f"not a Job CREATE ({request.operation})")
    planned = plan(request.object, gpu_resources)
    warnings = [planned.warning] if planned.warning else []
    # "skipped": a Job is no pod's decision; its reason says what was done to it.
    return Admission(build_response(request.uid, patch=planned.ops, warnings=warnings), "skipped", planned.reason)
