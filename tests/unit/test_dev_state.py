"""devplatform/cluster/devstate.py: dev-up's state.json is written as each component starts."""

from pathlib import Path

import pytest

from devplatform.cluster import devstate, processes
from devplatform.cluster.processes import ManagedProcess
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)


def proc(name: str, pid: int) -> ManagedProcess:
    return ManagedProcess(name=name, pid=pid, log_path=Path(f"/logs/{name}.log"), started_at_ticks=pid * 10)


def test_the_state_is_on_disk_before_anything_starts(tmp_path: Path) -> None:
    devstate.StartRecord(tmp_path / "state.json")
    state = processes.load_state(tmp_path / "state.json")
    assert state.processes == () and state.extra == {"phase": "starting"}


def test_each_process_and_fact_is_saved_the_moment_it_is_recorded(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    record = devstate.StartRecord(path)
    record.add(proc("etcd", 11))
    assert processes.load_state(path).processes == (proc("etcd", 11),)
    record.note(node_state="/dev/node/state.json")
    record.add(proc("kube-apiserver", 12))
    state = processes.load_state(path)
    assert state.processes == (proc("etcd", 11), proc("kube-apiserver", 12))
    assert state.extra == {"phase": "starting", "node_state": "/dev/node/state.json"}
    record.finish(kubeconfig="/dev/kubeconfig")
    assert processes.load_state(path).extra == {
        "phase": "up",
        "node_state": "/dev/node/state.json",
        "kubeconfig": "/dev/kubeconfig",
    }
    assert record.processes == (proc("etcd", 11), proc("kube-apiserver", 12))
