"""Data staging through the JARVICE vault: what to upload, where it lives, how the job finds it,
and when to copy it back. Pure.

The webhook gives a burst container's runner two lists of absolute paths (NIMBIX_BURST_STAGE_IN,
NIMBIX_BURST_STAGE_OUT, see `webhook.data_volumes`). The runner keeps every staged path of one
container's work under one directory of the vault, at the path itself: `/workspace/data` becomes
`<vault>/nimbix-burst/<work>/workspace/data`. JARVICE mounts the vault at `/data`, so the
submitted command starts with a prelude that links each path to its copy there
(`/workspace/data -> /data/nimbix-burst/<work>/workspace/data`) and then runs the command.

Where that work directory is, and its lease, is jarvice.vault_layout (the gateway reads the same).
The work is the pod's Job (NIMBIX_BURST_DATA_KEY, written by the webhook): a Job's retry finds in
the vault what its failed pod uploaded and sends only what changed. Pods of one Job may overlap (a
replacement is made while the old pod still copies back, or its node was lost with its job still
running), so a pod takes the Job's directory only through a lease beside it that no other pod holds;
otherwise it stages into a directory of its own (`pod-<pod UID>`), as any pod no Job owns does.

What was done is kept in a small record in the state directory (an emptyDir that outlives
container restarts): a few flags of constant size, whatever the number of files. Which files are
already in place is read from the vault itself (a copy whose size and modification time equal the
source's), so a restarted runner or a retry never uploads twice and a copy-back resumes.
"""

import json
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Final, Literal

from jarvice import contract, exitcodes
from jarvice.vault_layout import (
    DATA_KEY_RE,
    VAULT_ROOT,
    WorkDirs,
    lease_holder,
    pod_work_dirs,
    vault_path,
)

# Where JARVICE mounts the job's vault on every node.
VAULT_MOUNT: Final = "/data"
# The prelude's exit status when a staged path cannot be made: the job fails with it.
EXIT_LINK_FAILED: Final = exitcodes.EXIT_STAGE_LINK
RECORD_FORMAT: Final = 2
_CONTROL: Final = frozenset("\n\r\t\0")

CopyBack = Literal["none", "pending", "done"]


class StagingError(ValueError):
    """A staging variable or record the runner cannot use (the message says what to fix)."""


@dataclass(frozen=True, slots=True)
class StagePaths:
    stage_in: tuple[str, ...] = ()
    stage_out: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.stage_in or self.stage_out)

    @property
    def all_paths(self) -> tuple[str, ...]:
        return self.stage_in + tuple(p for p in self.stage_out if p not in self.stage_in)


def _parse_list(text: str, *, variable: str) -> tuple[str, ...]:
    paths: list[str] = []
    for raw in text.split(contract.STAGE_PATH_SEPARATOR):
        item = raw.strip()
        if not item:
            continue
        if not item.startswith("/") or set(item) & _CONTROL or ".." in item.split("/"):
            raise StagingError(f"{variable}: {item!r} is not an absolute path without '..' or control characters")
        path = "/" + posixpath.normpath(item).lstrip("/")
        if path == "/":
            raise StagingError(f"{variable}: '/' cannot be staged")
        if path not in paths:
            paths.append(path)
    return tuple(paths)


def parse_stage_paths(env: Mapping[str, str]) -> StagePaths:
    """The container's staged paths from the variables the webhook sets; empty when neither is set."""
    return StagePaths(
        stage_in=_parse_list(env.get(contract.ENV_STAGE_IN, ""), variable=contract.ENV_STAGE_IN),
        stage_out=_parse_list(env.get(contract.ENV_STAGE_OUT, ""), variable=contract.ENV_STAGE_OUT),
    )


def build_job_dir(job_label: str) -> str:
    """The per-job vault directory, relative to the vault's root: `nimbix-burst/<label>`.

    A fallback label may hold `/` (namespace/name); it becomes `_` so the directory is one level.
    """
    safe = "".join(ch if ch.isalnum() or ch in "-._~" else "_" for ch in job_label)
    return f"{VAULT_ROOT}/{safe.lstrip('.') or 'job'}"


def parse_data_key(env: Mapping[str, str]) -> str | None:
    """NIMBIX_BURST_DATA_KEY as the webhook writes it (`job-<Job UID>` or `job-<Job UID>-<index>`);
    None when unset. Raises StagingError naming what to fix."""
    raw = env.get(contract.ENV_DATA_KEY)
    if raw is None or not raw.strip():
        return None
    key = raw.strip()
    if not DATA_KEY_RE.match(key):
        raise StagingError(
            f"{contract.ENV_DATA_KEY} must be job-<Job UID> or job-<Job UID>-<completion index>, as the"
            f" nimbix-burst webhook writes it, got {key!r}; remove it from the pod to key its data by the pod"
        )
    return key


