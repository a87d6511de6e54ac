"""Whether a burst pod's data can follow it, and what its runners stage. Pure.

A burst container runs its command on JARVICE, where none of the pod's volumes exist. The runner
can carry data there and back through the JARVICE vault (`nimbix-burst.io/stage-in` and
`stage-out`), so:

- a bursting container that mounts a data volume (a PVC, hostPath, NFS, CSI, ...) bursts only when
  the pod declares staging, or says `nimbix-burst.io/remote-data: none` (the command fetches its own
  data); otherwise it is kept local, with the volumes named and how to opt in;
- its configMap and downwardAPI mounts are staged in automatically (small, read-only config);
- secret and projected volumes are staged only when a `stage-in` path names them;
- emptyDir and generic ephemeral volumes are scratch: nothing to carry.

`plan_data` returns the paths each burst container's runner stages (`DataPlan`), or why the pod
may not burst (`DataRefusal`). Paths are checked against the container's own mounts: an error says
which path and what to change.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from jarvice import contract

VolumeRole = Literal["config", "secret", "scratch", "data"]

# Volume kinds by what a burst does with them (keys of a pod volume, besides `name`).
CONFIG_KINDS: Final = frozenset({"configMap", "downwardAPI"})
# A projected volume carries the service account token (and may carry secrets): never auto-staged.
SECRET_KINDS: Final = frozenset({"secret", "projected"})
SCRATCH_KINDS: Final = frozenset({"emptyDir", "ephemeral"})
# Characters a staged path may not hold: the separator, and what breaks a log line or a shell word
# list we never build (paths are always quoted) but a human reading the annotation would misread.
_FORBIDDEN_CHARS: Final = frozenset(contract.STAGE_PATH_SEPARATOR + "\n\r\t\0")
# An annotation longer than this is a mistake (the API server allows 256 KiB for all of them).
MAX_STAGE_ANNOTATION: Final = 8192


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class ContainerStaging:
    container: Final[str]
    stage_in: Final[tuple[str, ...]]
    stage_out: Final[tuple[str, ...]]

    def __init__(self, container: str, stage_in: tuple[str, ...], stage_out: tuple[str, ...]) -> None:
        self.container = container
        self.stage_in = stage_in
        self.stage_out = stage_out

    def env_value(self, direction: Literal["in", "out"]) -> str:
        paths = self.stage_in if direction == "in" else self.stage_out
        return contract.STAGE_PATH_SEPARATOR.join(paths)


@dataclass(init=False, unsafe_hash=True, slots=True)
class DataPlan:
    staging: Final[tuple[ContainerStaging, ...]]  # only containers with something to stage

    def __init__(self, staging: tuple[ContainerStaging, ...]) -> None:
        self.staging = staging


@dataclass(frozen=True, slots=True)
class DataRefusal:
    reason: str  # for the pod's reason annotation
    volumes: str = ""  # the volumes not staged, for the data-not-staged annotation ("" for a bad annotation)
    # Short enough for kubectl (the API server truncates long warnings): one per volume, then how to opt in.
    warnings: tuple[str, ...] = ()


@dataclass(init=False, unsafe_hash=True, slots=True)
class _Mount:
    container: Final[str]
    path: Final[str]
    volume: Final[str]
    kind: Final[str]
    role: Final[VolumeRole]
    read_only: Final[bool]

    def __init__(self, container: str, path: str, volume: str, kind: str, role: VolumeRole, *, read_only: bool) -> None:
        self.container = container
        self.path = path
        self.volume = volume
        self.kind = kind
        self.role = role
        self.read_only = read_only


def volume_kind(volume: Mapping[str, Any]) -> str:
    """The volume's source key (`persistentVolumeClaim`, `configMap`, ...); "unknown" without one."""
    first: str | None = None
    for key in volume:  # the first in sorted order; a loop: a generator is slow compiled
        if key != "name" and (first is None or key < first):
            first = key
    return "unknown" if first is None else first


def volume_role(kind: str) -> VolumeRole:
    if kind in CONFIG_KINDS:
        return "config"
    if kind in SECRET_KINDS:
        return "secret"
    if kind in SCRATCH_KINDS:
        return "scratch"
    return "data"


def _describe_volume(mount: _Mount) -> str:
    return f"{mount.kind} {mount.volume} (container {mount.container}, mounted at {mount.path})"


