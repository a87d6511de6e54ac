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

from entrypoint import local_tree, staging, vault_settings
from entrypoint.plan import RemotePlan
from entrypoint.ports import EarlyExit, RemoteDeps
from entrypoint.settings import Settings
from entrypoint.sftp_transfer import DownloadRoot, Totals, TransferFailed, UploadRoot, VaultTransfer
from entrypoint.signals import CancelToken
from entrypoint.termination import KeptInVault
from jarvice import contract, exitcodes, vault_layout

log = logging.getLogger(__name__)

RECORD_NAME: Final = "staging"


class VaultStaging:
    def __init__(
        self,
        paths: staging.StagePaths,
        *,
        job_label: str,
        dirs: vault_layout.WorkDirs,
        pod_uid: str,
        transfer: VaultTransfer,
        state_dir: Path | None,
        container: str,
        keep_job_dir: bool,
        cancel: CancelToken,
        clock: Callable[[], float],
        never_staged: frozenset[str] = frozenset(),
        out_files: Sequence[str] = (),
        grace_seconds: int = contract.MIN_TERMINATION_GRACE_SECONDS,
    ) -> None:
        self.paths = paths
        # The credential files, as the kernel names them (a Secret volume's files are links).
        self.never_staged = frozenset(os.path.realpath(path) for path in never_staged)
        self.job_label = job_label
        self.dirs = dirs
        self.pod_uid = pod_uid
        self.out_files = tuple(out_files)
        self.transfer = transfer
        self.record_file = RecordFile(state_dir / f"{RECORD_NAME}-{container or 'runner'}.json" if state_dir else None)
        self.keep_job_dir = keep_job_dir
        self.cancel = cancel
        self.clock = clock
        self.signal_seen_at: float | None = None
        self.grace_seconds = grace_seconds
        self.record = self.record_file.load() or staging.StagingRecord(job_label=job_label)
        # Where this run's data is: chosen by prepare() (an earlier runner's, or under the Job's lease).
        self.job_dir = self.record.work_dir
        self.shared = self.record.shared
        self._kept: KeptInVault | None = None  # what the copy-back left in the vault (the pod's exit names it)

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

    def command(self, shell_command: str) -> str:
        """The job's command: the prelude that links each staged path to its copy, then `shell_command`."""
        prelude = staging.build_prelude(self.paths, job_dir=self.job_dir, out_files=self.out_files)
        return staging.wrap_shell_command(shell_command, prelude=prelude)

    def _choose_dir(self) -> str | None:
        """The Job's directory when its lease is free or this pod's, else the pod's own; an error
        text when the vault could not be asked."""
        self.job_dir, self.shared = self.dirs.own, False
        if self.dirs.shared is None or self.dirs.lease is None:
            return None
        lease = vault_layout.render_lease(pod_uid=self.pod_uid, job_label=self.job_label)
        try:
            existing = self.transfer.take_lease(self.dirs.lease, lease)
        except (OSError, asyncssh.Error, TransferFailed) as exc:
            return str(exc)
        if staging.decide_lease(existing, pod_uid=self.pod_uid) == "own_dir":
            holder = vault_layout.lease_holder(existing or "")
            log.warning(
                "another pod holds the Job's vault directory; staging into this pod's own (everything is sent)",
                extra={"vault_dir": self.dirs.shared, "held_by_pod": holder, "own_vault_dir": self.dirs.own},
            )
            return None
        if existing is not None:  # this pod's own lease, from an earlier runner: ours again, with our label
            try:
                self.transfer.write_file(self.dirs.lease, lease)
            except (OSError, asyncssh.Error) as exc:
                return str(exc)
        self.job_dir, self.shared = self.dirs.shared, True
        return None

    def _release(self) -> None:
        """Give the Job's directory back (its lease), when this run holds it: a retry may take it."""
        if not self.shared or self.dirs.lease is None:
            return
        try:
            self.transfer.remove_file(self.dirs.lease)
        except (OSError, asyncssh.Error) as exc:  # held for good: a retry stages into its own directory
            log.warning(
                "could not release the Job's vault directory", extra={"vault_dir": self.job_dir, "error": str(exc)}
            )

    def _stage_in(self) -> EarlyExit | None:
        if self.record.job_label != self.job_label:
            self.record = staging.StagingRecord(job_label=self.job_label)
        failed = self._choose_dir()
        job_dir = self.job_dir
        if failed is not None:
            log.error(
                "stage-in failed; nothing was submitted, a restarted runner resumes the upload",
                extra={"error": failed, "first_not_copied": [], "vault_dir": self.dirs.shared},
            )
            return EarlyExit(exitcodes.EXIT_TRANSFER, reported=False)
        roots: list[UploadRoot] = []
        for path in staging.outermost(self.paths.stage_in):  # a nested one is in its outer tree
            vault = vault_layout.vault_path(job_dir, path)
            try:
                real = local_tree.resolve_root(path)
            except FileNotFoundError:
                if staging.missing_stage_in(path, self.paths) == "error":
                    log.error(
                        "a stage-in path does not exist in this container",
                        extra={"path": path, "job_label": self.job_label},
                    )
                    self._release()
                    return EarlyExit(exitcodes.EXIT_CONFIG, reported=True)
                log.info(
                    "a stage-in path under a stage-out path does not exist yet; staged as empty", extra={"path": path}
                )
                roots.append(UploadRoot(path, path, vault, empty=True))
                continue
            if real is not None:
                roots.append(UploadRoot(path, real, vault))
        for path in self.paths.stage_out:
            if path not in self.paths.stage_in:
                roots.append(
                    UploadRoot(path, path, vault_layout.vault_path(job_dir, os.path.dirname(path)), empty=True)
                )
        try:
            totals = count_files(roots)
        except local_tree.LocalFailure as exc:
            log.error("a staged path cannot be read; nothing was submitted", extra={"error": str(exc)})
            self._release()
            return EarlyExit(exitcodes.EXIT_CONFIG, reported=True)
        log.info(
            "staging in",
            extra={"files": totals.files, "bytes": totals.bytes, "vault_dir": job_dir, "shared": self.shared},
        )
        report = self.transfer.upload(
            roots, totals=totals, never_staged=self.never_staged, should_stop=self.should_stop_stage_in
        )
        self.record = self._record(stage_in_done=report.complete)
        self.record_file.save(self.record)
        if not report.complete:  # nothing is submitted: nothing writes there
            self._release()
        if report.stopped:
            log.warning(
                "signal received during the stage-in; nothing was submitted", extra={"job_label": self.job_label}
            )
            return EarlyExit(exitcodes.EXIT_TERMINATED, reported=False)
        if report.failed_locally:
            log.error("a staged path cannot be read; nothing was submitted", extra={"error": report.error})
            return EarlyExit(exitcodes.EXIT_CONFIG, reported=True)
        if not report.complete:
            log.error(
                "stage-in failed; nothing was submitted, a restarted runner resumes the upload",
                extra={"error": report.error, "first_not_copied": report.not_copied, "vault_dir": job_dir},
            )
            return EarlyExit(exitcodes.EXIT_TRANSFER, reported=False)
        log.info(
            "stage-in complete",
            extra={
                "files": report.copied,
                "unchanged": report.skipped,
                "bytes": report.copied_bytes,
                "vault_dir": job_dir,
            },
        )
        return None

    # --- after the run -------------------------------------------------------------------------

    def finish(self, *, job: int | None, job_may_run: bool, exit_code: int, stopping_since: float | None) -> int:
        """Copy back what the job wrote (within the grace period after a signal); the exit status."""
        job_dir = self.job_dir
        if staging.decide_end(job_may_run=job_may_run, job_known=job is not None) == "leave":
            if job_may_run:  # the job still writes there: the directory stays this pod's
                log.warning(
                    "the job may still run: nothing copied back; a restarted runner copies back after it ends",
                    extra={"job": job, "vault_dir": job_dir},
                )
            else:  # no job ran: what was uploaded stays for a retry
                self._release()
            return exit_code
        if not self.paths.stage_out:
            self._done_with_work_dir(exit_code)
            return exit_code
        self.record = self._record(stage_in_done=True, copy_back="pending", exit_code=exit_code)
        self.record_file.save(self.record)
        return self._copy_back(self.job_label, exit_code=exit_code, stopping_since=stopping_since)

    def _record(
        self, *, stage_in_done: bool, copy_back: staging.CopyBack = "none", exit_code: int | None = None
    ) -> staging.StagingRecord:
        return staging.StagingRecord(
            job_label=self.job_label,
            stage_in_done=stage_in_done,
            copy_back=copy_back,
            exit_code=exit_code,
            vault_dir=self.job_dir,
            shared=self.shared,
        )

    def _copy_back(self, label: str, *, exit_code: int, stopping_since: float | None) -> int:
        job_dir = self.job_dir
        outer = staging.outermost(self.paths.stage_out)  # a nested one comes back with its outer tree
        roots = [DownloadRoot(vault_layout.vault_path(job_dir, path), path) for path in outer]
        if stopping_since is not None:
            self.signal_seen_at = stopping_since
        report = self.transfer.download(roots, should_stop=self.should_stop_copy_back)
        extra: dict[str, object] = {
            "copied": report.copied,
            "unchanged": report.skipped,
            "bytes": report.copied_bytes,
            "first_not_copied": report.not_copied,
            "refused": report.refused,
            "vault_dir": job_dir,
        }
        if not report.complete:  # whatever it could not place stays in the vault, named on the pod's exit
            self._kept = KeptInVault(job_dir, report.refused, tuple(report.kept_in_vault or report.not_copied))
        if report.stopped:
            log.warning("the grace period ended during the copy-back; the rest stays in the vault", extra=extra)
            return exit_code
        if report.refused and not report.error:
            # Nothing it could not place is deleted: the directory stays, and the copy-back stays
            # pending (a restarted runner finishes it once the pod's volume can take them).
            log.error(
                "copy-back could not place some outputs in the pod; they stay in the vault",
                extra={**extra, "first_kept_in_vault": report.kept_in_vault},
            )
            return exitcodes.EXIT_TRANSFER
        if not report.complete:
            log.error(
                "copy-back failed; what was not copied stays in the vault", extra={**extra, "error": report.error}
            )
            return exitcodes.EXIT_TRANSFER
        log.info("copy-back complete", extra=extra)
        self.record = dataclasses.replace(
            self.record, job_label=label, stage_in_done=True, copy_back="done", exit_code=exit_code
        )
        self.record_file.save(self.record)
        self._done_with_work_dir(exit_code)
        return exit_code

    def kept_in_vault(self) -> KeptInVault | None:
        return self._kept

    def _done_with_work_dir(self, exit_code: int) -> None:
        """Everything is home: remove the directory (the Job's only after a success), give its lease back."""
        job_dir = self.job_dir
        if self.keep_job_dir:
            log.info("keeping the job's vault directory", extra={"vault_dir": job_dir})
        elif not staging.removes_work_dir(shared=self.shared, exit_code=exit_code):
            log.info("keeping the Job's vault directory for a retry", extra={"vault_dir": job_dir})
        else:
            try:
                self.transfer.remove_tree(job_dir)
            except (OSError, asyncssh.Error) as exc:  # the data is home: a leftover directory is only untidy
                log.warning(
                    "could not remove the job's vault directory", extra={"vault_dir": job_dir, "error": str(exc)}
                )
        self._release()

    # --- the stop rule the transfers poll ------------------------------------------------------

    def should_stop_stage_in(self) -> bool:
        return self.cancel.signum is not None

    def should_stop_copy_back(self) -> bool:
        """A signal does not stop a copy-back at once: it may go on until the grace period ends."""
        if self.cancel.signum is None:
            return False
        if self.signal_seen_at is None:
            self.signal_seen_at = self.clock()
        return self.clock() - self.signal_seen_at >= vault_settings.copy_back_seconds(self.grace_seconds)


