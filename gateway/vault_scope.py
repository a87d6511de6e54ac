"""Which vault paths a burst pod's SFTP session may touch, and how each request is checked (pure).

The runner names its data by paths relative to the vault's root (entrypoint.staging):
`nimbix-burst/pod-<pod UID>[.<container>]/...`, its Job's `nimbix-burst/job-<Job UID>[-<index>][.<container>]/...`
and that directory's lease `nimbix-burst/.leases/<the same name>`. Through the gateway a pod reaches
those and nothing else: `nimbix-burst` and `nimbix-burst/.leases` are passages (looked at and made,
never listed or changed: listing them would show other pods' directories; so is the vault's root),
everything else is refused.

A path is checked twice: as written (relative, no `..`, inside the pod's directories), and as the
vault resolves it (the vault's own realpath of the path, or of its directory for a request that does
not follow its last component), so a symbolic link inside a pod's directory leads nowhere else.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from jarvice import vault_layout

VAULT_ROOT: Final = vault_layout.VAULT_ROOT
LEASES: Final = vault_layout.LEASES
POD_PREFIX: Final = vault_layout.POD_KEY_PREFIX
JOB_PREFIX: Final = vault_layout.JOB_KEY_PREFIX

Access = Literal["passage", "owned"]
# "full": the vault resolves the path itself (the request follows a link at its end);
# "parent": only its directory (the request acts on the link itself, or makes the name).
Resolve = Literal["full", "parent"]


class PathRefused(Exception):
    """A path outside the pod's vault directories; the message says what is allowed."""


@dataclass(frozen=True, slots=True)
class VaultGrant:
    """Whose data a session reaches: the pod's, and its Job's when a Job controls it."""

    pod_uid: str
    job_uid: str | None = None

    def owns_name(self, name: str) -> bool:
        """Whether a directory name under `nimbix-burst/` is this pod's (or its Job's)."""
        own = f"{POD_PREFIX}{self.pod_uid}"
        if name == own or name.startswith(own + "."):
            return True
        if self.job_uid is None:
            return False
        job = re.escape(f"{JOB_PREFIX}{self.job_uid}")
        return re.fullmatch(rf"{job}(?:-[0-9]{{1,9}})?(?:\..+)?", name) is not None


def _allowed_text(grant: VaultGrant) -> str:
    job = f" or its Job's {VAULT_ROOT}/{JOB_PREFIX}{grant.job_uid}..." if grant.job_uid else ""
    return f"this pod's vault directory is {VAULT_ROOT}/{POD_PREFIX}{grant.pod_uid}...{job}"


def split_path(path: str) -> tuple[str, ...]:
    """A request's path as its parts; PathRefused for an absolute path or one with `..`."""
    if path.startswith("/"):
        raise PathRefused(f"{path!r}: absolute paths are refused; give paths relative to the vault's root")
    parts = tuple(part for part in path.split("/") if part not in ("", "."))
    if ".." in parts:
        raise PathRefused(f"{path!r}: '..' is refused")
    return parts


def classify(parts: tuple[str, ...], grant: VaultGrant) -> Access:
    """Whether the path (its parts) is a passage or the pod's own; PathRefused otherwise."""
    shown = "/".join(parts) or "."
    if not parts:  # the vault's root: looked at (the runner times a stat of it), never listed
        return "passage"
    if parts[0] != VAULT_ROOT:
        raise PathRefused(f"{shown!r} is outside this pod's vault directories: {_allowed_text(grant)}")
    if len(parts) == 1 or parts[1:] == (LEASES,):
        return "passage"
    if parts[1] == LEASES:
        if len(parts) == 3 and grant.owns_name(parts[2]):
            return "owned"
    elif grant.owns_name(parts[1]):
        return "owned"
    raise PathRefused(f"{shown!r} is outside this pod's vault directories: {_allowed_text(grant)}")


def check_access(parts: tuple[str, ...], grant: VaultGrant, *, passage_ok: bool) -> None:
    if classify(parts, grant) == "passage" and not passage_ok:
        shown = "/".join(parts) or "."
        raise PathRefused(f"{shown!r} is shared by every pod: it may be looked at or made, not listed or changed")


def relative_to_root(resolved: str, root: str) -> tuple[str, ...]:
    """A path the vault resolved (absolute), as parts below the session's root; PathRefused when the
    path left the root (a link that leads out of the vault's root)."""
    normal = posixpath.normpath(resolved)
    base = posixpath.normpath(root)
    if base == "/":
        return tuple(part for part in normal.split("/") if part)
    if normal == base:
        return ()
    if not normal.startswith(base + "/"):
        raise PathRefused("a symbolic link on the path leads out of the vault")
    return tuple(part for part in normal[len(base) + 1 :].split("/") if part)


def check_resolved(
    parts: tuple[str, ...], resolved: tuple[str, ...], grant: VaultGrant, *, passage_ok: bool, how: Resolve
) -> None:
    """The vault's answer for `parts` (`how`: of the path, or of its directory) stays in the pod's."""
    target = resolved if how == "full" else (*resolved, parts[-1])
    try:
        check_access(target, grant, passage_ok=passage_ok)
    except PathRefused:
        shown = "/".join(parts)
        raise PathRefused(f"{shown!r}: a symbolic link on the path leads out of this pod's vault directories") from None


def controlling_job(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (name, UID) of the Job a pod's controller reference names; None for another pod. Written by
    whoever created the pod: the gateway grants the Job's directory only once the Job it names exists
    in the pod's namespace with that UID."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            if ref.get("apiVersion") == "batch/v1" and ref.get("kind") == "Job":
                name, uid = ref.get("name"), ref.get("uid")
                if isinstance(name, str) and name and isinstance(uid, str) and re.fullmatch(r"[0-9a-f-]{36}", uid):
                    return name, uid
            return None
    return None
