"""What the runner tells Kubernetes when it exits, and how long it needs to exit cleanly. Pure.

The termination message says whether the runner's JARVICE job may still run: the webhook's budget
keeps counting a finished pod's GPUs until it says `job_may_run: false` (or the controller records
the job ended). A runner killed with SIGKILL writes nothing, and its pod stays counted.
"""

import json
from typing import Final

from entrypoint.settings import Tuning
from jarvice import contract

# After the cancel grace, what is left for the terminate call itself.
TERMINATE_SECONDS: Final = 5.0
# Kubernetes keeps at most 4096 bytes of a termination message; ours is far below that.
MAX_MESSAGE_BYTES: Final = 4096
# Slack for the runner's own work around the calls (start-up, logging, the state file's fsyncs).
GRACE_MARGIN_SECONDS: Final = 5.0


def build_message(*, job: int | None, job_may_run: bool, exit_code: int) -> str:
    """The termination message: one JSON object under `contract.TERMINATION_KEY`."""
    body = {contract.TERMINATION_KEY: {"job": job, "job_may_run": job_may_run, "exit_code": exit_code}}
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


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
