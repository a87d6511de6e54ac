"""The checkpoint contract (pure): what a pod says about its checkpoints, read from its annotations.

A training program that keeps the contract can move between the cluster and JARVICE with its work:
it is asked for a checkpoint by SIGUSR1, writes it into its checkpoint directory (write, then rename,
so a half-written checkpoint is never taken for one) and exits 0; on start it resumes from the newest
complete checkpoint there. The pod says so with annotations (docs/checkpoints.md):

- `nimbix-burst.io/checkpoint-dir`: where the program writes its checkpoints, an absolute path inside
  its container under a path staged both ways (in `stage-in`, so a remote run resumes from it, and in
  `stage-out`, so it comes back).
- `nimbix-burst.io/checkpoint-interval`: how often the program checkpoints by itself (`10s`, `15m`,
  `1h30m`): the most work a move that fails half-way, or a killed run, may cost (a move asks for a
  fresh checkpoint).
- `nimbix-burst.io/come-home: running` (on the pod, or its namespace as the default; the pod's wins):
  a running burst job may move back to free local GPUs. `queued` (the default) moves it only while
  JARVICE still queues it.
- `nimbix-burst.io/come-home-min-saving` (on the pod, or its namespace as the default): money in the
  account's currency; a running job moves home only if its remaining walltime at its machine's price is
  above it. Default 0: any saving.

The webhook, the controller and the runner all read a pod through `parse_checkpoint_contract`, so a pod
means the same to each of them.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from jarvice import contract

ANNOTATION_CHECKPOINT_DIR: Final = contract.ANNOTATION_PREFIX + "checkpoint-dir"
ANNOTATION_CHECKPOINT_INTERVAL: Final = contract.ANNOTATION_PREFIX + "checkpoint-interval"
ANNOTATION_COME_HOME: Final = contract.ANNOTATION_PREFIX + "come-home"
ANNOTATION_COME_HOME_MIN_SAVING: Final = contract.ANNOTATION_PREFIX + "come-home-min-saving"

COME_HOME_RUNNING: Final = "running"  # a running job may move home with its checkpoint
COME_HOME_QUEUED: Final = "queued"  # only a job JARVICE still queues comes home (the default)
COME_HOME_VALUES: Final = (COME_HOME_RUNNING, COME_HOME_QUEUED)

# The shortest interval: a program cannot checkpoint more often than each second and still train.
MIN_INTERVAL_SECONDS: Final = 1
# A week: a longer interval is a typo (and a move would wait for a checkpoint that old).
MAX_INTERVAL_SECONDS: Final = 7 * 24 * 3600
MAX_PATH_CHARS: Final = 1024
# How much older than its interval the work since the last checkpoint may be before a move is refused
# (controller.moving), and how far past the gateway's clock a checkpoint may be dated and still count as
# written then (gateway.checkpoints): a homecoming round late (10 s apart), the listing through the
# gateway, a write that ended just before its rename, and the vault's clock a few seconds off the
# cluster's. Never a move refused for a checkpoint that came on time.
FRESHNESS_SLACK_SECONDS: Final = 30

SOURCE_POD: Final = "pod"
SOURCE_NAMESPACE: Final = "namespace"
SOURCE_DEFAULT: Final = "default"

# ASCII digits, at most 9 a part: \d takes any script's digits, and int() refuses more than 4300.
_INTERVAL_PART: Final = re.compile(r"([0-9]{1,9})([smh])")
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600}
_MONEY: Final = re.compile(r"\d+(\.\d+)?")


class CheckpointContractError(ValueError):
    """A checkpoint annotation that cannot be used; the message names it and says what to write."""


@dataclass(frozen=True, slots=True)
class CheckpointContract:
    """What a pod's annotations say about its checkpoints (see the module docstring)."""

    directory: str  # normalised absolute path inside the container
    interval_seconds: int  # how often the program checkpoints by itself
    come_home_running: bool  # a running burst job may move home
    come_home_source: str  # where come-home came from: "pod", "namespace" or "default"
    min_saving: float  # a move must save more than this (account currency); 0: any saving


def parse_checkpoint_contract(
    pod_annotations: Mapping[str, str] | None, namespace_annotations: Mapping[str, str] | None
) -> CheckpointContract | None:
    """The pod's checkpoint contract; None when the pod names no checkpoint directory (a namespace's
    `come-home: running` then does not apply to it: it has nothing to move home with).

    Raises CheckpointContractError naming the annotation to fix: a pod annotation of the contract without
    `checkpoint-dir`, a directory that is not absolute or not staged both ways, a missing or malformed
    interval, an unknown come-home value, a min-saving that is no amount.
    """
    pod = pod_annotations or {}
    namespace = namespace_annotations or {}
    directory_text = pod.get(ANNOTATION_CHECKPOINT_DIR)
    if directory_text is None:
        _refuse_without_directory(pod)
        return None
    directory = _parse_directory(directory_text)
    _check_staged(directory, pod)
    interval_text = pod.get(ANNOTATION_CHECKPOINT_INTERVAL)
    if interval_text is None:
        raise CheckpointContractError(
            f"{ANNOTATION_CHECKPOINT_DIR} is set but {ANNOTATION_CHECKPOINT_INTERVAL} is not: add how often"
            " the program writes a checkpoint by itself, e.g. 15m"
        )
    come_home, source = _come_home(pod, namespace)
    return CheckpointContract(
        directory=directory,
        interval_seconds=parse_interval(interval_text),
        come_home_running=come_home == COME_HOME_RUNNING,
        come_home_source=source,
        min_saving=_min_saving(pod, namespace),
    )


