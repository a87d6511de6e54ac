"""The emulator's vaults: `/jarvice/vault` in JARVICE's shape, each job's vault at /data, and an object
vault written back on a normal end or a shutdown but not after a terminate (reference section 5)."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from devplatform import demo_data
from devplatform.cluster import addons
from devplatform.emulator import Timing
from tests.support.vaults import vault_emulator

USER, KEY, APP = "alice", "vault-test-key-0001", "app"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("vaults")
    timing = Timing(queue_seconds=0.1, init_seconds=0.05, shutdown_kill_seconds=5.0)
    with vault_emulator(root, user=USER, apikey=KEY, app=APP, timing=timing) as emu:
        yield emu.url, root


def session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    return s


def submit(url: str, command: str, *, vault: str | None = None) -> int:
    body: dict[str, Any] = {
        "app": APP,
        "application": {"command": "run", "parameters": {"command": command}},
        "machine": {"type": "n0", "nodes": 1},
        "user": {"username": USER, "apikey": KEY},
    }
    if vault is not None:
        body["vault"] = {"name": vault, "readonly": False, "force": False}
    return int(session().post(f"{url}/jarvice/submit", json=body, timeout=5).json()["number"])


def wait_status(url: str, number: int, wanted: set[str]) -> str:
    for _ in range(300):
        status = (
            session()
            .get(f"{url}/jarvice/status", params={"username": USER, "apikey": KEY, "number": str(number)}, timeout=5)
            .json()[str(number)]["job_status"]
        )
        if status in wanted:
            return str(status)
        time.sleep(0.1)
    raise AssertionError(f"job {number} never reached {wanted}")


def wait_output(url: str, number: int, text: str) -> None:
    params = {"username": USER, "apikey": KEY, "number": str(number), "lines": "0"}
    for _ in range(300):
        if text in session().get(f"{url}/jarvice/tail", params=params, timeout=5).text:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {number} never printed {text!r}")


def call(url: str, endpoint: str, number: int) -> None:
    session().get(
        f"{url}/jarvice/{endpoint}", params={"username": USER, "apikey": KEY, "number": str(number)}, timeout=5
    )


def test_a_job_sees_its_vault_at_data_and_the_listing_shows_it(emulator: tuple[str, Path]) -> None:
    url, root = emulator
    number = submit(url, "mkdir -p /data/d && echo hi > /data/d/f.txt")
    assert wait_status(url, number, {"COMPLETED", "COMPLETED WITH ERROR"}) == "COMPLETED"
    assert (root / USER / "drop.jarvice.com" / "d" / "f.txt").read_text() == "hi\n"
    params = {"username": USER, "apikey": KEY, "path": "/d", "details": "true"}
    rows = session().get(f"{url}/jarvice/vault", params=params, timeout=5).json()
    assert [row[:2] for row in rows] == [["f.txt", 3]]
    top = session().get(f"{url}/jarvice/vault", params={**params, "path": "/", "details": "false"}, timeout=5).json()
    assert ["d/", 0, 0] in top
    denied = session().get(f"{url}/jarvice/vault", params={**params, "apikey": "wrong"}, timeout=5)
    assert denied.status_code == 401


@pytest.mark.parametrize(
    ("stop", "written_back"),
    [(None, True), ("shutdown", True), ("terminate", False)],
    ids=["normal-end", "shutdown", "terminate"],
)
def test_an_object_vault_is_written_back_only_on_a_normal_end(
    emulator: tuple[str, Path], stop: str | None, written_back: bool
) -> None:
    url, root = emulator
    name = f"out-{stop or 'end'}.txt"
    command = f"echo x > /data/{name}; echo written; " + ("sleep 30" if stop else "true")
    number = submit(url, command, vault="objects")
    if stop is not None:
        wait_output(url, number, "written")  # the file is written before the stop
        call(url, stop, number)
    wait_status(url, number, {"COMPLETED", "COMPLETED WITH ERROR", "TERMINATED", "CANCELED"})
    assert (root / USER / "objects" / name).exists() is written_back


def test_the_dev_emulator_says_where_its_vault_is(tmp_path: Path) -> None:
    """`make dev-up`'s emulator (its own process, with --vaults-dir): .dev/jarvice.env names the vault's
    SFTP address, and the `jarvice-vault` ConfigMap carries it with the host key."""
    process = addons.start_jarvice_emulator(tmp_path / "jarvice", args=demo_data.vault_args(tmp_path / "jarvice"))
    try:
        env = process.runner_env()
        config = demo_data.build_vault_config(process, namespace="demo")
    finally:
        addons.stop_jarvice_emulator(process)
    host, _, port = env["NIMBIX_BURST_VAULT_SFTP"].rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0
    assert config["metadata"] == {"name": "jarvice-vault", "namespace": "demo"}
    assert config["data"]["sftp"] == env["NIMBIX_BURST_VAULT_SFTP"]
    assert config["data"]["known_hosts"].startswith(f"[127.0.0.1]:{port} ssh-ed25519 ")