class RecordFile:
    """The staging record in the state directory (an emptyDir that outlives container restarts),
    replaced atomically; no file (no state directory): nothing is kept."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def load(self) -> staging.StagingRecord | None:
        if self.path is None:
            return None
        try:
            return staging.parse_record(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, staging.StagingError) as exc:
            log.warning("staging record unreadable; starting afresh", extra={"path": str(self.path), "error": str(exc)})
            return None

    def save(self, record: staging.StagingRecord) -> None:
        if self.path is None:
            return
        directory = self.path.parent
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(staging.render_record(record))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            log.warning("could not save the staging record", extra={"path": str(self.path), "error": str(exc)})


def count_files(roots: Sequence[UploadRoot]) -> Totals:
    """The files and bytes under the roots (one walk, nothing kept), for the progress lines."""
    files = size = 0
    for root in roots:
        if root.empty:
            continue
        single = local_tree.root_file(root.local, root.real)
        if single is not None:
            files, size = files + 1, size + single.size
            continue
        for directory in local_tree.walk_tree(root.local, root.real):
            for entry in directory.entries:
                if entry.kind == "file":
                    files, size = files + 1, size + entry.size
    return Totals(files, size)


def attach(
    env: Mapping[str, str], settings: Settings, plan: RemotePlan, deps: RemoteDeps, *, paths: staging.StagePaths
) -> tuple[RemotePlan, RemoteDeps]:
    """The plan, and the deps with a VaultStaging for the staged `paths` (it adds the staging prelude
    to the submitted command). Raises StagingError for a variable to fix."""
    logging.getLogger("asyncssh").setLevel(logging.WARNING)  # its INFO is a line per SSH step
    assert settings.remote is not None
    api_host = urllib.parse.urlsplit(settings.remote.api_url).hostname or ""
    vault = vault_settings.parse_vault_settings(env, api_host=api_host)
    pod = settings.pod
    dirs = staging.build_work_dirs(
        data_key=staging.parse_data_key(env), pod_uid=pod.uid, container=pod.container, job_label=plan.job_label
    )
    out_files = [path for path in paths.stage_out if os.path.isfile(path)]
    creds = settings.remote.credentials
    transfer = VaultTransfer(
        vault, username=creds.username, apikey=deps.apikey or creds.apikey, clock=deps.clock, progress_out=sys.stderr
    )
    stage = VaultStaging(
        paths,
        job_label=plan.job_label,
        dirs=dirs,
        pod_uid=pod.uid,
        transfer=transfer,
        state_dir=Path(settings.state_dir) if settings.state_dir else None,
        container=settings.pod.container,
        keep_job_dir=vault.keep_job_dir,
        cancel=deps.cancel,
        clock=deps.clock,
        never_staged=vault_settings.credential_files(env),
        out_files=out_files,
        grace_seconds=vault_settings.parse_grace_seconds(env),
    )
    log.info(
        "data staging",
        extra={
            "stage_in": list(paths.stage_in),
            "stage_out": list(paths.stage_out),
            "vault_host": vault.host,
            "jobs_vault_dir": dirs.shared,
        },
    )
    return plan, dataclasses.replace(deps, data=stage)
