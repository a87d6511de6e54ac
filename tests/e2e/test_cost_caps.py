"""Caps in money on the real node with the installed add-on (two webhook replicas, the controller writing
its spend record from the emulator's JARVICE), driven through kubectl and the emulator's API only.

The emulator's 1-GPU machines cost 2.10 and 3.20 an hour: a 1-GPU burst is counted at 3.20 (the dearest
of its size, docs/decision.md "Caps in money"), so against `max-cost-per-hour: "5"` one burst fits and a
second would not. This module's emulator also lists a 3-GPU machine without an `mc_price` (JARVICE may
list one): never priced at 0, never taken under a price ceiling.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devplatform import demo
from devplatform.cluster import addons, controlplane, install, node
from devplatform.emulator.catalogue import default_machines
from jarvice import contract
from tests.support.fault_matrix import FaultMatrix, Row
from tests.support.installed_controller import (
    CONTROLLER,
    CONTROLLER_SELECTOR,
    annotations_of,
    app_container,
    controller_leader,
    dry_run_admission,
    pod_body,
    wait_admitted_as,
)
from tests.support.webhook_replicas import create_at_once

# About replicas: two webhook replicas race against one cap; the controller is scaled to none and back.
pytestmark = pytest.mark.addon_replicas(2)

CAP = "nimbix-burst.io/max-cost-per-hour"
MONTH_CAP = "nimbix-burst.io/max-cost-per-month"
SPEND_RECORD = "nimbix-burst-spend"  # the controller's spend record (ConfigMap in the add-on's namespace)
UNPRICED = "ng3x"  # 3 GPUs, no mc_price: the only machine that holds 3 GPUs and no more
DEAREST_PRICE = 25.60  # the catalogue's dearest listed price (ng8): what a machine without one is priced at
LIVE = ("SUBMITTED", "PROCESSING STARTING")  # JARVICE job_status values of a job not ended
WAIT_SECONDS = 120.0


def _prices(emulator: addons.EmulatorProcess) -> dict[str, float]:
    """mc_price per node-hour of every machine that has one, as /jarvice/machines says (the account's own call)."""
    env = emulator.runner_env()
    query = urllib.parse.urlencode({"username": env["JARVICE_USERNAME"], "apikey": env["JARVICE_APIKEY"]})
    machines = demo.fetch_emulator(emulator.url, f"/jarvice/machines?{query}")
    return {str(name): float(entry["mc_price"]) for name, entry in machines.items() if "mc_price" in entry}


def _live_cost(emulator: addons.EmulatorProcess, uids: list[str], prices: dict[str, float]) -> float:
    total = 0.0
    for uid in uids:
        for job in demo.fetch_emulator_jobs(emulator.url, pod_uid=uid):
            if job["status"] in LIVE:
                # A machine without a price is costed at the dearest, never at 0.
                price = prices.get(str(job.get("machine", "")), max(prices.values()))
                total += price * max(1, len(job.get("nodes") or ()))
    return total


@pytest.fixture(scope="module")
def node_emulator(
    control_plane: controlplane.ControlPlane, real_node: node.RealNode
) -> Iterator[addons.EmulatorProcess]:
    """The module's emulator (in place of conftest's), its catalogue the built-in one plus `UNPRICED`."""
    run_dir = control_plane.run_dir / "test_cost_caps-emulator"
    run_dir.mkdir(parents=True, exist_ok=True)
    unpriced = {
        **default_machines()["ng2"],
        "mc_cores": 24,
        "mc_gpus": 3,
        "mc_slave_gpus": 3,
        "mc_scale_max": 1,
        "mc_description": "24 core, 192GB RAM, 3x NVIDIA V100 (listed without a price)",
    }
    del unpriced["mc_price"]
    catalogue = run_dir / "machines.json"
    catalogue.write_text(json.dumps({**default_machines(), UNPRICED: unpriced}))
    args = (*demo.EMULATOR_ARGS, "--machines", str(catalogue))
    emulator = addons.start_jarvice_emulator(run_dir, host=real_node.gateway_address, args=args)
    try:
        yield emulator
    finally:
        addons.stop_jarvice_emulator(emulator)


def _cap(
    control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess, ns: str, caps: dict[str, str]
) -> str:
    """`caps` on the namespace, and the webhook holding a fresh spend record (a 1-GPU probe would burst:
    the record is read and the caps leave room). The real node's GPUs must be gone already."""
    control_plane.kubectl("annotate", "namespace", ns, *(f"{k}={v}" for k, v in caps.items()), "--overwrite")
    demo.wait_for(
        lambda: control_plane.read("configmaps", SPEND_RECORD, namespace=install.NAMESPACE, missing_ok=True) != {},
        what="the controller's spend record",
        timeout=WAIT_SECONDS,
    )
    one = pod_body("seen-probe", app_container(node_emulator, "echo probe", gpus=1), gated=False)
    wait_admitted_as(control_plane, ns, one, decision="remote", what="the spend record and the node without GPUs")
    return ns


@pytest.fixture
def capped(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
) -> str:
    """The namespace with `max-cost-per-hour: "5"`, the real node's GPUs taken, the spend record read."""
    gpus_gone()
    return _cap(control_plane, node_emulator, ns, {CAP: "5"})


def _bodies(emulator: addons.EmulatorProcess, ns: str, count: int, prefix: str) -> list[dict[str, Any]]:
    bodies = []
    for i in range(count):
        body = pod_body(
            f"{prefix}-{i}", app_container(emulator, f'echo "{prefix}-{i} started"; sleep 30', gpus=1), gated=False
        )
        body["metadata"]["namespace"] = ns
        bodies.append(body)
    return bodies


def _race(
    fault: str,
    count: int,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
) -> None:
    prices = _prices(node_emulator)
    created, errors = create_at_once(control_plane, _bodies(node_emulator, ns, count, "cap"))
    assert not errors, errors
    burst = [p for p in created if annotations_of(p).get(contract.ANNOTATION_DECISION) == "remote"]
    kept = [p for p in created if annotations_of(p).get(contract.ANNOTATION_DECISION) == "local"]
    assert burst, [annotations_of(p) for p in created]
    for pod in kept:
        reason = annotations_of(pod)["nimbix-burst.io/budget"]
        assert f"{CAP} of namespace {ns} is 5.00" in reason and "an hour" in reason, reason
    uids = [str(p["metadata"]["uid"]) for p in created]
    # The live jobs' cost, sampled until every burst pod's job ran and ended.
    peak, deadline = 0.0, time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        peak = max(peak, _live_cost(node_emulator, uids, prices))
        done = all(
            any(
                job["status"] in ("COMPLETED", "COMPLETED WITH ERROR", "TERMINATED")
                for job in demo.fetch_emulator_jobs(node_emulator.url, pod_uid=str(p["metadata"]["uid"]))
            )
            for p in burst
        )
        if done:
            break
        time.sleep(1)
    per_pod = [len(demo.fetch_emulator_jobs(node_emulator.url, pod_uid=uid)) for uid in uids]
    row = fault_matrix.record(
        Row(
            fault,
            submitted=max(per_pod),  # jobs for one pod: 1 at most (none run twice)
            completed=0,
            billing_late=0,
            over_budget=0,
            note=(
                f"{len(burst)} burst, {len(kept)} kept local naming the cap; {sum(per_pod)} job(s) in all;"
                f" peak live cost {peak:.2f}/h of 5.00"
            ),
        )
    )
    assert peak <= 5.0 + 1e-6, row
    assert sum(per_pod) == len(burst), row


def test_three_one_gpu_pods_against_five_an_hour(
    capped: str,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
) -> None:
    _race("three 1-GPU pods at once against max-cost-per-hour 5", 3, fault_matrix, control_plane, node_emulator, capped)


def test_24_pods_race_against_a_cost_cap_with_two_replicas(
    capped: str,
    installed_addon: install.Installed,
    fault_matrix: FaultMatrix,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
) -> None:
    assert len(install.read_serving_pods(control_plane, install.APP_SELECTOR)) == install.REPLICAS
    _race(
        "24 one-GPU pods race against max-cost-per-hour 5 (two replicas)",
        24,
        fault_matrix,
        control_plane,
        node_emulator,
        capped,
    )


def _create(
    plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str, name: str, command: str, gpus: int
) -> dict[str, Any]:
    body = pod_body(name, app_container(emulator, command, gpus=gpus), gated=False)
    plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(body))
    return dict(json.loads(plane.kubectl("-n", ns, "get", "pod", name, "-o", "json").stdout))


