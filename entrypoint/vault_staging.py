"""The runner's data staging shell: stage in before the run, copy back after it (`ports.DataStage`).

`entrypoint.staging` decides (what to upload, whether to copy back, the record's meaning);
`entrypoint.sftp_transfer` moves bytes. This module lists the pod's files, keeps the staging record
in the state directory, and says in the log what was copied and where what was not copied stays.
"""

import contextlib
import dataclasses
import logging
import os
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import asyncssh

from entrypoint import staging
from entrypoint.plan import RemotePlan
from entrypoint.ports import EarlyExit, RemoteDeps
from entrypoint.settings import Settings
from entrypoint.sftp_transfer import Upload, VaultTransfer
from entrypoint.signals import CancelToken
from jarvice import contract, exitcodes

log = logging.getLogger(__name__)

# How many paths a log line names (the counts are always whole).
LOGGED_PATHS: Final = 20
# After a signal, the copy-back stops this long before the pod's guaranteed grace period ends.
GRACE_MARGIN_SECONDS: Final = 5.0
RECORD_NAME: Final = "staging"


class VaultStaging:
    def __init__(
        self,
        paths: staging.StagePaths,
        *,
        job_label: str,
        transfer: VaultTransfer,
        state_dir: Path | None,
        container: str,
        keep_job_dir: bool,
        cancel: CancelToken,
        clock: Callable[[], float],
        never_staged: frozenset[str] = frozenset(),
    ) -> None:
        self.paths = paths
        # The credential files, as the kernel names them (a Secret volume's files are links).
        self.never_staged = frozenset(os.path.realpath(path) for path in never_staged)
        self.job_label = job_label
        self.transfer = transfer
        self.record_path = state_dir / f"{RECORD_NAME}-{container or 'runner'}.json" if state_dir else None
        self.keep_job_dir = keep_job_dir
        self.cancel = cancel
        self.clock = clock
        self.signal_seen_at: float | None = None
        self.record = self._load() or staging.StagingRecord(job_label=job_label)

    # --- before the run ------------------------------------------------------------------------

    def prepare(self) -> EarlyExit | None:
        """Stage in (or finish an earlier runner's copy-back); an EarlyExit ends the run unsubmitted."""
        action = staging.decide_start(self.record, job_label=self.job_label)
        if action == "copy_back_only":
            label = self.record.job_label
            log.warning("finishing the copy-back of an earlier runner", extra={"job_label": label})
            code = self.record.exit_code if self.record.exit_code is not None else exitcodes.EXIT_FAILURE
            return EarlyExit(self._copy_back(label, exit_code=code, stopping_since=None), reported=True)
        if action == "skip_stage_in":
            log.info("stage-in already done for this job; not uploading again", extra={"job_label": self.job_label})
            return None
        return self._stage_in()

    def _stage_in(self) -> EarlyExit | None:
        job_dir = staging.build_job_dir(self.job_label)
        if self.record.job_label != self.job_label:
            self.record = staging.StagingRecord(job_label=self.job_label)
        try:
            files, dirs = _list_local(self.paths.stage_in)
        except FileNotFoundError as exc:
            log.error(
                "a stage-in path does not exist in this container",
                extra={"path": str(exc), "job_label": self.job_label},
            )
            return EarlyExit(exitcodes.EXIT_CONFIG, reported=True)
        secret = [f for f in files if os.path.realpath(f[0]) in self.never_staged]
        if secret:
            log.warning("not staging the JARVICE credentials", extra={"paths": [f[0] for f in secret]})
            files = [f for f in files if f not in secret]
        todo = [
            Upload(local=Path(path), vault=staging.vault_path(job_dir, path), size=size)
            for path, size, mtime_ns in files
            if not staging.is_uploaded(self.record, path, size=size, mtime_ns=mtime_ns)
        ]
        vault_dirs = [staging.vault_path(job_dir, d) for d in dirs]
        for path in self.paths.stage_out:
            if path not in self.paths.stage_in:
                vault_dirs.append(staging.vault_path(job_dir, os.path.dirname(path)))
        total = sum(item.size for item in todo)
        log.info(
            "staging in",
            extra={"files": len(todo), "skipped": len(files) - len(todo), "bytes": total, "vault_dir": job_dir},
        )
        report = self.transfer.upload(todo, dirs=vault_dirs, should_stop=self.should_stop_stage_in)
        uploaded = dict(self.record.uploaded)
        stats = {path: (size, mtime_ns) for path, size, mtime_ns in files}
        for path in report.done:
            size, mtime_ns = stats[path]
            uploaded[path] = staging.UploadedFile(size, mtime_ns, report.digests[path])
        self.record = staging.StagingRecord(
            job_label=self.job_label, uploaded=uploaded, stage_in_done=report.complete and not report.stopped
        )
        self._save()
        if report.stopped:
            log.warning(
                "signal received during the stage-in; nothing was submitted", extra={"job_label": self.job_label}
            )
            return EarlyExit(exitcodes.EXIT_TERMINATED, reported=False)
        if not report.complete:
            log.error(
                "stage-in failed; nothing was submitted, a restarted runner resumes the upload",
                extra={
                    "error": report.error,
                    "not_copied": len(report.left),
                    "first_not_copied": report.left[:LOGGED_PATHS],
                    "vault_dir": job_dir,
                },
            )
            return EarlyExit(exitcodes.EXIT_TRANSFER, reported=False)
        log.info("stage-in complete", extra={"files": len(report.done), "vault_dir": job_dir})
        return None

    # --- after the run -------------------------------------------------------------------------

    def finish(self, *, job: int | None, job_may_run: bool, exit_code: int, stopping_since: float | None) -> int:
        """Copy back what the job wrote (within the grace period after a signal); the exit status."""
        job_dir = staging.build_job_dir(self.job_label)
        if staging.decide_end(job_may_run=job_may_run, job_known=job is not None) == "leave":
            if job_may_run:
                log.warning(
                    "the job may still run: nothing copied back; a restarted runner copies back after it ends",
                    extra={"job": job, "vault_dir": job_dir},
                )
            return exit_code
        if not self.paths.stage_out:
            self._remove_job_dir(job_dir)
            return exit_code
        self.record = staging.StagingRecord(
            job_label=self.job_label,
            uploaded=self.record.uploaded,
            stage_in_done=True,
            copy_back="pending",
            exit_code=exit_code,
        )
        self._save()
        return self._copy_back(self.job_label, exit_code=exit_code, stopping_since=stopping_since)

    def _copy_back(self, label: str, *, exit_code: int, stopping_since: float | None) -> int:
        job_dir = staging.build_job_dir(label)
        files: list[tuple[str, Path, int]] = []
        for path in self.paths.stage_out:
            root = staging.vault_path(job_dir, path)
            found = self.transfer.list_files(root)
            if found is None:
                log.warning("the job wrote nothing at a stage-out path", extra={"path": path, "vault_path": root})
                continue
            files += [
                (vault_file, Path(staging.local_target(path, root_vault=root, vault_file=vault_file)), size)
                for vault_file, size in found
            ]
        if stopping_since is not None:
            self.signal_seen_at = stopping_since
        report = self.transfer.download(files, should_stop=self.should_stop_copy_back)
        extra: dict[str, object] = {
            "copied": len(report.done),
            "not_copied": len(report.left),
            "first_not_copied": report.left[:LOGGED_PATHS],
            "vault_dir": job_dir,
        }
        if report.stopped:
            log.warning("the grace period ended during the copy-back; the rest stays in the vault", extra=extra)
            return exit_code
        if not report.complete:
            log.error(
                "copy-back failed; what was not copied stays in the vault", extra={**extra, "error": report.error}
            )
            return exitcodes.EXIT_TRANSFER
        log.info("copy-back complete", extra=extra)
        self.record = staging.StagingRecord(job_label=label, stage_in_done=True, copy_back="done", exit_code=exit_code)
        self._save()
        self._remove_job_dir(job_dir)
        return exit_code

    def _remove_job_dir(self, job_dir: str) -> None:
        if self.keep_job_dir:
            log.info("keeping the job's vault directory", extra={"vault_dir": job_dir})
            return
        try:
            self.transfer.remove_tree(job_dir)
        except (OSError, asyncssh.Error) as exc:  # the data is home: a leftover directory is only untidy
            log.warning("could not remove the job's vault directory", extra={"vault_dir": job_dir, "error": str(exc)})

    # --- the stop rule the transfers poll ------------------------------------------------------

    def should_stop_stage_in(self) -> bool:
        return self.cancel.signum is not None

    def should_stop_copy_back(self) -> bool:
        """A signal does not stop a copy-back at once: it may go on until the grace period ends."""
        if self.cancel.signum is None:
            return False
        if self.signal_seen_at is None:
            self.signal_seen_at = self.clock()
        limit = contract.MIN_TERMINATION_GRACE_SECONDS - GRACE_MARGIN_SECONDS
        return self.clock() - self.signal_seen_at >= limit

    # --- the record ----------------------------------------------------------------------------

    def _load(self) -> staging.StagingRecord | None:
        if self.record_path is None:
            return None
        try:
            return staging.parse_record(self.record_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, staging.StagingError) as exc:
            log.warning(
                "staging record unreadable; starting afresh", extra={"path": str(self.record_path), "error": str(exc)}
            )
            return None

    def _save(self) -> None:
        if self.record_path is None:
            return
        directory = self.record_path.parent
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{self.record_path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(staging.render_record(self.record))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.record_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            log.warning("could not save the staging record", extra={"path": str(self.record_path), "error": str(exc)})


def _list_local(paths: Sequence[str]) -> tuple[list[tuple[str, int, int]], list[str]]:
    """(files as (path, size, mtime_ns), directories) under the staged paths; raises
    FileNotFoundError naming a path that does not exist."""
    files: list[tuple[str, int, int]] = []
    dirs: list[str] = []
    for path in paths:
        if os.path.isfile(path):
            info = os.stat(path)
            files.append((path, info.st_size, info.st_mtime_ns))
            continue
        if not os.path.isdir(path):
            raise FileNotFoundError(path)
        for directory, subdirs, names in os.walk(path):
            # A configMap or downwardAPI volume's `..data` and `..<timestamp>` are how the kubelet
            # swaps it atomically: the files are the links beside them (followed).
            subdirs[:] = sorted(d for d in subdirs if not d.startswith(".."))
            dirs.append(directory)
            for name in sorted(n for n in names if not n.startswith("..")):
                full = os.path.join(directory, name)
                if os.path.isfile(full):  # sockets, fifos and dangling links are not data
                    info = os.stat(full)
                    files.append((full, info.st_size, info.st_mtime_ns))
    return files, dirs


def attach(
    env: Mapping[str, str], settings: Settings, plan: RemotePlan, deps: RemoteDeps, *, paths: staging.StagePaths
) -> tuple[RemotePlan, RemoteDeps]:
    """The plan with the staging prelude and the deps with a VaultStaging for the staged `paths`.
    Raises StagingError for a variable to fix."""
    logging.getLogger("asyncssh").setLevel(logging.WARNING)  # its INFO is a line per SSH step
    assert settings.remote is not None
    api_host = urllib.parse.urlsplit(settings.remote.api_url).hostname or ""
    vault = staging.parse_vault_settings(env, api_host=api_host)
    job_dir = staging.build_job_dir(plan.job_label)
    out_files = [path for path in paths.stage_out if os.path.isfile(path)]
    prelude = staging.build_prelude(paths, job_dir=job_dir, out_files=out_files)
    wrapped = dataclasses.replace(plan, shell_command=staging.wrap_shell_command(plan.shell_command, prelude=prelude))
    creds = settings.remote.credentials
    transfer = VaultTransfer(
        vault, username=creds.username, apikey=creds.apikey, clock=deps.clock, progress_out=sys.stderr
    )
    stage = VaultStaging(
        paths,
        job_label=plan.job_label,
        transfer=transfer,
        state_dir=Path(settings.state_dir) if settings.state_dir else None,
        container=settings.pod.container,
        keep_job_dir=vault.keep_job_dir,
        cancel=deps.cancel,
        clock=deps.clock,
        never_staged=staging.credential_files(env),
    )
    log.info(
        "data staging",
        extra={"stage_in": list(paths.stage_in), "stage_out": list(paths.stage_out), "vault_host": vault.host},
    )
    return wrapped, dataclasses.replace(deps, data=stage)
