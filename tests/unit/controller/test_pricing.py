"""When the controller lists the JARVICE machines again (pure), and the one listing its loops share."""

from __future__ import annotations

import pytest

from controller.machinerates import MachineRates
from controller.pricing import Rate, needs_listing, rates_of
from jarvice.client import Unavailable
from jarvice.model import Machine

KNOWN = ("ng2", "ng4")


@pytest.mark.parametrize(
    ("age", "known", "named", "expected"),
    [
        (None, (), (), True),  # never listed
        (10.0, KNOWN, (), False),  # fresh
        (10.0, KNOWN, ("ng4",), False),  # every named machine known
        (3600.0, KNOWN, (), True),  # older than the refresh
        (30.0, KNOWN, ("ng8",), False),  # a machine missing, but the last try is too recent
        (60.0, KNOWN, ("ng8",), True),  # a machine missing, retry due
        (30.0, (), (), False),  # an empty listing (JARVICE was down): not before the retry
        (60.0, (), (), True),  # an empty listing: no price means every cost reads 0
    ],
)
def test_when_to_list_again(age: float | None, known: tuple[str, ...], named: tuple[str, ...], expected: bool) -> None:
    assert needs_listing(age, known=known, named=named, refresh=3600.0, retry=60.0) is expected


class Listing:
    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    def fetch(self) -> dict[str, Machine]:
        self.calls += 1
        if self.down:
            raise Unavailable("machines: down", endpoint="machines")
        return {"ng2": Machine(name="ng2", cores=8, gpus=2, price=4.2)}


def test_loops_share_one_listing_and_a_failure_keeps_the_last() -> None:
    now, errors, listing = [0.0], [0], Listing()

    def count_error() -> None:
        errors[0] += 1

    rates = MachineRates(fetch=listing.fetch, refresh=3600, clock=lambda: now[0], on_error=count_error)
    assert rates.current() == {"ng2": Rate(gpus=2, price=4.2)}
    assert rates.current(named={"ng2"}) == {"ng2": Rate(gpus=2, price=4.2)}
    assert listing.calls == 1  # the second loop's call is served from the listing
    listing.down, now[0] = True, 3600.0
    assert rates.current() == {"ng2": Rate(gpus=2, price=4.2)}  # stale but kept: better than no price
    assert (listing.calls, errors[0]) == (2, 1)


def test_a_machine_without_a_price_is_costed_at_the_dearest_known_price() -> None:
    machines = {
        "ng1": Machine(name="ng1", cores=8, gpus=1, price=2.1),
        "ng4": Machine(name="ng4", cores=32, gpus=4, price=8.4),
        "odd": Machine(name="odd", cores=8, gpus=1, price=None),
    }
    assert rates_of(machines)["odd"] == Rate(gpus=1, price=8.4)  # never 0: caps would never bind
    assert rates_of(machines)["ng1"] == Rate(gpus=1, price=2.1)


def test_with_no_price_known_an_unpriced_machine_is_left_out() -> None:
    # Nothing to cost it at: left out, so the webhook cannot price a burst on it (a capped namespace's pod stays local).
    assert rates_of({"odd": Machine(name="odd", cores=8, gpus=1, price=None)}) == {}
