"""Reservations: what this webhook promised before the watch showed the pod, and their expiry (pure state).

A local reservation holds resources on the node a pod was admitted to, as a claim in the
ClaimLedger, until the pod appears (its reservation id is on it) or the TTL passes. A remote
reservation counts a burst decision's GPUs against its namespace's budget (see webhook.budget)
until its pod appears. Both are handed over to the replica that leads next.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence

from kubeplumbing.leadership import HandedOver
from webhook.accounting import ClaimLedger
from webhook.scheduling import eligibility
from webhook.types import (
    Claim,
    Hold,
    LocalReservation,
    Placement,
    RemoteReservation,
    Requests,
    ReservationRoom,
)

REMOTE_GPUS_KEY = "gpus"  # the one "resource" of a handed-over remote reservation
_REMOTE = Hold(local=False)


def reservation_refusal(
    *, outstanding: int, outstanding_in_namespace: int, namespace: str, total_cap: int | None, namespace_cap: int | None
) -> str:
    """Why a new reservation may not be made ("" when it may): the caps on outstanding
    reservations, so reviews nobody follows with a pod cannot hold every GPU."""
    if total_cap is not None and outstanding >= total_cap:
        return f"{outstanding} local admissions await their pods (cap {total_cap})"
    if namespace_cap is not None and outstanding_in_namespace >= namespace_cap:
        return (
            f"{outstanding_in_namespace} local admissions in namespace {namespace} await their pods"
            f" (cap {namespace_cap})"
        )
    return ""


def reservation_room(
    *, outstanding: int, outstanding_in_namespace: int, namespace: str, total_cap: int | None, namespace_cap: int | None
) -> ReservationRoom | None:
    """How many more local reservations the namespace may make at once (None: no cap): what a gang
    decided local needs one of per rank."""
    rooms = []
    if namespace_cap is not None:
        rooms.append(
            ReservationRoom(namespace_cap - outstanding_in_namespace, namespace_cap, f"in namespace {namespace}")
        )
    if total_cap is not None:
        rooms.append(ReservationRoom(total_cap - outstanding, total_cap, "in total"))
    return min(rooms, key=lambda room: room.places, default=None)


class Reservations:
    def __init__(
        self,
        ledger: ClaimLedger,
        *,
        clock: Callable[[], float],
        ttl: float,
        max_reservations: int | None,
        max_reservations_per_namespace: int | None,
    ) -> None:
        self._ledger = ledger
        self._clock = clock
        self.ttl = ttl
        self.max_reservations = max_reservations
        self.max_reservations_per_namespace = max_reservations_per_namespace
        self._local: OrderedDict[str, float] = OrderedDict()  # id -> expiry, oldest first
        self._namespace_of: dict[str, str] = {}
        self._local_in: dict[str, int] = {}  # namespace -> outstanding local reservations
        # Remote reservations: id -> (namespace, GPUs, expiry), oldest first.
        self._remote: OrderedDict[str, tuple[str, int, float]] = OrderedDict()
        self._remote_gpus_in: dict[str, int] = {}  # namespace -> GPUs held by remote reservations

    @property
    def local_count(self) -> int:
        return len(self._local)

    @property
    def remote_count(self) -> int:
        return len(self._remote)

    def local_in(self, namespace: str) -> int:
        return self._local_in.get(namespace, 0)

    def remote_gpus_in(self, namespace: str) -> int:
        return self._remote_gpus_in.get(namespace, 0)

    def now(self) -> float:
        return self._clock()

    def hold(self, reservation_id: str) -> Hold | None:
        """What the reservation holds while it is outstanding (None: it is not)."""
        if reservation_id in self._local:
            claim = self._ledger.claims.get("res:" + reservation_id)
            return Hold(local=True, node="" if claim is None else claim.node)
        return _REMOTE if reservation_id in self._remote else None

    def refusal(self, namespace: str) -> str:
        return reservation_refusal(
            outstanding=len(self._local),
            outstanding_in_namespace=self._local_in.get(namespace, 0),
            namespace=namespace,
            total_cap=self.max_reservations,
            namespace_cap=self.max_reservations_per_namespace,
        )

    def room(self, namespace: str) -> ReservationRoom | None:
        return reservation_room(
            outstanding=len(self._local),
            outstanding_in_namespace=self._local_in.get(namespace, 0),
            namespace=namespace,
            total_cap=self.max_reservations,
            namespace_cap=self.max_reservations_per_namespace,
        )

    def reserve(
        self,
        reservation_id: str,
        *,
        node: str,
        requests: Requests,
        placement: Placement,
        namespace: str,
        ttl: float | None,
    ) -> None:
        self.release(reservation_id)
        expires_at = self._clock() + (self.ttl if ttl is None else ttl)
        claim = Claim(node=node, requests=requests, eligibility=eligibility(placement), expires_at=expires_at)
        self._ledger.add_claim("res:" + reservation_id, claim)
        self._local[reservation_id] = expires_at
        self._namespace_of[reservation_id] = namespace
        self._local_in[namespace] = self._local_in.get(namespace, 0) + 1

    def reserve_remote(self, reservation_id: str, *, namespace: str, gpus: int, ttl: float | None) -> None:
        self.release(reservation_id)
        expires_at = self._clock() + (self.ttl if ttl is None else ttl)
        self._remote[reservation_id] = (namespace, gpus, expires_at)
        if gpus:
            self._remote_gpus_in[namespace] = self._remote_gpus_in.get(namespace, 0) + gpus

    def apply(
        self, *, release: Sequence[str], local: Sequence[LocalReservation], remote: Sequence[RemoteReservation]
    ) -> None:
        """A decision's reservations: those in `release` dropped first, then the local and remote ones made."""
        for reservation_id in release:
            self.release(reservation_id)
        for held in local:
            self.reserve(held.reservation_id, node=held.node, requests=held.requests, placement=held.placement,
                         namespace=held.namespace, ttl=None)  # fmt: skip
        for counted in remote:
            self.reserve_remote(counted.reservation_id, namespace=counted.namespace, gpus=counted.gpus, ttl=None)

    def release(self, reservation_id: str) -> None:
        remote = self._remote.pop(reservation_id, None)
        if remote is not None:
            namespace, gpus = remote[0], remote[1]
            left = self._remote_gpus_in.get(namespace, 0) - gpus  # a gang's other ranks hold 0
            if left:
                self._remote_gpus_in[namespace] = left
            else:
                self._remote_gpus_in.pop(namespace, None)
        if self._local.pop(reservation_id, None) is not None:
            self._ledger.remove_claim("res:" + reservation_id)
            namespace = self._namespace_of.pop(reservation_id)
            left = self._local_in[namespace] - 1
            if left:
                self._local_in[namespace] = left
            else:
                del self._local_in[namespace]

    def export(self) -> list[HandedOver]:
        """Outstanding reservations, for the replica that leads after us (see kubeplumbing.leadership)."""
        now = self._clock()
        out = []
        claims = self._ledger.claims
        for reservation_id, expires_at in self._local.items():
            claim = claims.get("res:" + reservation_id)
            if claim is None or not claim.node or expires_at <= now:
                continue
            out.append(
                HandedOver(
                    reservation_id=reservation_id,
                    namespace=self._namespace_of.get(reservation_id, ""),
                    node=claim.node,
                    requests=dict(claim.requests),
                    expires_in=expires_at - now,
                )
            )
        for reservation_id, (namespace, gpus, expires_at) in self._remote.items():
            if expires_at > now:
                # node "" marks a remote reservation; the budget counts GPUs, so one resource carries them.
                out.append(HandedOver(reservation_id, namespace, "", {REMOTE_GPUS_KEY: gpus}, expires_at - now))
        return out

    def adopt(self, handed: Sequence[HandedOver], *, arrived: Collection[str]) -> None:
        """Take over a previous leader's reservations: on the node it promised, until they expire
        or their pod appears. One whose pod already `arrived` holds its own claim: not taken twice."""
        for item in handed:
            if item.reservation_id in arrived:
                continue
            ttl = min(item.expires_in, self.ttl)
            if not item.node:
                self.reserve_remote(
                    item.reservation_id, namespace=item.namespace, gpus=sum(item.requests.values()), ttl=ttl
                )
                continue
            placement = Placement(node_name=item.node)
            self.reserve(
                item.reservation_id,
                node=item.node,
                requests=item.requests,
                placement=placement,
                namespace=item.namespace,
                ttl=ttl,
            )

    def expire(self) -> int:
        now = self._clock()
        expired = 0
        while self._local:
            reservation_id, expires_at = next(iter(self._local.items()))
            if expires_at > now:
                break
            self.release(reservation_id)
            expired += 1
        while self._remote:
            reservation_id, (_, _, expires_at) = next(iter(self._remote.items()))
            if expires_at > now:
                break
            self.release(reservation_id)
            expired += 1
        return expired
