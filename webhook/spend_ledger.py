"""What each namespace's bursts hold, from the product's records (state, no I/O; the cache owns one).

Fed by the cache's writes: every burst pod the watch shows (what the webhook counted it for, from
annotations only the add-on may change), every priced reservation a decision makes, and the
controller's spend record (what JARVICE holds; webhook.spending). Asked once per admission in a
namespace that has a budget or caps: what it holds now (webhook.spending.reconcile).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from kubeplumbing.spendrecord import SpendRecord
from webhook.spending import InUse, OwnBurst, reconcile
from webhook.types import PodInfo, RemoteReservation

_NO_RECORD: Final = (
    "the controller's spend record (ConfigMap nimbix-burst-spend) has not been read yet, so no burst can be"
    " counted against the cost caps of namespace {namespace}"
)


class SpendLedger:
    def __init__(self, *, clock: Callable[[], float], max_record_age: float) -> None:
        self._clock = clock
        self._max_age = max_record_age
        # namespace -> owner (the UID a job label carries) -> pod uid -> what we counted for that pod
        self._own: dict[str, dict[str, dict[str, OwnBurst]]] = {}
        self._reserved: dict[str, dict[str, OwnBurst]] = {}  # namespace -> reservation id -> its price
        self.record: SpendRecord | None = None
        self.record_problem = ""  # why the last ConfigMap read could not be used ("": it could)

    # ----- written by the cache ----------------------------------------------------------------

    def count(self, pod: PodInfo, sign: int) -> None:
        if not pod.remote_gpus and not pod.remote_cost:
            return
        # Grouped as JARVICE's job label names its owner, so the record's entry and ours meet: a pod's
        # UID, or for a gang's pod (its submitting rank carries the gang's count) the gang's identity.
        # Each pod keeps an entry of its own under its owner: a pod that names another's UID as its
        # gang adds to that count, never replaces or removes it.
        owner = pod.gang or pod.uid
        held = self._own.setdefault(pod.namespace, {})
        if sign > 0:
            held.setdefault(owner, {})[pod.uid] = OwnBurst(pod.remote_gpus, pod.remote_cost, pod.remote_worst_case)
            return
        pods = held.get(owner, {})
        pods.pop(pod.uid, None)
        if not pods:
            held.pop(owner, None)
        if not held:
            del self._own[pod.namespace]

    def reserve(self, reservation: RemoteReservation) -> None:
        if reservation.cost_per_hour or reservation.worst_case:
            priced = OwnBurst(0, reservation.cost_per_hour, reservation.worst_case)
            self._reserved.setdefault(reservation.namespace, {})[reservation.reservation_id] = priced

    def set_record(self, record: SpendRecord | None, problem: str = "") -> None:
        """The ConfigMap's latest content (None: absent or unreadable, and `problem` says why)."""
        if record is not None or problem:
            self.record, self.record_problem = record, problem

    # ----- read by a decision ------------------------------------------------------------------

    def in_use(self, namespace: str, *, gpus_reserved: int, live: Callable[[str], bool]) -> InUse:
        """The namespace's GPUs, cost per hour and month's worst case now. `gpus_reserved`: GPUs of its
        remote reservations; `live`: whether a reservation id is still held (released or expired ones
        are dropped here)."""
        reserved = self._reserved.get(namespace, {})
        for gone in [rid for rid in reserved if not live(rid)]:
            del reserved[gone]
        cost = sum(r.cost_per_hour for r in reserved.values())
        worst = sum(r.worst_case for r in reserved.values())
        record = self.record.namespaces.get(namespace) if self.record is not None else None
        own = {owner: _total(pods.values()) for owner, pods in self._own.get(namespace, {}).items()}
        return reconcile(own, InUse(gpus_reserved, cost, worst), record)

    def refusal(self, namespace: str) -> str:
        """Why the record cannot vouch for what runs now ("" when it can)."""
        if self.record is None:
            why = f"; it is unusable: {self.record_problem}" if self.record_problem else ""
            return _NO_RECORD.format(namespace=namespace) + why
        age = self._clock() - self.record.observed_at
        if age > self._max_age:
            return (
                f"the controller's spend record is {age:.0f} s old (at most {self._max_age:.0f} s: is the controller"
                f" running?), so no burst can be counted against the cost caps of namespace {namespace}"
            )
        return ""


def _total(bursts: Iterable[OwnBurst]) -> OwnBurst:
    """What an owner's pods were counted for together (a gang's submitting rank carries the gang's)."""
    gpus, cost, worst = 0, 0.0, 0.0
    for burst in bursts:
        gpus, cost, worst = gpus + burst.gpus, cost + burst.cost_per_hour, worst + burst.worst_case
    return OwnBurst(gpus, cost, worst)
