"""What the runner tells Kubernetes when it exits, and how long it needs to exit cleanly. Pure.

The termination message says whether the runner's JARVICE job may still run: the webhook's budget
keeps counting a finished pod's GPUs until it says `job_may_run: false` (or the controller records
the job ended). A runner killed with SIGKILL writes nothing, and its pod stays counted.
"""

import json
from dataclasses import dataclass
from typing import Final

from entrypoint.remote_settings import Tuning
from jarvice import contract

# After the cancel grace, what is left for the terminate call itself.
TERMINATE_SECONDS: Final = 5.0
# Kubernetes keeps at most 4096 bytes of a termination message; ours is far below that.
MAX_MESSAGE_BYTES: Final = 4096
# Slack for the runner's own work around the calls (start-up, logging, the state file's fsyncs).
GRACE_MARGIN_SECONDS: Final = 5.0


# The longest path a message names: four of them and the rest stay far under MAX_MESSAGE_BYTES.
NAMED_PATH_CHARS: Final = 512


@dataclass(frozen=True, slots=True)
class KeptInVault:
    """Outputs the copy-back did not place in the pod: they stay in the vault, in `vault_dir`."""

    vault_dir: str
    count: int  # outputs refused by the pod's volume (0: the copy-back stopped or failed first)
    first: tuple[str, ...]  # the first of them (or of those not copied), as vault paths


def build_message(*, job: int | None, job_may_run: bool, exit_code: int, kept: KeptInVault | None = None) -> str:
    """The termination message: one JSON object under `contract.TERMINATION_KEY` (`kubectl describe pod`
    shows it). With `kept`, it says which outputs stayed in the vault and where."""
    payload: dict[str, object] = {"job": job, "job_may_run": job_may_run, "exit_code": exit_code}
    if kept is not None:
        payload["kept_in_vault"] = {
            "vault_dir": kept.vault_dir[:NAMED_PATH_CHARS],
            "refused": kept.count,
            "first": [path[:NAMED_PATH_CHARS] for path in kept.first[:4]],
        }
    return json.dumps({contract.TERMINATION_KEY: payload}, separators=(",", ":"), sort_keys=True)


def required_grace_seconds(tuning: Tuning) -> float:
    """The longest a SIGTERM may take to turn into an exit: it can arrive at the start of the
    submit POST (held until it returns: connect + read timeout), then the cancel grace, then the
    terminate call, plus a margin. The pod's terminationGracePeriodSeconds must cover it."""
    return (
        tuning.connect_timeout
        + tuning.read_timeout
        + tuning.cancel_grace_seconds
        + TERMINATE_SECONDS
        + GRACE_MARGIN_SECONDS
    )


def build_grace_warning(tuning: Tuning, *, grace_seconds: int = contract.MIN_TERMINATION_GRACE_SECONDS) -> str | None:
    """A warning when the timeouts need more than the burst pod's guaranteed grace period."""
    needed = required_grace_seconds(tuning)
    if needed <= grace_seconds:
        return None
    return (
        f"JARVICE_CONNECT_TIMEOUT + JARVICE_READ_TIMEOUT + JARVICE_CANCEL_GRACE_SECONDS + {TERMINATE_SECONDS:g} s"
        f" (terminate) + {GRACE_MARGIN_SECONDS:g} s = {needed:g} s exceed the burst pod's grace period of"
        f" {grace_seconds} s: a SIGTERM during the submit may be followed by SIGKILL before the job is"
        " stopped; lower them or raise the pod's terminationGracePeriodSeconds"
    )
