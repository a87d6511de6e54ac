"""The Event of a finished burst pod whose outputs stayed in the JARVICE vault (pure).

When the copy-back cannot put outputs in place, the runner keeps them in the vault and says so in its
termination message (`{"nimbix_burst": {..., "kept_in_vault": {"vault_dir", "refused", "first"}}}`).
`kubectl nimbix` reads it from the pod; this module turns it into one Warning Event for `kubectl
describe` and `kubectl get events`, on the pod and on its Job.

A termination message is any container's to write, so it is read as untrusted text: anything but the
runner's shape is no Event, a vault directory must be one the runner makes (`nimbix-burst/<name>`, a
name of the characters it uses), and the paths quoted are cut short. Once reported, the pod carries
`ANNOTATION_REPORTED`, written by a JSON patch that tests the pod's UID and resourceVersion as read:
a controller whose view lags (a new leader's, say) is refused rather than reporting twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from controller.model import TERMINAL_PHASES, Owner, owner_of
from jarvice import contract

REASON: Final = "NimbixOutputsKeptInVault"
EVENT_TYPE: Final = "Warning"
# Set on the pod once its Event is recorded: the next rounds, and the next leader, leave it alone.
ANNOTATION_REPORTED: Final = contract.ANNOTATION_PREFIX + "kept-in-vault-reported"

# Kubernetes keeps at most 4096 bytes of a container's message; anything longer is not the kubelet's.
MAX_MESSAGE_CHARS: Final = 4096
# The runner's work directories: `nimbix-burst/` and one name of the characters it writes, never
# starting with a dot (entrypoint.staging); the longest it makes is 127 characters.
VAULT_DIR_RE: Final = re.compile(r"nimbix-burst/[A-Za-z0-9][A-Za-z0-9._~-]{0,159}")
MAX_COUNT: Final = 10**12  # outputs refused: a count beyond any volume's is not the runner's
SHOWN_PATHS: Final = 2  # of the first outputs the message names (the runner names up to four)
PATH_CHARS: Final = 100  # each, at most, before it is cut short
# Kubernetes keeps 1024 characters of an Event's message (the Kube adapter cuts there): the pod's
# message leaves room for the Job's copy to name the pod (`pod <name>: `, a name of 253 at most).
MAX_EVENT_CHARS: Final = 1024 - len("pod : ") - 253
COPY_COMMAND: Final = "lftp -u \"$USER\" -e 'mirror {dir}; bye' sftp://<vault host>"


@dataclass(frozen=True, slots=True)
class Kept:
    """One container's outputs left in the vault, as its runner's termination message says."""

    container: str
    vault_dir: str
    refused: int  # outputs the pod's volume refused; 0: the copy-back stopped or failed first
    first: tuple[str, ...]  # the first of them, as the pod's paths (already cut short)


@dataclass(frozen=True, slots=True)
class KeptPod:
    """A finished burst pod with outputs in the vault and no Event for them yet."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    owner: Owner | None  # its Job (batch/v1), which gets the Event too; None for anything else
    message: str  # the Event's


