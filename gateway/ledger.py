"""What the gateway has submitted and JARVICE still runs, per namespace, and the last check before
money is spent (pure).

The ledger lives in one ConfigMap of the add-on's namespace, written with a resourceVersion
precondition: every replica adds a submit's entry BEFORE it sends the submit, so two replicas
checking the same namespace at once cannot both pass (the second write is refused, re-read and
checked again). An entry stays while JARVICE lists its job (by label), and for `pending_seconds`
after it was written whatever the listing says (a new job may not be listed yet). The checks are
the namespace's own annotations (`nimbix-burst.io/max-remote-gpus`, `max-cost-per-hour`,
`max-cost-per-month`), counted from the ledger, never from what a pod says; this month's ended
jobs come from the controller's spend record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Set
from dataclasses import dataclass, replace
from typing import Final

from gateway.submission import AdmittedSubmit
from jarvice.gpubudget import ANNOTATION_MAX_REMOTE_GPUS, parse_budget
from kubeplumbing.spendrecord import ANNOTATION_MAX_COST_PER_HOUR, ANNOTATION_MAX_COST_PER_MONTH, parse_cost_cap

CONFIGMAP_NAME: Final = "nimbix-burst-gateway-ledger"
LEDGER_KEY: Final = "ledger.json"
LEDGER_VERSION: Final = 1


class LedgerError(ValueError):
    """The stored ledger is unreadable: nothing is submitted until it is repaired or removed."""


@dataclass(frozen=True, slots=True)
class Entry:
    namespace: str
    pod_uid: str
    gpus: int
    cost_per_hour: float | None
    worst_case: float | None
    at: float  # when the gateway wrote it, before the submit (Unix seconds)
    number: int | None = None  # JARVICE's job number once the submit answered (written after the answer)
    machine: str | None = None  # what was counted: the machine and nodes sent (None in older entries)
    nodes: int | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """A namespace's budget and caps; None where it sets none. An unreadable value caps at 0."""

    max_gpus: int | None = None
    max_cost_per_hour: float | None = None
    max_cost_per_month: float | None = None


def limits_from_annotations(annotations: Mapping[str, str]) -> Limits:
    gpus = annotations.get(ANNOTATION_MAX_REMOTE_GPUS)
    hour = annotations.get(ANNOTATION_MAX_COST_PER_HOUR)
    month = annotations.get(ANNOTATION_MAX_COST_PER_MONTH)
    return Limits(
        max_gpus=None if gpus is None else parse_budget(gpus).limit,
        max_cost_per_hour=None if hour is None else parse_cost_cap(hour).limit,
        max_cost_per_month=None if month is None else parse_cost_cap(month).limit,
    )


Ledger = Mapping[str, Entry]  # by job label


