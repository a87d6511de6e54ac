"""SpendKeeper.round against a fake JARVICE and a fake API server's ConfigMaps and namespaces: the
record written when it changed, read back by a new leader without counting twice, the metrics
with the namespaces' caps, and only the leader counting."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import generate_latest

from controller.kube import ConfigMapChanged
from controller.machinerates import MachineRates
from controller.metrics import Metrics
from controller.spendkeeping import SpendKeeper
from controller.store import PodStore
from jarvice.client import Unavailable
from jarvice.model import JobEntry, Machine
from kubeplumbing.spendrecord import CONFIGMAP_NAME, RECORD_KEY
from tests.support.clocks import Clock

UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
HERE = "0123456789ab"
WALL = 1_700_000_000
ADDON = "nimbix-burst"


def pod(uid: str = UID, namespace: str = "team") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": "train-0", "namespace": namespace}, "status": {"phase": "Running"}}


def entry(number: int, *, start: int = 0, end: int = 0, price: float | None = None) -> JobEntry:
    state = "COMPLETED" if end else "PROCESSING STARTING"
    label = f"k8s-{HERE}.{UID}-app-1"
    return JobEntry(number, "j", state, label, 0, "", "ng2", 2, start, end, walltime_limit=3600, job_price=price)


@dataclass
class FakeJarvice:
    live: dict[int, JobEntry] = field(default_factory=dict)
    ended: dict[int, JobEntry] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    down: bool = False
    machines_down: bool = False

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        self.calls.append("history" if completed else "live")
        if self.down:
            raise Unavailable("jobs: down", endpoint="jobs")
        return dict(self.ended if completed else self.live)

    def fetch_machines(self) -> dict[str, Machine]:
        if self.machines_down:
            raise Unavailable("machines: down", endpoint="machines")
        return {"ng2": Machine("ng2", cores=16, gpus=2, price=4.0)}


@dataclass
class FakeApi:
    configmaps: dict[str, tuple[dict[str, str], int]] = field(default_factory=dict)
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)
    writes: int = 0

    def read_configmap(self, namespace: str, name: str) -> tuple[Mapping[str, str], str] | None:
        held = self.configmaps.get(f"{namespace}/{name}")
        return None if held is None else (dict(held[0]), str(held[1]))

    def write_configmap(self, namespace: str, name: str, data: Mapping[str, str], *, resource_version: str) -> None:
        key = f"{namespace}/{name}"
        held = self.configmaps.get(key)
        if (held is None) != (resource_version == "") or (held is not None and str(held[1]) != resource_version):
            raise ConfigMapChanged("changed (409)")
        self.configmaps[key] = (dict(data), (held[1] if held else 0) + 1)
        self.writes += 1

    def list_namespace_annotations(self) -> dict[str, Mapping[str, str]]:
        return dict(self.namespaces)

    def record(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.configmaps[f"{ADDON}/{CONFIGMAP_NAME}"][0][RECORD_KEY])
        return parsed


def keeper(
    jarvice: FakeJarvice, api: FakeApi, *, wall: Clock, leader: list[bool] | None = None, metrics: Metrics | None = None
) -> SpendKeeper:
    store = PodStore(clock=Clock())
    store.replace([pod()])
    leading = leader if leader is not None else [True]
    return SpendKeeper(
        store=store,
        jarvice=jarvice,
        kube=api,
        namespace=ADDON,
        cluster=lambda: HERE,
        metrics=metrics or Metrics(is_leader=lambda: leading[0]),
        is_leader=lambda: leading[0],
        interval=15,
        refresh=60,
        rates=MachineRates(fetch=jarvice.fetch_machines, refresh=3600, clock=Clock(), on_error=lambda: None),
        stale_after=60,
        clock=Clock(),
        wall_clock=wall,
    )


def test_the_record_is_written_and_a_new_leader_counts_nothing_twice() -> None:
    wall = Clock(WALL)
    jarvice, api = FakeJarvice(live={1: entry(1, start=WALL - 600)}), FakeApi()
    keeper(jarvice, api, wall=wall).round()
    team = api.record()["namespaces"]["team"]
    assert team["cost_per_hour"] == 8.0 and team["pods"][UID]["gpus"] == 4 and team["month_worst_case"] == 8.0
    # the job ends; another replica takes the lead and reads the ledger from the ConfigMap
    wall.now += 30
    jarvice.ended = {1: entry(1, start=WALL - 600, end=WALL + 20, price=1.5)}
    jarvice.live = {}
    second = keeper(jarvice, api, wall=wall)
    second.round()
    assert api.record()["namespaces"]["team"]["month_recorded"] == 1.5
    wall.now += 30
    keeper(jarvice, api, wall=wall).round()
    assert api.record()["namespaces"]["team"]["month_recorded"] == 1.5


def test_an_unchanged_record_is_written_again_only_after_the_refresh() -> None:
    wall = Clock(WALL)
    jarvice, api = FakeJarvice(live={1: entry(1, start=WALL - 60)}), FakeApi()
    spend = keeper(jarvice, api, wall=wall)
    spend.round()
    wall.now += 15
    spend.round()
    assert api.writes == 1
    wall.now += 50
    spend.round()
    assert api.writes == 2 and api.record()["observed_at"] == WALL + 65


def test_metrics_carry_spend_and_caps_and_only_the_leader_shows_them() -> None:
    wall, leader = Clock(WALL), [True]
    metrics = Metrics(is_leader=lambda: leader[0])
    jarvice = FakeJarvice(live={1: entry(1, start=WALL - 60)})
    api = FakeApi(
        namespaces={"team": {"nimbix-burst.io/max-cost-per-hour": "10", "nimbix-burst.io/max-cost-per-month": "x"}}
    )
    spend = keeper(jarvice, api, wall=wall, leader=leader, metrics=metrics)
    spend.round()
    text = generate_latest(metrics.registry).decode()
    for line in (
        'nimbix_burst_namespace_cost_per_hour{namespace="team"} 8.0',
        'nimbix_burst_namespace_month_cost{namespace="team"} 8.0',
        'nimbix_burst_namespace_remote_gpus_live{namespace="team"} 4.0',
        'nimbix_burst_namespace_cost_cap_per_hour{namespace="team"} 10.0',
        'nimbix_burst_namespace_cost_cap_per_month{namespace="team"} 0.0',  # invalid: 0
        "nimbix_burst_unattributed_jobs 0.0",
    ):
        assert line in text
    leader[0] = False
    spend.round()
    assert 'namespace="team"' not in generate_latest(metrics.registry).decode()


def test_a_jarvice_outage_keeps_the_last_record() -> None:
    wall = Clock(WALL)
    jarvice, api = FakeJarvice(live={1: entry(1)}), FakeApi()
    spend = keeper(jarvice, api, wall=wall)
    spend.round()
    jarvice.down = True
    wall.now += 120
    spend.round()
    assert api.writes == 1 and api.record()["observed_at"] == WALL


def test_without_machine_prices_nothing_is_written() -> None:
    """Every figure would read 0: a cap would let anything through."""
    jarvice, api = FakeJarvice(live={1: entry(1)}, machines_down=True), FakeApi()
    keeper(jarvice, api, wall=Clock(WALL)).round()
    assert api.writes == 0
