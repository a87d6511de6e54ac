"""The machines' GPUs and prices the controller costs jobs with, and when to list them again (pure).

The job recorder and the spend keeper both cost jobs by their machine; they share one listing
(`controller.machinerates`), so the account's machines are read once per refresh, not once per loop.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from jarvice.model import Machine


@dataclass(frozen=True, slots=True)
class Rate:
    """A machine's GPUs and price per node-hour (/jarvice/machines `mc_gpus`, `mc_price`)."""

    gpus: int
    price: float


def rates_of(machines: Mapping[str, Machine]) -> dict[str, Rate]:
    """Each machine's rate. One the catalogue gives no `mc_price` is costed at the dearest price it
    does give (never 0: a cost cap would then never bind); with no price given at all it is left out,
    so nothing is priced on it (a namespace with caps does not burst to it)."""
    known = [m.price for m in machines.values() if m.price is not None]
    dearest = max(known, default=None)
    rates = {}
    for name, machine in machines.items():
        price = machine.price if machine.price is not None else dearest
        if price is not None:
            rates[name] = Rate(gpus=machine.gpus, price=price)
    return rates


def needs_listing(
    age: float | None,
    *,
    known: Collection[str],
    named: Collection[str],
    refresh: float,
    retry: float,
) -> bool:
    """Whether to list the machines again: never listed, older than `refresh`, or (at most every `retry`
    seconds) a job names a machine the listing lacks or the listing is empty (no price: every cost
    would read 0)."""
    if age is None or age >= refresh:
        return True
    missing = not known or bool(set(named) - set(known))
    return missing and age >= retry
