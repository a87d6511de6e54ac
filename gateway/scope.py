"""Which JARVICE jobs a pod may see and act on, and what of them it is shown (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.terms import container_env
from jarvice import contract
from jarvice.labels import parse_job_label
from jarvice.redaction import MASK


@dataclass(frozen=True, slots=True)
class PodScope:
    """The cluster and UIDs (the pod's, its gangs') whose job labels are the pod's."""

    cluster: str
    uids: frozenset[str]

    def owns(self, label: object) -> bool:
        if not isinstance(label, str):
            return False
        parsed = parse_job_label(label)
        return parsed is not None and parsed.cluster == self.cluster and parsed.pod_uid in self.uids


def pod_scope(pod: Mapping[str, Any]) -> PodScope:
    meta = pod.get("metadata") or {}
    uids = {str(meta.get("uid", ""))}
    clusters: set[str] = set()
    for container in (pod.get("spec") or {}).get("containers") or ():
        env = container_env(container)
        if env.get(contract.ENV_REMOTE) != "1":
            continue
        clusters.add(env.get(contract.ENV_CLUSTER, ""))
        if contract.is_uid(env.get(contract.ENV_GANG_UID)):
            uids.add(env[contract.ENV_GANG_UID])
    # A pod whose burst containers name two clusters is not the webhook's work: it owns nothing.
    cluster = clusters.pop() if len(clusters) == 1 else ""
    return PodScope(cluster=cluster if contract.is_cluster_identity(cluster) else "", uids=frozenset(uids))


def scrub(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A job entry as a pod may see it: JARVICE echoes the submit body, with the account's key."""
    shown = dict(entry)
    submission = shown.get("job_api_submission")
    if isinstance(submission, dict) and "user" in submission:
        shown["job_api_submission"] = {**submission, "user": {"username": MASK, "apikey": MASK}}
    elif isinstance(submission, str):
        shown["job_api_submission"] = MASK
    return shown


def own_jobs(listing: Mapping[str, Any], scope: PodScope) -> dict[str, Any]:
    """/jarvice/jobs as the pod sees it: its own jobs only, scrubbed."""
    return {
        number: scrub(entry)
        for number, entry in listing.items()
        if isinstance(entry, Mapping) and scope.owns(entry.get("job_label"))
    }


def find_label(listings: Iterable[Mapping[str, Any]], *, number: str | None, name: str | None) -> str | None:
    """The label of the job a selector names (by number or name), from /jarvice/jobs listings."""
    for listing in listings:
        for key, entry in listing.items():
            if not isinstance(entry, Mapping):
                continue
            if (number is not None and key == number) or (name is not None and entry.get("job_name") == name):
                label = entry.get("job_label")
                return label if isinstance(label, str) else None
    return None
