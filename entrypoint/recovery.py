"""What the runner does when a JARVICE call fails: retry, re-attach or give up. Pure.

One table for every failure, so no exit path can forget the job: a job this runner started is
never left running with nobody watching it. While following a job, a failure that may be
transient (an HTML page from a proxy, a 401 from a hiccuping auth backend, a 404 for a job that
exists, a stream cut mid-body) is retried a bounded number of times; a job that seems to have
vanished is looked up again by its label. Once the runner must give up, a job that may still run
is terminated (best effort) before the runner exits.
"""

from dataclasses import dataclass
from typing import Final, Literal

from jarvice import exitcodes

Failure = Literal[
    "unavailable",  # JARVICE unreachable past the outage budget (the retries are already spent)
    "protocol",  # an answer that is not what the API documents (HTML page, wrong shape)
    "rejected",  # a 4xx other than 401/404
    "credentials",  # HTTP 401
    "job_not_found",  # HTTP 404 for a per-job call
    "stream_broken",  # the connection died in the middle of an output body
    "app_not_found",  # HTTP 404 on submit
    "internal",  # a bug in the runner
]
Action = Literal["retry", "reattach", "give_up"]

# Consecutive failures tolerated while following a job before giving up. With the default backoff
# (1 s doubling, capped at 30 s) six retries span about a minute: long enough for a proxy or an
# auth backend to recover, short enough that a job nobody can watch is not billed for long.
MAX_FOLLOW_RETRIES: Final = 6

_EXIT_CODES: Final[dict[Failure, int]] = {
    "unavailable": exitcodes.EXIT_REMOTE_UNAVAILABLE,
    "protocol": exitcodes.EXIT_PROTOCOL,
    "rejected": exitcodes.EXIT_PROTOCOL,
    "credentials": exitcodes.EXIT_CREDENTIALS,
    "job_not_found": exitcodes.EXIT_PROTOCOL,
    "stream_broken": exitcodes.EXIT_REMOTE_UNAVAILABLE,
    "app_not_found": exitcodes.EXIT_CONFIG,
    "internal": exitcodes.EXIT_INTERNAL,
}
# Failures worth another try while a job is being followed; "unavailable" has had its retries
# inside the adapter (the outage budget) and a bug does not fix itself.
_TRANSIENT: Final = frozenset({"protocol", "rejected", "credentials", "stream_broken"})


@dataclass(frozen=True, slots=True)
class Recovery:
    action: Action
    exit_code: int  # the exit status if the runner gives up (meaningful for give_up only)
    terminate: bool  # give up: stop the job first, best effort
    reason: str


def decide_recovery(failure: Failure, *, job_known: bool, failures: int) -> Recovery:
    """The runner's move after `failure`; `failures` counts the consecutive failures before it."""
    code = _EXIT_CODES[failure]
    if not job_known:
        return Recovery("give_up", code, terminate=False, reason=f"{failure} before any job was started")
    if failures < MAX_FOLLOW_RETRIES:
        if failure == "job_not_found":
            return Recovery("reattach", code, terminate=False, reason="job not found: look it up again by its label")
        if failure in _TRANSIENT:
            return Recovery("retry", code, terminate=False, reason=f"{failure} while following: retrying")
    reason = f"{failure} after {failures} retries" if failure in _TRANSIENT or failure == "job_not_found" else failure
    return Recovery("give_up", code, terminate=True, reason=f"{reason}: stopping the job before exiting")


def retry_delay(failures: int, *, base_seconds: float, cap_seconds: float) -> float:
    """Exponential backoff between follow retries (the caller adds jitter)."""
    return float(min(cap_seconds, base_seconds * 2.0 ** min(failures, 30)))
