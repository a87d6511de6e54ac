"""The termination message, and the runner's timeouts held to the burst pod's grace period."""

import json

import pytest

from entrypoint import termination
from entrypoint.remote_settings import (
    DEFAULT_CANCEL_GRACE_SECONDS,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    Tuning,
)
from entrypoint.stopping import CANCEL_POLL_SECONDS
from jarvice import contract


@pytest.mark.parametrize(
    ("job", "may_run", "code"),
    [(1234, False, 0), (None, False, 78), (99, True, 69), (2**40, True, 255)],
)
def test_build_message(job: int | None, may_run: bool, code: int) -> None:
    text = termination.build_message(job=job, job_may_run=may_run, exit_code=code)
    assert json.loads(text) == {"nimbix_burst": {"job": job, "job_may_run": may_run, "exit_code": code}}
    assert contract.TERMINATION_KEY == "nimbix_burst"
    assert len(text.encode()) < termination.MAX_MESSAGE_BYTES // 10


def test_the_message_names_what_stayed_in_the_vault_and_stays_within_kubernetes_limit() -> None:
    kept = termination.KeptInVault("nimbix-burst/job-7", 2, ("out/model.bin", "out/x" * 400, "c", "d", "e"))
    text = termination.build_message(job=7, job_may_run=False, exit_code=75, kept=kept)
    payload = json.loads(text)["nimbix_burst"]
    assert payload["kept_in_vault"]["vault_dir"] == "nimbix-burst/job-7"
    assert payload["kept_in_vault"]["refused"] == 2
    assert payload["kept_in_vault"]["first"][0] == "out/model.bin"
    assert len(payload["kept_in_vault"]["first"]) == 4  # the first few: the runner's log has the rest
    assert len(payload["kept_in_vault"]["first"][1]) == termination.NAMED_PATH_CHARS
    long = termination.KeptInVault("d" * 5000, 9, tuple("p" * 5000 for _ in range(10)))
    worst = termination.build_message(job=2**40, job_may_run=True, exit_code=255, kept=long)
    assert len(worst.encode()) < termination.MAX_MESSAGE_BYTES


def test_default_timeouts_fit_the_burst_pods_grace_period() -> None:
    # SIGTERM at the start of the submit POST: held until the POST returns (connect + read timeout),
    # then the cancel grace, then the terminate call, plus a margin, all before the kubelet's SIGKILL.
    margin = 5.0
    worst = DEFAULT_CONNECT_TIMEOUT + DEFAULT_READ_TIMEOUT + DEFAULT_CANCEL_GRACE_SECONDS + 5.0 + margin
    assert worst <= contract.MIN_TERMINATION_GRACE_SECONDS
    assert termination.TERMINATE_SECONDS == 5.0 and margin >= CANCEL_POLL_SECONDS
    assert termination.required_grace_seconds(Tuning()) == worst
    assert termination.build_grace_warning(Tuning()) is None


@pytest.mark.parametrize(
    ("tuning", "warns"),
    [
        (Tuning(read_timeout=40.0), False),  # 5 + 40 + 20 + 5 + 5 = 75
        (Tuning(read_timeout=41.0), True),
        (Tuning(cancel_grace_seconds=60.0), True),
        (Tuning(connect_timeout=1.0, read_timeout=10.0, cancel_grace_seconds=50.0), False),
    ],
    ids=["at-limit", "read-over", "grace-over", "rebalanced"],
)
def test_grace_warning(tuning: Tuning, warns: bool) -> None:
    warning = termination.build_grace_warning(tuning)
    assert (warning is not None) is warns
    if warning:
        assert "terminationGracePeriodSeconds" in warning and "75 s" in warning
