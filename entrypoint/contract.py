"""Names shared by the webhook and the runner: the only module the webhook imports from here.

The webhook writes these onto a pod; the runner reads them from its environment. Keeping both
sides on one definition is what makes a rewritten pod runnable.
"""

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
# The pod's GPU model constraint as the webhook read it; on a pod kept local because no JARVICE
# machine offers that model, also why (the burst controller leaves such a pod alone).
ANNOTATION_GPU_MODEL: Final = ANNOTATION_PREFIX + "gpu-model"
# A machine type: letters, digits, '_', '-' and '.', as /jarvice/machines names them (n0, ng4a);
# never a comma or a space, so a list of them is a plain comma-separated string.
MAX_MACHINE_NAME: Final = 64
_MACHINE_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


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


# --- what the controller shows of a burst pod's JARVICE jobs (`kubectl describe`, `kubectl nimbix`) ---

# Its latest job (the highest number), that job's machine and node count, and the state of that job:
# submitted, queued, running, succeeded or failed (the controller's `ended` above is never replaced).
ANNOTATION_JOB_NUMBER: Final = ANNOTATION_PREFIX + "job-number"
ANNOTATION_JOB_MACHINE: Final = ANNOTATION_PREFIX + "job-machine"
ANNOTATION_JOB_NODES: Final = ANNOTATION_PREFIX + "job-nodes"
# All its jobs together, so far: GPU-hours, and cost from each machine's mc_price (per node-hour).
ANNOTATION_GPU_HOURS: Final = ANNOTATION_PREFIX + "gpu-hours"
ANNOTATION_COST: Final = ANNOTATION_PREFIX + "cost"
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

# --- gangs: the pods of one distributed job burst as one multi-node JARVICE job ---
# Set by the webhook on every burst container of a gang's pods (an Indexed Job's pods, or a Kueue
# plain-pod group). The gang's identity is a UUID: the owning Job's UID, or for a pod group
# uuid5(NAMESPACE_URL, "<cluster identity>/<namespace>/<group name>"). The gang's JARVICE job label is
# build_job_label with the gang UID in place of the pod UID and no container part.
ENV_GANG_UID: Final = "NIMBIX_BURST_GANG_UID"
# How many pods (= JARVICE nodes) the gang has, and this pod's rank in it (0..size-1).
ENV_GANG_SIZE: Final = "NIMBIX_BURST_GANG_SIZE"
ENV_GANG_RANK: Final = "NIMBIX_BURST_GANG_RANK"
# The same three facts on the pod, for the controller and for people.
ANNOTATION_GANG: Final = ANNOTATION_PREFIX + "gang"
ANNOTATION_GANG_SIZE: Final = ANNOTATION_PREFIX + "gang-size"
ANNOTATION_GANG_RANK: Final = ANNOTATION_PREFIX + "gang-rank"
