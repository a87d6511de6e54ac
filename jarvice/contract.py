"""Names shared by the webhook, the runner and the controller.

The webhook writes these onto a pod; the runner reads them from its environment; the controller reads
them back from the pod. Keeping every side on one definition is what makes a rewritten pod runnable.
"""

import re
from typing import Final

# The label that opts a pod in (the original design's label, kept for compatibility).
LABEL_TASK_TYPE: Final = "task-type"
LABEL_TASK_TYPE_VALUE: Final = "Nimbix"

# Environment the webhook sets on a rewritten pod.
ENV_REMOTE: Final = "REMOTE"
ENV_NUM_GPUS: Final = "NUM_GPUS"
ENV_NUM_CPUS: Final = "NUM_CPUS"

# Annotations recording the decision; the prefix marks them as ours.
ANNOTATION_PREFIX: Final = "nimbix-burst.io/"
ANNOTATION_DECISION: Final = ANNOTATION_PREFIX + "decision"
ANNOTATION_REASON: Final = ANNOTATION_PREFIX + "reason"
ANNOTATION_ORIGINAL_RESOURCES: Final = ANNOTATION_PREFIX + "original-resources"
ANNOTATION_CANDIDATES: Final = ANNOTATION_PREFIX + "candidate-nodes"
# Set on pods admitted as local: lets the cache release the GPUs it reserved for this admission
# the moment the pod appears (its name and UID do not exist yet at admission time).
ANNOTATION_RESERVATION: Final = ANNOTATION_PREFIX + "reservation"
# Set on every pod the webhook decides: the admission's token. A pod that arrives carrying a decision
# is the product's own reinvocation only while the webhook holds that token as issued and no pod has
# taken it (webhook.provenance); a copy of a decided pod carries a token already taken.
ANNOTATION_ADMISSION: Final = ANNOTATION_PREFIX + "admission"

# Set by the controller on a burst pod it brings home, right before evicting it: the webhook holds the
# GPUs the pod comes home to for its Job's next pod, from the eviction to that pod's admission.
ANNOTATION_COMING_HOME: Final = ANNOTATION_PREFIX + "coming-home"

DECISION_LOCAL: Final = "local"
DECISION_REMOTE: Final = "remote"

# Per-container bursting: the webhook names the container a runner runs in (part of its job label,
# so two burst containers of one pod never share a JARVICE job) and gives it the pod's identity
# from the downward API when the pod does not already.
ENV_CONTAINER_NAME: Final = "NIMBIX_BURST_CONTAINER"
ENV_POD_UID: Final = "POD_UID"
ENV_POD_NAMESPACE: Final = "POD_NAMESPACE"
ENV_POD_NAME: Final = "POD_NAME"

