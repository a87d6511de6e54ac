"""One stage-in or copy-back by the runner's own code, in a fresh process whose peak RSS the
staging benchmark (bench.staging) reads: `python -m bench.staging --client SPEC`.

Logs in with the benchmark's key instead of a password (the only change from the runner: the
session is the same once it is up)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import asyncssh

from entrypoint import local_tree, sftp_transfer, staging, vault_staging
from entrypoint.batched_socket import BatchedTCP
from entrypoint.sftp_transfer import DownloadRoot, UploadRoot, VaultTransfer
from entrypoint.signals import CancelToken
from jarvice.redaction import Secret

CONNECT_TIMEOUT_SECONDS = 15.0


class KeyTransfer(VaultTransfer):
    def __init__(self, spec: dict[str, Any]) -> None:
        address = staging.VaultSettings("127.0.0.1", spec["port"], spec["known_hosts"], keep_job_dir=True)
        super().__init__(address, username="root", apikey=Secret(""), clock=time.monotonic, progress_out=sys.stderr)
        self.key = spec["key"]

    async def _connect(self) -> asyncssh.SSHClientConnection:
        return await asyncio.wait_for(
            asyncssh.connect(
                "127.0.0.1",
                port=self.address.port,
                username="root",
                client_keys=[self.key],
                known_hosts=self.address.known_hosts,
                agent_path=None,
                encryption_algs=sftp_transfer.ENCRYPTION_ALGS,
                tunnel=BatchedTCP(),
            ),
            timeout=CONNECT_TIMEOUT_SECONDS,
        )


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