def _mounts(spec: Mapping[str, Any], containers: Collection[str]) -> list[_Mount]:
    # dict, not the Mapping ABC: decoded JSON holds dicts, and the ABC check costs ten times more.
    kinds = {str(v.get("name", "")): volume_kind(v) for v in spec.get("volumes") or () if isinstance(v, dict)}
    found = []
    for container in spec.get("containers") or ():
        name = str(container.get("name", ""))
        if name not in containers:
            continue
        for mount in container.get("volumeMounts") or ():
            volume = str(mount.get("name", ""))
            kind = kinds.get(volume, "unknown")
            path = posixpath.normpath(str(mount.get("mountPath", "")))
            found.append(_Mount(name, path, volume, kind, volume_role(kind), read_only=mount.get("readOnly") is True))
    return found


def parse_stage_paths(text: str, *, annotation: str) -> tuple[str, ...]:
    """Comma-separated absolute paths, normalised, in order, without duplicates.

    Raises ValueError naming the annotation and the path to fix.
    """
    if len(text) > MAX_STAGE_ANNOTATION:
        raise ValueError(f"{annotation} is {len(text)} characters long; at most {MAX_STAGE_ANNOTATION}")
    paths: list[str] = []
    for raw in text.split(contract.STAGE_PATH_SEPARATOR):
        item = raw.strip()
        if not item:
            continue
        if set(item) & _FORBIDDEN_CHARS:
            raise ValueError(f"{annotation}: path {item!r} holds a control character")
        if not item.startswith("/"):
            raise ValueError(f"{annotation}: path {item!r} is not absolute (write it as it is inside the container)")
        if ".." in item.split("/"):
            raise ValueError(f"{annotation}: path {item!r} contains '..'; name the path itself")
        path = posixpath.normpath(item)
        if path.startswith("//"):  # normpath keeps a leading double slash (POSIX leaves it implementation-defined)
            path = "/" + path.lstrip("/")
        if path == "/":
            raise ValueError(f"{annotation}: '/' cannot be staged; name a directory or file under a volume mount")
        if path not in paths:
            paths.append(path)
    return tuple(paths)


def _is_under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _mount_of(path: str, mounts: Sequence[_Mount]) -> _Mount | None:
    """The deepest mount holding `path` (a mount inside another mount hides what is beneath it)."""
    deepest: _Mount | None = None
    for mount in mounts:  # a loop, not max(key=lambda): the first of the longest, as max() gives
        if _is_under(path, mount.path) and (deepest is None or len(mount.path) > len(deepest.path)):
            deepest = mount
    return deepest


def _check_path(path: str, mounts: Sequence[_Mount], *, annotation: str, out: bool) -> _Mount:
    mount = _mount_of(path, mounts)
    if mount is None:
        containers = sorted({m.container for m in mounts})
        where = ", ".join(sorted({m.path for m in mounts})) or "none"
        raise ValueError(
            f"{annotation}: {path} is under no volume mount of the bursting container(s) {', '.join(containers)}"
            f" (their mounts: {where}); mount a volume there or correct the path"
        )
    if out and (mount.read_only or mount.role in ("config", "secret")):
        why = "mounted readOnly" if mount.read_only else f"a {mount.kind} volume"
        raise ValueError(
            f"{annotation}: {path} is on {mount.volume} ({why}), so its copy cannot come back; stage out"
            " to a writable volume (a persistentVolumeClaim, hostPath, ...)"
        )
    return mount