def build_work_dirs(*, data_key: str | None, pod_uid: str, container: str, job_label: str) -> WorkDirs:
    """The Job's directory `nimbix-burst/<data key>.<container>` (with a data key) and the pod's own
    `nimbix-burst/pod-<pod UID>.<container>` (the container left out when the runner was not told
    it). Without a pod UID (a runner the webhook did not set up) only the job label's directory,
    as `build_job_dir`."""
    if not contract.is_uid(pod_uid):
        return WorkDirs(own=build_job_dir(job_label))
    return pod_work_dirs(pod_uid=pod_uid, container=container, data_key=data_key)


# --- the lease: which pod stages into a Job's directory ---------------------------------------------

LeaseAction = Literal["take", "own_dir"]


def decide_lease(existing: str | None, *, pod_uid: str) -> LeaseAction:
    """Whether a pod takes its Job's directory, given the lease found (None: there was none, and
    this pod's was created). Only a lease of this very pod is taken over (its own runner restarted:
    the runners of one container of one pod never overlap); any other holder, readable or not, may
    still be copying back or have a job writing there, so the pod stages into its own directory."""
    if existing is None or lease_holder(existing) == pod_uid:
        return "take"
    return "own_dir"


def removes_work_dir(*, shared: bool, exit_code: int) -> bool:
    """After a complete copy-back: the pod's own directory goes whatever the end (no later pod reads
    it); the Job's only after a success (a failed run's retry sends only what changed)."""
    return not shared or exit_code == 0


def remote_path(job_dir: str, path: str) -> str:
    """Where the job sees `path`'s copy: under the vault's mount."""
    return f"{VAULT_MOUNT}/{vault_path(job_dir, path)}"


# Shell functions, so each path is one quoted call. An empty directory in the image at the path is
# replaced (the pod's volume mount hides it too); anything else there stops the job: never deleted.
# `sudo -n` where the job's user may not write (JARVICE runs images as `nimbix`, with sudo).
_LINK_FUNCTIONS: Final = r"""nimbix_burst_as_root() {
  "$@" 2>/dev/null || { command -v sudo >/dev/null && sudo -n "$@"; }
}
nimbix_burst_link() {
  nimbix_burst_as_root mkdir -p -- "$(dirname -- "$2")" || return 1
  if [ -e "$2" ] && [ ! -L "$2" ]; then
    if [ -d "$2" ] && [ -z "$(ls -A -- "$2")" ]; then nimbix_burst_as_root rmdir -- "$2" || return 1
    else echo "nimbix-burst: $2 exists in the image and is not an empty directory" >&2; return 1
    fi
  fi
  nimbix_burst_as_root ln -sfn -- "$1" "$2"
}"""


def outermost(paths: Sequence[str]) -> tuple[str, ...]:
    """The paths no other of `paths` holds, in their order: each staged tree once."""
    return tuple(p for p in paths if not any(q != p and is_inside(p, q) for q in paths))


def build_prelude(paths: StagePaths, *, job_dir: str, out_files: Sequence[str] = ()) -> str:
    """Shell lines that make each staged path appear at its absolute path, linked to its vault copy.

    A stage-out path that is not staged in is made in the vault first: a directory, unless the
    runner found a file at that path in the pod (`out_files`), whose parent directory is made.
    """
    lines = [_LINK_FUNCTIONS]
    for path in paths.stage_out:
        if path in paths.stage_in:
            continue
        target = remote_path(job_dir, path)
        made = posixpath.dirname(target) if path in out_files else target
        lines.append(f"nimbix_burst_as_root mkdir -p -- {shlex.quote(made)}")
    # A path inside another staged path is reached through that one's link (its vault copy is
    # inside the other's): linking it too would make a directory where the outer link goes.
    for path in outermost(paths.all_paths):
        target, link = shlex.quote(remote_path(job_dir, path)), shlex.quote(path)
        lines.append(
            f"nimbix_burst_link {target} {link} || {{ echo {shlex.quote('nimbix-burst: cannot make ' + path)} >&2;"
            f" exit {EXIT_LINK_FAILED}; }}"
        )
    lines.append("unset -f nimbix_burst_link nimbix_burst_as_root")
    return "\n".join(lines) + "\n"