def _jobs(emulator: addons.EmulatorProcess, pod: dict[str, Any]) -> list[dict[str, Any]]:
    return demo.fetch_emulator_jobs(emulator.url, pod_uid=str(pod["metadata"]["uid"]))


def test_a_monthly_cap_lets_one_burst_and_keeps_the_next_local(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
    fault_matrix: FaultMatrix,
) -> None:
    """`max-cost-per-month: "100"`: a 1-GPU burst's worst case is 3.20 an hour x the default walltime (24 h)
    = 76.80, so one burst fits the month and a second would not: it stays local naming the cap."""
    gpus_gone()
    _cap(control_plane, node_emulator, ns, {MONTH_CAP: "100"})
    first = _create(control_plane, node_emulator, ns, "month-0", 'echo "month-0 ran"; sleep 10', gpus=1)
    assert annotations_of(first).get(contract.ANNOTATION_DECISION) == "remote", annotations_of(first)
    worst = float(annotations_of(first)["nimbix-burst.io/worst-case-cost"])
    assert worst > 50.0, annotations_of(first)  # the whole walltime, not the hour
    second = _create(control_plane, node_emulator, ns, "month-1", 'echo "month-1 ran"', gpus=1)
    assert annotations_of(second).get(contract.ANNOTATION_DECISION) == "local", annotations_of(second)
    reason = annotations_of(second)["nimbix-burst.io/budget"]
    assert f"{MONTH_CAP} of namespace {ns} is 100.00" in reason and f"may cost up to {worst:.2f} more" in reason, reason
    ended = demo.wait_for(
        lambda: [j for j in _jobs(node_emulator, first) if j["status"] not in LIVE],
        what="the burst's job to run and end",
        timeout=WAIT_SECONDS,
    )
    row = fault_matrix.record(
        Row(
            "two 1-GPU pods against max-cost-per-month 100 (worst case 76.80 each)",
            submitted=len(_jobs(node_emulator, first)) + len(_jobs(node_emulator, second)),
            completed=sum(1 for j in ended if j["status"] == "COMPLETED"),
            billing_late=0,
            over_budget=0,
            note=f"1 burst, 1 kept local: {reason}",
        )
    )
    assert row.submitted == 1 and _jobs(node_emulator, second) == [], row


