"""Data staging through the JARVICE vault: what to upload, where it lives, how the job finds it,
and when to copy it back. Pure.

The webhook gives a burst container's runner two lists of absolute paths (NIMBIX_BURST_STAGE_IN,
NIMBIX_BURST_STAGE_OUT, see `webhook.data_volumes`). The runner keeps every staged path of one job
under a per-job directory of the vault, at the path itself: `/workspace/data` becomes
`<vault>/nimbix-burst/<job label>/workspace/data`. JARVICE mounts the vault at `/data`, so the
submitted command starts with a prelude that links each path to its copy there
(`/workspace/data -> /data/nimbix-burst/<job label>/workspace/data`) and then runs the command.

What was done is kept in a small record in the state directory (an emptyDir that outlives
container restarts), so a restarted runner never uploads twice and copies back once.
"""

import json
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Final, Literal

from jarvice import contract, exitcodes

# Where JARVICE mounts the job's vault on every node.
VAULT_MOUNT: Final = "/data"
# The vault directory holding every per-job directory: one place to look, and to clean.
VAULT_ROOT: Final = "nimbix-burst"
# The prelude's exit status when a staged path cannot be made: the job fails with it.
EXIT_LINK_FAILED: Final = exitcodes.EXIT_STAGE_LINK
RECORD_FORMAT: Final = 1
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


def vault_path(job_dir: str, path: str) -> str:
    """Where `path` lives in the vault (relative to its root)."""
    return f"{job_dir}/{path.lstrip('/')}"


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
    for path in paths.all_paths:
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
class UploadedFile:
    size: int
    mtime_ns: int
    sha256: str


@dataclass(frozen=True, slots=True)
class StagingRecord:
    job_label: str
    # Local path -> what was uploaded and verified; a file changed since is uploaded again.
    uploaded: Mapping[str, UploadedFile] = field(default_factory=dict)
    stage_in_done: bool = False
    copy_back: CopyBack = "none"
    exit_code: int | None = None  # the job's exit status, kept while its copy-back is pending


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
        uploaded = {
            str(path): UploadedFile(int(item["size"]), int(item["mtime_ns"]), str(item["sha256"]))
            for path, item in dict(raw.get("uploaded") or {}).items()
        }
        copy_back = raw.get("copy_back", "none")
        if copy_back not in ("none", "pending", "done"):
            raise StagingError(f"copy_back is {copy_back!r}")
        exit_code = raw.get("exit_code")
        return StagingRecord(
            job_label=str(raw["job_label"]),
            uploaded=uploaded,
            stage_in_done=raw.get("stage_in_done") is True,
            copy_back=copy_back,
            exit_code=exit_code if isinstance(exit_code, int) else None,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StagingError(f"unreadable staging record: {exc}") from exc


def is_uploaded(record: StagingRecord, path: str, *, size: int, mtime_ns: int) -> bool:
    """Whether `path` was uploaded and verified as it is now (same size and modification time)."""
    done = record.uploaded.get(path)
    return done is not None and done.size == size and done.mtime_ns == mtime_ns


StartAction = Literal["stage_in", "skip_stage_in", "copy_back_only"]


def decide_start(record: StagingRecord | None, *, job_label: str) -> StartAction:
    """What a starting runner does about its data.

    - the record of an earlier runner whose copy-back is pending (its job ended): only copy back,
      then exit with the job's status, whatever this runner's label (a retry would run the job again);
    - this label's stage-in completed (a job is submitted only after it): nothing to upload;
    - otherwise upload, skipping files the record shows uploaded unchanged.
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


# --- progress lines -------------------------------------------------------------------------------


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def format_progress(direction: str, *, done: int, total: int, seconds: float) -> str:
    """One progress line: `stage-in 512.0 MiB of 1.0 GiB (50%), 85.3 MiB/s, ETA 6 s`."""
    share = 100 * done // total if total else 100
    rate = done / seconds if seconds > 0 else 0.0
    eta = f"{(total - done) / rate:.0f} s" if rate > 0 else "unknown"
    return (
        f"nimbix-burst: {direction} {format_bytes(done)} of {format_bytes(total)} ({share}%),"
        f" {format_bytes(rate)}/s, ETA {eta}"
    )


# --- where the vault is -----------------------------------------------------------------------------

ENV_VAULT_SFTP: Final = "NIMBIX_BURST_VAULT_SFTP"  # host[:port]; default: JARVICE_API_URL's host, port 22
ENV_VAULT_KNOWN_HOSTS: Final = "NIMBIX_BURST_VAULT_KNOWN_HOSTS"  # a known_hosts file for the vault's host key
ENV_KEEP_VAULT_DIR: Final = "NIMBIX_BURST_KEEP_VAULT_DIR"  # 1: keep the per-job directory after the copy-back
DEFAULT_SFTP_PORT: Final = 22


@dataclass(frozen=True, slots=True)
class VaultSettings:
    host: str
    port: int
    known_hosts: str | None
    keep_job_dir: bool


def parse_vault_settings(env: Mapping[str, str], *, api_host: str) -> VaultSettings:
    """The vault's SFTP address and options; raises StagingError naming the variable to fix."""
    raw = env.get(ENV_VAULT_SFTP, "").strip()
    host, port = api_host, DEFAULT_SFTP_PORT
    if raw:
        head, colon, tail = raw.rpartition(":")
        if colon and tail.isdigit() and not head.endswith(":"):
            host, port = head.strip("[]"), int(tail)
        else:
            host = raw.strip("[]")
        if not host or not 0 < port < 65536:
            raise StagingError(f"{ENV_VAULT_SFTP} must be host or host:port, got {raw!r}")
    if not host:
        raise StagingError(f"the vault's host is unknown: set {ENV_VAULT_SFTP}")
    known_hosts = env.get(ENV_VAULT_KNOWN_HOSTS, "").strip() or None
    if known_hosts is not None and not known_hosts.startswith("/"):
        raise StagingError(f"{ENV_VAULT_KNOWN_HOSTS} must be an absolute path, got {known_hosts!r}")
    keep = env.get(ENV_KEEP_VAULT_DIR, "").strip()
    if keep not in ("", "0", "1"):
        raise StagingError(f"{ENV_KEEP_VAULT_DIR} must be 0 or 1, got {keep!r}")
    return VaultSettings(host=host, port=port, known_hosts=known_hosts, keep_job_dir=keep == "1")


def local_target(path: str, *, root_vault: str, vault_file: str) -> str:
    """The local path of a vault file found under the vault copy `root_vault` of the staged `path`."""
    if vault_file == root_vault:
        return path
    return path.rstrip("/") + "/" + vault_file[len(root_vault) :].lstrip("/")


# The runner's credential files (settings.ENV_USERNAME_FILE, ENV_APIKEY_FILE): never staged, even
# under a staged directory (the API key is also the vault's SFTP password).
CREDENTIAL_FILE_VARIABLES: Final = ("JARVICE_USERNAME_FILE", "JARVICE_APIKEY_FILE")


def credential_files(env: Mapping[str, str]) -> frozenset[str]:
    return frozenset(value.strip() for name in CREDENTIAL_FILE_VARIABLES if (value := env.get(name, "")).strip())