def parse_interval(text: str) -> int:
    """`10s`, `15m`, `1h30m` -> whole seconds (1 s to a week). Raises CheckpointContractError."""
    value = text.strip().lower()
    if not value or _INTERVAL_PART.sub("", value):
        raise CheckpointContractError(
            f"{ANNOTATION_CHECKPOINT_INTERVAL}: {text!r} is not a duration; write whole numbers with s, m or h,"
            " such as 30s, 15m or 1h30m"
        )
    seconds = sum(int(number) * _UNIT_SECONDS[unit] for number, unit in _INTERVAL_PART.findall(value))
    if seconds < MIN_INTERVAL_SECONDS:
        raise CheckpointContractError(
            f"{ANNOTATION_CHECKPOINT_INTERVAL}: {text!r} is zero; write how often the program checkpoints, at least 1s"
        )
    if seconds > MAX_INTERVAL_SECONDS:
        raise CheckpointContractError(
            f"{ANNOTATION_CHECKPOINT_INTERVAL}: {text!r} is longer than a week (168h); checkpoint more often"
        )
    return seconds


def parse_min_saving(text: str, *, source: str = SOURCE_POD) -> float:
    """`5`, `12.50` -> an amount in the account's currency. Raises CheckpointContractError."""
    value = text.strip()
    if _MONEY.fullmatch(value) is None or not math.isfinite(float(value)):
        raise CheckpointContractError(
            f"{ANNOTATION_COME_HOME_MIN_SAVING} on the {source}: {text!r} is not an amount; write a plain number"
            " in the account's currency without a symbol, such as 5 or 12.50 (0: any saving)"
        )
    return float(value)


def _refuse_without_directory(pod: Mapping[str, str]) -> None:
    """A pod that asks for part of the contract without naming where its checkpoints are."""
    named = [
        name for name in (ANNOTATION_CHECKPOINT_INTERVAL, ANNOTATION_COME_HOME_MIN_SAVING) if pod.get(name) is not None
    ]
    if (pod.get(ANNOTATION_COME_HOME) or "").strip() == COME_HOME_RUNNING:
        named.insert(0, f"{ANNOTATION_COME_HOME}: {COME_HOME_RUNNING}")
    if named:
        raise CheckpointContractError(
            f"the pod sets {', '.join(named)} but not {ANNOTATION_CHECKPOINT_DIR}: add the directory the program"
            " writes its checkpoints to (under a path in both stage-in and stage-out), or remove them"
        )


def _parse_directory(text: str) -> str:
    item = text.strip()
    where = ANNOTATION_CHECKPOINT_DIR
    if not item:
        raise CheckpointContractError(f"{where} is empty; name the directory the program writes its checkpoints to")
    if len(item) > MAX_PATH_CHARS:
        raise CheckpointContractError(f"{where} is {len(item)} characters long; at most {MAX_PATH_CHARS}")
    if any(ord(ch) < 32 or ch == "\x7f" for ch in item) or "," in item:
        raise CheckpointContractError(f"{where}: {item!r} holds a control character or a comma; name one directory")
    if not item.startswith("/"):
        raise CheckpointContractError(f"{where}: {item!r} is not absolute; write it as it is inside the container")
    if ".." in item.split("/"):
        raise CheckpointContractError(f"{where}: {item!r} contains '..'; name the directory itself")
    path = "/" + posixpath.normpath(item).lstrip("/")
    if path == "/":
        raise CheckpointContractError(f"{where}: '/' cannot hold checkpoints; name a directory under a volume mount")
    return path


def _staged_paths(pod: Mapping[str, str], annotation: str) -> tuple[str, ...]:
    """The absolute paths a staging annotation lists (the webhook checks them; others are ignored here)."""
    paths = []
    for raw in (pod.get(annotation) or "").split(contract.STAGE_PATH_SEPARATOR):
        item = raw.strip()
        if item.startswith("/") and ".." not in item.split("/"):
            paths.append("/" + posixpath.normpath(item).lstrip("/"))
    return tuple(paths)


def _is_under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _check_staged(directory: str, pod: Mapping[str, str]) -> None:
    """The checkpoint must travel both ways: up for a remote start, back for a local one."""
    missing = [
        annotation
        for annotation in (contract.ANNOTATION_STAGE_IN, contract.ANNOTATION_STAGE_OUT)
        if not any(_is_under(directory, staged) for staged in _staged_paths(pod, annotation))
    ]
    if missing:
        raise CheckpointContractError(
            f"{ANNOTATION_CHECKPOINT_DIR}: {directory} is under no path of {' or '.join(missing)}; add {directory}"
            f" (or a directory holding it) to {' and '.join(missing)}, so the checkpoint goes up for a remote"
            " start and comes back for a local one"
        )


def _come_home(pod: Mapping[str, str], namespace: Mapping[str, str]) -> tuple[str, str]:
    for written, source in ((pod, SOURCE_POD), (namespace, SOURCE_NAMESPACE)):
        text = written.get(ANNOTATION_COME_HOME)
        if text is None:
            continue
        value = text.strip().lower()
        if value not in COME_HOME_VALUES:
            raise CheckpointContractError(
                f"{ANNOTATION_COME_HOME} on the {source}: {text!r} is not {' or '.join(COME_HOME_VALUES)};"
                f" write {COME_HOME_RUNNING} to move a running job home with its checkpoint"
            )
        return value, source
    return COME_HOME_QUEUED, SOURCE_DEFAULT


def _min_saving(pod: Mapping[str, str], namespace: Mapping[str, str]) -> float:
    for written, source in ((pod, SOURCE_POD), (namespace, SOURCE_NAMESPACE)):
        text = written.get(ANNOTATION_COME_HOME_MIN_SAVING)
        if text is not None:
            return parse_min_saving(text, source=source)
    return 0.0