# A small volume that outlives container restarts within the pod (an emptyDir): the runner keeps
# its job's state there, so a runner restarted before it reported a result picks that job up again
# instead of submitting it twice, and one restarted after reporting a failure retries on purpose.
ENV_STATE_DIR: Final = "NIMBIX_BURST_STATE_DIR"
# The namespace's JARVICE credentials, mounted by the webhook into every burst container that does not
# bring its own (docs/install.md): the Secret's keys `username` and `apikey` as files.
DEFAULT_CREDENTIALS_SECRET: Final = "jarvice-credentials"
CREDENTIALS_VOLUME_NAME: Final = "nimbix-burst-jarvice-credentials"
CREDENTIALS_MOUNT_PATH: Final = "/var/run/secrets/jarvice"
CREDENTIALS_URL_KEY: Final = "url"  # optional: the API endpoint, when not JARVICE's public one
ENV_USERNAME_FILE: Final = "JARVICE_USERNAME_FILE"
ENV_APIKEY_FILE: Final = "JARVICE_APIKEY_FILE"
ENV_APP_NAME: Final = "APP_NAME"
ENV_API_URL: Final = "JARVICE_API_URL"
# On a namespace: the JARVICE application its burst pods run (the add-on's --default-app otherwise).
ANNOTATION_JARVICE_APP: Final = ANNOTATION_PREFIX + "jarvice-app"
# On a namespace: `own` when its burst pods pay with the namespace's own key (its `jarvice-credentials`
# Secret) rather than through the add-on's gateway. Opt-in: without it, an add-on with a gateway
# sends every burst through the gateway, and no key reaches the namespace.
ANNOTATION_JARVICE_ACCOUNT: Final = ANNOTATION_PREFIX + "jarvice-account"
JARVICE_ACCOUNT_OWN: Final = "own"
# What a burst pod gets to reach the gateway: a token the kubelet projects for the gateway's audience
# (bound to the pod, short-lived, refreshed), mounted where the runner reads its key from.
GATEWAY_TOKEN_VOLUME_NAME: Final = "nimbix-burst-gateway-token"
GATEWAY_TOKEN_MOUNT_PATH: Final = "/var/run/secrets/nimbix-burst-gateway"
GATEWAY_TOKEN_FILE: Final = "token"
GATEWAY_TOKEN_SECONDS: Final = 600  # the shortest the API server allows; the kubelet refreshes it at 80 %
# The pod's annotations (the downward API, kept current by the kubelet), in a volume of their own on every
# burst container whichever way it pays (through the gateway or with its namespace's key, as a pod that
# stages data does): where the runner sees the controller's move-home mark. The variable names the file.
POD_INFO_VOLUME_NAME: Final = "nimbix-burst-pod-info"
POD_INFO_MOUNT_PATH: Final = "/var/run/nimbix-burst-pod"
POD_ANNOTATIONS_FILE: Final = "pod-annotations"
ENV_POD_ANNOTATIONS_FILE: Final = "NIMBIX_BURST_POD_ANNOTATIONS_FILE"
# Set by the controller on a burst pod whose running job moves home: the JARVICE job number. Its runner
# asks that job for a checkpoint (SIGUSR1 through /jarvice/signal), copies it back, and exits 81.
ANNOTATION_MOVE_HOME: Final = ANNOTATION_PREFIX + "move-home"
GATEWAY_USERNAME: Final = "pod"  # the gateway knows the pod by its token; JARVICE's username slot is not used
# The CA that signs the gateway's serving certificate (PEM), for the runner to trust it.
ENV_GATEWAY_CA: Final = "NIMBIX_BURST_GATEWAY_CA"
# Where a container stages its data (the runner reads them; the webhook writes the gateway's SFTP
# endpoint there in a namespace that pays through the gateway): host[:port], a known_hosts file, or
# the host's public key itself ("ssh-ed25519 AAAA...", for the address given).
ENV_VAULT_SFTP: Final = "NIMBIX_BURST_VAULT_SFTP"
ENV_VAULT_KNOWN_HOSTS: Final = "NIMBIX_BURST_VAULT_KNOWN_HOSTS"
ENV_VAULT_HOST_KEY: Final = "NIMBIX_BURST_VAULT_HOST_KEY"
STATE_VOLUME_NAME: Final = "nimbix-burst-state"
STATE_MOUNT_PATH: Final = "/var/run/nimbix-burst"
# What it holds, per burst container: the restart state and the staging record (a few flags each,
# whatever the number of staged files), each beside the temporary copy that replaces it: 4 files of
# at most STATE_FILE_MAX_BYTES (one 4 KiB block each; the runner's tests check the bound), for up
# to STATE_VOLUME_CONTAINERS burst containers in one pod.
STATE_FILE_MAX_BYTES: Final = 4096
STATE_VOLUME_CONTAINERS: Final = 64
STATE_VOLUME_BYTES: Final = 4 * STATE_FILE_MAX_BYTES * STATE_VOLUME_CONTAINERS
STATE_VOLUME_SIZE_LIMIT: Final = f"{STATE_VOLUME_BYTES >> 20}Mi"

# --- money safety: what the webhook tells the runner, and what the runner tells the cluster back ---

