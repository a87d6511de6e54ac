"""The Job failure-policy rule under which a pod the product evicts costs its Job nothing (pure).

Evicting a pod (the Eviction API) makes the API server mark it `DisruptionTarget` before deleting
it. A Job whose `podFailurePolicy` starts with `IGNORE_DISRUPTIONS` neither counts such a pod
against its `backoffLimit` nor lets a later rule fail the Job for it: it creates the replacement.
The webhook puts the rule first at a Job's creation; the controller moves only the pods of Jobs that
have it (`ignores_disruptions_first`).

A running burst job moves home from its checkpoint by its runner's exit with MOVED_HOME_EXIT_CODE,
after the checkpoint was copied back; the webhook puts one `ignore_moved_home` rule per burst container
right after the evictions' rule, each naming its container, so the Job creates the replacement for that
exit of the runner's container only (`ignores_moves_home`): an 81 of a sidecar, an init container or a
container without the runner counts as any failure, never a free retry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

DISRUPTION_TARGET: Final = "DisruptionTarget"
IGNORE_DISRUPTIONS: Final[Mapping[str, Any]] = {
    "action": "Ignore",
    "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}],
}

# The runner's EXIT_MOVED_HOME (jarvice.exitcodes, which this package may not import; a test keeps
# the two equal).
MOVED_HOME_EXIT_CODE: Final = 81


def ignore_moved_home(container: str) -> dict[str, Any]:
    """The rule ignoring a move home's exit of `container` (a burst container: its runner's)."""
    return {
        "action": "Ignore",
        "onExitCodes": {"containerName": container, "operator": "In", "values": [MOVED_HOME_EXIT_CODE]},
    }


def ignores_disruptions_first(pod_failure_policy: object) -> bool:
    """Whether a Job's podFailurePolicy's first rule ignores a pod marked DisruptionTarget: then no
    other rule can count or fail the Job for a pod the product evicted."""
    if not isinstance(pod_failure_policy, dict):
        return False
    rules = pod_failure_policy.get("rules")
    if not isinstance(rules, list) or not rules or not isinstance(rules[0], dict):
        return False
    first = rules[0]
    conditions = first.get("onPodConditions")
    return (
        first.get("action") == "Ignore"
        and isinstance(conditions, list)
        and any(
            isinstance(c, dict) and c.get("type") == DISRUPTION_TARGET and c.get("status", "True") == "True"
            for c in conditions
        )
    )


def moves_home_containers(pod_failure_policy: object) -> frozenset[str] | None:
    """The containers whose move-home exit the Job ignores: the rules right after the evictions' first one
    that ignore 81, up to the first rule of another kind (a later one may come after a rule that counts or
    fails the Job for that exit). None: one of them names no container (any container's 81 is ignored, as
    the rule of Jobs created before rules named their containers did). Empty: no such rule, or the
    evictions' rule is not first."""
    if not ignores_disruptions_first(pod_failure_policy):
        return frozenset()
    assert isinstance(pod_failure_policy, dict)
    names: set[str] = set()
    for rule in pod_failure_policy["rules"][1:]:
        exits = rule.get("onExitCodes") if isinstance(rule, dict) else None
        if not (
            isinstance(exits, dict)
            and rule.get("action") == "Ignore"
            and exits.get("operator") == "In"
            and isinstance(exits.get("values"), list)
            and MOVED_HOME_EXIT_CODE in exits["values"]
        ):
            break
        name = exits.get("containerName")
        if name in (None, ""):
            return None
        if isinstance(name, str):
            names.add(name)
    return frozenset(names)


def covers_moves_home(covered: frozenset[str] | None, containers: Iterable[str]) -> bool:
    """Whether the containers `moves_home_containers` found (None: any container) include each of a pod's
    burst `containers` (and there is at least one)."""
    wanted = set(containers)
    return covered is None or (bool(wanted) and wanted <= covered)


def ignores_moves_home(pod_failure_policy: object, containers: Iterable[str]) -> bool:
    """Whether a Job's podFailurePolicy ignores evictions first and a move home's exit of every one of
    `containers` (the burst containers, whose runners exit 81 once the checkpoint is home) right after:
    then no rule of the Job's own counts or fails the Job for the pod that left with its checkpoint."""
    return covers_moves_home(moves_home_containers(pod_failure_policy), containers)
