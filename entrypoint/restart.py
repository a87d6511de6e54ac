"""A container's restart state: what a restarted runner does with the job of the runner before it. Pure.

Two restarts look alike from inside a container and must be told apart:
- the runner died before it reported its job's result (OOM kill, kill -9, node hiccup): the job is
  still this attempt's, so the new runner picks it up (re-attaches, or prints the rest of a
  finished job's output and exits with its code) instead of running it again;
- the runner reported a failure and the kubelet restarted it (`restartPolicy: OnFailure` or
  `Always`): a deliberate retry, so it submits anew as the next attempt, with a job label of its own;
- the runner reported success and the kubelet restarted it anyway (only `restartPolicy: Always`, the
  bare Pod's default, does that): the work is done and paid for, so nothing is submitted again; the
  runner says so and waits until it is stopped (an exit would only be restarted again).

The state file (in NIMBIX_BURST_STATE_DIR, an emptyDir that outlives container restarts) is
written before the submit, updated once the job number is known and as output is printed, and
marked reported just before the runner exits.
"""

import json
from dataclasses import asdict, dataclass
from typing import Final, Literal

STATE_FORMAT: Final = 1
# The file name when the container is unknown (no NIMBIX_BURST_CONTAINER).
DEFAULT_STATE_NAME: Final = "runner"


class StateError(ValueError):
    """The state file cannot be read as a state."""


@dataclass(frozen=True, slots=True)
class RunnerState:
    attempt: int
    job_label: str
    job_number: int | None = None
    printed_lines: int = 0  # application output lines written to stdout (at least these)
    reported: bool = False  # the runner reported a result: a restart after this is a deliberate retry
    exit_code: int | None = None


StartKind = Literal["first", "pick_up", "retry", "settled"]


@dataclass(frozen=True, slots=True)
class StartDecision:
    kind: StartKind
    attempt: int
    previous: RunnerState | None
    reason: str


def decide_start(previous: RunnerState | None) -> StartDecision:
    if previous is None:
        return StartDecision("first", 1, None, "no state: the first runner of this container")
    if not previous.reported:
        return StartDecision(
            "pick_up",
            previous.attempt,
            previous,
            "the previous runner exited before reporting its job's result: picking that job up",
        )
    if previous.exit_code == 0:
        return StartDecision(
            "settled",
            previous.attempt,
            previous,
            "the previous runner reported success: a restart after it (restartPolicy Always) submits nothing",
        )
    return StartDecision(
        "retry",
        previous.attempt + 1,
        previous,
        f"the previous runner reported exit {previous.exit_code}: a deliberate retry, submitting anew",
    )


def build_state_name(container: str) -> str:
    """One state file per container (two burst containers of a pod share the state volume)."""
    return f"{container or DEFAULT_STATE_NAME}.json"


def render_state(state: RunnerState) -> str:
    return json.dumps({"format": STATE_FORMAT, **asdict(state)}, sort_keys=True) + "\n"


def _int_or_none(raw: dict[str, object], key: str) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateError(f"{key} must be an integer or null, got {value!r}")
    return value


def parse_state(text: str) -> RunnerState:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise StateError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT:
        raise StateError(f"expected a format-{STATE_FORMAT} state object")
    attempt = _int_or_none(raw, "attempt")
    label = raw.get("job_label")
    reported = raw.get("reported")
    printed = _int_or_none(raw, "printed_lines") or 0
    if attempt is None or attempt < 1 or not isinstance(label, str) or not label or not isinstance(reported, bool):
        raise StateError("attempt (>= 1), job_label and reported are required")
    return RunnerState(
        attempt=attempt,
        job_label=label,
        job_number=_int_or_none(raw, "job_number"),
        printed_lines=max(0, printed),
        reported=reported,
        exit_code=_int_or_none(raw, "exit_code"),
    )
