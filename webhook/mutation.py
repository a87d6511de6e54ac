"""JSONPatch builders for admitted pods (pure).

Only ops that are valid against the pod as received: `remove` only for keys that exist, `add` of a
whole map or list when it is absent, append with `/-` otherwise (RFC 6902, RFC 6901 escaping).
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from jarvice import contract, gpubudget
from webhook import gpu_model_patch, gpu_models, spending, walltime
from webhook.gangs import GangTerms
from webhook.resources import all_containers, container_gpus, container_quantity, format_quantity_cores
from webhook.types import Decision, GpuCounts

JsonPatchOp = dict[str, Any]
_COMPUTE = ("cpu", "memory")


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


@dataclass(frozen=True, slots=True)
class BurstTerms:
    """What admission settled for every burst container of a pod, beside its own GPU count."""

    # contract.cluster_identity: who may reap the container's job. "" only on reinvocation without a
    # known identity (a first rewrite never happens without one): the env is then left as it is.
    cluster: str
    limit: walltime.Walltime  # JARVICE_WALLTIME, unless the container sets a shorter one
    # A reinvocation: the budget was counted at the first rewrite, so a container's counted GPUs are
    # never raised (kept as set; 0 for a container that only now asks for GPUs).
    reinvoked: bool = False
    # A gang's pod (webhook.gangs): its runner is one rank of one multi-node job.
    gang: GangTerms | None = None
    # Per burst container: (name, stage-in, stage-out) as NIMBIX_BURST_STAGE_IN/OUT values (webhook.data_volumes).
    staging: tuple[tuple[str, str, str], ...] = ()
    # NIMBIX_BURST_DATA_KEY on every container that stages (data_volumes.data_key): "" for none.
    data_key: str = ""
    # The pod's GPU model constraint (gpu_models.describe_constraint), "" when it has none, and the
    # machine types it allows: the constraint leaves the pod and becomes the runner's machine choice.
    gpu_model: str = ""
    allowed_machines: tuple[str, ...] = ()
    # A priced burst (its namespace has cost caps; webhook.spending): the dearest price per node-hour
    # its runner may pay, and what the pod is counted for (per hour, worst case over its walltime).
    max_price: float = 0.0
    cost_per_hour: float = 0.0
    worst_case: float = 0.0
    # The JARVICE application (APP_NAME) unless the container names one: the namespace's
    # `nimbix-burst.io/jarvice-app`, else the add-on's --default-app ("": neither).
    app: str = ""
    # The machines to use in order (NIMBIX_BURST_MACHINES; (): any that fits, cheapest first) and how
    # long a job may stay queued before it moves to the next (NIMBIX_BURST_MAX_REMOTE_QUEUE; "": the
    # runner's default); webhook.machine_terms. `warnings`: what kubectl shows about unreadable annotations.
    machine_order: tuple[str, ...] = ()
    max_remote_queue: str = ""
    warnings: tuple[str, ...] = ()
    # The namespace pays with its own key (`jarvice-account: own`): its Secret is mounted, not the gateway's token.
    own_account: bool = False


def escape(token: str) -> str:
    """RFC 6901: '~' -> '~0', '/' -> '~1' (resource names contain '/')."""
    return token.replace("~", "~0").replace("/", "~1")


def _annotation_ops(meta: Mapping[str, Any], values: Mapping[str, str]) -> list[JsonPatchOp]:
    existing = meta.get("annotations")
    if not existing:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]
    return [
        {"op": "replace" if key in existing else "add", "path": f"/metadata/annotations/{escape(key)}", "value": value}
        for key, value in values.items()
    ]


def _decision_label_ops(meta: Mapping[str, Any], decision: str) -> list[JsonPatchOp]:
    """The decision as a label too (`kubectl get pods -l nimbix-burst.io/decision=remote`): the
    labels map is created when the pod has none."""
    labels = meta.get("labels")
    if not labels:
        return [{"op": "add", "path": "/metadata/labels", "value": {contract.LABEL_DECISION: decision}}]
    if labels.get(contract.LABEL_DECISION) == decision:
        return []
    op = "replace" if contract.LABEL_DECISION in labels else "add"
    return [{"op": op, "path": f"/metadata/labels/{escape(contract.LABEL_DECISION)}", "value": decision}]


def build_local_patch(
    pod: Mapping[str, Any],
    *,
    decision: Decision,
    reservation_id: str,
    notes: Mapping[str, str] | None = None,
    admission: str = "",
) -> list[JsonPatchOp]:
    """Local: annotations (decision, reason, candidate count, reservation id, the admission's token
    and `notes`) and the decision label."""
    values = {
        **_token(admission),
        contract.ANNOTATION_DECISION: contract.DECISION_LOCAL,
        contract.ANNOTATION_REASON: decision.reason,
        contract.ANNOTATION_CANDIDATES: str(decision.candidates),
    }
    if reservation_id:
        values[contract.ANNOTATION_RESERVATION] = reservation_id
    values = {**values, **(notes or {})}
    meta = pod.get("metadata") or {}
    return _annotation_ops(meta, values) + _decision_label_ops(meta, contract.DECISION_LOCAL)


def _token(admission: str) -> dict[str, str]:
    """The admission's token (webhook.provenance): what proves a reinvocation is the product's own."""
    return {contract.ANNOTATION_ADMISSION: admission} if admission else {}


def _resource_ops(
    base: str,
    container: Mapping[str, Any],
    policy: RewritePolicy,
    original: dict[str, Any],
    *,
    shrink: bool,
    stages: bool = False,
) -> list[JsonPatchOp]:
    """Remove GPUs; with `shrink`, also cut cpu/memory to the runner's footprint (a CPU limit of
    policy.staging_cpu_limit for a runner that `stages` data)."""
    ops: list[JsonPatchOp] = []
    resources = container.get("resources") or {}
    saved: dict[str, dict[str, Any]] = {}
    for source in ("requests", "limits"):
        cpu = (
            policy.staging_cpu_limit
            if stages and source == "limits" and policy.staging_cpu_limit
            else policy.remote_cpu
        )
        footprint = {"cpu": cpu, "memory": policy.remote_memory}
        values = resources.get(source) or {}
        for resource in policy.gpu_resources:
            if resource in values:
                ops.append({"op": "remove", "path": f"{base}/resources/{source}/{escape(resource)}"})
                saved.setdefault(source, {})[resource] = values[resource]
        if not shrink:
            continue
        if source not in resources:
            # The runner's footprint is set whatever the pod said: a container that asked only for GPUs
            # would otherwise run the runner with no memory limit at all.
            ops.append({"op": "add", "path": f"{base}/resources/{source}", "value": dict(footprint)})
            continue
        for resource in _COMPUTE:
            if values.get(resource) == footprint[resource]:
                continue
            op = "replace" if resource in values else "add"
            ops.append({"op": op, "path": f"{base}/resources/{source}/{resource}", "value": footprint[resource]})
            if resource in values:
                saved.setdefault(source, {})[resource] = values[resource]
    if saved:
        original[str(container.get("name", ""))] = saved
    return ops


# (name, entry, replace_existing): ours are replaced whatever the pod says (the runner depends on
# them); the rest are defaults the pod may already set.
_EnvWish = tuple[str, dict[str, Any], bool]


def _env_ops(base: str, container: Mapping[str, Any], wanted: Sequence[_EnvWish]) -> list[JsonPatchOp]:
    env = container.get("env")
    if not env:
        return [{"op": "add", "path": f"{base}/env", "value": [entry for _, entry, _ in wanted]}]
    index_of = {item.get("name"): i for i, item in enumerate(env)}  # the last duplicate is the one in effect
    ops: list[JsonPatchOp] = []
    for name, entry, replace_existing in wanted:
        if name not in index_of:
            ops.append({"op": "add", "path": f"{base}/env/-", "value": entry})
        elif replace_existing and env[index_of[name]] != entry:
            # Replace the whole entry: a valueFrom must not survive beside the new value.
            ops.append({"op": "replace", "path": f"{base}/env/{index_of[name]}", "value": entry})
    return ops


def _value(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def _field_ref(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _mounts_path(container: Mapping[str, Any], wanted: str) -> bool:
    name = posixpath.basename(wanted)
    for mount in container.get("volumeMounts") or ():
        path = str(mount.get("mountPath", ""))
        # normpath only drops ".", "..", and repeated or trailing slashes: a path without the last
        # component's name cannot normalise to it, and most mounts are skipped without it.
        if name in path and posixpath.normpath(path) == wanted:
            return True
    return False


def _append_ops(path: str, existing: object, items: Sequence[Mapping[str, Any]]) -> list[JsonPatchOp]:
    """Add `items` to the list at `path`: the whole list when there is none, appended otherwise."""
    if not items:
        return []
    if not existing:
        return [{"op": "add", "path": path, "value": list(items)}]
    return [{"op": "add", "path": f"{path}/-", "value": item} for item in items]


_POD_ANNOTATIONS_PATH: Final = posixpath.join(contract.POD_INFO_MOUNT_PATH, contract.POD_ANNOTATIONS_FILE)


def _mounts(container: Mapping[str, Any], *, credentials: bool, gateway: bool) -> list[dict[str, Any]]:
    """What a burst container mounts: the state volume, and the namespace's JARVICE credentials
    (`credentials`) or the gateway's token (`gateway`), each unless something is already mounted at its
    path: two mounts at one path are invalid, and what is there (a re-created burst pod carries ours)
    is used instead."""
    mounts: list[dict[str, Any]] = []
    if not _mounts_path(container, contract.STATE_MOUNT_PATH):
        mounts.append({"name": contract.STATE_VOLUME_NAME, "mountPath": contract.STATE_MOUNT_PATH})
    if credentials and not _mounts_path(container, contract.CREDENTIALS_MOUNT_PATH):
        mount = {"name": contract.CREDENTIALS_VOLUME_NAME, "mountPath": contract.CREDENTIALS_MOUNT_PATH}
        mounts.append({**mount, "readOnly": True})
    if gateway and not _mounts_path(container, contract.GATEWAY_TOKEN_MOUNT_PATH):
        mount = {"name": contract.GATEWAY_TOKEN_VOLUME_NAME, "mountPath": contract.GATEWAY_TOKEN_MOUNT_PATH}
        mounts.append({**mount, "readOnly": True})
    if not _mounts_path(container, contract.POD_INFO_MOUNT_PATH):
        mount = {"name": contract.POD_INFO_VOLUME_NAME, "mountPath": contract.POD_INFO_MOUNT_PATH}
        mounts.append({**mount, "readOnly": True})
    return mounts


def _volume_ops(spec: Mapping[str, Any], used: set[str], policy: RewritePolicy) -> list[JsonPatchOp]:
    """The pod volumes its burst containers mount (`used`); a pod volume already of that name is used
    as is. The state is one emptyDir per pod; the credentials, the namespace's Secret, readable by
    whatever user the image runs as, optional so a namespace without it gets the runner's own error."""
    volumes = spec.get("volumes") or []
    have = {v.get("name") for v in volumes}
    wanted: list[dict[str, Any]] = []
    if contract.STATE_VOLUME_NAME in used and contract.STATE_VOLUME_NAME not in have:
        state = {"sizeLimit": contract.STATE_VOLUME_SIZE_LIMIT}
        wanted.append({"name": contract.STATE_VOLUME_NAME, "emptyDir": state})
    if contract.CREDENTIALS_VOLUME_NAME in used and contract.CREDENTIALS_VOLUME_NAME not in have:
        secret = {"secretName": policy.credentials_secret, "defaultMode": 0o444, "optional": True}
        wanted.append({"name": contract.CREDENTIALS_VOLUME_NAME, "secret": secret})
    if contract.GATEWAY_TOKEN_VOLUME_NAME in used and contract.GATEWAY_TOKEN_VOLUME_NAME not in have:
        token = {
            "audience": policy.gateway_audience,
            "expirationSeconds": contract.GATEWAY_TOKEN_SECONDS,
            "path": contract.GATEWAY_TOKEN_FILE,
        }
        projected = {"sources": [{"serviceAccountToken": token}], "defaultMode": 0o444}
        wanted.append({"name": contract.GATEWAY_TOKEN_VOLUME_NAME, "projected": projected})
    if contract.POD_INFO_VOLUME_NAME in used and contract.POD_INFO_VOLUME_NAME not in have:
        # The pod's annotations, kept current by the kubelet: the runner sees the controller's move-home
        # mark there (entrypoint.homeward), however the pod pays. Projected: never staged in on its own.
        annotations = {"path": contract.POD_ANNOTATIONS_FILE, "fieldRef": {"fieldPath": "metadata.annotations"}}
        projected = {"sources": [{"downwardAPI": {"items": [annotations]}}], "defaultMode": 0o444}
        wanted.append({"name": contract.POD_INFO_VOLUME_NAME, "projected": projected})
    return _append_ops("/spec/volumes", volumes, wanted)


