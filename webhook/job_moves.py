"""What the webhook remembers of each Job's moves (pure state): the deadline its pods wait until before
bursting, whether a pod of it burst, and the GPUs held for it while a pod of it comes home.

- Waits (webhook.waiting): the deadline given to a Job's first waiting pod, by the Job's UID, until an
  hour past it (WAIT_MEMORY_SECONDS): its other pods wait until the same deadline, and its replacements,
  admitted after it, burst at once.
- Bursts: when the watch last showed a burst pod of the Job. A Job one of whose pods burst never waits
  again (the replacement of a pod that came home and found its GPU taken bursts at once).
- Homecomings: the controller marks a burst pod `coming-home` right before evicting it; seeing the
  marked pod go, the webhook holds the GPUs it comes home to (a reservation on the node that fits them
  best) for its Job's next pod, whose admission takes them over (`take_over`); until then every other
  decision, dry runs included, finds them taken. A hold no pod takes over expires.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from webhook.fitting import find_fit
from webhook.reservations import Reservations
from webhook.scheduling import eligibility
from webhook.types import ClusterView, Placement, PodInfo

# How long a Job's wait deadline is remembered after it passed: its replacement pods, created within
# seconds of the controller's scan, burst at once; a pod the Job creates much later may wait again.
WAIT_MEMORY_SECONDS = 3600.0
# How long the GPUs a pod comes home to are held for its Job's next pod: the evicted runner stops
# (within its grace period), then the Job creates the replacement; a hold no pod takes over expires.
HOMECOMING_HOLD_SECONDS = 120.0
_HOME_PREFIX = "home-"
# Evicted pods whose GPUs were held, remembered so that their later events (the runner stopping, the
# finalizer going) never hold them again; a few hundred: far more than come home at once.
_HELD_PODS_KEPT = 512


class JobMoves:
    def __init__(self, *, view: ClusterView, reservations: Reservations, wall_clock: Callable[[], float]) -> None:
        self._view = view
        self._reservations = reservations
        self._wall_clock = wall_clock
        # Job UID -> the deadline its pods wait until before bursting. In memory: a new leader gives a
        # Job with no burst pod a new wait (the controller's re-burst cap bounds the repeats).
        self.waits: dict[str, float] = {}
        self.burst_jobs: dict[str, float] = {}  # Job UID -> when the watch last showed a burst pod of it
        self.homecomings: dict[str, str] = {}  # Job UID -> the reservation holding its pod's GPUs
        self._held_pods: dict[str, None] = {}  # UIDs of the pods whose GPUs were held, oldest first

    def remember_wait(self, job_uid: str, deadline: float) -> None:
        self.waits[job_uid] = deadline

    def burst_deadlines(self) -> Mapping[str, float]:
        """The deadlines Jobs' pods wait until (webhook.waiting), those long past forgotten first."""
        forget = self._wall_clock() - WAIT_MEMORY_SECONDS
        for key in [key for key, deadline in self.waits.items() if deadline < forget]:
            del self.waits[key]
        return self.waits

    def burst_before(self, job_uid: str) -> bool:
        """Whether a pod of the Job burst (a burst pod of it seen within WAIT_MEMORY_SECONDS)."""
        seen = self.burst_jobs.get(job_uid)
        if seen is not None and seen < self._wall_clock() - WAIT_MEMORY_SECONDS:
            del self.burst_jobs[job_uid]
            return False
        return seen is not None

    def saw_burst_pod(self, pod: PodInfo) -> None:
        """A burst pod of a Job as the watch shows it (a pod its `job_uid` says a Job controls)."""
        self.burst_jobs[pod.job_uid] = self._wall_clock()
        if pod.coming_home and not pod.terminal and pod.uid not in self._held_pods:
            self._held_pods[pod.uid] = None  # once per pod, whatever its later events
            if len(self._held_pods) > _HELD_PODS_KEPT:
                del self._held_pods[next(iter(self._held_pods))]
            self._hold(pod)

    def _hold(self, pod: PodInfo) -> None:
        """Hold the GPUs a marked burst pod comes home to for its Job's next pod. Once per pod; a leader
        that adopted the hold from the last one takes it as it is."""
        for job, held in list(self.homecomings.items()):  # holds expired with no pod taking them over
            if self._reservations.hold(held) is None:
                del self.homecomings[job]
        reservation_id = _HOME_PREFIX + pod.uid
        if self._reservations.hold(reservation_id) is None:
            requests = dict(pod.coming_home)
            fit = find_fit(self._view, requests, eligibility(Placement()))
            if fit.node is None:
                return  # nothing free to hold: the next pod is decided on what there is
            self._reservations.reserve(
                reservation_id,
                node=fit.node.name,
                requests=requests,
                placement=Placement(),
                namespace=pod.namespace,
                ttl=HOMECOMING_HOLD_SECONDS,
            )
        self.homecomings[pod.job_uid] = reservation_id

    def take_over(self, job_uid: str) -> None:
        """A pod of the Job is being admitted: the GPUs held for it as a pod of it came home are released
        for its decision (which reserves them again under its own admission when it stays local). The
        caller settles the claim ledger before deciding (ClusterCache.snapshot_for does)."""
        reservation_id = self.homecomings.pop(job_uid, None) if job_uid else None
        if reservation_id is not None:
            self._reservations.release(reservation_id)
