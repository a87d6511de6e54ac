"""Waiting before bursting (pure): whether a pod that would burst waits for a local node first, until when.

`nimbix-burst.io/burst-after` (on the pod, or on its namespace as the default; "0", the default,
bursts at once) keeps a pod that would burst local for up to that long: GPUs that free in time run
it here and nothing is submitted. If no node has taken it by its deadline, the controller replaces
it (as its re-burst does) and the replacement bursts at once.

Only a pod something recreates, at no cost, can wait: one a Job controls (the Job recreates the pod
the controller evicts), with restartPolicy Never (the webhook gives such a Job, at its creation, a
podFailurePolicy rule ignoring the eviction: webhook.job_policy; a Job with OnFailure can have none,
and would count the eviction against its backoffLimit). A bare pod, or a ReplicaSet's, bursts at
once, and says why on its `burst-after-ignored` annotation. One Job waits once: the webhook
remembers the deadline it gave the Job's first waiting pod (ClusterCache.waits, by the Job's UID),
its later pods wait until that same deadline, and a pod admitted after it bursts at once, which is
how the replacement of a pod that waited in vain bursts. Nor does a pod of a Job one of whose pods
burst (ClusterCache.burst_jobs, from the watch, for as long as such a pod lives): the replacement of a
pod that came home and found its GPU taken bursts at once, without a second wait.

A gang (webhook.gangs) waits as one. An Indexed Job's pods wait until the Job's creation + the
setting: every pod's admission computes the same deadline from what they all share, whenever it comes
and whichever replica decides it, with nothing remembered; at the deadline the controller replaces
the whole gang (its pods scheduled here meanwhile too: a gang runs as one) and the replacements,
admitted after the deadline, burst as one multi-node job. A gang whose Job's creation is not known
(a pod group whose pods a Job controls) waits by the deadline remembered for that Job, as a Job's pods
alone do. A Kueue pod group's pods are not recreated when deleted: such a pod group bursts at once,
and says why.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from jarvice import contract

# A week: longer is a typo, or a wish never to burst (leave the pod unlabeled for that).
MAX_SECONDS: Final = 7 * 24 * 3600
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
JOB_API_VERSION: Final = "batch/v1"


class DurationError(ValueError):
    """A burst-after value that is not a duration; the message says what to write instead."""


def parse_duration(text: str) -> float:
    """ "90s", "10m", "1h30m", "250ms", "0" -> seconds; raises DurationError for anything else."""
    value = text.strip()
    if value == "0":
        return 0.0
    if not value or _PART.sub("", value):
        raise DurationError(
            f"{value!r} is not a duration: write a number with a unit, such as 90s, 10m or 1h30m (0: burst at once)"
        )
    seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(value))
    if seconds > MAX_SECONDS:
        raise DurationError(f"{value!r} is longer than a week (168h), the most a pod may wait before bursting")
    return seconds


def format_deadline(epoch: float) -> str:
    """Epoch seconds -> RFC 3339 UTC with milliseconds, rounded up (a deadline is never shown early;
    milliseconds, so that a short wait, such as a replay's compressed one, is kept as it is)."""
    millis = -(-round(epoch * 1e6) // 1000)  # whole microseconds first: 0.1 + 0.2 is not 0.3000
    moment = datetime.datetime.fromtimestamp(millis // 1000, datetime.UTC)
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{millis % 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class WaitAsk:
    """What the wait is decided from: the pod's setting (or its namespace's), its Job and the clock."""

    setting: str | None  # the pod's burst-after annotation as written (None: absent)
    namespace_setting: str | None  # its namespace's (None: absent)
    job_uid: str  # the UID of the Job that controls the pod ("": none)
    now: float  # wall clock, epoch seconds
    deadlines: Mapping[str, float]  # Job UID -> the deadline given to its first waiting pod
    restart_policy: str  # the pod's spec.restartPolicy as written ("": unset, Always)
    burst_before: bool = False  # a pod of its Job burst (the watch shows it): the Job has waited


@dataclass(frozen=True, slots=True)
class Wait:
    """The pod waits for a local node until `deadline`; `key` is its Job's UID, remembered with it
    ("": a gang's pod, whose deadline is computed again at each of its pods, never remembered)."""

    key: str
    deadline: float
    seconds: float  # the setting it waits by
    source: str  # "pod" or "namespace"

    def reason(self) -> str:
        if not self.key:
            return (
                f"its gang waits for local nodes until {format_deadline(self.deadline)} (its Job's creation +"
                f" {contract.ANNOTATION_BURST_AFTER} {self.seconds:g}s, from the {self.source}), then bursts as one"
            )
        return (
            f"waits for a local node until {format_deadline(self.deadline)} ({contract.ANNOTATION_BURST_AFTER}"
            f" {self.seconds:g}s, from the {self.source}), then bursts"
        )


@dataclass(frozen=True, slots=True)
class NoWait:
    """The pod bursts at once; `reason` says why when it asked to wait ("": it did not ask)."""

    reason: str = ""


NO_WAIT = NoWait()


def controlling_job(meta: Mapping[str, Any]) -> str:
    """The UID of the Job that controls the pod (its controller ownerReference), "" when none does."""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            if ref.get("apiVersion") == JOB_API_VERSION and ref.get("kind") == "Job":
                uid = ref.get("uid")
                return uid if isinstance(uid, str) else ""
            return ""
    return ""


def _setting(ask: WaitAsk) -> tuple[float, str] | NoWait:
    """(seconds, where from), or NoWait when none applies or it cannot be read."""
    for text, source in ((ask.setting, "pod"), (ask.namespace_setting, "namespace")):
        if text is None:
            continue
        try:
            return parse_duration(text), source
        except DurationError as exc:
            return NoWait(f"the {source}'s {contract.ANNOTATION_BURST_AFTER} is ignored: {exc}")
    return NO_WAIT


def decide(ask: WaitAsk, *, gang: bool, gang_since: float | None = None) -> Wait | NoWait:
    """Whether a pod that would burst now waits first (see the module's rules). `gang`: a gang's pod;
    `gang_since`: an Indexed Job gang's creation (epoch s; None: a pod group's pod)."""
    setting = _setting(ask)
    if isinstance(setting, NoWait):
        return setting
    seconds, source = setting
    if seconds <= 0:
        return NO_WAIT
    # Its Job can have no failure policy ignoring the eviction: moving it later would cost a retry.
    not_free = ask.restart_policy != "Never"
    if gang and (gang_since is not None or not ask.job_uid):
        return (
            _not_free(ask)
            if not_free and gang_since is not None
            else _gang_wait(seconds, source, now=ask.now, since=gang_since)
        )
    # A gang whose Job's creation is not known waits as one Job's pods do: by the deadline remembered.
    if not ask.job_uid:
        return NoWait(
            f"{contract.ANNOTATION_BURST_AFTER} is ignored: only a Job's pod can wait (the Job recreates it to burst"
            " later); this pod bursts at once"
        )
    if not_free:
        return _not_free(ask)
    if ask.burst_before:  # e.g. the replacement of a pod that came home and lost its GPU meanwhile
        return NoWait("its Job's pods already burst (a Job waits once); this pod bursts at once")
    deadline = ask.deadlines.get(ask.job_uid)
    if deadline is None:
        return Wait(ask.job_uid, ask.now + seconds, seconds, source)
    if ask.now < deadline:
        return Wait(ask.job_uid, deadline, seconds, source)
    return NoWait(f"its Job waited until {format_deadline(deadline)} for a local node and none took its pod")


def _not_free(ask: WaitAsk) -> NoWait:
    return NoWait(
        f"{contract.ANNOTATION_BURST_AFTER} is ignored: only a pod with restartPolicy Never can wait (its Job then"
        f" ignores the eviction that bursts it later; with {ask.restart_policy or 'Always'} the eviction would count"
        " against the Job's backoffLimit); this pod bursts at once"
    )


def _gang_wait(seconds: float, source: str, *, now: float, since: float | None) -> Wait | NoWait:
    """A gang's pod: the gang waits until its Job's creation + the setting, computed alike at every pod."""
    if since is None:
        return NoWait(
            f"{contract.ANNOTATION_BURST_AFTER} is ignored: only a gang whose pods a Job controls can wait (the Job"
            " recreates them to burst later); nothing recreates this pod group's pods, so it bursts as one at once"
        )
    deadline = since + seconds
    if now < deadline:
        return Wait("", deadline, seconds, source)
    return NoWait(
        f"its gang's wait ended at {format_deadline(deadline)} (its Job's creation + {seconds:g}s) with no local"
        " nodes for all of its pods; it bursts as one"
    )
