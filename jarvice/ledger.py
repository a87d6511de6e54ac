"""The job ledger annotation: the last stage each of a burst pod's JARVICE jobs reached (pure).

`nimbix-burst.io/jobs: 4711=running,4712=submitted`. The controller writes it (controller.jobrecords)
and reads it back after a restart; `kubectl nimbix` reads it to show a job's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from jarvice import contract
from jarvice.model import parse_job_number

Stage = Literal["submitted", "queued", "running", "succeeded", "failed"]
STAGES: Final[tuple[Stage, ...]] = ("submitted", "queued", "running", "succeeded", "failed")

# Jobs a ledger keeps (a pod whose runner retried many times): the oldest are dropped, and a job
# older than every entry of a full ledger counts as recorded. Keeps the annotation a few hundred bytes.
MAX_LEDGER: Final = 20


def parse_ledger(text: str) -> tuple[dict[int, Stage], str]:
    """`4711=running,4712=submitted` -> {4711: "running", 4712: "submitted"}, and a problem ("" when
    readable). An entry that is not `<number>=<stage>` is dropped and named in the problem."""
    ledger: dict[int, Stage] = {}
    bad: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        number, _, stage = item.partition("=")
        named = next((s for s in STAGES if s == stage.strip()), None)
        job = parse_job_number(number)
        if job is None or named is None:
            bad.append(item[:40])
            continue
        ledger[job] = named
    problem = ""
    if bad:
        problem = (
            f"{contract.ANNOTATION_JOB_LEDGER}: entries {bad[:3]} are not <job number>=<stage> with a stage of"
            f" {', '.join(STAGES)}; they are ignored (remove the annotation's bad entries)"
        )
    return ledger, problem


def format_ledger(ledger: Mapping[int, Stage]) -> str:
    kept = sorted(ledger)[-MAX_LEDGER:]
    return ",".join(f"{number}={ledger[number]}" for number in kept)