def test_a_machine_without_a_price_is_never_counted_as_free(
    capped: str, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess
) -> None:
    """A 3-GPU pod's smallest machine is listed without a price: it is counted at the dearest listed price,
    so `max-cost-per-hour: "5"` keeps it local (priced at 0 it would burst)."""
    body = pod_body("unpriced-probe", app_container(node_emulator, "echo probe", gpus=3), gated=False)
    pod, warnings = dry_run_admission(control_plane, capped, body)
    assert annotations_of(pod).get(contract.ANNOTATION_DECISION) == "local", annotations_of(pod)
    reason = annotations_of(pod)["nimbix-burst.io/budget"]
    assert f"this pod may cost {DEAREST_PRICE:.2f} an hour more" in reason, reason
    assert CAP in warnings, warnings


def _runner_exit(plane: controlplane.ControlPlane, ns: str, name: str) -> tuple[int, str]:
    exit_code = demo.wait_for(
        lambda: demo.read_exit_code(demo.read_pod(plane, ns, name)),
        what=f"{name}'s runner to exit",
        timeout=WAIT_SECONDS,
    )
    return int(exit_code), plane.kubectl("-n", ns, "logs", name).stdout


def test_the_runner_never_submits_over_its_price_ceiling(
    controller: None,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    ns: str,
    gpus_gone: Callable[[], None],
    fault_matrix: FaultMatrix,
) -> None:
    """Under `max-cost-per-hour: "100"` each burst's runner gets the price it was counted at as a ceiling
    (NIMBIX_BURST_MAX_PRICE) and submits nothing over it: a 3-GPU pod, counted at the dearest listed price
    because its only machine within 3 GPUs (`UNPRICED`) has none, never takes that machine (without a
    ceiling it would); a 1-GPU pod counted at 3.20 whose env pins 4 nodes of ng1 (2.10 x 4 = 8.40 an hour)
    never gets them. Both exit 79 naming the ceiling, nothing submitted."""
    gpus_gone()
    _cap(control_plane, node_emulator, ns, {CAP: "100"})
    unpriced = _create(control_plane, node_emulator, ns, "unpriced", 'echo "unpriced ran"', gpus=3)
    whole_job = pod_body("whole-job", app_container(node_emulator, 'echo "whole-job ran"', gpus=1), gated=False)
    whole_job["spec"]["containers"][0]["env"] += [
        {"name": "JARVICE_MACHINE", "value": "ng1"},
        {"name": "JARVICE_NODES", "value": "4"},
    ]
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(whole_job))
    pods = [unpriced, demo.read_pod(control_plane, ns, "whole-job")]
    ceilings = []
    for pod in pods:
        assert annotations_of(pod).get(contract.ANNOTATION_DECISION) == "remote", annotations_of(pod)
        env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}
        ceilings.append(float(env[contract.ENV_MAX_PRICE]))
    assert ceilings == [pytest.approx(DEAREST_PRICE), pytest.approx(3.20)], ceilings
    outcomes = {pod["metadata"]["name"]: _runner_exit(control_plane, ns, pod["metadata"]["name"]) for pod in pods}
    row = fault_matrix.record(
        Row(
            "bursts whose machines are over their price ceiling (an unpriced one; 4 nodes of a cheap one)",
            submitted=sum(len(_jobs(node_emulator, pod)) for pod in pods),
            completed=0,
            billing_late=0,
            over_budget=0,
            note=", ".join(f"{name} exit {code}" for name, (code, _) in outcomes.items()) + "; nothing submitted",
        )
    )
    for name, left_out in (("unpriced", f"{UNPRICED} (no price)"), ("whole-job", "ng1 (8.4 an hour)")):
        code, logs = outcomes[name]
        assert code == 79, (name, code, logs)
        assert contract.ENV_MAX_PRICE in logs and left_out in logs, (name, logs)
    assert row.submitted == 0, row


