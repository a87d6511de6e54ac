"""Which of a pod's burst marks the product wrote, and a pod cleared of the ones it did not (pure).

What a namespace spends is counted from what the product itself decided, never from what a pod
says. A pod can arrive carrying the product's marks: a `nimbix-burst.io/decision`, a counted GPU
figure, `REMOTE=1` and the runner's environment the webhook writes (`_PRODUCT_ENV`). Two very different pods do:

- the product's own reinvocation: the webhook rewrote this very pod moments ago and a later webhook
  changed it. The proof is the product's record, not the pod: the admission's token (the pod's
  `nimbix-burst.io/admission` annotation) is one the webhook issued and no pod has taken yet
  (webhook.cache.ClusterCache.issued);
- anything else: a copy of a burst pod (`kubectl get pod -o yaml | kubectl create -f -`), or a pod
  written with a decision of its own. Its marks are cleared and it is decided afresh, like any pod.

What a user may set on a pod (`USER_ANNOTATIONS`: the data to stage, and the like) is kept; every
other `nimbix-burst.io/` annotation, the decision label, and the variables the webhook writes on a burst
(`REMOTE`, the counted GPUs, the price ceiling, the cluster, the gang, the staged paths and whose
data they are) are the product's to write. `POD_UID`, `POD_NAMESPACE` and `POD_NAME` are rewritten from the API
server's own fields on every burst container (webhook.mutation), whatever the pod says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jarvice import checkpoint, contract

# What a user writes on a pod for the product to read. Every other annotation under the prefix is
# the product's own record of what it decided.
USER_ANNOTATIONS: Final = frozenset(
    {
        contract.ANNOTATION_STAGE_IN,
        contract.ANNOTATION_STAGE_OUT,
        contract.ANNOTATION_REMOTE_DATA,
        contract.ANNOTATION_BURST_AFTER,
        contract.ANNOTATION_MACHINES,
        contract.ANNOTATION_MAX_REMOTE_QUEUE,
        # The checkpoint contract (docs/checkpoints.md): where the program keeps its checkpoints, how
        # often, and whether (and for how much) its running job may move home.
        checkpoint.ANNOTATION_CHECKPOINT_DIR,
        checkpoint.ANNOTATION_CHECKPOINT_INTERVAL,
        checkpoint.ANNOTATION_COME_HOME,
        checkpoint.ANNOTATION_COME_HOME_MIN_SAVING,
    }
)
# The environment the webhook writes on a burst container: what makes the runner submit (REMOTE), what
# it was counted for and may pay, and who it is. Other NIMBIX_BURST_* variables are the container's own
# settings (the vault's address, machine preferences, ...), which it may set itself.
_PRODUCT_ENV: Final = frozenset(
    {
        contract.ENV_REMOTE,
        contract.ENV_CONTAINER_NAME,
        contract.ENV_STATE_DIR,
        contract.ENV_CLUSTER,
        contract.ENV_COUNTED_GPUS,
        contract.ENV_MAX_PRICE,
        contract.ENV_ALLOWED_MACHINES,
        contract.ENV_STAGE_IN,
        contract.ENV_STAGE_OUT,
        contract.ENV_DATA_KEY,
        contract.ENV_GRACE_SECONDS,
        contract.ENV_GANG_UID,
        contract.ENV_GANG_SIZE,
        contract.ENV_GANG_RANK,
        contract.ENV_GANG_SINCE,
    }
)
_CONTAINER_LISTS: Final = ("initContainers", "containers")
# How many marks a warning names before it says "and N more".
_SHOWN: Final = 4

JsonPatchOp = dict[str, Any]


def is_product_annotation(key: str) -> bool:
    return key.startswith(contract.ANNOTATION_PREFIX) and key not in USER_ANNOTATIONS


def is_product_env(name: object) -> bool:
    return isinstance(name, str) and name in _PRODUCT_ENV


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else ()


def carried_marks(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The product's marks the pod carries, as `annotation <key>`, `label <key>`, `env <container>/<name>`
    (empty for a pod as users write it: the common case costs three lookups per container)."""
    meta = _dict(pod.get("metadata"))
    marks = [f"annotation {key}" for key in _dict(meta.get("annotations")) if is_product_annotation(key)]
    if contract.LABEL_DECISION in _dict(meta.get("labels")):
        marks.append(f"label {contract.LABEL_DECISION}")
    spec = _dict(pod.get("spec"))
    for list_name in _CONTAINER_LISTS:
        for raw in _list(spec.get(list_name)):
            container = _dict(raw)
            for item in _list(container.get("env")):
                name = _dict(item).get("name")
                if is_product_env(name):
                    marks.append(f"env {container.get('name', '?')}/{name}")
    return tuple(marks)


