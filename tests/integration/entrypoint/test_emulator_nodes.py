"""The emulator's multi-node jobs over HTTP: machine.nodes within the machine's scale, each job's
nodes and cores files, a catalogue application's job fanned out (one local process per node), and
the JobEntry fields that say how many nodes and which."""

import time
import uuid
from typing import Any

import pytest
import requests

from devplatform.emulator import EmulatorControl, EmulatorThread
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import API_KEY, APP, USER, direct_session

pytestmark = pytest.mark.timeout(HANG_SECONDS)

RANKS = 'echo "rank=$NODE_RANK/$NNODES at $MASTER_ADDR:$MASTER_PORT"; cat "$NIMBIX_BURST_NODES_DIR/nodes" | wc -l'


def submit(session: requests.Session, url: str, command: str, *, machine: str, nodes: int) -> requests.Response:
    body = {
        "app": APP,
        "application": {"command": "run", "parameters": {"command": command}},
        "machine": {"type": machine, "nodes": nodes},
        "job_label": f"nodes-{uuid.uuid4().hex[:8]}",
        "user": {"username": USER, "apikey": API_KEY},
    }
    return session.post(f"{url}/jarvice/submit", json=body, timeout=5)


def finished_entry(session: requests.Session, url: str, number: int) -> dict[str, Any]:
    params = {"username": USER, "apikey": API_KEY}
    while True:
        listed = session.get(f"{url}/jarvice/jobs", params={**params, "completed": "true"}, timeout=5).json()
        if str(number) in listed:
            return dict(listed[str(number)])
        time.sleep(0.05)


def output(session: requests.Session, url: str, number: int) -> str:
    params = {"username": USER, "apikey": API_KEY, "number": number, "lines": 0}
    return session.get(f"{url}/jarvice/output", params=params, timeout=5).text


def test_a_two_node_job_runs_once_per_node(emulator: EmulatorThread, control: EmulatorControl) -> None:
    with direct_session() as session:
        response = submit(session, emulator.url, RANKS, machine="n1", nodes=2)
        assert response.status_code == 200, response.text
        number = response.json()["number"]
        entry = finished_entry(session, emulator.url, number)
        text = output(session, emulator.url, number)
    assert entry["job_status"] == "COMPLETED", text
    assert (entry["job_mc_name"], entry["job_mc_scale"], entry["job_nodes"]) == ("n1", 2, "127.0.0.1 127.0.0.2")
    assert "rank=0/2 at 127.0.0.1:29500\n" in text and "rank=1/2 at 127.0.0.1:29500\n" in text
    (job,) = [j for j in control.jobs() if j["number"] == number]
    assert job["nodes"] == ["127.0.0.1", "127.0.0.2"]


def test_each_job_has_its_nodes_and_cores_files(emulator: EmulatorThread) -> None:
    with direct_session() as session:
        response = submit(session, emulator.url, 'cat "$NIMBIX_BURST_NODES_DIR/cores"', machine="n1", nodes=1)
        number = response.json()["number"]
        assert finished_entry(session, emulator.url, number)["job_status"] == "COMPLETED"
        text = output(session, emulator.url, number)
    assert text.endswith("127.0.0.1\n" * 8)  # n1 has 8 cores; one node: no fan-out, the command as ever


@pytest.mark.parametrize(("machine", "nodes"), [("n0", 2), ("n1", 9), ("n1", 0)], ids=["no-scale", "too-many", "zero"])
def test_nodes_outside_the_machines_scale_are_refused(
    emulator: EmulatorThread, control: EmulatorControl, machine: str, nodes: int
) -> None:
    with direct_session() as session:
        response = submit(session, emulator.url, "true", machine=machine, nodes=nodes)
    assert (response.status_code, response.json()) == (400, {"error": "Missing or Malformed API Syntax"})
