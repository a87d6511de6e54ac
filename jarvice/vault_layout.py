"""Where a burst container's staged data lives in the JARVICE vault (pure): shared by the runner, which
stages into it (entrypoint.staging), and the gateway, which confines a pod's SFTP session to it and
reads its checkpoints there (gateway.vault_scope, gateway.checkpoints). One naming, so the two never
disagree about whose directory is whose.

Every directory is under `nimbix-burst/`: a Job's `job-<Job UID>[-<index>][.<container>]`, taken by a
pod only under the lease beside it (`nimbix-burst/.leases/<the same name>`, naming the pod), else the
pod's own `pod-<pod UID>[.<container>]`. A staged path lives in it at the path itself.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Final

from jarvice import contract

# The vault directory holding every per-job directory: one place to look, and to clean.
VAULT_ROOT: Final = "nimbix-burst"
# Beside the work directories, one lease file per shared directory: the pod that stages into it.
LEASES: Final = ".leases"
LEASES_DIR: Final = f"{VAULT_ROOT}/{LEASES}"
# The pod's own directory, when no Job's is used: `pod-<pod UID>`; a Job's: `job-<Job UID>`.
POD_KEY_PREFIX: Final = "pod-"
JOB_KEY_PREFIX: Final = contract.DATA_KEY_JOB_PREFIX
# Between the work and the container in a directory's name: in neither a key nor a container name.
CONTAINER_SEPARATOR: Final = "."
DATA_KEY_RE: Final = re.compile(rf"^{JOB_KEY_PREFIX}{contract.UID_RE.pattern}(?:-(?:0|[1-9][0-9]{{0,8}}))?$")
CONTAINER_RE: Final = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
LEASE_FORMAT: Final = 1


@dataclass(frozen=True, slots=True)
class WorkDirs:
    """Where one burst container's data lives in the vault (relative to its root).

    `shared`: the Job's directory (None: no Job's), used only under its lease; `own`: the pod's."""

    own: str
    shared: str | None = None

    @property
    def lease(self) -> str | None:
        return f"{LEASES_DIR}/{posixpath.basename(self.shared)}" if self.shared else None


def pod_work_dirs(*, pod_uid: str, container: str, data_key: str | None) -> WorkDirs:
    """The Job's directory `nimbix-burst/<data key>.<container>` (with a data key) and the pod's own
    `nimbix-burst/pod-<pod UID>.<container>` (the container left out when it is not a container name)."""
    tail = f"{CONTAINER_SEPARATOR}{container}" if CONTAINER_RE.match(container) else ""
    own = f"{VAULT_ROOT}/{POD_KEY_PREFIX}{pod_uid}{tail}"
    return WorkDirs(own=own, shared=f"{VAULT_ROOT}/{data_key}{tail}" if data_key else None)


def render_lease(*, pod_uid: str, job_label: str) -> str:
    return json.dumps({"format": LEASE_FORMAT, "pod": pod_uid, "job_label": job_label}, sort_keys=True) + "\n"


def lease_holder(text: str) -> str | None:
    """The pod UID a lease names; None for text that is no lease of this format (held by someone unknown)."""
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict) or raw.get("format") != LEASE_FORMAT:
        return None
    pod = raw.get("pod")
    return pod if isinstance(pod, str) and contract.is_uid(pod) else None


def vault_path(work_dir: str, path: str) -> str:
    """Where `path` lives in the vault (relative to its root)."""
    return f"{work_dir}/{path.lstrip('/')}"