def parse_ledger(text: str | None) -> dict[str, Entry]:
    if not text:
        return {}
    try:
        document = json.loads(text)
        if document.get("version") != LEDGER_VERSION:
            raise LedgerError(f"ledger version {document.get('version')!r}, this gateway reads {LEDGER_VERSION}")
        return {label: Entry(**fields) for label, fields in document["entries"].items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise LedgerError(f"the gateway's ledger ConfigMap {CONFIGMAP_NAME} is unreadable: {exc}") from None


def encode_ledger(ledger: Ledger) -> str:
    entries = {
        label: {
            "namespace": e.namespace,
            "pod_uid": e.pod_uid,
            "gpus": e.gpus,
            "cost_per_hour": e.cost_per_hour,
            "worst_case": e.worst_case,
            "at": e.at,
            "number": e.number,
            "machine": e.machine,
            "nodes": e.nodes,
        }
        for label, e in sorted(ledger.items())
    }
    return json.dumps({"version": LEDGER_VERSION, "entries": entries}, separators=(",", ":"))


# A job JARVICE answered with a number is in its listing at once; this covers a listing read just before.
LISTED_GRACE_SECONDS: Final = 5.0
# A submit of the same attempt this recent may still be creating its job: a second one waits. (A runner
# submits an attempt again only after looking for its job for its resolve window, 30 s by default.)
IN_FLIGHT_SECONDS: Final = 10.0


def in_flight(ledger: Ledger, label: str, *, now: float) -> bool:
    """Whether a submit of this attempt was sent moments ago and its answer is not known yet."""
    entry = ledger.get(label)
    return entry is not None and entry.number is None and now - entry.at < IN_FLIGHT_SECONDS


def prune(ledger: Ledger, *, live_labels: Set[str], now: float, pending_seconds: float) -> dict[str, Entry]:
    """The entries that still count: a job JARVICE lists; a submit whose answer is not known yet, for
    `pending_seconds` (it may have created a job not listed yet); an answered one for a few seconds.
    An answered job no longer listed has ended (a runner moving its queued job to another machine
    terminates it, then submits the same attempt again)."""

    def counts(label: str, entry: Entry) -> bool:
        grace = pending_seconds if entry.number is None else LISTED_GRACE_SECONDS
        return label in live_labels or now - entry.at < grace

    return {label: entry for label, entry in ledger.items() if counts(label, entry)}


def _sum(values: list[float | None]) -> float:
    return sum(v for v in values if v is not None)


def refusal(
    ledger: Ledger, *, namespace: str, limits: Limits, submit: AdmittedSubmit, month_recorded: float
) -> str | None:
    """Why this submit would take `namespace` past its budget or caps, or None when it may go. An entry
    of the same label is the one this submit replaces (its job ended, or its submit created none)."""
    mine = [e for label, e in ledger.items() if e.namespace == namespace and label != submit.label]
    if limits.max_gpus is not None:
        held = sum(e.gpus for e in mine)
        if held + submit.gpus > limits.max_gpus:
            return (
                f"the namespace's burst budget is {limits.max_gpus} GPU(s); "
                f"its jobs hold {held}, this one needs {submit.gpus}"
            )
    capped = limits.max_cost_per_hour is not None or limits.max_cost_per_month is not None
    if capped and submit.cost_per_hour is None:
        return f"machine {submit.machine} gives no price, and the namespace has cost caps"
    if limits.max_cost_per_hour is not None and submit.cost_per_hour is not None:
        rate = _sum([e.cost_per_hour for e in mine])
        if rate + submit.cost_per_hour > limits.max_cost_per_hour + 1e-9:
            return (
                f"the namespace's cap is {limits.max_cost_per_hour:g} per hour; its jobs cost {rate:g}, "
                f"this one {submit.cost_per_hour:g}"
            )
    if limits.max_cost_per_month is not None and submit.worst_case is not None:
        month = month_recorded + _sum([e.worst_case for e in mine])
        if month + submit.worst_case > limits.max_cost_per_month + 1e-9:
            return (
                f"the namespace's cap is {limits.max_cost_per_month:g} per month; this month holds {month:g}, "
                f"this job may cost {submit.worst_case:g}"
            )
    return None


def with_submit(
    ledger: Ledger, submit: AdmittedSubmit, *, namespace: str, pod_uid: str, now: float
) -> dict[str, Entry]:
    entry = Entry(
        namespace=namespace,
        pod_uid=pod_uid,
        gpus=submit.gpus,
        cost_per_hour=submit.cost_per_hour,
        worst_case=submit.worst_case,
        at=now,
        machine=submit.machine,
        nodes=submit.nodes,
    )
    return {**ledger, submit.label: entry}


def with_number(ledger: Ledger, label: str, number: int) -> dict[str, Entry]:
    if label not in ledger:
        return dict(ledger)
    return {**ledger, label: replace(ledger[label], number=number)}


def without(ledger: Ledger, label: str) -> dict[str, Entry]:
    return {k: v for k, v in ledger.items() if k != label}
