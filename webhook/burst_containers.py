"""A burst pod's containers, rewritten (pure): an app container with GPUs becomes the runner of its own
remote job (its resources cut to the runner's footprint, the runner's environment, its mounts and the
pod volumes behind them); an init container loses only its GPUs and runs here. Also the texts the
runner and the pod's annotations share: the walltime note and prices. `webhook.mutation` calls
`container_ops` for the remote and the reinvocation patches.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Final

from jarvice import contract
from webhook import walltime
from webhook.grace_period import grace_seconds, own_grace_seconds
from webhook.json_patch import JsonPatchOp, escape
from webhook.resources import all_containers, container_gpus, container_quantity, format_quantity_cores
from webhook.rewrite_terms import BurstTerms, RewritePolicy

_COMPUTE = ("cpu", "memory")


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


def _mounts_path(container: Mapping[str, Any], wanted: str, name: str) -> bool:
    """Whether something is mounted at `wanted` (normalised); `name`: its last component."""
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
# The paths a burst container is given, joined and split once rather than on every review.
_CREDENTIAL_FILES: Final = tuple(
    (name, posixpath.join(contract.CREDENTIALS_MOUNT_PATH, file))
    for name, file in ((contract.ENV_USERNAME_FILE, "username"), (contract.ENV_APIKEY_FILE, "apikey"))
)
_GATEWAY_TOKEN_PATH: Final = posixpath.join(contract.GATEWAY_TOKEN_MOUNT_PATH, contract.GATEWAY_TOKEN_FILE)
_STATE_NAME: Final = posixpath.basename(contract.STATE_MOUNT_PATH)
_CREDENTIALS_NAME: Final = posixpath.basename(contract.CREDENTIALS_MOUNT_PATH)
_GATEWAY_TOKEN_NAME: Final = posixpath.basename(contract.GATEWAY_TOKEN_MOUNT_PATH)
_POD_INFO_NAME: Final = posixpath.basename(contract.POD_INFO_MOUNT_PATH)


def _mounts(container: Mapping[str, Any], *, credentials: bool, gateway: bool) -> list[dict[str, Any]]:
    """What a burst container mounts: the state volume, and the namespace's JARVICE credentials
    (`credentials`) or the gateway's token (`gateway`), each unless something is already mounted at its
    path: two mounts at one path are invalid, and what is there (a re-created burst pod carries ours)
    is used instead."""
    mounts: list[dict[str, Any]] = []
    if not _mounts_path(container, contract.STATE_MOUNT_PATH, _STATE_NAME):
        mounts.append({"name": contract.STATE_VOLUME_NAME, "mountPath": contract.STATE_MOUNT_PATH})
    if credentials and not _mounts_path(container, contract.CREDENTIALS_MOUNT_PATH, _CREDENTIALS_NAME):
        mount = {"name": contract.CREDENTIALS_VOLUME_NAME, "mountPath": contract.CREDENTIALS_MOUNT_PATH}
        mounts.append({**mount, "readOnly": True})
    if gateway and not _mounts_path(container, contract.GATEWAY_TOKEN_MOUNT_PATH, _GATEWAY_TOKEN_NAME):
        mount = {"name": contract.GATEWAY_TOKEN_VOLUME_NAME, "mountPath": contract.GATEWAY_TOKEN_MOUNT_PATH}
        mounts.append({**mount, "readOnly": True})
    return mounts + _pod_info_mounts(container)


def _pod_info_mounts(container: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod's annotations file mounted in `container`, unless something is mounted at its path."""
    if _mounts_path(container, contract.POD_INFO_MOUNT_PATH, _POD_INFO_NAME):
        return []
    return [{"name": contract.POD_INFO_VOLUME_NAME, "mountPath": contract.POD_INFO_MOUNT_PATH, "readOnly": True}]


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
        wanted.append(_pod_info_volume())
    return _append_ops("/spec/volumes", volumes, wanted)


