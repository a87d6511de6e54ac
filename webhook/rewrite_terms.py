"""What a burst rewrite is told (pure): the add-on's `RewritePolicy` (its flags: which resources are
GPUs, the runner's footprint, how a burst pod reaches JARVICE) and a pod's `BurstTerms` (what admission
settled for its burst containers). `webhook.mutation` builds the patches from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from jarvice import contract
from webhook import gpu_models, walltime
from webhook.gangs import GangTerms


@dataclass(frozen=True, slots=True)
class RewritePolicy:
    gpu_resources: tuple[str, ...]
    remote_cpu: str  # the runner's footprint: it only submits, polls and streams logs
    remote_memory: str
    strip_node_selector_keys: frozenset[str] = frozenset()
    strip_toleration_keys: frozenset[str] = frozenset()
    strip_runtime_classes: frozenset[str] = frozenset()
    cluster_name: str = ""  # --cluster-name: the readable part of the cluster identity (contract.cluster_identity)
    default_walltime_seconds: int = 24 * 3600  # --default-walltime: a burst job's limit without a deadline
    gpu_model_label: str = gpu_models.DEFAULT_MODEL_LABEL  # --gpu-model-label: the node label naming the GPU model
    gpu_model_map: gpu_models.ModelMap | None = None  # --gpu-models-file (None: no mapping)
    # What a burst pod needs to reach JARVICE, written by the webhook so users need not: the Secret in
    # the pod's namespace with the credentials (--credentials-secret; "": none mounted), the API URL
    # (--jarvice-api-url) and the application when the namespace names none (--default-app).
    credentials_secret: str = contract.DEFAULT_CREDENTIALS_SECRET
    jarvice_api_url: str = ""
    default_app: str = ""
    # The add-on's JARVICE gateway (--gateway-url; "": none): burst pods of namespaces that do not pay
    # with their own key reach JARVICE only through it, with a projected token of --gateway-audience
    # for key, trusting --gateway-ca-file's CA (PEM text here). No key is mounted into them.
    gateway_url: str = ""
    gateway_audience: str = ""
    gateway_ca: str = ""
    # The gateway's SFTP endpoint (--gateway-sftp, host:port; "": none) and its SSH host key
    # (--gateway-ssh-host-key, "ssh-ed25519 AAAA..."): a burst container that stages data in a namespace
    # paying through the gateway stages through it, its token for password.
    gateway_sftp: str = ""
    gateway_ssh_host_key: str = ""
    # --staging-cpu-limit: the CPU limit (not request) of a runner that stages data, so SSH's
    # encryption is not throttled at remote_cpu; "" keeps remote_cpu.
    staging_cpu_limit: str = ""


# Its own __init__ and Final fields: mypyc compiles that __init__ (the one dataclasses writes stays
# interpreted, mypyc #817: ~780 ns a call against ~50 ns) and keeps the fields read-only.
@dataclass(init=False, unsafe_hash=True, slots=True)
class BurstTerms:
    """What admission settled for every burst container of a pod, beside its own GPU count."""

    # contract.cluster_identity: who may reap the container's job. "" only on reinvocation without a
    # known identity (a first rewrite never happens without one): the env is then left as it is.
    cluster: Final[str]
    limit: Final[walltime.Walltime]  # JARVICE_WALLTIME, unless the container sets a shorter one
    # A reinvocation: the budget was counted at the first rewrite, so a container's counted GPUs are
    # never raised (kept as set; 0 for a container that only now asks for GPUs).
    reinvoked: Final[bool]
    # A gang's pod (webhook.gangs): its runner is one rank of one multi-node job.
    gang: Final[GangTerms | None]
    # Per burst container: (name, stage-in, stage-out) as NIMBIX_BURST_STAGE_IN/OUT values (webhook.data_volumes).
    staging: Final[tuple[tuple[str, str, str], ...]]
    # NIMBIX_BURST_DATA_KEY on every container that stages (data_volumes.data_key): "" for none.
    data_key: Final[str]
    # The pod's GPU model constraint (gpu_models.describe_constraint), "" when it has none, and the
    # machine types it allows: the constraint leaves the pod and becomes the runner's machine choice.
    gpu_model: Final[str]
    allowed_machines: Final[tuple[str, ...]]
    # A priced burst (its namespace has cost caps; webhook.spending): the dearest price per node-hour
    # its runner may pay, and what the pod is counted for (per hour, worst case over its walltime).
    max_price: Final[float]
    cost_per_hour: Final[float]
    worst_case: Final[float]
    # The JARVICE application (APP_NAME) unless the container names one: the namespace's
    # `nimbix-burst.io/jarvice-app`, else the add-on's --default-app ("": neither).
    app: Final[str]
    # The machines to use in order (NIMBIX_BURST_MACHINES; (): any that fits, cheapest first) and how
    # long a job may stay queued before it moves to the next (NIMBIX_BURST_MAX_REMOTE_QUEUE; "": the
    # runner's default); webhook.machine_terms. `warnings`: what kubectl shows about unreadable annotations.
    machine_order: Final[tuple[str, ...]]
    max_remote_queue: Final[str]
    warnings: Final[tuple[str, ...]]
    # The namespace pays with its own key (`jarvice-account: own`): its Secret is mounted, not the gateway's token.
    own_account: Final[bool]

    def __init__(
        self,
        cluster: str,
        limit: walltime.Walltime,
        reinvoked: bool = False,
        gang: GangTerms | None = None,
        staging: tuple[tuple[str, str, str], ...] = (),
        *,
        data_key: str = "",
        gpu_model: str = "",
        allowed_machines: tuple[str, ...] = (),
        max_price: float = 0.0,
        cost_per_hour: float = 0.0,
        worst_case: float = 0.0,
        app: str = "",
        machine_order: tuple[str, ...] = (),
        max_remote_queue: str = "",
        warnings: tuple[str, ...] = (),
        own_account: bool = False,
    ) -> None:
        self.cluster = cluster
        self.limit = limit
        self.reinvoked = reinvoked
        self.gang = gang
        self.staging = staging
        self.data_key = data_key
        self.gpu_model = gpu_model
        self.allowed_machines = allowed_machines
        self.max_price = max_price
        self.cost_per_hour = cost_per_hour
        self.worst_case = worst_case
        self.app = app
        self.machine_order = machine_order
        self.max_remote_queue = max_remote_queue
        self.warnings = warnings
        self.own_account = own_account
