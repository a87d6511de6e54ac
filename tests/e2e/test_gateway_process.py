"""The JARVICE gateway against the real API server, without a node: a host webhook registered with
the gateway's URL decides labelled GPU pods remote (no node can host them); each pod's token is
minted as the kubelet would project it (`kubectl create token --bound-object-kind Pod`, audience
nimbix-burst-gateway); the runner's own JARVICE client talks to a host gateway (two replicas for the
race), which talks to the emulator. Everything but the node is the real thing. Replica 0 also serves
the vault's SFTP endpoint, relaying to the emulator's vault: the runner's own transfers stage through
it with a pod's token."""

from __future__ import annotations

import io
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import requests

from controller.accounting import plan_stops
from controller.gatewayjobs import GatewayAccess, GatewayJobs
from devplatform import demo
from devplatform.cluster import addons, controlplane
from devplatform.cluster.pki import KeyPair, make_ca
from devplatform.cluster.processes import free_port
from devplatform.emulator.vault import DEFAULT_VAULT
from entrypoint import sftp_transfer, vault_settings
from entrypoint.sftp_transfer import DownloadRoot, UploadRoot, VaultTransfer
from gateway.settings import DEFAULT_AUDIENCE, DEFAULT_CONTROLLER_AUDIENCE
from jarvice import contract
from jarvice.client import CredentialsRejected, JarviceClient, JobNotFound, RequestRejected, RetryPolicy
from jarvice.labels import PodIdentity, build_job_label
from jarvice.model import SubmitBody
from jarvice.redaction import Secret
from tests.support.gpus import GPU

ADDON_NAMESPACE = "nimbix-burst"
CONTROLLER_SERVICE_ACCOUNT = "nimbix-burst-controller"


def EMULATOR_VAULTS(control_plane: controlplane.ControlPlane) -> Path:  # noqa: N802 - a path, as a constant would be
    return control_plane.run_dir / "gateway-emulator" / "vaults"


@dataclass(frozen=True)
class Gateways:
    urls: tuple[str, ...]
    ca_file: Path
    webhook: addons.WebhookProcess
    sftp_port: int
    ssh_host_key: str  # the endpoint's public key
    vault_dir: Path  # the emulator's vault on disk


@pytest.fixture(scope="module")
def emulator(control_plane: controlplane.ControlPlane) -> Iterator[addons.EmulatorProcess]:
    run_dir = control_plane.run_dir / "gateway-emulator"
    started = addons.start_jarvice_emulator(run_dir, args=("--vaults-dir", str(EMULATOR_VAULTS(control_plane))))
    try:
        yield started
    finally:
        addons.stop_jarvice_emulator(started)