def _gateway_vault_env(policy: RewritePolicy) -> list[_EnvWish]:
    """Where a container stages through the gateway: its SFTP endpoint and host key, whatever the
    container set (the pod's token, its password, goes nowhere else); a known_hosts file of its own
    is blanked, so the gateway's key is the one checked."""
    return [
        (contract.ENV_VAULT_SFTP, _value(contract.ENV_VAULT_SFTP, policy.gateway_sftp), True),
        (contract.ENV_VAULT_HOST_KEY, _value(contract.ENV_VAULT_HOST_KEY, policy.gateway_ssh_host_key), True),
        (contract.ENV_VAULT_KNOWN_HOSTS, _value(contract.ENV_VAULT_KNOWN_HOSTS, ""), True),
    ]


def _burst_container_ops(
    base: str,
    container: Mapping[str, Any],
    *,
    gpus: int,
    terms: BurstTerms,
    policy: RewritePolicy,
    credentials: bool,
    gateway: bool,
    grace: int = contract.MIN_TERMINATION_GRACE_SECONDS,
) -> list[JsonPatchOp]:
    """What makes one app container a runner for its own remote job: what the product counted and
    pays with is written by the product (the container's own values of those are replaced); where to
    submit and as which application, unless the container says."""
    cores = format_quantity_cores(container_quantity(container, "cpu"))
    memory = container_quantity(container, "memory")
    wanted: list[_EnvWish] = [
        (contract.ENV_REMOTE, _value(contract.ENV_REMOTE, "1"), True),
        # The machine's size is what was counted, whatever the pod said (a reinvocation keeps the first's).
        (contract.ENV_NUM_GPUS, _value(contract.ENV_NUM_GPUS, str(gpus)), not terms.reinvoked),
        (contract.ENV_NUM_CPUS, _value(contract.ENV_NUM_CPUS, str(cores)), False),
        (contract.ENV_CONTAINER_NAME, _value(contract.ENV_CONTAINER_NAME, str(container.get("name", ""))), True),
        # The job's pod identity comes from the API server, never from a value the pod sets: the
        # reaper and the spend record attribute the job by it.
        (contract.ENV_POD_UID, _field_ref(contract.ENV_POD_UID, "metadata.uid"), True),
        (contract.ENV_POD_NAMESPACE, _field_ref(contract.ENV_POD_NAMESPACE, "metadata.namespace"), True),
        (contract.ENV_POD_NAME, _field_ref(contract.ENV_POD_NAME, "metadata.name"), True),
        (contract.ENV_STATE_DIR, _value(contract.ENV_STATE_DIR, contract.STATE_MOUNT_PATH), True),
        (contract.ENV_POD_ANNOTATIONS_FILE, _value(contract.ENV_POD_ANNOTATIONS_FILE, _POD_ANNOTATIONS_PATH), True),
    ]
    if terms.cluster:
        wanted.append((contract.ENV_CLUSTER, _value(contract.ENV_CLUSTER, terms.cluster), True))
    own = _own_walltime(container, terms.limit)
    wanted.append((contract.ENV_WALLTIME, _value(contract.ENV_WALLTIME, terms.limit.text), not own))
    gang = terms.gang
    # A gang's budget counted every rank: rank 0's runner checks the whole job's machines against it.
    counted = "0" if terms.reinvoked else str(gpus if gang is None else gpus * gang.size)
    wanted.append((contract.ENV_COUNTED_GPUS, _value(contract.ENV_COUNTED_GPUS, counted), not terms.reinvoked))
    if gang is not None:
        wanted.append((contract.ENV_GANG_UID, _value(contract.ENV_GANG_UID, gang.uid), True))
        wanted.append((contract.ENV_GANG_SIZE, _value(contract.ENV_GANG_SIZE, str(gang.size)), True))
        wanted.append((contract.ENV_GANG_RANK, _value(contract.ENV_GANG_RANK, str(gang.rank)), True))
    for name, stage_in, stage_out in terms.staging:
        if name == container.get("name"):
            for env_name, paths in ((contract.ENV_STAGE_IN, stage_in), (contract.ENV_STAGE_OUT, stage_out)):
                if paths:
                    wanted.append((env_name, _value(env_name, paths), True))
            if terms.data_key:
                wanted.append((contract.ENV_DATA_KEY, _value(contract.ENV_DATA_KEY, terms.data_key), True))
            # The copy-back after a signal runs as long as the pod's grace period allows.
            wanted.append((contract.ENV_GRACE_SECONDS, _value(contract.ENV_GRACE_SECONDS, str(grace)), True))
            if gateway and policy.gateway_sftp:
                wanted += _gateway_vault_env(policy)
    if terms.allowed_machines:
        allowed = contract.format_machine_list(terms.allowed_machines)
        wanted.append((contract.ENV_ALLOWED_MACHINES, _value(contract.ENV_ALLOWED_MACHINES, allowed), True))
    if terms.max_price:
        wanted.append((contract.ENV_MAX_PRICE, _value(contract.ENV_MAX_PRICE, _price_text(terms.max_price)), True))
    if credentials:
        for name, file in ((contract.ENV_USERNAME_FILE, "username"), (contract.ENV_APIKEY_FILE, "apikey")):
            wanted.append((name, _value(name, posixpath.join(contract.CREDENTIALS_MOUNT_PATH, file)), False))
    if terms.app:
        wanted.append((contract.ENV_APP_NAME, _value(contract.ENV_APP_NAME, terms.app), False))
    if gateway:
        # Where and as whom the runner submits is the product's: the gateway, with the pod's own token.
        token = posixpath.join(contract.GATEWAY_TOKEN_MOUNT_PATH, contract.GATEWAY_TOKEN_FILE)
        # A key the container brings (its env, or envFrom a Secret) is blanked, which the runner reads as
        # unset: in a namespace paying through the gateway no job is submitted past it.
        wanted += [
            (contract.ENV_API_URL, _value(contract.ENV_API_URL, policy.gateway_url), True),
            (_USERNAME, _value(_USERNAME, contract.GATEWAY_USERNAME), True),
            (contract.ENV_APIKEY_FILE, _value(contract.ENV_APIKEY_FILE, token), True),
            (_APIKEY, _value(_APIKEY, ""), True),
            (contract.ENV_USERNAME_FILE, _value(contract.ENV_USERNAME_FILE, ""), True),
        ]
        if policy.gateway_ca:
            wanted.append((contract.ENV_GATEWAY_CA, _value(contract.ENV_GATEWAY_CA, policy.gateway_ca), True))
    elif policy.jarvice_api_url:
        wanted.append((contract.ENV_API_URL, _value(contract.ENV_API_URL, policy.jarvice_api_url), False))
    elif credentials:  # the Secret may name the endpoint (its optional `url` key); else the runner's default
        url = {
            "secretKeyRef": {"name": policy.credentials_secret, "key": contract.CREDENTIALS_URL_KEY, "optional": True}
        }
        wanted.append((contract.ENV_API_URL, {"name": contract.ENV_API_URL, "valueFrom": url}, False))
    # The machine's RAM: the runner's candidates hold at least this much per node. Not on reinvocation:
    # the container's resources are the runner's footprint by then.
    if memory > 0 and not terms.reinvoked:
        memory_gb = str(math.ceil(memory / contract.BYTES_PER_GB))
        wanted.append((contract.ENV_MEMORY_GB, _value(contract.ENV_MEMORY_GB, memory_gb), False))
    # The container's own values win (as NUM_GPUS): the budget caps every candidate whatever the order.
    if terms.machine_order:
        order = ",".join(terms.machine_order)
        wanted.append((contract.ENV_MACHINES, _value(contract.ENV_MACHINES, order), False))
    if terms.max_remote_queue:
        queue = terms.max_remote_queue
        wanted.append((contract.ENV_MAX_REMOTE_QUEUE, _value(contract.ENV_MAX_REMOTE_QUEUE, queue), False))
    return _env_ops(base, container, wanted)


