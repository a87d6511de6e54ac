"""The job label a runner submits its JARVICE job under: built from the pod, and parsed back. Pure.

A label names one burst container's attempt of one pod of one cluster. The runner builds it (to
submit, and to find its job again after a restart); the controller parses it (to map a job back to
its pod, and to reap only its own cluster's jobs).
"""

import hashlib
import re
from dataclasses import dataclass
from typing import Final

from jarvice import contract

# Older JARVICE releases cap job_label at 50 characters (reference §5, J7 JAR-4699).
MAX_JOB_LABEL: Final = 50
JOB_LABEL_PREFIX: Final = "k8s-"
# Between the cluster identity and the pod UID: it occurs in neither, nor in a legacy label, so the
# two formats can never be read as each other.
CLUSTER_SEPARATOR: Final = "."
# JARVICE's job_label limit since 2021 (reference §5, J7 JAR-4699). A label with a cluster needs
# up to 150 characters for the longest identity and container name, so it relies on this limit;
# a legacy label (no cluster) keeps to the 50 of older releases (MAX_JOB_LABEL).
MAX_CLUSTER_JOB_LABEL: Final = 255
_LABEL_HASH_CHARS: Final = 8
HASHED_CONTAINER_MARK: Final = "~"
# In a legacy label the hash shrinks as attempt numbers grow (6 hex digits for attempts 1-9, 3 for
# 4-digit ones); legacy labels fit 50 characters through attempt 999999, past which (years of
# restarts) they may grow slightly longer, still far below today's 255.
MIN_CONTAINER_HASH_CHARS: Final = 1
# The cluster part is checked again by contract.is_cluster_identity (name length, no leading '-').
_UID_LABEL_RE: Final = re.compile(
    r"^k8s-(?:(?P<cluster>[a-z0-9-]+)\.)?(?P<uid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"(?:-(?P<container>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?|~[0-9a-f]+))?-(?P<attempt>[1-9][0-9]*)$"
)


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """The pod a runner runs for, as its job label names it (the runner reads it from its environment)."""

    uid: str
    namespace: str
    name: str
    hostname: str
    container: str = ""  # NIMBIX_BURST_CONTAINER: the burst container this runner runs in
    # NIMBIX_BURST_CLUSTER: the cluster's identity (contract.cluster_identity), carried in the job
    # label so that only this cluster's reaper may stop the job; "" when the webhook did not set it.
    cluster: str = ""


def _shorten_label(text: str) -> str:
    label = JOB_LABEL_PREFIX + text
    if len(label) <= MAX_JOB_LABEL:
        return label
    digest = hashlib.sha256(text.encode()).hexdigest()[:_LABEL_HASH_CHARS]
    keep = MAX_JOB_LABEL - len(JOB_LABEL_PREFIX) - 1 - _LABEL_HASH_CHARS
    return f"{JOB_LABEL_PREFIX}{text[:keep]}-{digest}"


def _container_part(container: str, *, budget: int) -> str:
    """The container name, or `~<sha256 hex>` filling `budget` when the name does not fit.

    `~` cannot occur in a container name (a DNS-1123 label), so a reader knows the part is a hash.
    """
    if len(container) <= budget:
        return container
    digest = hashlib.sha256(container.encode()).hexdigest()
    return HASHED_CONTAINER_MARK + digest[: max(MIN_CONTAINER_HASH_CHARS, budget - len(HASHED_CONTAINER_MARK))]


def build_job_label(pod: PodIdentity, *, attempt: int = 1) -> str:
    """A key per cluster, container and attempt: `k8s-<cluster>.<uid>-<container>-<attempt>`.

    - `<cluster>` is `NIMBIX_BURST_CLUSTER` (contract.cluster_identity): only the reaper of the
      cluster that made the label may stop its job. Without it the label is the legacy
      `k8s-<uid>-<container>-<attempt>`, which no reaper ever stops.
    - `<uid>` is the pod UID, always whole (36 characters), so a controller can map a JARVICE job
      back to its pod.
    - `<container>` is `NIMBIX_BURST_CONTAINER`, so two burst containers of one pod never share a
      job. It stays whole while the label fits 255 characters (50 for a legacy label, the limit
      of older JARVICE releases); past that it becomes `~` plus as many hex digits of its SHA-256
      as fit (6 for legacy attempts 1-9; a label with a cluster never needs it in practice).
      Without the variable the part is left out: `k8s-<cluster>.<uid>-<attempt>`.
    - `<attempt>` counts deliberate retries (1, then 2 after a reported failure, ...), so a
      retry gets a job of its own while a restarted runner finds the job of its attempt.

    Parse with `parse_job_label`. Without a pod UID the label falls back to
    `k8s-<namespace>/<name>-<container>-<attempt>`, else `k8s-<hostname>-...`, truncated and
    suffixed with a hash when too long (not meant to be parsed, so never reaped).
    """
    if pod.uid:
        tail = f"-{attempt}"
        if pod.cluster:
            head, limit = f"{JOB_LABEL_PREFIX}{pod.cluster}{CLUSTER_SEPARATOR}{pod.uid}", MAX_CLUSTER_JOB_LABEL
        else:
            head, limit = f"{JOB_LABEL_PREFIX}{pod.uid}", MAX_JOB_LABEL
        if not pod.container:
            return f"{head}{tail}"
        budget = limit - len(head) - 1 - len(tail)
        return f"{head}-{_container_part(pod.container, budget=budget)}{tail}"
    base = f"{pod.namespace}/{pod.name}" if pod.namespace and pod.name else (pod.hostname or "unknown-host")
    container = f"-{pod.container}" if pod.container else ""
    return _shorten_label(f"{base}{container}-{attempt}")


@dataclass(frozen=True, slots=True)
class ParsedLabel:
    pod_uid: str
    container: str | None  # None when the label carries no container part
    container_hashed: bool  # the container part is `~<hash>` (its name was too long)
    attempt: int
    cluster: str | None = None  # None for a legacy label (made without NIMBIX_BURST_CLUSTER)

    def names_container(self, name: str) -> bool:
        """Whether the container part stands for the container `name`: its name, or `~` and a
        prefix of its SHA-256 (as `build_job_label` hashes it). A label without a container part
        was made by a runner not told its container: it may be any of the pod's containers."""
        if self.container is None:
            return True
        if self.container_hashed:
            return hashlib.sha256(name.encode()).hexdigest().startswith(self.container[len(HASHED_CONTAINER_MARK) :])
        return self.container == name


def parse_job_label(label: str) -> ParsedLabel | None:
    """The parts of a UID-based label from `build_job_label`, with or without a cluster; None
    for any other text (a fallback label, someone else's, a cluster part that is no identity)."""
    match = _UID_LABEL_RE.match(label)
    if match is None:
        return None
    cluster = match.group("cluster")
    if cluster is not None and not contract.is_cluster_identity(cluster):
        return None
    container = match.group("container")
    return ParsedLabel(
        pod_uid=match.group("uid"),
        container=container,
        container_hashed=container is not None and container.startswith(HASHED_CONTAINER_MARK),
        attempt=int(match.group("attempt")),
        cluster=cluster,
    )