def _printable(text: str, limit: int) -> str:
    """`text` with control characters replaced, cut to `limit` characters (an ellipsis says so)."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text[: limit + 1])
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def parse_kept(container: str, message: object) -> Kept | None:
    """What one container's termination message says it left in the vault; None for anything that is
    not the runner's message naming kept outputs (not JSON, another shape, wrong types, a directory the
    runner would not make)."""
    if not isinstance(message, str) or not message or len(message) > MAX_MESSAGE_CHARS:
        return None
    try:
        decoded = json.loads(message)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return None
    payload = decoded.get(contract.TERMINATION_KEY) if isinstance(decoded, dict) else None
    kept = payload.get("kept_in_vault") if isinstance(payload, dict) else None
    if not isinstance(kept, dict):
        return None
    vault_dir, refused, first = kept.get("vault_dir"), kept.get("refused"), kept.get("first")
    if not isinstance(vault_dir, str) or not VAULT_DIR_RE.fullmatch(vault_dir):
        return None
    if type(refused) is not int or not 0 <= refused <= MAX_COUNT or not isinstance(first, list):
        return None
    if not all(isinstance(path, str) for path in first):
        return None
    shown = []
    for path in first[:SHOWN_PATHS]:
        # A refused output is named by its vault path, the directory then the pod's path: the pod's path says it.
        inside = path[len(vault_dir) :] if path.startswith(vault_dir + "/") else path
        shown.append(_printable(inside, PATH_CHARS))
    return Kept(container=_printable(container, 63), vault_dir=vault_dir, refused=refused, first=tuple(shown))


def kept_of(statuses: object) -> list[Kept]:
    """Every container's kept outputs, from `status.containerStatuses` (each one's `state.terminated`)."""
    found = []
    for status in statuses if isinstance(statuses, list) else ():
        if not isinstance(status, dict):
            continue
        state = status.get("state")
        terminated = state.get("terminated") if isinstance(state, dict) else None
        if isinstance(terminated, dict) and (
            kept := parse_kept(str(status.get("name") or ""), terminated.get("message"))
        ):
            found.append(kept)
    return sorted(found, key=lambda kept: kept.container)


def _part(kept: Kept, *, named: bool) -> str:
    who = f"container {kept.container}: " if named else ""
    first = f" (first: {', '.join(kept.first)})" if kept.first else ""
    if kept.refused:
        what = f"{kept.refused} output{'s' if kept.refused != 1 else ''} the job wrote could not be put in place"
        return f"{who}{what} and {'are' if kept.refused != 1 else 'is'} kept in the vault at {kept.vault_dir}{first}"
    return f"{who}the copy-back did not finish: what it did not copy is kept in the vault at {kept.vault_dir}{first}"


def _more(rest: int) -> str:
    return f"; and {rest} more container{'s' if rest != 1 else ''} (kubectl nimbix explain names them)" if rest else ""


def event_message(kept: Sequence[Kept]) -> str | None:
    """The Event's message for a pod's kept outputs (None: nothing kept), fitted under MAX_EVENT_CHARS:
    the containers that do not fit are counted, not named."""
    if not kept:
        return None
    if len(kept) == 1:
        return f"{_part(kept[0], named=False)}; copy them with {COPY_COMMAND.format(dir=kept[0].vault_dir)}"
    hint = f"; copy each directory with {COPY_COMMAND.format(dir='<dir>')}"
    parts = [_part(item, named=True) for item in kept]
    for shown in range(len(parts), 1, -1):
        text = "; ".join(parts[:shown]) + _more(len(parts) - shown) + hint
        if len(text) <= MAX_EVENT_CHARS:
            return text
    return parts[0] + _more(len(parts) - 1) + hint


def parse_kept_pod(obj: Mapping[str, Any]) -> KeptPod | None:
    """A burst pod that finished (Succeeded or Failed) with outputs in the vault and no report yet."""
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    status = obj.get("status") or {}
    if annotations.get(contract.ANNOTATION_DECISION) != contract.DECISION_REMOTE or ANNOTATION_REPORTED in annotations:
        return None
    if status.get("phase") not in TERMINAL_PHASES or not metadata.get("uid"):
        return None
    message = event_message(kept_of(status.get("containerStatuses")))
    if message is None:
        return None
    owner = owner_of(metadata)
    return KeptPod(
        uid=str(metadata["uid"]),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        owner=owner if owner is not None and owner.kind == "Job" and owner.api_version == "batch/v1" else None,
        message=message,
    )


def mark_patch(pod: KeptPod) -> list[dict[str, Any]]:
    """The JSON patch that marks the pod reported: it applies only to the pod as read (its UID and
    resourceVersion), so a view that lags behind an earlier report is refused."""
    return [
        {"op": "test", "path": "/metadata/uid", "value": pod.uid},
        {"op": "test", "path": "/metadata/resourceVersion", "value": pod.resource_version},
        {"op": "add", "path": "/metadata/annotations/" + ANNOTATION_REPORTED.replace("/", "~1"), "value": "true"},
    ]


def event_targets(pod: KeptPod) -> list[tuple[dict[str, str], str]]:
    """Where the Event goes (involvedObject, message): the pod, and its Job naming the pod."""
    targets = [({"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}, pod.message)]
    if pod.owner is not None:
        targets.append((pod.owner.reference(), f"pod {pod.name}: {pod.message}"))
    return targets