def _price_text(value: float) -> str:
    """Money as the annotations and the runner read it: at most 4 decimals, no exponent."""
    return f"{value:.4f}".rstrip("0").rstrip(".") or "0"


def _own_walltime(container: Mapping[str, Any], limit: walltime.Walltime) -> str:
    """The container's own JARVICE_WALLTIME when it is readable and shorter than `limit` (kept); else ""."""
    own = ""
    for item in container.get("env") or ():  # the last duplicate is the one in effect
        if item.get("name") == contract.ENV_WALLTIME:
            value = item.get("value")
            own = value if isinstance(value, str) and "valueFrom" not in item else ""
    seconds = walltime.parse_walltime(own) if own else None
    return own.strip() if seconds is not None and seconds < limit.seconds else ""


def _walltime_note(spec: Mapping[str, Any], policy: RewritePolicy, limit: walltime.Walltime) -> str:
    """The pod's walltime annotation: the limit, where it came from, and the containers keeping a shorter one."""
    note = f"{limit.text} from {limit.source}"
    for container in spec.get("containers") or ():
        own = _own_walltime(container, limit) if container_gpus(container, policy.gpu_resources) else ""
        if own:
            note += f"; container {container.get('name', '')} keeps its own {own}"
    return note


def _container_ops(
    spec: Mapping[str, Any], policy: RewritePolicy, original: dict[str, dict[str, Any]], terms: BurstTerms
) -> list[JsonPatchOp]:
    """Per container: an app container with GPUs goes remote (shrunk, with its own GPU count); init
    containers lose only their GPUs and run here; everything else is untouched. Idempotent: a
    container already rewritten and without GPUs yields no op."""
    ops: list[JsonPatchOp] = []
    used: set[str] = set()
    for list_name, index, container in all_containers(spec):
        gpus = container_gpus(container, policy.gpu_resources)
        if not gpus:
            continue
        base = f"/spec/{list_name}/{index}"
        is_app = list_name == "containers"
        stages = any(name == container.get("name") for name, *_ in terms.staging)
        ops += _resource_ops(base, container, policy, original.setdefault(list_name, {}), shrink=is_app, stages=stages)
        if is_app:
            gateway = bool(policy.gateway_url) and not terms.own_account
            credentials = not gateway and bool(policy.credentials_secret) and not _sets_credentials(container)
            mounts = _mounts(container, credentials=credentials, gateway=gateway)
            ops += _burst_container_ops(
                base,
                container,
                gpus=gpus,
                terms=terms,
                policy=policy,
                credentials=credentials,
                gateway=gateway,
                grace=grace_seconds(spec),
            )
            ops += _append_ops(f"{base}/volumeMounts", container.get("volumeMounts"), mounts)
            used |= {mount["name"] for mount in mounts}
    return ops + _volume_ops(spec, used, policy)  # an unused volume would only confuse


