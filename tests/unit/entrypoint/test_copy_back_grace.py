"""The copy-back after a signal runs as long as the pod's grace period allows (the webhook tells the
runner its grace period), not a fixed time."""

import io
import signal

import pytest

from entrypoint import staging, vault_settings
from entrypoint.sftp_transfer import VaultTransfer
from entrypoint.signals import CancelToken
from entrypoint.vault_staging import VaultStaging
from jarvice import contract, vault_layout
from jarvice.redaction import Secret


@pytest.mark.parametrize(
    ("env", "seconds"),
    [
        ({}, contract.MIN_TERMINATION_GRACE_SECONDS),
        ({"NIMBIX_BURST_GRACE_SECONDS": " "}, contract.MIN_TERMINATION_GRACE_SECONDS),
        ({"NIMBIX_BURST_GRACE_SECONDS": "600"}, 600),
        ({"NIMBIX_BURST_GRACE_SECONDS": "75"}, 75),
    ],
)
def test_parse_grace_seconds(env: dict[str, str], seconds: int) -> None:
    assert vault_settings.parse_grace_seconds(env) == seconds


@pytest.mark.parametrize("raw", ["0", "-5", "1.5", "ten", str(vault_settings.MAX_GRACE_SECONDS + 1)])
def test_parse_grace_seconds_rejects(raw: str) -> None:
    with pytest.raises(staging.StagingError, match="NIMBIX_BURST_GRACE_SECONDS must be the pod's grace period"):
        vault_settings.parse_grace_seconds({"NIMBIX_BURST_GRACE_SECONDS": raw})


@pytest.mark.parametrize(("grace", "copy_back"), [(75, 70.0), (600, 595.0), (3, 0.0)])
def test_copy_back_seconds(grace: int, copy_back: float) -> None:
    assert vault_settings.copy_back_seconds(grace) == copy_back


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("grace", [75, 600])
def test_the_copy_back_after_a_signal_stops_only_near_the_end_of_the_pod_s_grace_period(grace: int) -> None:
    clock, cancel = Clock(), CancelToken()
    transfer = VaultTransfer(
        vault_settings.VaultSettings("vault.invalid", 22, "/known_hosts", keep_job_dir=False),
        username="u",
        apikey=Secret("k"),
        clock=clock,
        progress_out=io.StringIO(),
    )
    stage = VaultStaging(
        staging.StagePaths((), ("/w/out",)),
        job_label="j",
        dirs=vault_layout.WorkDirs(own="nimbix-burst/j"),
        pod_uid="",
        transfer=transfer,
        state_dir=None,
        container="",
        keep_job_dir=False,
        cancel=cancel,
        clock=clock,
        grace_seconds=grace,
    )
    assert not stage.should_stop_copy_back()
    cancel.request(signal.SIGTERM)
    assert not stage.should_stop_copy_back()  # the signal's time is noted
    clock.now += grace - vault_settings.GRACE_MARGIN_SECONDS - 1
    assert not stage.should_stop_copy_back()
    clock.now += 1
    assert stage.should_stop_copy_back()
