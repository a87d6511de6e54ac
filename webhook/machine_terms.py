"""Which machines a burst may use, in what order, and how long its job may stay queued on one (pure).

From the namespace's `nimbix-burst.io/machines` (the machines to use, in order) and the pod's
`nimbix-burst.io/max-remote-queue`, else its namespace's (a duration; the runner's default, 10
minutes, without either). The runner reads them as NIMBIX_BURST_MACHINES and
NIMBIX_BURST_MAX_REMOTE_QUEUE (entrypoint.candidates orders the machines and moves a queued job).
A value that cannot be read is left out, and the admission warns saying what to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from jarvice import contract
from webhook.types import NamespaceMachines


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class MachineTerms:
    order: Final[tuple[str, ...]]  # NIMBIX_BURST_MACHINES (): every machine that fits, cheapest first
    max_remote_queue: Final[str]  # NIMBIX_BURST_MAX_REMOTE_QUEUE as `<seconds>s` ("": the runner's default)
    warnings: Final[tuple[str, ...]]  # what kubectl shows about an annotation that could not be read

    def __init__(self, order: tuple[str, ...], max_remote_queue: str, warnings: tuple[str, ...]) -> None:
        self.order = order
        self.max_remote_queue = max_remote_queue
        self.warnings = warnings


def _shown(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def decide_machine_terms(
    pod_annotations: Mapping[str, Any], namespace: NamespaceMachines | None, *, namespace_name: str
) -> MachineTerms:
    warnings: list[str] = []
    queue = ""
    sources: list[tuple[object, str]] = []
    if contract.ANNOTATION_MAX_REMOTE_QUEUE in pod_annotations:
        sources.append((pod_annotations[contract.ANNOTATION_MAX_REMOTE_QUEUE], "of the pod"))
    if namespace is not None and namespace.max_remote_queue is not None:
        sources.append((namespace.max_remote_queue, f"of namespace {namespace_name}"))
    for value, whose in sources:
        try:
            seconds = contract.parse_duration_seconds(value if isinstance(value, str) else repr(value))
        except ValueError as exc:
            # Short: the API server may cut a warning past 120 characters (webhook.review).
            fix = "at most 168h" if "week" in str(exc) else "write 30s, 10m or 0"
            warnings.append(
                f"nimbix-burst: {contract.ANNOTATION_MAX_REMOTE_QUEUE} {_shown(value)!r} {whose} ignored: {fix}"
            )
            continue
        queue = f"{seconds}s"
        break
    order: tuple[str, ...] = ()
    if namespace is not None and namespace.machines is not None:
        try:
            order = contract.parse_machine_order(namespace.machines)
        except ValueError:
            warnings.append(
                f"nimbix-burst: {contract.ANNOTATION_MACHINES} {namespace.machines!r} of namespace {namespace_name}"
                " ignored: write e.g. ng4,ng4v"
            )
    return MachineTerms(order=order, max_remote_queue=queue, warnings=tuple(warnings))