# The runner's credential variables: a container that sets any of them brings its own credentials.
_USERNAME, _APIKEY = "JARVICE_USERNAME", "JARVICE_APIKEY"
_CREDENTIAL_ENV = frozenset({_USERNAME, _APIKEY, contract.ENV_USERNAME_FILE, contract.ENV_APIKEY_FILE})


def _sets_credentials(container: Mapping[str, Any]) -> bool:
    return any(item.get("name") in _CREDENTIAL_ENV for item in container.get("env") or ())


_GRACE = "terminationGracePeriodSeconds"
DEFAULT_GRACE_SECONDS = 30  # what the API server gives a pod that sets none


def grace_seconds(spec: Mapping[str, Any]) -> int:
    """The grace period the pod has once admitted: its own, raised to the minimum (see _grace_ops)."""
    current = spec.get(_GRACE)
    own = current if type(current) is int else DEFAULT_GRACE_SECONDS
    return max(own, contract.MIN_TERMINATION_GRACE_SECONDS)


def _grace_ops(spec: Mapping[str, Any]) -> tuple[list[JsonPatchOp], str]:
    """Raise a grace period too short for the runner to cancel its job before the kubelet's SIGKILL
    (see contract.MIN_TERMINATION_GRACE_SECONDS); the note says from what. Nothing when it is long enough."""
    current = spec.get(_GRACE)
    minimum = contract.MIN_TERMINATION_GRACE_SECONDS
    if type(current) is int and current >= minimum:
        return [], ""
    shown = str(current) if type(current) is int else f"{DEFAULT_GRACE_SECONDS} (the default)"
    op = {"op": "replace" if _GRACE in spec else "add", "path": f"/spec/{_GRACE}", "value": minimum}
    return [op], f"raised from {shown} to {minimum} so the runner can stop its job"