@dataclass(frozen=True, slots=True)
class Cleared:
    """A pod with the product's marks removed, and the ops that turn the pod as received into it
    (applied first: every later op of the response addresses the cleared pod)."""

    pod: dict[str, Any]
    ops: tuple[JsonPatchOp, ...]
    warning: str


def clear(pod: Mapping[str, Any], marks: Sequence[str]) -> Cleared:
    """The pod without the product's marks (annotations, decision label, environment). Whole maps and
    lists are replaced, so the ops stay valid whatever order the pod's entries are in."""
    meta = dict(_dict(pod.get("metadata")))
    spec = dict(_dict(pod.get("spec")))
    ops: list[JsonPatchOp] = []
    annotations = _dict(meta.get("annotations"))
    kept = {k: v for k, v in annotations.items() if not is_product_annotation(k)}
    if len(kept) != len(annotations):
        meta["annotations"] = kept
        ops.append({"op": "replace", "path": "/metadata/annotations", "value": kept})
    labels = _dict(meta.get("labels"))
    if contract.LABEL_DECISION in labels:
        kept_labels = {k: v for k, v in labels.items() if k != contract.LABEL_DECISION}
        meta["labels"] = kept_labels
        ops.append({"op": "replace", "path": "/metadata/labels", "value": kept_labels})
    for list_name in _CONTAINER_LISTS:
        containers = _list(spec.get(list_name))
        cleared_list: list[Any] = []
        for index, raw in enumerate(containers):
            container = _dict(raw)
            env = _list(container.get("env"))
            kept_env = [item for item in env if not is_product_env(_dict(item).get("name"))]
            if len(kept_env) != len(env):
                ops.append({"op": "replace", "path": f"/spec/{list_name}/{index}/env", "value": kept_env})
                cleared_list.append({**container, "env": kept_env})
            else:
                cleared_list.append(container)
        if list_name in spec:
            spec[list_name] = cleared_list
    shown = ", ".join(marks[:_SHOWN]) + (f" and {len(marks) - _SHOWN} more" if len(marks) > _SHOWN else "")
    warning = (
        f"nimbix-burst: this pod carried marks only nimbix-burst writes ({shown}), but no decision of its"
        " own: they were removed and the pod decided afresh (a copy of a burst pod is a new pod)"
    )
    return Cleared(pod={**pod, "metadata": meta, "spec": spec}, ops=tuple(ops), warning=warning)


# How long an issued token proves a reinvocation. The API server calls a reinvoked webhook within
# the same request (milliseconds, bounded by its timeouts); the watch shows the created pod soon
# after, and that takes the token at once. A minute is far past both.
TOKEN_TTL_SECONDS: Final = 60.0


class IssuedTokens:
    """The product's record of the admissions it decided whose pod the watch has not shown yet
    (state, no I/O; the cache owns one). A token is taken by the first pod that shows it, and
    expires after `ttl`: a copy of that pod, made later, proves nothing."""

    def __init__(self, *, clock: Callable[[], float], ttl: float = TOKEN_TTL_SECONDS) -> None:
        self._clock = clock
        self._ttl = ttl
        self._expires: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._expires)

    def issue(self, token: str) -> None:
        if token:
            self._expires[token] = self._clock() + self._ttl
            if len(self._expires) % 1024 == 0:  # bounded without a timer: drop the expired now and then
                self.expire()

    def holds(self, token: str) -> bool:
        expires = self._expires.get(token) if token else None
        return expires is not None and expires > self._clock()

    def take(self, token: str) -> None:
        if token:
            self._expires.pop(token, None)

    def expire(self) -> None:
        now = self._clock()
        for token in [t for t, expires in self._expires.items() if expires <= now]:
            del self._expires[token]