def _pod_info_volume() -> dict[str, Any]:
    """The pod's annotations, kept current by the kubelet: the runner sees the controller's move-home mark
    there (entrypoint.homeward), however the pod pays, and whether the pod keeps the checkpoint contract
    (entrypoint.leaving). Projected: never staged in on its own."""
    annotations = {"path": contract.POD_ANNOTATIONS_FILE, "fieldRef": {"fieldPath": "metadata.annotations"}}
    projected = {"sources": [{"downwardAPI": {"items": [annotations]}}], "defaultMode": 0o444}
    return {"name": contract.POD_INFO_VOLUME_NAME, "projected": projected}


def leave_ops(spec: Mapping[str, Any], gpu_resources: Sequence[str]) -> list[JsonPatchOp]:
    """A pod decided local that keeps the checkpoint contract: each app container with GPUs gets the pod's
    annotations file and its grace period, so that its runner turns the kubelet's SIGTERM (a preemption, a
    drain, a delete) into the contract's checkpoint request and the pod leaves with its work
    (entrypoint.leaving). Its grace period is the pod's own: nothing here runs remotely."""
    ops: list[JsonPatchOp] = []
    grace = str(own_grace_seconds(spec))
    for index, container in enumerate(spec.get("containers") or ()):
        if not container_gpus(container, gpu_resources):
            continue
        base = f"/spec/containers/{index}"
        wanted: list[_EnvWish] = [
            (contract.ENV_POD_ANNOTATIONS_FILE, _value(contract.ENV_POD_ANNOTATIONS_FILE, _POD_ANNOTATIONS_PATH), True),
            (contract.ENV_GRACE_SECONDS, _value(contract.ENV_GRACE_SECONDS, grace), True),
        ]
        ops += _env_ops(base, container, wanted)
        ops += _append_ops(f"{base}/volumeMounts", container.get("volumeMounts"), _pod_info_mounts(container))
    volumes = spec.get("volumes") or []
    if not ops or any(volume.get("name") == contract.POD_INFO_VOLUME_NAME for volume in volumes):
        return ops
    return ops + _append_ops("/spec/volumes", volumes, [_pod_info_volume()])


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
        if gang.began is not None:
            wanted.append((contract.ENV_GANG_SINCE, _value(contract.ENV_GANG_SINCE, str(gang.began)), True))
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
        wanted.append((contract.ENV_MAX_PRICE, _value(contract.ENV_MAX_PRICE, price_text(terms.max_price)), True))
    if credentials:
        for name, path in _CREDENTIAL_FILES:
            wanted.append((name, _value(name, path), False))
    if terms.app:
        wanted.append((contract.ENV_APP_NAME, _value(contract.ENV_APP_NAME, terms.app), False))
    if gateway:
        # Where and as whom the runner submits is the product's: the gateway, with the pod's own token.
        # A key the container brings (its env, or envFrom a Secret) is blanked, which the runner reads as
        # unset: in a namespace paying through the gateway no job is submitted past it.
        wanted += [
            (contract.ENV_API_URL, _value(contract.ENV_API_URL, policy.gateway_url), True),
            (_USERNAME, _value(_USERNAME, contract.GATEWAY_USERNAME), True),
            (contract.ENV_APIKEY_FILE, _value(contract.ENV_APIKEY_FILE, _GATEWAY_TOKEN_PATH), True),
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


def price_text(value: float) -> str:
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


def walltime_note(spec: Mapping[str, Any], policy: RewritePolicy, limit: walltime.Walltime) -> str:
    """The pod's walltime annotation: the limit, where it came from, and the containers keeping a shorter one."""
    note = f"{limit.text} from {limit.source}"
    for container in spec.get("containers") or ():
        own = _own_walltime(container, limit) if container_gpus(container, policy.gpu_resources) else ""
        if own:
            note += f"; container {container.get('name', '')} keeps its own {own}"
    return note


def container_ops(
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