def plan_data(
    spec: Mapping[str, Any], annotations: Mapping[str, Any], *, burst_containers: Sequence[str]
) -> DataPlan | DataRefusal:
    """What each burst container stages, or why the pod must stay local (see the module docstring)."""
    mounts = _mounts(spec, burst_containers)
    try:
        remote_data = _remote_data(annotations)
        stage_in = parse_stage_paths(
            _text(annotations, contract.ANNOTATION_STAGE_IN), annotation=contract.ANNOTATION_STAGE_IN
        )
        stage_out = parse_stage_paths(
            _text(annotations, contract.ANNOTATION_STAGE_OUT), annotation=contract.ANNOTATION_STAGE_OUT
        )
        for path in stage_in:
            _check_path(path, mounts, annotation=contract.ANNOTATION_STAGE_IN, out=False)
        for path in stage_out:
            _check_path(path, mounts, annotation=contract.ANNOTATION_STAGE_OUT, out=True)
    except ValueError as exc:
        return DataRefusal(
            reason=f"the pod's staging annotations are invalid: {exc}",
            warnings=(
                "nimbix-burst: kept local, not burst: invalid staging annotation (see the pod's reason)",
                str(exc),
            ),
        )
    if not (stage_in or stage_out or remote_data):
        unstaged = [m for m in mounts if m.role == "data"]
        if unstaged:
            named = "; ".join(_describe_volume(m) for m in unstaged)
            how = (
                f"list the paths the command reads in {contract.ANNOTATION_STAGE_IN} and those it writes in"
                f" {contract.ANNOTATION_STAGE_OUT}, or set {contract.ANNOTATION_REMOTE_DATA}:"
                f" {contract.REMOTE_DATA_NONE} if the command fetches its own data"
            )
            warnings = tuple(
                f"nimbix-burst: kept local, not burst: {m.kind} {m.volume} would not follow the job" for m in unstaged
            )
            opt_in = (
                f"nimbix-burst: to burst, set {contract.ANNOTATION_STAGE_IN} and stage-out, or"
                f" {contract.ANNOTATION_REMOTE_DATA}: {contract.REMOTE_DATA_NONE}"
            )
            reason = f"its data volumes would not follow it to Nimbix: {named}; {how}"
            return DataRefusal(reason=reason, volumes=named, warnings=(*warnings, opt_in))
    return DataPlan(staging=_per_container(burst_containers, mounts, stage_in, stage_out))


def _per_container(
    burst_containers: Sequence[str], mounts: Sequence[_Mount], stage_in: Sequence[str], stage_out: Sequence[str]
) -> tuple[ContainerStaging, ...]:
    plans = []
    for name in burst_containers:
        own = [m for m in mounts if m.container == name]
        paths_in = [p for p in stage_in if _mount_of(p, own) is not None]
        for mount in own:
            # Config mounts are staged whole unless a named path already covers them.
            if mount.role == "config" and not any(_is_under(mount.path, p) for p in paths_in):
                paths_in.append(mount.path)
        paths_out = tuple(p for p in stage_out if _mount_of(p, own) is not None)
        if paths_in or paths_out:
            plans.append(ContainerStaging(name, tuple(paths_in), paths_out))
    return tuple(plans)


def _text(annotations: Mapping[str, Any], key: str) -> str:
    value = annotations.get(key, "")
    return value if isinstance(value, str) else ""


def _remote_data(annotations: Mapping[str, Any]) -> bool:
    if contract.ANNOTATION_REMOTE_DATA not in annotations:
        return False
    value = _text(annotations, contract.ANNOTATION_REMOTE_DATA).strip()
    if value != contract.REMOTE_DATA_NONE:
        raise ValueError(
            f"{contract.ANNOTATION_REMOTE_DATA} is {value!r}; the only value is {contract.REMOTE_DATA_NONE!r}"
            " (burst without staging: the command fetches its own data)"
        )
    return True


# --- whose data: the work's, so a Job's retry finds what the failed pod uploaded ---

JOB_API_VERSION: Final = "batch/v1"
ANNOTATION_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
_MAX_INDEX_DIGITS: Final = 9


def data_key(meta: Mapping[str, Any]) -> str:
    """NIMBIX_BURST_DATA_KEY for a pod's staged data (contract.ENV_DATA_KEY): `job-<Job UID>` for a pod
    a Job controls, `job-<Job UID>-<index>` for an Indexed Job's (its completion index annotation,
    which the Job controller writes before the pod is created); "" for any other pod (the runner keys
    by the pod's UID) and for an owner or index that is not the Job controller's (a pod's own
    data is then never mistaken for another's)."""
    owner = ""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            if (
                ref.get("apiVersion") == JOB_API_VERSION
                and ref.get("kind") == "Job"
                and contract.is_uid(ref.get("uid"))
            ):
                owner = str(ref["uid"])
            break
    if not owner:
        return ""
    annotations = meta.get("annotations") or {}
    if ANNOTATION_COMPLETION_INDEX not in annotations:
        return f"{contract.DATA_KEY_JOB_PREFIX}{owner}"
    index = annotations.get(ANNOTATION_COMPLETION_INDEX)
    if not (isinstance(index, str) and index.isascii() and index.isdigit() and len(index) <= _MAX_INDEX_DIGITS):
        return ""
    return f"{contract.DATA_KEY_JOB_PREFIX}{owner}-{int(index)}"