def _controller_pods_gone(plane: controlplane.ControlPlane) -> bool:
    return not plane.read("pods", namespace=install.NAMESPACE, labels=CONTROLLER_SELECTOR)["items"]


def test_without_a_spend_record_a_capped_namespace_does_not_burst(
    capped: str, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess
) -> None:
    """The controller stopped and its spend record deleted: nothing vouches for what the namespace
    spends, so its pods stay local saying why (never refused for it), until a controller writes one."""
    deployment = f"deployment/{CONTROLLER}"
    try:
        control_plane.kubectl("-n", install.NAMESPACE, "scale", deployment, "--replicas=0")
        demo.wait_for(lambda: _controller_pods_gone(control_plane), what="no controller pod", timeout=WAIT_SECONDS)
        control_plane.kubectl("-n", install.NAMESPACE, "delete", "configmap", SPEND_RECORD)
        probe = pod_body("record-probe", app_container(node_emulator, "echo probe", gpus=1), gated=False)
        wait_admitted_as(
            control_plane,
            capped,
            probe,
            decision="local",
            what="the spend record gone",
            annotation=("nimbix-burst.io/budget", SPEND_RECORD),
        )
        pod = _create(control_plane, node_emulator, capped, "no-record", "echo ran", gpus=1)
        annotations = annotations_of(pod)
        assert annotations.get(contract.ANNOTATION_DECISION) == "local", annotations
        assert "no burst can be counted against the cost caps" in annotations["nimbix-burst.io/budget"], annotations
        assert _jobs(node_emulator, pod) == []
    finally:
        control_plane.kubectl("-n", install.NAMESPACE, "scale", deployment, "--replicas=2")
        control_plane.kubectl("-n", install.NAMESPACE, "rollout", "status", deployment, "--timeout=180s")
        demo.wait_for(lambda: controller_leader(control_plane), what="a controller leader", timeout=WAIT_SECONDS)
    # A controller again: the record is written, and the namespace bursts again.
    wait_admitted_as(control_plane, capped, probe, decision="remote", what="the spend record written again")
