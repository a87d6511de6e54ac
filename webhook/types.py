"""Plain typed values shared by the webhook's pure modules.

Wire data (Kubernetes JSON) is converted into these at the edge (`model.py`), so decision code
never touches raw dictionaries or the kubernetes client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, final

from jarvice.gpubudget import NamespaceBudget
from kubeplumbing.spendrecord import MachineRate
from webhook.spending import NOTHING_IN_USE, CostCaps, InUse

GpuCounts = Mapping[str, int]
"""Resource name -> whole-device count, e.g. {"nvidia.com/gpu": 4}."""

Requests = Mapping[str, int]
"""What a pod takes from a node: GPU counts plus CPU_MILLI and MEMORY_BYTES, e.g.
{"nvidia.com/gpu": 1, "cpu": 12000, "memory": 17179869184}."""

# CPU and memory are accounted next to GPUs under these keys: a node whose GPUs are free but whose
# CPU is taken cannot host the pod, and kube-scheduler would leave it Pending there.
CPU_MILLI = "cpu"
MEMORY_BYTES = "memory"
EPHEMERAL_STORAGE_BYTES = "ephemeral-storage"
# Every pod takes one of the node's `pods` allocatable (NodeResourcesFit counts pods, not requests).
POD_COUNT = "pods"
# Resources every kubelet reports: a node object without one of them (a hand-made test node) is not
# limited by it. Any other resource a pod requests must be advertised by the node, as in the scheduler.
STANDARD_RESOURCES = frozenset({CPU_MILLI, MEMORY_BYTES, EPHEMERAL_STORAGE_BYTES, POD_COUNT})

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class Toleration:
    key: Final[str]
    operator: Final[str]  # "Equal" (the API default) or "Exists"
    value: Final[str]
    effect: Final[str]  # "" tolerates every effect

    def __init__(self, key: str, operator: str, value: str, effect: str) -> None:
        self.key = key
        self.operator = operator
        self.value = value
        self.effect = effect


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One nodeSelectorTerm: all requirements must hold (terms are ORed)."""

    match_expressions: tuple[SelectorRequirement, ...]
    match_fields: tuple[SelectorRequirement, ...]


