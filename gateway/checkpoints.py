"""Where a burst pod's remote job writes its checkpoints in the vault, and which file is the newest
complete one (pure; the controller's route in gateway.oversight, the vault I/O in gateway.checkpoint_reader).

The runner keeps a container's staged paths under one vault directory, at the paths themselves
(jarvice.vault_layout, the naming the runner stages by): its Job's
`nimbix-burst/job-<Job UID>[-<index>][.<container>]` when it holds that directory's lease, else its
own `nimbix-burst/pod-<pod UID>[.<container>]`. The job sees each staged path at its place, so what
the program writes into its `checkpoint-dir` lands at `<that directory>/<checkpoint-dir>`. Every
path is checked with the SFTP endpoint's rules (gateway.vault_scope): never outside the pod's own.

A complete checkpoint is a regular file renamed into place: dotfiles and `*.tmp` are writes under
way (docs/checkpoints.md, the contract). An Indexed Job's program writes into the subdirectory named
by its completion index: that subdirectory is looked at too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from gateway.terms import container_env
from gateway.vault_scope import VaultGrant, check_access, split_path
from jarvice import contract
from jarvice.checkpoint import CheckpointContractError, parse_checkpoint_contract
from jarvice.vault_layout import DATA_KEY_RE, lease_holder, pod_work_dirs, vault_path

ANNOTATION_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"

Kind = Literal["file", "directory", "other"]


class NoCheckpointPlace(Exception):
    """The pod has no checkpoint directory the gateway can look at; the message says why."""


@dataclass(frozen=True, slots=True)
class CheckpointPlace:
    """Where to look: the pod's grant, its directories, and the checkpoint directory inside them."""

    grant: VaultGrant
    own: str  # the pod's own vault directory
    shared: str | None  # its Job's, used when `lease` names this pod (None: no Job's it may reach)
    lease: str | None
    checkpoint_dir: str  # absolute, inside the container
    index: str | None  # an Indexed Job's completion index: its subdirectory is looked at too

    def directories(self, work_dir: str) -> tuple[str, ...]:
        """The vault paths to list for the work directory the runner uses."""
        base = vault_path(work_dir, self.checkpoint_dir)
        paths = (base,) if self.index is None else (base, f"{base}/{self.index}")
        for path in paths:
            check_access(split_path(path), self.grant, passage_ok=False)
        return paths


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    kind: Kind
    mtime: float | None


@dataclass(frozen=True, slots=True)
class Newest:
    name: str  # relative to the checkpoint directory (`<index>/<file>` in an index's subdirectory)
    mtime: float


def _burst_container(pod: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    found = [
        (env[contract.ENV_CONTAINER_NAME].strip(), env)
        for container in (pod.get("spec") or {}).get("containers") or ()
        if isinstance(container, Mapping) and contract.ENV_CONTAINER_NAME in (env := container_env(container))
    ]
    if len(found) != 1:
        raise NoCheckpointPlace(
            f"the pod has {len(found)} burst containers (env {contract.ENV_CONTAINER_NAME}): its checkpoints are"
            " looked at for a pod of one"
        )
    return found[0]


def checkpoint_place(pod: Mapping[str, Any], *, job_uid: str | None) -> CheckpointPlace:
    """The pod's checkpoint place, from the pod as the API server holds it. `job_uid`: its controlling
    Job's UID once that Job was found with it (None: the Job's directory is not the pod's to reach)."""
    meta = pod.get("metadata") or {}
    pod_uid = meta.get("uid")
    if not contract.is_uid(pod_uid):
        raise NoCheckpointPlace("the pod has no UID")
    annotations = meta.get("annotations") or {}
    try:
        terms = parse_checkpoint_contract(annotations, {})
    except CheckpointContractError as exc:
        raise NoCheckpointPlace(f"its checkpoint annotations cannot be used: {exc}") from None
    if terms is None:
        raise NoCheckpointPlace("the pod names no nimbix-burst.io/checkpoint-dir")
    container, env = _burst_container(pod)
    grant = VaultGrant(pod_uid=str(pod_uid), job_uid=job_uid)
    key = (env.get(contract.ENV_DATA_KEY) or "").strip()
    dirs = pod_work_dirs(pod_uid=str(pod_uid), container=container, data_key=key if DATA_KEY_RE.match(key) else None)
    own, shared, lease = dirs.own, dirs.shared, dirs.lease
    if shared is not None and not grant.owns_name(shared.rsplit("/", 1)[-1]):
        shared, lease = None, None  # a data key naming no Job of the pod's: its runner's is not reachable
    index = annotations.get(ANNOTATION_COMPLETION_INDEX)
    return CheckpointPlace(
        grant=grant,
        own=own,
        shared=shared,
        lease=lease,
        checkpoint_dir=terms.directory,
        index=index if isinstance(index, str) and index.isdigit() else None,
    )


def work_dir(place: CheckpointPlace, lease_text: str | None) -> str:
    """The directory the runner stages into: its Job's when the lease there names this pod, else its own
    (`lease_text` None: there is no lease)."""
    held = lease_text is not None and lease_holder(lease_text) == place.grant.pod_uid
    return place.shared if place.shared is not None and held else place.own


def under_way(name: str) -> bool:
    """A name the trainers in use give a checkpoint while they write it, before the rename that completes
    it: a dotfile, `*.tmp`, Hugging Face's `tmp-checkpoint-500`, Orbax's `100.orbax-checkpoint-tmp-1733`."""
    lowered = name.lower()
    return lowered.startswith((".", "tmp")) or lowered.endswith(".tmp") or "-tmp-" in lowered or ".tmp." in lowered


def is_complete(entry: Entry) -> bool:
    """A checkpoint renamed into place: a regular file, or a directory (Hugging Face's `checkpoint-500/`,
    Orbax's `100/`, DeepSpeed's `global_step500/`: its time is when an entry in it last changed, so the
    rename that completes it keeps it), whose name is not one of a write under way."""
    return entry.kind in ("file", "directory") and entry.mtime is not None and not under_way(entry.name)


def base_entries(place: CheckpointPlace, entries: Iterable[Entry]) -> list[Entry]:
    """The checkpoint directory's own entries that may be checkpoints: for an Indexed Job's pod, not the
    indexes' subdirectories (`0/`, `1/`, ...), whose checkpoints are looked at in its own index's alone."""
    if place.index is None:
        return list(entries)
    return [entry for entry in entries if not (entry.kind == "directory" and entry.name.isdigit())]


def newest(listings: Iterable[tuple[str, Iterable[Entry]]], *, not_after: float = math.inf) -> Newest | None:
    """The newest complete checkpoint of the listings (prefix, entries); the later name on a tie. A file
    dated after `not_after` (the gateway's clock and the slack) is left out: a time in the future says
    nothing of when it was written, and taken for the newest it would keep the job fresh for ever."""
    found: Newest | None = None
    for prefix, entries in listings:
        for entry in entries:
            if not is_complete(entry):
                continue
            assert entry.mtime is not None
            if entry.mtime > not_after:
                continue
            candidate = Newest(f"{prefix}{entry.name}", entry.mtime)
            if found is None or (candidate.mtime, candidate.name) > (found.mtime, found.name):
                found = candidate
    return found


def answer(place: CheckpointPlace, work: str, found: Newest | None, *, now: float) -> dict[str, Any]:
    """The route's answer: the newest complete checkpoint (None: none there yet), where it was looked
    for, and the gateway's clock when it looked."""
    return {
        "checkpoint": None if found is None else {"name": found.name, "mtime": found.mtime},
        "directory": vault_path(work, place.checkpoint_dir),
        "checked_at": now,
    }
