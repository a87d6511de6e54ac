"""Who acts: one replica at a time, chosen through a coordination.k8s.io Lease (pure).

The webhook and the burst controller both elect their leader this way. In the webhook every
replica watches and is Ready; only the Lease holder decides, followers forward reviews to it. So
there is one reservation ledger and two replicas can never promise the same GPUs (in the
controller, only the holder re-bursts and reaps). The rules follow client-go's leader election:
expiry is judged by *when this replica last saw the record change* (its own monotonic clock), never
by comparing another machine's timestamps; a leader that has not renewed within its renew deadline
stops deciding before anyone else may take over. Only a replica fit to lead (its watch synced and
fresh) takes or keeps the Lease: one whose view goes stale releases it, so the leader is always a
replica that can see the cluster.

On a graceful stop the leader releases the Lease (empty holder) with its outstanding reservations
attached (the webhook's; the controller hands over none), so the next leader starts from the same
ledger: a handover loses no promise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

ANNOTATION_LEADER_URL = "nimbix-burst.io/leader-url"
ANNOTATION_HANDOVER = "nimbix-burst.io/handover"
# Caps the handover annotation (the Lease must stay far below the 256 KiB annotation limit).
MAX_HANDOVER_RESERVATIONS = 2000

Standing = Literal["leader", "follower", "candidate"]


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    duration: float  # a follower takes over this long after it last saw the holder renew
    renew_deadline: float  # a leader that could not renew for this long stops deciding
    retry: float  # how often every replica reads (and the leader renews) the Lease

    def __post_init__(self) -> None:
        if not 0 < self.retry < self.renew_deadline < self.duration:
            raise ValueError(
                f"lease timing must satisfy 0 < retry ({self.retry}) < renew deadline "
                f"({self.renew_deadline}) < duration ({self.duration})"
            )


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What the Lease says, reduced to what the election needs."""

    holder: str
    duration: float
    transitions: int
    resource_version: str
    leader_url: str
    handover: str  # JSON list of reservations, set by a releasing leader

    @property
    def fingerprint(self) -> tuple[str, str]:
        # A renewal changes the resourceVersion: that is what "saw it change" means.
        return (self.holder, self.resource_version)


@dataclass(frozen=True, slots=True)
class Observation:
    record: LeaseRecord | None  # None: the Lease does not exist yet
    seen_at: float  # local monotonic time the record (fingerprint) was first seen


def observe(previous: Observation | None, record: LeaseRecord | None, *, now: float) -> Observation:
    """Keep the first-seen time while the record is unchanged; restart it when it changes."""
    if previous is not None and _fingerprint(previous.record) == _fingerprint(record):
        return Observation(record=record, seen_at=previous.seen_at)
    return Observation(record=record, seen_at=now)


def _fingerprint(record: LeaseRecord | None) -> tuple[str, str] | None:
    return None if record is None else record.fingerprint


def may_acquire(observation: Observation, *, identity: str, now: float) -> bool:
    """May this replica write itself as holder? Its own Lease, a free one, or an expired one."""
    record = observation.record
    if record is None or not record.holder or record.holder == identity:
        return True
    return now - observation.seen_at >= record.duration


RoundPlan = Literal["take", "step-down", "watch"]


def plan_round(observation: Observation, *, identity: str, now: float, fit: bool) -> RoundPlan:
    """What one election round does. `fit`: this replica's cache may decide (synced and fresh); only
    such a replica takes or keeps the Lease. take: write ourselves as holder (create, take over or
    renew); step-down: we hold it but may not decide, so release it now and a fit replica takes over
    in one round instead of a lease duration; watch: only observe."""
    record = observation.record
    if not fit:
        return "step-down" if record is not None and record.holder == identity else "watch"
    return "take" if may_acquire(observation, identity=identity, now=now) else "watch"


