"""One stage-in or copy-back by the runner's own code, in a fresh process whose peak RSS the
staging benchmark (bench.staging) reads: `python -m bench.staging --client SPEC`.

Logs in with the benchmark's key instead of a password (the only change from the runner: the
session is the same once it is up)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from entrypoint import local_tree, staging, vault_settings, vault_staging
from entrypoint.sftp_transfer import DownloadRoot, UploadRoot, VaultTransfer
from entrypoint.signals import CancelToken
from jarvice.redaction import Secret


class KeyTransfer(VaultTransfer):
    def __init__(self, spec: dict[str, Any]) -> None:
        address = vault_settings.VaultSettings("127.0.0.1", spec["port"], spec["known_hosts"], keep_job_dir=True)
        super().__init__(address, username="root", apikey=Secret(""), clock=time.monotonic, progress_out=sys.stderr)
        self.key = spec["key"]
        self.password = spec.get("password")  # through the gateway: the pod's token, as the runner logs in
        if spec.get("cipher"):  # the benchmark's one cipher for every tool
            self.encryption_algs = (spec["cipher"],)

    def _login(self) -> dict[str, object]:
        if self.password:
            return {"username": "bench", "password": self.password, "client_keys": None}
        # The bench's sshd takes a key (OpenSSH's `sftp -b` cannot type a password); the rest of the
        # session is the runner's own (VaultTransfer._connect).
        return {"username": "root", "client_keys": [self.key]}


def run(spec: dict[str, Any]) -> None:
    if spec.get("mode") in ("stage-in", "copy-back"):
        run_staging(spec)
        return
    transfer = KeyTransfer(spec)
    local, remote = spec["local"], spec["remote"]
    if spec["direction"] == "up":
        real = local_tree.resolve_root(local)
        if real is None:
            raise SystemExit(f"{local} is a link out of its directory")
        roots = [UploadRoot(local, real, remote)]
        totals = vault_staging.count_files(roots)
        report = transfer.upload(roots, totals=totals, never_staged=frozenset(), should_stop=lambda: False)
    else:
        report = transfer.download([DownloadRoot(remote, local)], should_stop=lambda: False)
    if not report.complete:
        raise SystemExit(f"transfer failed: {report.error}")


def run_staging(spec: dict[str, Any]) -> None:
    """The runner's VaultStaging: the stage-in of `local` (count walk, upload, staging record), or the
    copy-back into it after a job, with the record in `state_dir`."""
    local = spec["local"]
    paths = staging.StagePaths(stage_in=(local,), stage_out=(local,))
    stage = vault_staging.VaultStaging(
        paths,
        job_label=spec["label"],
        dirs=staging.build_work_dirs(data_key=None, pod_uid="", container="bench", job_label=spec["label"]),
        pod_uid="",
        transfer=KeyTransfer(spec),
        state_dir=Path(spec["state_dir"]),
        container="bench",
        keep_job_dir=True,
        cancel=CancelToken(),
        clock=time.monotonic,
    )
    if spec["mode"] == "stage-in":
        early = stage.prepare()
        if early is not None:
            raise SystemExit(f"the stage-in ended early: exit code {early.code}")
        return
    code = stage.finish(job=1, job_may_run=False, exit_code=0, stopping_since=None)
    if code != 0:
        raise SystemExit(f"the copy-back failed: exit code {code}")