@pytest.fixture(scope="module")
def gateways(
    control_plane: controlplane.ControlPlane, core: Any, emulator: addons.EmulatorProcess
) -> Iterator[Gateways]:
    run_dir = control_plane.run_dir / "gateway"
    ca: KeyPair = make_ca("nimbix-burst-gateway-test-ca")
    control_plane.kubectl("create", "namespace", ADDON_NAMESPACE, check=False)
    accounts = json.loads(demo.build_gateway_accounts_file(emulator))
    session = requests.Session()
    session.trust_env = False
    vault = session.get(f"{emulator.url}/_emulator/vault", timeout=10).json()
    accounts["accounts"][0]["vault"] = {
        "address": vault["sftp"],
        "host_key": " ".join(vault["known_hosts"].split()[1:3]),
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    host_key.write_private_key(str(run_dir / "ssh_host_key"))
    sftp_port = free_port()
    sftp_args = ("--sftp-port", str(sftp_port), "--ssh-host-key-file", str(run_dir / "ssh_host_key"))
    started = [
        addons.start_gateway(
            run_dir / f"replica-{i}",
            kubeconfig=control_plane.kubeconfig_path,
            accounts_json=json.dumps(accounts),
            namespace=ADDON_NAMESPACE,
            ca=ca,
            extra_args=sftp_args if i == 0 else (),
        )
        for i in range(2)
    ]
    ca_file = run_dir / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    args = ["--gateway-url", started[0].url, "--gateway-ca-file", str(ca_file)]
    try:
        with addons.registered_webhook(control_plane, run_dir / "webhook", name_suffix="-gateway", args=args) as hook:
            yield Gateways(
                urls=tuple(g.url for g in started),
                ca_file=ca_file,
                webhook=hook,
                sftp_port=sftp_port,
                ssh_host_key=host_key.export_public_key("openssh").decode().strip(),
                vault_dir=EMULATOR_VAULTS(control_plane) / emulator.runner_env()["JARVICE_USERNAME"] / DEFAULT_VAULT,
            )
    finally:
        for gateway in started:
            addons.stop_webhook(gateway)


def burst_pod(control_plane: controlplane.ControlPlane, namespace: str, name: str, *, gpus: int = 1) -> dict[str, Any]:
    """A labelled GPU pod no node can host: the webhook decides it remote. Returned as stored."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {contract.LABEL_TASK_TYPE: contract.LABEL_TASK_TYPE_VALUE}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "trainer", "image": "example/app", "resources": {"limits": {GPU: str(gpus)}}}],
        },
    }
    out = control_plane.kubectl("-n", namespace, "create", "-o", "json", "-f", "-", input=json.dumps(body)).stdout
    pod: dict[str, Any] = json.loads(out)
    assert pod["metadata"]["annotations"][contract.ANNOTATION_DECISION] == "remote", pod["metadata"]
    return pod


def token_for(control_plane: controlplane.ControlPlane, pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return control_plane.kubectl(
        "-n", meta["namespace"], "create", "token", "default", f"--audience={DEFAULT_AUDIENCE}",
        "--bound-object-kind=Pod", f"--bound-object-name={meta['name']}", f"--bound-object-uid={meta['uid']}",
    ).stdout.strip()  # fmt: skip


def client_for(url: str, token: str, ca_file: Path, session: requests.Session) -> JarviceClient:
    session.verify = str(ca_file)
    session.trust_env = False  # as the runner does: REQUESTS_CA_BUNDLE would override the CA
    return JarviceClient(
        base_url=url,
        username="pod",
        apikey=Secret(token),
        session=session,
        connect_timeout=5,
        read_timeout=30,
        retry=RetryPolicy(base_seconds=0.1, cap_seconds=0.5, outage_seconds=2),
        sleep=lambda _: None,
        clock=lambda: 0.0,
        rng=random.Random(1),
    )


def submit_body(
    pod: dict[str, Any], emulator: addons.EmulatorProcess, *, machine: str, nodes: int, attempt: int = 1
) -> SubmitBody:
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    identity = PodIdentity(
        uid=pod["metadata"]["uid"],
        namespace=pod["metadata"]["namespace"],
        name=pod["metadata"]["name"],
        hostname="h",
        container="trainer",
        cluster=str(env[contract.ENV_CLUSTER]),
    )
    return {
        "app": emulator.runner_env()["APP_NAME"],
        "staging": False,
        "checkedout": False,
        "application": {"command": "run", "parameters": {"command": "sleep 30"}, "walltime": "99:00:00"},
        "machine": {"type": machine, "nodes": nodes},
        "job_label": build_job_label(identity, attempt=attempt),
    }


def signal_once(client: JarviceClient, number: int, signal: int) -> bool:
    try:
        return client.signal(number, signal).signal == signal
    except JobNotFound:  # not running yet
        return False


def submissions(emulator: addons.EmulatorProcess, label: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = demo.fetch_emulator(emulator.url, f"/_emulator/submissions?job_label={label}")[
        "submissions"
    ]
    return found


def test_the_pod_gets_the_size_counted_and_its_own_jobs_only(
    control_plane: controlplane.ControlPlane, namespace: str, gateways: Gateways, emulator: addons.EmulatorProcess
) -> None:
    mine, other = burst_pod(control_plane, namespace, "mine"), burst_pod(control_plane, namespace, "other")
    with requests.Session() as session, requests.Session() as other_session:
        client = client_for(gateways.urls[0], token_for(control_plane, mine), gateways.ca_file, session)
        body = submit_body(mine, emulator, machine="n0", nodes=32)
        result = client.submit(body)
        (sent,) = submissions(emulator, body["job_label"])
        assert sent["body"]["machine"] == {"type": "ng1", "nodes": 1}, sent
        assert sent["body"]["application"]["walltime"] == "24:00:00", sent
        assert client.fetch_status(result.number).state
        assert list(client.fetch_jobs(completed=False)) == [result.number]
        other_client = client_for(gateways.urls[1], token_for(control_plane, other), gateways.ca_file, other_session)
        assert other_client.fetch_jobs(completed=False) == {}
        with pytest.raises(JobNotFound, match="no job of this pod has that number"):
            other_client.terminate(result.number)
        # Signals (a move home asks the job for its checkpoint) reach the pod's own job only.
        with pytest.raises(JobNotFound, match="no job of this pod has that number"):
            other_client.signal(result.number, 10)
        # SIGCONT: nothing changes for `sleep`. A job still starting (no process yet) answers 404.
        assert demo.wait_for(lambda: signal_once(client, result.number, 18), what="a signal delivered", timeout=30)
        client.terminate(result.number)


def test_a_token_of_a_deleted_pod_or_of_another_audience_is_refused(
    control_plane: controlplane.ControlPlane, namespace: str, gateways: Gateways, emulator: addons.EmulatorProcess
) -> None:
    pod = burst_pod(control_plane, namespace, "gone")
    token = token_for(control_plane, pod)
    wrong = control_plane.kubectl("-n", namespace, "create", "token", "default", "--audience=kube").stdout.strip()
    control_plane.kubectl("-n", namespace, "delete", "pod", "gone", "--wait=false")
    with requests.Session() as session:
        for key in (token, wrong):
            with pytest.raises(CredentialsRejected):
                client_for(gateways.urls[0], key, gateways.ca_file, session).submit(
                    submit_body(pod, emulator, machine="ng1", nodes=1)
                )
    assert submissions(emulator, submit_body(pod, emulator, machine="ng1", nodes=1)["job_label"]) == []


def test_two_replicas_never_both_pass_a_budget(
    control_plane: controlplane.ControlPlane, namespace: str, gateways: Gateways, emulator: addons.EmulatorProcess
) -> None:
    """Two burst pods, then a budget of 1 GPU (set after the webhook decided both: the gateway's check is
    the last one, made when the money is spent), both submitting at the same moment, each to another
    replica: the ledger's precondition lets exactly one through."""
    pods = [burst_pod(control_plane, namespace, f"racer-{i}") for i in range(2)]
    control_plane.kubectl("annotate", "namespace", namespace, "nimbix-burst.io/max-remote-gpus=1")
    tokens = [token_for(control_plane, pod) for pod in pods]
    outcomes: list[str] = ["", ""]
    start = threading.Barrier(2)

    def race(i: int) -> None:
        with requests.Session() as session:
            client = client_for(gateways.urls[i], tokens[i], gateways.ca_file, session)
            body = submit_body(pods[i], emulator, machine="ng1", nodes=1)
            start.wait()
            try:
                client.submit(body)
                outcomes[i] = "submitted"
            except RequestRejected as exc:
                outcomes[i] = str(exc)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(o == "submitted" for o in outcomes) == [False, True], outcomes
    assert any("burst budget is 1 GPU(s)" in o for o in outcomes), outcomes


@pytest.fixture
def controller_token(control_plane: controlplane.ControlPlane, tmp_path: Path) -> Iterator[Path]:
    """The controller's ServiceAccount's token of its own audience, in a file as the kubelet projects it.
    The account is made for the test when the add-on is not installed, and removed after it (a later
    install, Helm's among them, must find its namespace as it would on a fresh cluster)."""
    made = control_plane.kubectl(
        "-n", ADDON_NAMESPACE, "create", "serviceaccount", CONTROLLER_SERVICE_ACCOUNT, check=False
    ).returncode == 0  # fmt: skip
    try:
        audience = f"--audience={DEFAULT_CONTROLLER_AUDIENCE}"
        token = control_plane.kubectl(
            "-n", ADDON_NAMESPACE, "create", "token", CONTROLLER_SERVICE_ACCOUNT, audience
        ).stdout.strip()  # fmt: skip
        path = tmp_path / "controller-token"
        path.write_text(token)
        yield path
    finally:
        if made:
            control_plane.kubectl(
                "-n", ADDON_NAMESPACE, "delete", "serviceaccount", CONTROLLER_SERVICE_ACCOUNT, "--ignore-not-found"
            )


def _submit_with_the_account_key(emulator: addons.EmulatorProcess, body: SubmitBody) -> int:
    env = emulator.runner_env()
    sent = {**body, "user": {"username": env["JARVICE_USERNAME"], "apikey": env["JARVICE_APIKEY"]}}
    with requests.Session() as session:
        session.trust_env = False
        answer = session.post(env["JARVICE_API_URL"].rstrip("/") + "/jarvice/submit", json=sent, timeout=10)
    answer.raise_for_status()
    return int(answer.json()["number"])


def test_the_controller_sees_every_accounts_jobs_with_what_was_counted_and_stops_the_rest(
    control_plane: controlplane.ControlPlane,
    namespace: str,
    gateways: Gateways,
    emulator: addons.EmulatorProcess,
    controller_token: Path,
) -> None:
    """A burst pod's job through the gateway (1 GPU counted), and a 4-GPU job submitted around it with the
    account's key under the pod's next label. The controller's own client, with its token, lists both with
    what the ledger counted (the second: nothing), its decision marks the second, then stops it through
    the gateway; the counted job runs on. A pod's token of the controller's audience is refused (403)."""
    pod = burst_pod(control_plane, namespace, "counted")
    with requests.Session() as session:
        client = client_for(gateways.urls[0], token_for(control_plane, pod), gateways.ca_file, session)
        counted_number = client.submit(submit_body(pod, emulator, machine="ng1", nodes=1)).number
    around = _submit_with_the_account_key(emulator, submit_body(pod, emulator, machine="ng4", nodes=1, attempt=2))
    access = GatewayAccess(gateways.urls[1], str(gateways.ca_file), str(controller_token))
    with requests.Session() as session:
        jobs = GatewayJobs(access, session=session, read_file=lambda p: Path(p).read_text())
        listed = {job.number: job for job in jobs.live_jobs()}
        counted, hand_made = listed[counted_number], listed[around]
        assert counted.counted is not None and (counted.counted.namespace, counted.counted.gpus) == (namespace, 1)
        assert (counted.gpus, hand_made.gpus, hand_made.counted) == (1, 4, None)
        cluster = str({e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}[contract.ENV_CLUSTER])
        decided = {pod["metadata"]["uid"]}
        first = plan_stops(list(listed.values()), cluster=cluster, decided_uids=decided, caps={}, marked=())
        assert first.stop == () and ("emulator", around) in first.marked
        second = plan_stops(jobs.live_jobs(), cluster=cluster, decided_uids=decided, caps={}, marked=first.marked)
        # This test's two jobs (the module's earlier tests may have left live jobs of pods not in `decided`).
        ours = {counted_number, around}
        assert [(s.job.number, s.reason) for s in second.stop if s.job.number in ours] == [(around, "not-decided")]
        jobs.terminate("emulator", around)
    states = {int(j["number"]): j["status"] for j in demo.fetch_emulator(emulator.url, "/_emulator/jobs")}
    assert states[around] == "TERMINATED" and states[counted_number] != "TERMINATED", states
    meta = pod["metadata"]
    stolen = control_plane.kubectl(
        "-n", meta["namespace"], "create", "token", "default", f"--audience={DEFAULT_CONTROLLER_AUDIENCE}"
    ).stdout.strip()  # fmt: skip
    with requests.Session() as session:
        session.trust_env = False
        answer = session.get(
            gateways.urls[0] + "/controller/jobs",
            headers={"Authorization": f"Bearer {stolen}"},
            verify=str(gateways.ca_file),
            timeout=30,
        )
    assert answer.status_code == 403 and "only the controller" in answer.json()["error"], answer.text


def through_gateway(gateways: Gateways, token: str) -> VaultTransfer:
    """The runner's transfers as the webhook sets them up in a gateway namespace: the endpoint's
    address and host key, the pod's token for password."""
    address = vault_settings.VaultSettings(
        "127.0.0.1", gateways.sftp_port, None, keep_job_dir=True, host_key=gateways.ssh_host_key
    )
    return VaultTransfer(
        address, username="pod", apikey=Secret(token), clock=time.monotonic, progress_out=io.StringIO()
    )


def test_a_pod_stages_through_the_gateway_into_its_own_directory_only(
    control_plane: controlplane.ControlPlane, namespace: str, gateways: Gateways, tmp_path: Path
) -> None:
    mine, other = burst_pod(control_plane, namespace, "stager"), burst_pod(control_plane, namespace, "neighbour")
    own = f"nimbix-burst/pod-{mine['metadata']['uid']}.trainer/workspace"
    local = tmp_path / "workspace"
    (local / "data").mkdir(parents=True)
    (local / "data" / "input.bin").write_bytes(payload := os.urandom(300_000))
    transfer = through_gateway(gateways, token_for(control_plane, mine))
    up = transfer.upload(
        [UploadRoot(str(local), str(local), own)],
        totals=sftp_transfer.Totals(),
        never_staged=frozenset(),
        should_stop=lambda: False,
    )
    assert up.complete, up.error
    assert (gateways.vault_dir / own / "data" / "input.bin").read_bytes() == payload
    back = tmp_path / "back"
    down = transfer.download([DownloadRoot(own, str(back))], should_stop=lambda: False)
    assert down.complete, down.error
    assert (back / "data" / "input.bin").read_bytes() == payload
    # The neighbour's token reaches none of it; a deleted pod's token logs in no more.
    neighbour = through_gateway(gateways, token_for(control_plane, other))
    peek = neighbour.download([DownloadRoot(own, str(tmp_path / "peek"))], should_stop=lambda: False)
    assert not peek.complete and "outside this pod's vault directories" in str(peek.error), peek
    gone = token_for(control_plane, other)
    control_plane.kubectl("-n", namespace, "delete", "pod", "neighbour", "--wait=true")
    refused = through_gateway(gateways, gone).download(
        [DownloadRoot(f"nimbix-burst/pod-{other['metadata']['uid']}", str(tmp_path / "x"))], should_stop=lambda: False
    )
    assert not refused.complete