def standing(
    observation: Observation, *, identity: str, last_renewed: float | None, now: float, timing: LeaseTiming
) -> Standing:
    """leader: we hold it and renewed within the deadline; follower: someone else holds a live
    Lease; candidate: nobody may be assumed to decide (free, expired, or our renewals failing)."""
    record = observation.record
    if record is not None and record.holder == identity:
        if last_renewed is not None and now - last_renewed < timing.renew_deadline:
            return "leader"
        return "candidate"
    if record is None or not record.holder or may_acquire(observation, identity=identity, now=now):
        return "candidate"
    return "follower"


def build_lease_body(
    *,
    name: str,
    namespace: str,
    identity: str,
    url: str,
    timing: LeaseTiming,
    previous: LeaseRecord | None,
    now_rfc3339: str,
) -> dict[str, Any]:
    """A Lease naming `identity` as holder; carries `previous`'s resourceVersion so the write is a
    compare-and-swap (409 if anyone else wrote in between)."""
    taking_over = previous is None or previous.holder != identity
    transitions = (previous.transitions if previous else 0) + (1 if taking_over and previous else 0)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": {ANNOTATION_LEADER_URL: url}}
    if previous is not None:
        # A replace drops the handover annotation: the taker has read it, nobody else needs it.
        metadata["resourceVersion"] = previous.resource_version
    spec: dict[str, Any] = {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, round(timing.duration)),
        "renewTime": now_rfc3339,
        "leaseTransitions": transitions,
    }
    if taking_over:
        spec["acquireTime"] = now_rfc3339
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}


def build_release_body(record: LeaseRecord, *, name: str, namespace: str, handover: str) -> dict[str, Any]:
    """Give the Lease up at once (empty holder) and leave the reservations for the next leader."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": record.resource_version,
            "annotations": {ANNOTATION_HANDOVER: handover},
        },
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": record.transitions},
    }


def parse_lease(obj: Mapping[str, Any]) -> LeaseRecord:
    """A Lease as returned by the API server (JSON); absent fields read as empty."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    duration = spec.get("leaseDurationSeconds")
    transitions = spec.get("leaseTransitions")
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration=float(duration) if isinstance(duration, int | float) and duration > 0 else 0.0,
        transitions=int(transitions) if isinstance(transitions, int) else 0,
        resource_version=str(metadata.get("resourceVersion") or ""),
        leader_url=str(annotations.get(ANNOTATION_LEADER_URL) or ""),
        handover=str(annotations.get(ANNOTATION_HANDOVER) or ""),
    )


@dataclass(frozen=True, slots=True)
class HandedOver:
    """One outstanding reservation, as passed from a releasing leader to the next."""

    reservation_id: str
    namespace: str
    # The node a local admission was promised; "" for a remote decision holding `requests` GPUs of
    # its namespace's burst budget (a leader that predates budgets drops such entries: compatible).
    node: str
    requests: Mapping[str, int]
    expires_in: float


def encode_handover(reservations: Sequence[HandedOver]) -> str:
    kept = sorted(reservations, key=lambda r: r.expires_in, reverse=True)[:MAX_HANDOVER_RESERVATIONS]
    return json.dumps(
        [
            {"id": r.reservation_id, "ns": r.namespace, "node": r.node, "req": dict(r.requests), "ttl": r.expires_in}
            for r in kept
        ],
        separators=(",", ":"),
        sort_keys=True,
    )


def decode_handover(text: str) -> list[HandedOver]:
    """Reservations from the Lease; anything malformed is dropped (the Lease is writable by the
    webhook's own ServiceAccount only, but a bad entry must not stop a new leader)."""
    if not text:
        return []
    try:
        items = json.loads(text)
    except ValueError:
        return []
    if not isinstance(items, list):
        return []
    out: list[HandedOver] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        rid, ns, node, req, ttl = (item.get(k) for k in ("id", "ns", "node", "req", "ttl"))
        if not (isinstance(rid, str) and rid and isinstance(ns, str) and isinstance(node, str)):
            continue
        if not isinstance(req, dict) or not all(isinstance(k, str) and type(v) is int for k, v in req.items()):
            continue
        if not isinstance(ttl, int | float) or ttl <= 0:
            continue
        out.append(HandedOver(reservation_id=rid, namespace=ns, node=node, requests=req, expires_in=float(ttl)))
    return out
