"""The Job failure-policy rule under which a pod the product evicts costs its Job nothing (pure).

Evicting a pod (the Eviction API) makes the API server mark it `DisruptionTarget` before deleting
it. A Job whose `podFailurePolicy` starts with `IGNORE_DISRUPTIONS` neither counts such a pod
against its `backoffLimit` nor lets a later rule fail the Job for it: it creates the replacement.
The webhook puts the rule first at a Job's creation; the controller moves only the pods of Jobs that
have it (`ignores_disruptions_first`).

A running burst job moves home from its checkpoint by its runner's exit with MOVED_HOME_EXIT_CODE,
after the checkpoint was copied back; the webhook puts `IGNORE_MOVED_HOME` second, so the Job creates
the replacement for that exit too (`ignores_moves_home`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

DISRUPTION_TARGET: Final = "DisruptionTarget"
IGNORE_DISRUPTIONS: Final[Mapping[str, Any]] = {
    "action": "Ignore",
    "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}],
}

# The runner's EXIT_MOVED_HOME (jarvice.exitcodes, which this package may not import; a test keeps
# the two equal).
MOVED_HOME_EXIT_CODE: Final = 81
IGNORE_MOVED_HOME: Final[Mapping[str, Any]] = {
    "action": "Ignore",
    "onExitCodes": {"operator": "In", "values": [MOVED_HOME_EXIT_CODE]},
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


def ignores_moves_home(pod_failure_policy: object) -> bool:
    """Whether a Job's podFailurePolicy ignores evictions first and a move home's exit second: then no
    rule of the Job's own counts or fails the Job for the pod that left with its checkpoint. A rule
    that names a container is not that rule: the runner's exit is its burst container's, whatever
    its name, and the moved pod would count against the Job's backoffLimit."""
    if not ignores_disruptions_first(pod_failure_policy):
        return False
    assert isinstance(pod_failure_policy, dict)
    rules = pod_failure_policy["rules"]
    if len(rules) < 2 or not isinstance(rules[1], dict):
        return False
    second = rules[1]
    exits = second.get("onExitCodes")
    return (
        second.get("action") == "Ignore"
        and isinstance(exits, dict)
        and exits.get("containerName") in (None, "")
        and exits.get("operator") == "In"
        and isinstance(exits.get("values"), list)
        and MOVED_HOME_EXIT_CODE in exits["values"]
    )
