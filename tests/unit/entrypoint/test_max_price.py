"""NIMBIX_BURST_MAX_PRICE: the price a namespace's cost caps counted a burst at; the runner never
submits to a dearer machine (docs/money-safety.md, "Caps in money")."""

from __future__ import annotations

import pytest

from entrypoint import candidates, plan
from entrypoint.settings import SettingsError, parse_settings
from jarvice import contract
from tests.unit.entrypoint.test_allowed_machines import CATALOGUE, REMOTE_OK, remote_plan


@pytest.mark.parametrize(
    ("gpus", "max_price", "machine", "expected"),
    [
        (1, None, None, ("ng1", "ng1a-spot", "ng1a")),  # cheapest first, never a bigger machine than the first
        (1, "2.4", None, ("ng1", "ng1a-spot")),  # the 3.20 A100 is dearer than what was counted
        (2, "4.2", None, ("ng2",)),
        (1, "2.0", None, None),  # nothing that cheap
        (1, "2.4", "ng1a", None),  # a pin dearer than what was counted is refused
    ],
)
def test_the_runner_never_pays_more_than_was_counted(
    gpus: int, max_price: str | None, machine: str | None, expected: tuple[str, ...] | None
) -> None:
    extra = {contract.ENV_MAX_PRICE: max_price} if max_price is not None else {}
    chosen = candidates.order_candidates(remote_plan(gpus=gpus, allowed=None, machine=machine, extra=extra), CATALOGUE)
    if expected is None:
        assert isinstance(chosen, plan.NoMachineFits)
    else:
        assert isinstance(chosen, candidates.Candidates) and chosen.machines == expected


@pytest.mark.parametrize("raw", ["cheap", "-1", "inf", "nan"])
def test_an_unreadable_ceiling_is_refused_with_what_to_write(raw: str) -> None:
    env = {**REMOTE_OK, contract.ENV_MAX_PRICE: raw}
    with pytest.raises(SettingsError, match="NIMBIX_BURST_MAX_PRICE must be a price per node-hour"):
        parse_settings(env, argv=(), read_file=lambda path: "", hostname="h")