def build_grace_patch(pod: Mapping[str, Any]) -> list[JsonPatchOp]:
    """A burst pod whose grace period a later webhook shortened: raised again, and recorded. Empty
    when it is long enough (reinvocation is idempotent)."""
    ops, note = _grace_ops(pod.get("spec") or {})
    if not ops:
        return []
    return ops + _annotation_ops(pod.get("metadata") or {}, {contract.ANNOTATION_GRACE: note})


def _audit_json(audit: Mapping[str, Any]) -> str:
    """Compact, keys sorted. orjson takes a tenth of the stdlib's time (10 us of a remote review, issue
    15); the stdlib writes what orjson refuses (an integer past 64 bits from a hostile pod). The JSON is
    the same value either way; orjson leaves non-ASCII characters unescaped."""
    try:
        return orjson.dumps(audit, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(audit, sort_keys=True, separators=(",", ":"))


def build_kept_local_patch(
    pod: Mapping[str, Any], *, reason: str, notes: Mapping[str, str] | None = None, admission: str = ""
) -> list[JsonPatchOp]:
    """A pod that would burst but may not (its namespace's budget, an unknown cluster identity) stays
    as submitted and waits for local GPUs: only annotations (decision local, why, and `notes`). No
    reservation: nothing local was promised, the pod claims GPUs like any pending pod."""
    values = {
        **_token(admission),
        contract.ANNOTATION_DECISION: contract.DECISION_LOCAL,
        contract.ANNOTATION_REASON: reason,
        **(notes or {}),
    }
    meta = pod.get("metadata") or {}
    return _annotation_ops(meta, values) + _decision_label_ops(meta, contract.DECISION_LOCAL)


def build_remote_patch(
    pod: Mapping[str, Any],
    *,
    gpus: GpuCounts,
    decision: Decision,
    policy: RewritePolicy,
    terms: BurstTerms,
    remote_gpus: int | None = None,
    reservation_id: str = "",
    admission: str = "",
    notes: Mapping[str, str] | None = None,
) -> list[JsonPatchOp]:
    """Burst each app container that asked for GPUs, strip GPUs everywhere, and record what changed
    (and `notes`: annotations beside the decision, such as why it did not wait first)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    original_resources: dict[str, dict[str, Any]] = {}
    ops = _container_ops(spec, policy, original_resources, terms)
    audit: dict[str, Any] = {k: v for k, v in original_resources.items() if v}
    audit["gpus"] = dict(gpus)
    if "resources" in spec:
        # Pod-level resources size the whole pod for the GPU work that now runs remotely: they would
        # strand it on a big node (the scheduler uses them instead of the container sum). Removed, the
        # pod is sized by its containers' own requests again.
        ops.append({"op": "remove", "path": "/spec/resources"})
        audit["resources"] = spec["resources"]
    node_selector = spec.get("nodeSelector") or {}
    strip_keys = policy.strip_node_selector_keys | ({policy.gpu_model_label} if terms.gpu_model else set())
    stripped_selector = {k: v for k, v in node_selector.items() if k in strip_keys}
    if stripped_selector and len(stripped_selector) == len(node_selector):
        ops.append({"op": "remove", "path": "/spec/nodeSelector"})
    else:
        ops += [{"op": "remove", "path": f"/spec/nodeSelector/{escape(k)}"} for k in stripped_selector]
    if stripped_selector:
        audit["nodeSelector"] = stripped_selector
    if terms.gpu_model:
        affinity_ops, required = gpu_model_patch.build_affinity_ops(spec, label=policy.gpu_model_label)
        ops += affinity_ops
        if required is not None:
            audit["nodeAffinityRequired"] = required
    tolerations = spec.get("tolerations") or []
    stripped = [i for i, t in enumerate(tolerations) if t.get("key") in policy.strip_toleration_keys]
    # Highest index first so earlier removals do not shift later paths.
    ops += [{"op": "remove", "path": f"/spec/tolerations/{i}"} for i in reversed(stripped)]
    if stripped:
        audit["tolerations"] = [tolerations[i] for i in stripped]
    runtime_class = spec.get("runtimeClassName")
    if runtime_class and runtime_class in policy.strip_runtime_classes:
        ops.append({"op": "remove", "path": "/spec/runtimeClassName"})
        audit["runtimeClassName"] = runtime_class
        if "overhead" in spec:
            # The RuntimeClass admission plugin rejects an overhead without its RuntimeClass.
            ops.append({"op": "remove", "path": "/spec/overhead"})
            audit["overhead"] = spec["overhead"]

    grace_ops, grace_note = _grace_ops(spec)
    ops += grace_ops
    ops += _annotation_ops(
        pod.get("metadata") or {},
        {
            **_token(admission),
            contract.ANNOTATION_DECISION: contract.DECISION_REMOTE,
            contract.ANNOTATION_REASON: decision.reason,
            contract.ANNOTATION_ORIGINAL_RESOURCES: _audit_json(audit),
            contract.ANNOTATION_WALLTIME: _walltime_note(spec, policy, terms.limit),
            # What the namespace's burst budget counts while the pod runs (see webhook.budget).
            gpubudget.ANNOTATION_REMOTE_GPUS: str(sum(gpus.values()) if remote_gpus is None else remote_gpus),
            # Set when the GPUs are reserved against a budget: the pod's appearance releases them.
            **({contract.ANNOTATION_RESERVATION: reservation_id} if reservation_id else {}),
            **({contract.ANNOTATION_GRACE: grace_note} if grace_note else {}),
            **(terms.gang.annotations() if terms.gang is not None else {}),
            **_model_annotations(terms),
            **_cost_annotations(terms),
            **(notes or {}),
        },
    )
    ops += _decision_label_ops(pod.get("metadata") or {}, contract.DECISION_REMOTE)
    return ops


def _cost_annotations(terms: BurstTerms) -> dict[str, str]:
    if not terms.max_price:
        return {}
    # A gang's job is counted on the rank that submits it (its GPUs too: webhook.verdict); the others 0.
    carried = terms.gang is None or terms.gang.rank == contract.GANG_SUBMITTING_RANK
    return {
        spending.ANNOTATION_COST_PER_HOUR: _price_text(terms.cost_per_hour if carried else 0.0),
        spending.ANNOTATION_WORST_CASE: _price_text(terms.worst_case if carried else 0.0),
    }


def _model_annotations(terms: BurstTerms) -> dict[str, str]:
    if not terms.gpu_model:
        return {}
    return {
        contract.ANNOTATION_GPU_MODEL: terms.gpu_model,
        contract.ANNOTATION_ALLOWED_MACHINES: contract.format_machine_list(terms.allowed_machines),
    }


# Audit key for what reinvocations stripped, beside (never over) what the first rewrite recorded.
_AUDIT_REINVOKED = "reinvoked"


def build_reinvocation_patch(pod: Mapping[str, Any], *, policy: RewritePolicy, terms: BurstTerms) -> list[JsonPatchOp]:
    """A pod already decided remote, changed by a later webhook: strip the GPUs it carries again,
    the same way as the first rewrite. Empty when there is nothing new (reinvocation is idempotent)."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    stripped: dict[str, dict[str, Any]] = {}
    # Built, not dataclasses.replace(): the module is compiled with mypyc.
    reinvoked_terms = BurstTerms(
        cluster=terms.cluster, limit=terms.limit, reinvoked=True, gang=terms.gang, own_account=terms.own_account
    )
    ops = _container_ops(spec, policy, stripped, reinvoked_terms)
    if not ops:
        return []
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    try:
        audit = json.loads((meta.get("annotations") or {}).get(contract.ANNOTATION_ORIGINAL_RESOURCES, "{}"))
    except ValueError:
        audit = {}
    if not isinstance(audit, dict):
        audit = {}  # not ours to trust: start a fresh record rather than fail the rewrite
    reinvoked = audit.get(_AUDIT_REINVOKED)
    reinvoked = audit[_AUDIT_REINVOKED] = reinvoked if isinstance(reinvoked, dict) else {}
    for list_name, containers in stripped.items():
        if containers:
            recorded = reinvoked.get(list_name)
            reinvoked[list_name] = {**(recorded if isinstance(recorded, dict) else {}), **containers}
    return ops + _annotation_ops(meta, {contract.ANNOTATION_ORIGINAL_RESOURCES: _audit_json(audit)})