# The cluster's identity, set by the webhook on every burst container and carried in every job
# label, so the reaper of one cluster never touches another cluster's jobs on a shared account.
# Made by `cluster_identity` from the `kube-system` namespace's UID (and an optional name).
ENV_CLUSTER: Final = "NIMBIX_BURST_CLUSTER"
# The GPUs the webhook counted against the namespace's budget for this container's job (all nodes
# together). The runner refuses a machine whose GPUs times its nodes exceed it (nothing submitted).
ENV_COUNTED_GPUS: Final = "NIMBIX_BURST_COUNTED_GPUS"
# The job's walltime limit (HH:MM:SS), set by the webhook from the pod's activeDeadlineSeconds or
# the configured default; the runner never submits without one.
ENV_WALLTIME: Final = "JARVICE_WALLTIME"
# On a burst pod: that limit and where it came from (webhook.walltime), for `kubectl nimbix explain`.
ANNOTATION_WALLTIME: Final = ANNOTATION_PREFIX + "walltime"
# Without JARVICE_WALLTIME (a pod the webhook did not rewrite), no job runs longer than a day.
DEFAULT_WALLTIME: Final = "24:00:00"
WALLTIME_RE: Final = re.compile(r"^(\d{1,5}):([0-5]\d):([0-5]\d)$")


