"""The failure table: every failure, with and without a job, before and after the retries run out."""

import pytest

from entrypoint import recovery
from entrypoint.recovery import MAX_FOLLOW_RETRIES as MAX
from jarvice import exitcodes
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

# (failure, job known, consecutive failures so far) -> (action, exit status, terminate first)
TABLE = [
    # No job yet: nothing to watch or stop; exit with the failure's own status.
    ("credentials", False, 0, "give_up", exitcodes.EXIT_CREDENTIALS, False),
    ("protocol", False, 0, "give_up", exitcodes.EXIT_PROTOCOL, False),
    ("rejected", False, 0, "give_up", exitcodes.EXIT_PROTOCOL, False),
    ("app_not_found", False, 0, "give_up", exitcodes.EXIT_CONFIG, False),
    ("unavailable", False, 0, "give_up", exitcodes.EXIT_REMOTE_UNAVAILABLE, False),
    ("internal", False, 0, "give_up", exitcodes.EXIT_INTERNAL, False),
    # A job runs: transient-looking failures are retried ...
    ("protocol", True, 0, "retry", exitcodes.EXIT_PROTOCOL, False),
    ("protocol", True, MAX - 1, "retry", exitcodes.EXIT_PROTOCOL, False),
    ("rejected", True, 2, "retry", exitcodes.EXIT_PROTOCOL, False),
    ("credentials", True, 0, "retry", exitcodes.EXIT_CREDENTIALS, False),
    ("stream_broken", True, 0, "retry", exitcodes.EXIT_REMOTE_UNAVAILABLE, False),
    # ... a vanished job is looked up again ...
    ("job_not_found", True, 0, "reattach", exitcodes.EXIT_PROTOCOL, False),
    # ... and when the runner gives up, it stops the job first.
    ("protocol", True, MAX, "give_up", exitcodes.EXIT_PROTOCOL, True),
    ("credentials", True, MAX, "give_up", exitcodes.EXIT_CREDENTIALS, True),
    ("job_not_found", True, MAX, "give_up", exitcodes.EXIT_PROTOCOL, True),
    ("stream_broken", True, MAX, "give_up", exitcodes.EXIT_REMOTE_UNAVAILABLE, True),
    ("unavailable", True, 0, "give_up", exitcodes.EXIT_REMOTE_UNAVAILABLE, True),
    ("internal", True, 0, "give_up", exitcodes.EXIT_INTERNAL, True),
]


@pytest.mark.parametrize(
    ("failure", "job_known", "failures", "action", "code", "terminate"),
    TABLE,
    ids=[f"{row[0]}-{'job' if row[1] else 'nojob'}-{row[2]}" for row in TABLE],
)
def test_decide_recovery(
    failure: recovery.Failure, job_known: bool, failures: int, action: str, code: int, terminate: bool
) -> None:
    decision = recovery.decide_recovery(failure, job_known=job_known, failures=failures)
    assert (decision.action, decision.exit_code, decision.terminate) == (action, code, terminate)
    assert decision.reason


def test_a_job_is_never_abandoned() -> None:
    """Whatever fails, with a job known the runner either keeps watching it or stops it."""
    for failure in recovery._EXIT_CODES:
        for failures in range(MAX + 2):
            decision = recovery.decide_recovery(failure, job_known=True, failures=failures)
            assert decision.action in ("retry", "reattach") or decision.terminate, (failure, failures)


@pytest.mark.parametrize(("failures", "expected"), [(0, 1.0), (1, 2.0), (3, 8.0), (10, 30.0), (500, 30.0)])
def test_retry_delay(failures: int, expected: float) -> None:
    assert recovery.retry_delay(failures, base_seconds=1.0, cap_seconds=30.0) == expected
