"""What the product decided for a burst pod, read from the pod as the API server holds it (pure).

A pod's spec cannot change after creation, and the webhook wrote these values when it decided the
pod remote, replacing whatever the pod said (docs/decision.md): the GPUs it counted, the machines
the pod's GPU model allows, the price its namespace's caps counted, the walltime, the gang. Only a
pod that carries the `task-type: Nimbix` label and the webhook's `remote` decision has such terms:
a copy made without the label never passed the webhook, and is refused here whatever its env says
(the marks policy refuses adding the label or the decision to an existing pod). Values the webhook
lets a container narrow (a shorter walltime, its own machine order) are read as the container has
them: they can only ask for less.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.identity import Caller
from jarvice import contract
from jarvice.labels import parse_job_label


class NotDecided(Exception):
    """The pod has no terms the gateway may submit for; the message says why."""


@dataclass(frozen=True, slots=True)
class GangTerms:
    uid: str
    size: int
    rank: int


@dataclass(frozen=True, slots=True)
class ContainerTerms:
    namespace: str
    pod_name: str
    pod_uid: str
    container: str
    cluster: str
    gpus_per_node: int  # NUM_GPUS: what the container asked for, per node
    counted_gpus: int | None  # NIMBIX_BURST_COUNTED_GPUS: the whole job's GPUs the budget counted
    allowed_machines: tuple[str, ...]  # (): any machine
    max_price: float | None  # per node-hour; None: the namespace has no cost cap
    walltime_seconds: int
    app: str
    gang: GangTerms | None

    @property
    def nodes(self) -> int:
        return self.gang.size if self.gang is not None else 1

    @property
    def job_uid(self) -> str:
        """The UID the pod's job labels carry: the gang's for a gang's pod."""
        return self.gang.uid if self.gang is not None else self.pod_uid

    def owns_label(self, label: str) -> bool:
        """Whether a job with this label is the pod's (or its gang's), made in this cluster."""
        parsed = parse_job_label(label)
        return (
            parsed is not None
            and parsed.cluster == self.cluster
            and parsed.pod_uid in {self.pod_uid, self.job_uid}
            and (self.gang is not None or parsed.names_container(self.container))
        )


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's literal env values; the last of duplicates is the one in effect."""
    env: dict[str, str] = {}
    for item in container.get("env") or ():
        if isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("value"), str):
            env[item["name"]] = item["value"]
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
            env.pop(item["name"], None)
    return env


def _whole(env: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    text = env.get(name)
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < minimum:
        raise NotDecided(f"{name}={text!r} on the pod is not what the webhook writes")
    return int(text)


def _price(env: Mapping[str, str]) -> float | None:
    text = env.get(contract.ENV_MAX_PRICE)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise NotDecided(f"{contract.ENV_MAX_PRICE}={text!r} on the pod is not a price") from None
    if not value >= 0:
        raise NotDecided(f"{contract.ENV_MAX_PRICE}={text!r} on the pod is not a price")
    return value


def _gang(env: Mapping[str, str]) -> GangTerms | None:
    uid = env.get(contract.ENV_GANG_UID)
    if uid is None:
        return None
    size = _whole(env, contract.ENV_GANG_SIZE, minimum=1)
    rank = _whole(env, contract.ENV_GANG_RANK, minimum=0)
    if not contract.is_uid(uid) or size is None or rank is None or rank >= size:
        raise NotDecided("the pod's gang variables are not what the webhook writes")
    return GangTerms(uid=uid, size=size, rank=rank)


def _find_container(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for container in (pod.get("spec") or {}).get("containers") or ():
        if isinstance(container, Mapping) and container.get("name") == name:
            return container
    raise NotDecided(f"the pod has no container {name!r}")


def check_pod(pod: Mapping[str, Any], caller: Caller) -> None:
    """The pod is the token's, labelled, and decided remote by the webhook; else NotDecided."""
    meta = pod.get("metadata") or {}
    if (meta.get("uid"), meta.get("namespace"), meta.get("name")) != (
        caller.pod_uid,
        caller.namespace,
        caller.pod_name,
    ):
        raise NotDecided("the token's pod is gone (a pod of that name is another pod now)")
    labels = meta.get("labels") or {}
    if labels.get(contract.LABEL_TASK_TYPE) != contract.LABEL_TASK_TYPE_VALUE:
        raise NotDecided(
            f"the pod has no {contract.LABEL_TASK_TYPE}: {contract.LABEL_TASK_TYPE_VALUE} label, so the webhook "
            "never decided it: only pods created with the label may burst"
        )
    if (meta.get("annotations") or {}).get(contract.ANNOTATION_DECISION) != contract.DECISION_REMOTE:
        raise NotDecided("the webhook did not decide this pod remote: it runs on local GPUs")


def decided_terms(pod: Mapping[str, Any], caller: Caller, container: str) -> ContainerTerms:
    """The terms of one burst container of the caller's pod; NotDecided says why there are none."""
    check_pod(pod, caller)
    env = container_env(_find_container(pod, container))
    if env.get(contract.ENV_REMOTE) != "1":
        raise NotDecided(f"container {container!r} is not a burst container of the pod")
    cluster = env.get(contract.ENV_CLUSTER, "")
    if not contract.is_cluster_identity(cluster):
        raise NotDecided("the pod carries no cluster identity from the webhook")
    walltime = contract.parse_walltime_seconds(env.get(contract.ENV_WALLTIME, contract.DEFAULT_WALLTIME))
    if walltime is None:
        raise NotDecided(f"{contract.ENV_WALLTIME} on the pod is not HH:MM:SS")
    allowed = env.get(contract.ENV_ALLOWED_MACHINES)
    try:
        machines = contract.parse_machine_list(allowed) if allowed else ()
    except ValueError as exc:
        raise NotDecided(str(exc)) from None
    return ContainerTerms(
        namespace=caller.namespace,
        pod_name=caller.pod_name,
        pod_uid=caller.pod_uid,
        container=container,
        cluster=cluster,
        gpus_per_node=_whole(env, contract.ENV_NUM_GPUS, minimum=0) or 0,
        counted_gpus=_whole(env, contract.ENV_COUNTED_GPUS, minimum=0),
        allowed_machines=machines,
        max_price=_price(env),
        walltime_seconds=walltime,
        app=env.get(contract.ENV_APP_NAME, ""),
        gang=_gang(env),
    )