def wrap_shell_command(command: str, *, prelude: str) -> str:
    """The prelude, then the command exactly as given (on its own lines: a trailing comment or a
    heredoc in it stays intact)."""
    return prelude + command


# --- the record: what was staged, so a restarted runner neither uploads twice nor copies back twice ---


@dataclass(frozen=True, slots=True)
class StagingRecord:
    """A few flags, never a list of files: the record's size does not grow with the data."""

    job_label: str
    stage_in_done: bool = False
    copy_back: CopyBack = "none"
    exit_code: int | None = None  # the job's exit status, kept while its copy-back is pending
    # The vault directory the data went to ("": `build_job_dir(job_label)`, as runners before it wrote).
    vault_dir: str = ""
    shared: bool = False  # vault_dir is the Job's, taken under its lease

    @property
    def work_dir(self) -> str:
        return self.vault_dir or build_job_dir(self.job_label)


def render_record(record: StagingRecord) -> str:
    body = asdict(record)
    body["format"] = RECORD_FORMAT
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def parse_record(text: str) -> StagingRecord:
    """Raises StagingError for anything that is not a record this runner wrote."""
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("format") != RECORD_FORMAT:
            raise StagingError("not a staging record of this format")
        copy_back = raw.get("copy_back", "none")
        if copy_back not in ("none", "pending", "done"):
            raise StagingError(f"copy_back is {copy_back!r}")
        exit_code = raw.get("exit_code")
        vault_dir = raw.get("vault_dir", "")
        if not isinstance(vault_dir, str) or (vault_dir and not vault_dir.startswith(f"{VAULT_ROOT}/")):
            raise StagingError(f"vault_dir is {vault_dir!r}")
        return StagingRecord(
            job_label=str(raw["job_label"]),
            stage_in_done=raw.get("stage_in_done") is True,
            copy_back=copy_back,
            exit_code=exit_code if isinstance(exit_code, int) else None,
            vault_dir=vault_dir,
            shared=raw.get("shared") is True,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StagingError(f"unreadable staging record: {exc}") from exc


# The longest record: the longest job label (JARVICE's limit is 64 characters; a fallback label
# is longer), every flag set, an exit status of 3 digits. Its temporary copy exists beside it
# while it is replaced.
_LONGEST_LABEL: Final = 512
# The longest work directory: a data key with the longest index and the longest container name.
_LONGEST_WORK_DIR: Final = f"{VAULT_ROOT}/{contract.DATA_KEY_JOB_PREFIX}{'0' * 36}-{'9' * 9}.{'c' * 63}"
MAX_RECORD_BYTES: Final = len(
    render_record(
        StagingRecord(
            job_label="x" * _LONGEST_LABEL,
            stage_in_done=True,
            copy_back="pending",
            exit_code=255,
            vault_dir=_LONGEST_WORK_DIR,
            shared=True,
        )
    )
)


def is_inside(path: str, tree: str) -> bool:
    """Whether the absolute, normalised `path` is `tree` or below it."""
    return path == tree or path.startswith(tree.rstrip("/") + "/")


MissingAction = Literal["empty", "error"]


def missing_stage_in(path: str, paths: StagePaths) -> MissingAction:
    """A stage-in path that does not exist in the pod: under a stage-out path (a checkpoint
    directory before the first checkpoint) it is staged as empty; anywhere else it is an error."""
    return "empty" if any(is_inside(path, out) for out in paths.stage_out) else "error"


StartAction = Literal["stage_in", "skip_stage_in", "copy_back_only"]


def decide_start(record: StagingRecord | None, *, job_label: str) -> StartAction:
    """What a starting runner does about its data.

    - the record of an earlier runner whose copy-back is pending (its job ended): only copy back,
      then exit with the job's status, whatever this runner's label (a retry would run the job again);
    - this label's stage-in completed (a job is submitted only after it): nothing to upload;
    - otherwise upload, skipping files whose vault copy is current.
    """
    if record is not None and record.copy_back == "pending":
        return "copy_back_only"
    if record is not None and record.job_label == job_label and record.stage_in_done:
        return "skip_stage_in"
    return "stage_in"


EndAction = Literal["copy_back", "leave"]


def decide_end(*, job_may_run: bool, job_known: bool) -> EndAction:
    """After the run: copy back what the job wrote, unless the job may still run (it is still
    writing; a restarted runner picks it up and copies back then) or no job ever ran."""
    if job_may_run or not job_known:
        return "leave"
    return "copy_back"