@dataclass(init=False, unsafe_hash=True, slots=True)
class Placement:
    """Everything in a pod spec that restricts which nodes it may use."""

    node_selector: Final[Mapping[str, str]]
    # None: no required node affinity. An empty tuple matches no node (API semantics).
    required_terms: Final[tuple[SelectorTerm, ...] | None]
    tolerations: Final[tuple[Toleration, ...]]
    # spec.nodeName set at creation: the scheduler is bypassed and only that node's kubelet decides.
    node_name: Final[str]

    def __init__(
        self,
        node_selector: Mapping[str, str] | None = None,
        required_terms: tuple[SelectorTerm, ...] | None = None,
        tolerations: tuple[Toleration, ...] = (),
        node_name: str = "",
    ) -> None:
        self.node_selector = {} if node_selector is None else node_selector
        self.required_terms = required_terms
        self.tolerations = tolerations
        self.node_name = node_name


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """The fields of a Node that GPU accounting needs, nothing more."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]  # NoSchedule/NoExecute only: the ones that filter
    unschedulable: bool
    ready: bool
    allocatable: Requests  # GPU resources it advertises (non-zero), and every other allocatable resource

    @property
    def schedulable(self) -> bool:
        return self.ready and not self.unschedulable


@dataclass(init=False, unsafe_hash=True, slots=True)
class PodNeeds:
    """What a pod asks of the cluster, read off its spec once per admission."""

    gpus: Final[GpuCounts]  # its effective GPU request per GPU resource (none empty)
    requests: Final[Requests]  # `gpus` plus everything else it takes from a node (see model.pod_compute)
    placement: Final[Placement]
    namespace: Final[str]

    def __init__(self, gpus: GpuCounts, requests: Requests, placement: Placement, namespace: str) -> None:
        self.gpus = gpus
        self.requests = requests
        self.placement = placement
        self.namespace = namespace


NodeCheck = Callable[[NodeInfo], bool]


@dataclass(init=False, unsafe_hash=True, slots=True)
class Eligibility:
    """A pod's placement rules applied once (webhook.scheduling.eligibility), for the fit search to
    read (webhook.fitting): which nodes it may use, resources aside. Equal when the placements are."""

    placement: Final[Placement]
    allows: NodeCheck = field(compare=False)  # every filter but resources: may it run on this node?
    # Whether it tolerates the unschedulable taint (cordoned nodes may host it): asked only when some
    # node is cordoned, so most decisions never work it out.
    cordoned_ok: Callable[[], bool] = field(compare=False)

    def __init__(self, placement: Placement, allows: NodeCheck, cordoned_ok: Callable[[], bool]) -> None:
        self.placement = placement
        self.allows = allows
        self.cordoned_ok = cordoned_ok


@dataclass(frozen=True, slots=True)
class PodInfo:
    """The fields of a pod that accounting needs. Stored: GPU pods, and other pods while they hold CPU
    or memory on a node (bound, not terminal)."""

    uid: str
    namespace: str
    name: str
    node_name: str  # "" while unbound
    nominated_node: str
    requests: Requests  # effective GPU counts, CPU (milli) and memory (bytes)
    terminal: bool  # Succeeded or Failed: holds nothing
    placement: Placement
    reservation_id: str  # our annotation: the admission that reserved GPUs for this pod
    # Why an unbound pod might not compete for GPUs (see webhook.cache.claims_gpus):
    scheduler_name: str = "default-scheduler"
    gated: bool = False  # spec.schedulingGates non-empty: the scheduler ignores it until ungated
    blocked_elsewhere: bool = False  # PodScheduled=False/Unschedulable, and the message names no GPU resource
    # A burst pod (decision annotation `remote`): the GPUs it runs on JARVICE, counted against its
    # namespace's burst budget (see webhook.budget) until its jobs are known to be gone: a finished
    # pod keeps them while a job may still run (see model.parse_pod).
    remote_gpus: int = 0
    # A gang's pod (see webhook.gangs): its generation's UID and this pod's rank (our annotations), the
    # decision it carries, whether it is being deleted and whether it succeeded (a gang whose pods are
    # going is decided afresh; a burst generation one of whose pods failed or is going, or all of whose
    # ranks succeeded, takes no pod any more). A finished burst pod of a gang is kept (counting 0) to tell that.
    gang: str = ""
    gang_rank: int = -1
    decision: str = ""
    deleting: bool = False
    succeeded: bool = False  # phase Succeeded (terminal, and not Failed)
    created: float = 0.0  # a gang's pod: its creationTimestamp (epoch s; 0: unreadable), when its generation began
    waiting: bool = False  # a gang's pod kept local to wait before bursting (its burst-deadline annotation)
    admission: str = ""  # our annotation: the token of the admission that decided it (webhook.provenance)
    # A burst pod in a namespace with cost caps: what it was counted for (webhook.spending).
    remote_cost: float = 0.0  # per hour
    remote_worst_case: float = 0.0  # over its walltime
    # A burst pod's Job (the UID of the Job that controls it; "": none): a Job one of whose pods burst
    # never waits before bursting again (webhook.waiting), however long ago its wait ended.
    job_uid: str = ""
    # A burst pod the controller is bringing home (its coming-home mark, and being deleted): the GPUs it
    # ran remotely (its original resources), to hold for its Job's next pod (ClusterCache). Empty: none.
    coming_home: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class NamespaceMachines:
    """A namespace's annotations on its bursts' machines, as written (None: absent); see webhook.machine_terms."""

    machines: str | None = None  # `nimbix-burst.io/machines`: the machines to use, in order
    max_remote_queue: str | None = None  # `nimbix-burst.io/max-remote-queue`: its pods' default


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """The fields of a namespace the webhook reads: its UID (kube-system's names the cluster) and
    its annotations for bursting."""

    name: str
    uid: str
    budget: NamespaceBudget | None  # None: no `max-remote-gpus` annotation
    default_walltime: str | None = None  # its `default-walltime` annotation as written (None: absent)
    cost_caps: CostCaps | None = None  # its `max-cost-per-hour`/`-month` annotations (None: neither)
    app: str = ""  # its `jarvice-app` annotation: the JARVICE application its bursts run ("": absent)
    burst_after: str | None = None  # its `burst-after` annotation as written (None: absent)
    machines: NamespaceMachines | None = None  # None: neither machine annotation
    own_account: bool = False  # `jarvice-account: own`: its bursts pay with its own key, not the gateway


DecisionKind = Literal["local", "remote", "skipped"]


@dataclass(init=False, unsafe_hash=True, slots=True)
class Decision:
    kind: Final[DecisionKind]
    reason: Final[str]
    node: Final[str]  # local: the node we reserved on
    candidates: Final[int]  # local: how many nodes could host the pod (capped, see decision.py)
    capped: Final[bool]  # remote only because the reservation cap was reached (counted in metrics)

    def __init__(
        self,
        kind: DecisionKind,
        reason: str,
        node: str = "",
        candidates: int = 0,
        capped: bool = False,
    ) -> None:
        self.kind = kind
        self.reason = reason
        self.node = node
        self.candidates = candidates
        self.capped = capped


# ----- the cluster as a decision reads it (see webhook.fitting and webhook.cache) -----------------


@dataclass(init=False, unsafe_hash=True, slots=True)
class FitResult:
    node: Final[NodeInfo | None]  # the best-fit node (least free GPUs that still fit), if any
    candidates: Final[int]  # nodes that fit, counted up to fitting.CANDIDATE_CAP
    excluded_by_placement: Final[int]  # nodes with enough free GPUs that taints/selectors rule out
    short_of_compute: Final[int]  # nodes with enough free GPUs but not enough CPU, memory, pods...
    best_free: Final[int]  # free GPUs (of the resource scanned) on `node`

    def __init__(
        self,
        node: NodeInfo | None,
        candidates: int,
        excluded_by_placement: int,
        short_of_compute: int = 0,
        best_free: int = 0,
    ) -> None:
        self.node = node
        self.candidates = candidates
        self.excluded_by_placement = excluded_by_placement
        self.short_of_compute = short_of_compute
        self.best_free = best_free


@dataclass(frozen=True, slots=True)
class Claim:
    node: str  # "" when no node could take it: such a claim holds nothing
    requests: Requests
    eligibility: Eligibility  # its pod's placement rules: kept so the claim can move when the scheduler fills its node
    expires_at: float | None  # reservations expire; claims of watched pods do not
    pinned: bool = False  # on the pod's nominated node: the scheduler chose it, it stays while the node exists


@final
@dataclass(slots=True, eq=False, kw_only=True)
class ClusterView:
    """What a decision reads (webhook.fitting searches it), shared with the cache that keeps it:
    never written through a view.

    The cache builds one view over its own structures and keeps it for its lifetime (it mutates
    them in place, never rebinds them), so handing it out per review costs nothing."""

    gpu_resources: tuple[str, ...]
    nodes: dict[str, NodeInfo]  # name -> node
    used: dict[str, dict[str, int]]  # node -> resource -> effective requests of bound pods
    claimed: dict[str, dict[str, int]]  # node -> resource -> held by claims placed there
    claimed_total: dict[str, int]  # resource -> sum of `claimed`
    # resource -> free count -> node names (insertion-ordered set) of schedulable nodes
    buckets: dict[str, dict[int, dict[str, None]]]
    bucket_of: dict[str, dict[str, int]]  # resource -> node -> its bucket (free count)
    max_allocatable: dict[str, int]  # resource -> the most any node has
    cordoned: dict[str, None]  # Ready but cordoned GPU nodes: outside the buckets
    unschedulable_gpu_nodes: set[str]
    # (label key, value) -> node names: a pod pinned by nodeSelector or an `In` affinity visits
    # only matching nodes, instead of every node with free GPUs.
    by_label: dict[tuple[str, str], dict[str, None]]
    claims: dict[str, Claim]  # claim id ("pod:<uid>" or "res:<reservation id>") -> the claim
    claims_on: dict[str, dict[str, None]]  # node -> ids of the claims placed there, oldest first
    # A trial's view only (webhook.room.Trial): resource -> node -> the free-count bucket it was
    # re-filed to (NOT_FILED: out of them), in the order of re-filing; read over `buckets`. Empty
    # in the cache's own view.
    refiled: dict[str, dict[str, int]] = field(default_factory=dict)
    # Nodes with claims placed on them, by what they would have free with every claim gone
    # (allocatable - used), per GPU resource: resource -> node -> that amount, and resource -> amount
    # -> how many such nodes. Making room (webhook.room) needs such a node, and with none it answers
    # at once, not after a walk over every node with claims. Kept by fitting.refile.
    claim_room: dict[str, dict[str, int]] = field(default_factory=dict)
    claim_room_counts: dict[str, dict[int, int]] = field(default_factory=dict)


ClaimMove = tuple[str, str]  # (claim id, the node it moves to)


def empty_view(gpu_resources: tuple[str, ...]) -> ClusterView:
    """A view of no node: what the cache starts from before its first list (and tests build on)."""
    return ClusterView(
        gpu_resources=gpu_resources,
        nodes={},
        used={},
        claimed={},
        claimed_total={},
        buckets={r: {} for r in gpu_resources},
        bucket_of={r: {} for r in gpu_resources},
        max_allocatable=dict.fromkeys(gpu_resources, 0),
        cordoned={},
        unschedulable_gpu_nodes=set(),
        by_label={},
        claims={},
        claims_on={},
    )


@dataclass(frozen=True, slots=True)
class Hold:
    """What one outstanding reservation holds (webhook.reservations): resources on a node (local), or
    GPUs counted against its namespace's burst budget (remote)."""

    local: bool
    node: str = ""  # local: the node ("" when its node has gone: it then holds nothing)


@dataclass(frozen=True, slots=True)
class LocalReservation:
    """A reservation a decision asks the cache to make: `requests` held on `node` until the pod appears."""

    reservation_id: str
    node: str
    requests: Requests
    placement: Placement
    namespace: str


@dataclass(init=False, unsafe_hash=True, slots=True)
class RemoteReservation:
    """A reservation a decision asks the cache to make: a burst's GPUs counted against its namespace's
    budget until the pod appears (0 GPUs: a marker that holds nothing)."""

    reservation_id: Final[str]
    namespace: Final[str]
    gpus: Final[int]
    cost_per_hour: Final[float]  # a priced burst (a namespace with cost caps): what it may cost
    worst_case: Final[float]

    def __init__(
        self,
        reservation_id: str,
        namespace: str,
        gpus: int,
        cost_per_hour: float = 0.0,
        worst_case: float = 0.0,
    ) -> None:
        self.reservation_id = reservation_id
        self.namespace = namespace
        self.gpus = gpus
        self.cost_per_hour = cost_per_hour
        self.worst_case = worst_case


@dataclass(init=False, unsafe_hash=True, slots=True)
class Snapshot:
    """Everything one admission decides from, handed out by the cache in one call
    (ClusterCache.snapshot_for): the cluster's view (shared, read-only), and what its namespace and
    the webhook's state say. Plain data: the decision (webhook.decision.decide) is pure over it."""

    view: Final[ClusterView]
    reservation_refusal: Final[str]  # why no reservation may be made now ("": one may)
    budget: Final[NamespaceBudget | None]  # the namespace's burst budget (None: none)
    remote_in_use: Final[int]  # GPUs counted against that budget now
    cluster: Final[str]  # the cluster's identity (contract.cluster_identity), "" when unknown
    cluster_unknown: Final[str]  # why it is unknown ("" when known): no identity, no burst
    default_walltime: Final[str | None]  # the namespace's default-walltime annotation as written (None: absent)
    cost_caps: Final[CostCaps | None]  # the namespace's caps in money (None: none)
    app: Final[str]  # the namespace's JARVICE application ("": the add-on's default)
    in_use: Final[InUse]  # what it holds now, GPUs and money (webhook.spending.reconcile)
    spend_refusal: Final[str]  # why the spend record cannot be used now ("": it can, or no caps)
    machines: Final[Mapping[str, MachineRate] | None]  # the record's machine rates (None: no record)
    burst_after: Final[str | None]  # the namespace's burst-after annotation as written (None: absent)
    namespace_machines: Final[NamespaceMachines | None]  # its machine annotations (None: neither)
    own_account: Final[bool]  # the namespace pays with its own key (`jarvice-account: own`)
    # Local reservations the namespace may still make (the caps on outstanding ones, its own and the
    # total): a gang decided local reserves one per rank at once. None: no cap.
    reservation_room: Final[ReservationRoom | None]

    def __init__(
        self,
        view: ClusterView,
        reservation_refusal: str,
        budget: NamespaceBudget | None,
        remote_in_use: int,
        cluster: str,
        *,
        cluster_unknown: str,
        default_walltime: str | None,
        cost_caps: CostCaps | None = None,
        app: str = "",
        in_use: InUse = NOTHING_IN_USE,
        spend_refusal: str = "",
        machines: Mapping[str, MachineRate] | None = None,
        burst_after: str | None = None,
        namespace_machines: NamespaceMachines | None = None,
        own_account: bool = False,
        reservation_room: ReservationRoom | None = None,
    ) -> None:
        self.view = view
        self.reservation_refusal = reservation_refusal
        self.budget = budget
        self.remote_in_use = remote_in_use
        self.cluster = cluster
        self.cluster_unknown = cluster_unknown
        self.default_walltime = default_walltime
        self.cost_caps = cost_caps
        self.app = app
        self.in_use = in_use
        self.spend_refusal = spend_refusal
        self.machines = machines
        self.burst_after = burst_after
        self.namespace_machines = namespace_machines
        self.own_account = own_account
        self.reservation_room = reservation_room


@dataclass(frozen=True, slots=True)
class ReservationRoom:
    """How many more local reservations may be made now, and the cap that sets it (for the reason)."""

    places: int
    cap: int
    scope: str  # "in namespace <name>" or "in total"
