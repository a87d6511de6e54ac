"""The review's value types: built by a compiled __init__ when their module is compiled (the one
dataclasses writes stays interpreted under mypyc: ~780 ns a call against ~50 ns), read-only there, and
equal and hashed by their fields as frozen dataclasses are. The compiled run of these tests
(tests/support/compiled_run.py) names the compiled modules; interpreted, the native checks are skipped."""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any

import pytest

from webhook import burst, data_volumes, machine_terms, placement, responses, review, room, spending, verdict, walltime
from webhook.types import Decision, FitResult, Placement, PodNeeds, RemoteReservation, Toleration

# (class, the fields of one instance); each is built on every review (a remote one builds ~30).
CASES: tuple[tuple[type[Any], dict[str, Any]], ...] = (
    (Toleration, {"key": "k", "operator": "Equal", "value": "v", "effect": ""}),
    (Placement, {"node_selector": {}, "required_terms": None, "tolerations": (), "node_name": ""}),
    (Decision, {"kind": "remote", "reason": "r", "node": "", "candidates": 0, "capped": False}),
    (FitResult, {"node": None, "candidates": 0, "excluded_by_placement": 1, "short_of_compute": 0, "best_free": 0}),
    (RemoteReservation, {"reservation_id": "u", "namespace": "n", "gpus": 8, "cost_per_hour": 0.0, "worst_case": 0.0}),
    (walltime.Walltime, {"seconds": 3600, "source": "the pod's annotation"}),
    (
        review.AdmissionRequest,
        {
            "uid": "u",
            "operation": "CREATE",
            "kind": "Pod",
            "group": "",
            "namespace": "n",
            "dry_run": False,
            "object": {},
        },
    ),
)
# Every converted class, for the compiled check: its __init__ must be the extension's.
CONVERTED = (
    Toleration, Placement, PodNeeds, Decision, FitResult, RemoteReservation, walltime.Walltime,
    review.AdmissionRequest, responses.Admission, verdict.Effects, verdict.Verdict, burst.BurstAsk, burst.Terms,
    room.Room, room.RoomSearch, placement.Choice, placement.Packing, spending.InUse, spending.Price,
    machine_terms.MachineTerms, data_volumes.ContainerStaging, data_volumes.DataPlan,
)  # fmt: skip


def _changed(values: dict[str, Any]) -> dict[str, Any]:
    """One field given another value of its own type (compiled, a field's type is checked at run time)."""
    name, value = next((n, v) for n, v in values.items() if type(v) in {str, int})
    return {name: value + ("x" if isinstance(value, str) else 1)}


def _compiled(cls: type[Any]) -> bool:
    return cls.__module__ in os.environ.get("NIMBIX_BURST_COMPILED_MODULES", "").split(",")


@pytest.mark.parametrize(("cls", "values"), CASES, ids=[c.__name__ for c, _ in CASES])
def test_equal_by_fields_as_a_frozen_dataclass(cls: type[Any], values: dict[str, Any]) -> None:
    one, other = cls(**values), cls(**values)
    assert one == other and dataclasses.astuple(one) == dataclasses.astuple(other)
    assert {f.name: getattr(one, f.name) for f in dataclasses.fields(cls)} == values
    if not any(isinstance(v, dict) for v in values.values()):
        assert hash(one) == hash(other) and len({one, other}) == 1
    changed = dataclasses.replace(one, **_changed(values))
    assert changed != one


def test_placement_defaults_to_no_rules() -> None:
    assert Placement() == Placement({}, None, (), "")
    assert Placement().node_selector == {}


@pytest.mark.parametrize("cls", CONVERTED, ids=[c.__name__ for c in CONVERTED])
def test_built_natively_and_read_only_when_compiled(cls: type[Any]) -> None:
    if not _compiled(cls):
        pytest.skip("module interpreted: mypy's Final is the only guard")
    assert not inspect.isfunction(cls.__init__), "dataclasses' interpreted __init__: mypyc issue 817"
    values = dict(next((v for c, v in CASES if c is cls), {}))
    if values:
        instance = cls(**values)
        with pytest.raises(AttributeError):
            setattr(instance, *next(iter(_changed(values).items())))