def parse_walltime_seconds(text: str) -> int | None:
    """`HH:MM:SS` (hours up to 5 digits) to seconds; None for anything else (the runner's
    JARVICE_WALLTIME, and a job's `application.walltime` as JARVICE echoes it)."""
    match = WALLTIME_RE.match(text.strip())
    if match is None:
        return None
    hours, minutes, seconds = (int(part) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


# Where the runner writes its termination message (Kubernetes shows it in the container's
# terminated state): whether the job it ran may still be running. The budget frees a terminal
# pod's GPUs only when the runner said its job had ended, or the controller recorded it.
ENV_TERMINATION_LOG: Final = "NIMBIX_BURST_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG: Final = "/dev/termination-log"
TERMINATION_KEY: Final = "nimbix_burst"  # {"nimbix_burst": {"job": N|null, "job_may_run": bool, "exit_code": N}}
# Set by the controller on a burst pod once no live JARVICE job carries its UID (reaped or ended).
ANNOTATION_JOB_STATE: Final = ANNOTATION_PREFIX + "job-state"
JOB_STATE_ENDED: Final = "ended"

# --- GPU models: what a pod selected becomes the remote machine choice (docs/gpu-models.md) ---

# The JARVICE machine types the pod's GPU model constraint allows (comma-separated, sorted), set by
# the webhook on every burst container of a pod that selected a model; the runner chooses only
# among them. Unset: any machine of /jarvice/machines may be chosen.
ENV_ALLOWED_MACHINES: Final = "NIMBIX_BURST_ALLOWED_MACHINES"
ANNOTATION_ALLOWED_MACHINES: Final = ANNOTATION_PREFIX + "allowed-machines"
# Set by the webhook on a burst in a namespace with cost caps: the highest price per node-hour (as
# /jarvice/machines gives mc_price) its runner may submit at; the pod was counted at that price.
ENV_MAX_PRICE: Final = "NIMBIX_BURST_MAX_PRICE"
# The pod's GPU model constraint as the webhook read it; on a pod kept local because no JARVICE
# machine offers that model, also why (the burst controller leaves such a pod alone).
ANNOTATION_GPU_MODEL: Final = ANNOTATION_PREFIX + "gpu-model"
# A machine type: letters, digits, '_', '-' and '.', as /jarvice/machines names them (n0, ng4a);
# never a comma or a space, so a list of them is a plain comma-separated string.
MAX_MACHINE_NAME: Final = 64
_MACHINE_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


# A Kubernetes object's UID as the API server writes it: a lowercase UUID.
UID_RE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_uid(text: object) -> bool:
    return isinstance(text, str) and UID_RE.fullmatch(text) is not None


def is_machine_name(text: str) -> bool:
    """Whether `text` can name a JARVICE machine type (see MAX_MACHINE_NAME)."""
    return 0 < len(text) <= MAX_MACHINE_NAME and set(text) <= _MACHINE_NAME_CHARS and text[0].isalnum()


def format_machine_list(machines: tuple[str, ...]) -> str:
    """The value of NIMBIX_BURST_ALLOWED_MACHINES (and its annotation): sorted, without duplicates."""
    return ",".join(sorted(set(machines)))


def parse_machine_list(text: str) -> tuple[str, ...]:
    """NIMBIX_BURST_ALLOWED_MACHINES -> machine types, sorted. Raises ValueError naming the first entry
    that is no machine type, or when the list is empty."""
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if not is_machine_name(name):
            raise ValueError(
                f"{name!r} is not a JARVICE machine type (letters, digits, '_', '-', '.', at most"
                f" {MAX_MACHINE_NAME} characters); give a comma-separated list such as ng4a,ng8"
            )
    return tuple(sorted(set(names)))


# --- which machine, and moving a job JARVICE keeps queued (docs/runner.md#which-machine) ---

# The machines to use and their order (comma-separated, order kept), from a namespace's annotation
# `nimbix-burst.io/machines` (the webhook copies it) or set on the container. Unset: every machine
# that fits, cheapest first.
ENV_MACHINES: Final = "NIMBIX_BURST_MACHINES"
ANNOTATION_MACHINES: Final = ANNOTATION_PREFIX + "machines"
# How long a job may stay queued on JARVICE (not yet started) before it is terminated and submitted
# on the next candidate machine: a duration (`30s`, `10m`, `1h`, `0` never). The pod's annotation
# `nimbix-burst.io/max-remote-queue`, else its namespace's; the webhook writes the variable.
ENV_MAX_REMOTE_QUEUE: Final = "NIMBIX_BURST_MAX_REMOTE_QUEUE"
ANNOTATION_MAX_REMOTE_QUEUE: Final = ANNOTATION_PREFIX + "max-remote-queue"
# The container's memory request in GiB, rounded up (set by the webhook from its resources): only
# machines with at least that much `mc_ram` (read as GiB) per node are candidates. Unset: any.
ENV_MEMORY_GB: Final = "NIMBIX_BURST_MEMORY_GB"
BYTES_PER_GB: Final = 2**30
# Without the annotation (or the variable): ten minutes.
DEFAULT_MAX_REMOTE_QUEUE_SECONDS: Final = 600
# At most a week: a longer queue is no queue to move from.
MAX_REMOTE_QUEUE_SECONDS: Final = 7 * 24 * 3600
_DURATION_UNITS: Final = {"s": 1, "m": 60, "h": 3600}


def parse_machine_order(text: str) -> tuple[str, ...]:
    """NIMBIX_BURST_MACHINES (or the namespace annotation) -> machine types in the order given,
    without repeats. Raises ValueError naming the first entry that is no machine type."""
    names: list[str] = []
    for part in text.split(","):
        name = part.strip()
        if not is_machine_name(name):
            raise ValueError(
                f"{name!r} is not a JARVICE machine type (letters, digits, '_', '-', '.', at most"
                f" {MAX_MACHINE_NAME} characters); give the machines in the order to try, e.g. ng4,ng4v"
            )
        if name not in names:
            names.append(name)
    return tuple(names)


def parse_duration_seconds(text: str) -> int:
    """`90s`, `10m`, `1h`, `90` (seconds) or `0` -> whole seconds, at most MAX_REMOTE_QUEUE_SECONDS.
    Raises ValueError saying what to write."""
    value = text.strip().lower()
    unit = _DURATION_UNITS.get(value[-1:], 0) if value else 0
    digits = value[:-1] if unit else value
    if not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{text!r} is not a duration: write a whole number with s, m or h, e.g. 30s or 10m (0: never)")
    seconds = int(digits) * (unit or 1)
    if seconds > MAX_REMOTE_QUEUE_SECONDS:
        raise ValueError(f"{text!r} is longer than a week ({MAX_REMOTE_QUEUE_SECONDS} s); write 0 to never move")
    return seconds


# --- what the controller shows of a burst pod's JARVICE jobs (`kubectl describe`, `kubectl nimbix`) ---

# Its latest job (the highest number), that job's machine and node count, and the state of that job:
# submitted, queued, running, succeeded or failed (the controller's `ended` above is never replaced).
ANNOTATION_JOB_NUMBER: Final = ANNOTATION_PREFIX + "job-number"
ANNOTATION_JOB_MACHINE: Final = ANNOTATION_PREFIX + "job-machine"
ANNOTATION_JOB_NODES: Final = ANNOTATION_PREFIX + "job-nodes"
# All its jobs together, so far: GPU-hours, and cost from each machine's mc_price (per node-hour).
ANNOTATION_GPU_HOURS: Final = ANNOTATION_PREFIX + "gpu-hours"
ANNOTATION_COST: Final = ANNOTATION_PREFIX + "cost"
# The pod's stage, as the controller derives it each round (controller.stages): staging-in,
# submitting, queued, running, copying-back, finishing, ended; none on a gang's pods.
ANNOTATION_STAGE: Final = ANNOTATION_PREFIX + "stage"
# The controller's ledger, `4711=running,4712=submitted`: the last stage each job's Events reached.
# A restarted controller reads it, so no Event is recorded twice.
ANNOTATION_JOB_LEDGER: Final = ANNOTATION_PREFIX + "jobs"
# The decision as a label too, so `kubectl get pods -l nimbix-burst.io/decision=remote` works.
LABEL_DECISION: Final = ANNOTATION_PREFIX + "decision"

# A cluster identity is a DNS-label-like token: [a-z0-9-], at most this long.
MAX_CLUSTER_NAME: Final = 30
CLUSTER_UID_CHARS: Final = 12


def cluster_identity(kube_system_uid: str, name: str = "") -> str:
    """`<name>-<12 hex of the kube-system namespace UID>`, or the hex alone without a name.

    The UID part makes two clusters given the same name still distinct; the name makes a job
    list readable. Raises ValueError on a UID without 12 hex digits or a name that is not a
    lowercase DNS label of at most 30 characters.
    """
    digits = "".join(ch for ch in kube_system_uid.lower() if ch in "0123456789abcdef")
    if len(digits) < CLUSTER_UID_CHARS or len(digits) != len(kube_system_uid.replace("-", "")):
        raise ValueError(f"kube-system UID {kube_system_uid!r} is not a UUID")
    if name and not _is_cluster_name(name):
        raise ValueError(
            f"cluster name {name!r} must be lowercase letters, digits and '-', start and end with a letter or"
            f" digit, at most {MAX_CLUSTER_NAME} characters"
        )
    part = digits[:CLUSTER_UID_CHARS]
    return f"{name}-{part}" if name else part


def _is_cluster_name(name: str) -> bool:
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-")
    return 0 < len(name) <= MAX_CLUSTER_NAME and set(name) <= allowed and name[0] != "-" and name[-1] != "-"


def is_cluster_identity(text: str) -> bool:
    """Whether `text` could have come from `cluster_identity` (what a job label may carry)."""
    name, separator, part = text.rpartition("-")
    hexdigits = set("0123456789abcdef")
    if len(part) != CLUSTER_UID_CHARS or not set(part) <= hexdigits:
        return False
    return not separator or _is_cluster_name(name)  # "-<hex>" has an empty name: not one we make


# The shortest termination grace period a burst pod gets (the webhook raises a lower one and
# records it): the runner may be inside the submit POST when SIGTERM comes (connect + read
# timeout, ~35 s), then needs its cancel grace (20 s) and the terminate call (5 s) before the
# kubelet's SIGKILL. A unit test holds the runner's defaults to it.
MIN_TERMINATION_GRACE_SECONDS: Final = 75
ANNOTATION_GRACE: Final = ANNOTATION_PREFIX + "termination-grace"

# --- data staging: the pod's volumes follow the job through the JARVICE vault (docs/data.md) ---

# Set by the user on the pod: absolute paths inside the bursting container, comma-separated, each
# under one of its volume mounts. stage-in is uploaded before the submit and found remotely at the
# same path; stage-out is copied back into the pod's volume after the job ends normally.
ANNOTATION_STAGE_IN: Final = ANNOTATION_PREFIX + "stage-in"
ANNOTATION_STAGE_OUT: Final = ANNOTATION_PREFIX + "stage-out"
# "none": burst a pod that mounts data volumes without staging them (the command fetches its data).
ANNOTATION_REMOTE_DATA: Final = ANNOTATION_PREFIX + "remote-data"
REMOTE_DATA_NONE: Final = "none"
# Set by the webhook on a pod kept local because its data could not follow it: the volumes named.
ANNOTATION_DATA_NOT_STAGED: Final = ANNOTATION_PREFIX + "data-not-staged"
# What the webhook tells one burst container's runner: the validated paths (its own mounts only,
# configMap and downwardAPI mounts added to stage-in), comma-separated; unset when empty.
ENV_STAGE_IN: Final = "NIMBIX_BURST_STAGE_IN"
ENV_STAGE_OUT: Final = "NIMBIX_BURST_STAGE_OUT"
STAGE_PATH_SEPARATOR: Final = ","
# What a burst container's staged data belongs to: the work, not the pod, so a Job's retry finds in
# the vault what the failed pod uploaded. Set by the webhook on a pod a Job controls: `job-<Job UID>`,
# or `job-<Job UID>-<completion index>` for an Indexed Job's pod; unset for any other pod (the runner
# then keys by the pod's UID). The runner checks its form (entrypoint.staging.parse_data_key).
ENV_DATA_KEY: Final = "NIMBIX_BURST_DATA_KEY"
# The pod's terminationGracePeriodSeconds as admitted (set by the webhook on a container that stages):
# how long the copy-back after a signal may run.
ENV_GRACE_SECONDS: Final = "NIMBIX_BURST_GRACE_SECONDS"
DATA_KEY_JOB_PREFIX: Final = "job-"

# --- gangs: the pods of one distributed job burst as one multi-node JARVICE job ---
# Set by the webhook on every burst container of a gang's pods (an Indexed Job's pods, or a Kueue
# plain-pod group). The gang's identity is a UUID, one per generation (the pods decided together;
# a retry after a burst generation's pod finished is the next): generation 1's is the owning Job's
# UID, or for a pod group uuid5(NAMESPACE_URL, "<cluster identity>/<namespace>/<group name>");
# generation n > 1's is uuid5(<generation 1's>, "generation/<n>"). The gang's JARVICE job label is
# build_job_label with the gang UID in place of the pod UID and no container part.
ENV_GANG_UID: Final = "NIMBIX_BURST_GANG_UID"
# How many pods (= JARVICE nodes) the gang has, and this pod's rank in it (0..size-1).
ENV_GANG_SIZE: Final = "NIMBIX_BURST_GANG_SIZE"
ENV_GANG_RANK: Final = "NIMBIX_BURST_GANG_RANK"
# When the pod's generation began (Unix seconds: the creation of its earliest pod the webhook saw; absent
# when it saw none): a following rank takes a finished job of the gang's label that ended at or after it.
# A rank that comes late (its Job recreated it apart from the others) may start after its gang's job ended.
ENV_GANG_SINCE: Final = "NIMBIX_BURST_GANG_SINCE"
# The same three facts on the pod, for the controller and for people.
ANNOTATION_GANG: Final = ANNOTATION_PREFIX + "gang"
ANNOTATION_GANG_SIZE: Final = ANNOTATION_PREFIX + "gang-size"
ANNOTATION_GANG_RANK: Final = ANNOTATION_PREFIX + "gang-rank"

# --- waiting before bursting ---
# Set by the user on a pod, or on its namespace as the default: how long a pod that would burst waits
# for a local node first ("90s", "10m", "1h"; "0", the default, bursts at once).
ANNOTATION_BURST_AFTER: Final = ANNOTATION_PREFIX + "burst-after"
# Set by the webhook on a pod it keeps local to wait: when it bursts if no node has taken it (RFC 3339,
# UTC). The controller replaces the pod then; its replacement is burst at once.
ANNOTATION_BURST_DEADLINE: Final = ANNOTATION_PREFIX + "burst-deadline"
# Set by the webhook on a pod that asked to wait but bursts at once: why it did not wait.
ANNOTATION_BURST_AFTER_IGNORED: Final = ANNOTATION_PREFIX + "burst-after-ignored"

# The generation (1, 2, ...) whose identity ANNOTATION_GANG is, for people.
ANNOTATION_GANG_GENERATION: Final = ANNOTATION_PREFIX + "gang-generation"
# The rank whose runner submits the gang's one job (the others follow it): its pod carries the whole
# gang's GPUs in the budget's count (its nimbix-burst.io/remote-gpus), the other ranks' pods none.
GANG_SUBMITTING_RANK: Final = 0
