"""The controller's `GET /controller/checkpoint`: the gateway's HTTPS route in front of the emulator's
vault (a real asyncssh SFTP server), asked by the controller's own client (controller.gatewayjobs). It
answers the newest complete checkpoint in the directory the pod's runner stages into (its Job's under
the lease it holds, else its own), never a path out of the pod's directories, and says why when it
cannot. The API server's answers (TokenReview, the pod, its Job) come from a table: the e2e tier runs
the route's callers against the real one (tests/e2e/test_gateway_process.py)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import kubernetes
import pytest
import requests
from aiohttp import web

from controller.gatewayjobs import GatewayAccess, GatewayError, GatewayJobs
from controller.moving import LastCheckpoint
from devplatform.cluster.pki import issue_cert, make_ca, write_pair
from devplatform.emulator import EmulatorControl, Timing
from gateway.accounts import Account, Accounts, VaultAccess
from gateway.checkpoint_reader import MAX_LISTED_ENTRIES, CheckpointReader
from gateway.kube import KubeAdapter, StoredLedger
from gateway.metrics import GatewayMetrics
from gateway.oversight import Oversight, controller_user
from gateway.server import refusals
from gateway.submits import Submits, SubmitTiming
from gateway.upstream import Upstream
from gateway.vault_server import connect_vault
from jarvice.redaction import Secret
from tests.support import vaults
from tests.support.deadlines import HANG_SECONDS
from tests.support.runner_processes import API_KEY, APP, FAST_TIMING, USER

pytestmark = pytest.mark.timeout(HANG_SECONDS)

AUDIENCE = "nimbix-burst-gateway-controller"
CONTROLLER = controller_user("nimbix-burst", "nimbix-burst-controller")
CONTROLLER_TOKEN, POD_TOKEN = "token-of-the-controller", "token-of-a-pod"
POD, OTHER_POD, JOB = (str(uuid.UUID(int=n)) for n in (11, 12, 13))
OWN, OTHER_OWN, SHARED = (
    f"nimbix-burst/pod-{POD}.main",
    f"nimbix-burst/pod-{OTHER_POD}.main",
    f"nimbix-burst/job-{JOB}.main",
)
LEASE = f"nimbix-burst/.leases/job-{JOB}.main"
CKPT = "workspace/ckpt"


def a_pod(uid: str, *, job: str | None = None) -> dict[str, Any]:
    env = [{"name": "NIMBIX_BURST_CONTAINER", "value": "main"}]
    meta: dict[str, Any] = {
        "name": "train-abcde",
        "namespace": "team",
        "uid": uid,
        "annotations": {
            "nimbix-burst.io/checkpoint-dir": f"/{CKPT}",
            "nimbix-burst.io/checkpoint-interval": "10s",
            "nimbix-burst.io/stage-in": "/workspace",
            "nimbix-burst.io/stage-out": "/workspace",
        },
    }
    if job is not None:
        env.append({"name": "NIMBIX_BURST_DATA_KEY", "value": f"job-{job}"})
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job, "controller": True}
        ]
    return {"metadata": meta, "spec": {"containers": [{"name": "app", "env": env}]}}


@dataclass
class Cluster:
    """What the route reads of the API server: token reviews by a table, pods and Jobs as stored."""

    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    jobs: dict[tuple[str, str], str] = field(default_factory=dict)

    def review_token(self, token: str, *, audience: str) -> dict[str, Any]:
        users = {CONTROLLER_TOKEN: CONTROLLER, POD_TOKEN: "system:serviceaccount:team:default"}
        if token not in users:
            return {"status": {"authenticated": False, "error": "invalid bearer token"}}
        return {"status": {"authenticated": True, "audiences": [audience], "user": {"username": users[token]}}}

    def read_ledger(self) -> StoredLedger:
        return StoredLedger(text=None, resource_version=None)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get((namespace, name))

    def job_uid(self, namespace: str, name: str) -> str | None:
        return self.jobs.get((namespace, name))


@dataclass(frozen=True)
class Gateway:
    url: str
    ca_file: Path
    stored: Path  # the vault's directory on disk
    cluster: Cluster


def _serve(app_factory: Any, ssl_context: ssl.SSLContext) -> tuple[asyncio.AbstractEventLoop, web.AppRunner, int]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def start() -> tuple[web.AppRunner, int]:
        runner = web.AppRunner(await app_factory())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        return runner, runner.addresses[0][1]

    runner, port = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
    return loop, runner, port


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    root = tmp_path_factory.mktemp("vaults")
    with vaults.vault_emulator(root, user=USER, apikey=API_KEY, app=APP, timing=Timing(**FAST_TIMING)) as emu:
        with EmulatorControl(emu.url) as ctl:
            info = ctl.session.get(f"{emu.url}/_emulator/vault", timeout=5).json()
        host, _, port = info["sftp"].rpartition(":")
        vault = VaultAccess(host, int(port), " ".join(info["known_hosts"].split()[1:3]), USER, Secret(API_KEY), None)
        accounts = Accounts(
            (
                Account("research", USER, Secret(API_KEY), emu.url, ("team",), vault),
                Account("no-vault", USER, Secret(API_KEY), emu.url, ("plain",)),
            )
        )
        cluster = Cluster()
        ca = make_ca("gateway-test-ca")
        serving = issue_cert(ca, common_name="gateway", ip_addresses=["127.0.0.1"], server=True)
        write_pair(serving, cert_path=root / "tls.crt", key_path=root / "tls.key")
        (root / "ca.crt").write_bytes(ca.cert_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(root / "tls.crt", root / "tls.key")
        session: list[aiohttp.ClientSession] = []

        async def app() -> web.Application:
            session.append(aiohttp.ClientSession())
            upstream = Upstream(session[0])
            unused = KubeAdapter(kubernetes.client.ApiClient(), namespace="nimbix-burst")  # the submit routes'
            oversight = Oversight(
                kube=cluster,
                upstream=upstream,
                submits=Submits(unused, upstream, clock=time.monotonic, wall_clock=time.time, timing=SubmitTiming()),
                accounts=accounts,
                audience=AUDIENCE,
                user=CONTROLLER,
                # The product's 20 s deadline is for the controller's ask; here the hang guard: listing the
                # bound's 10,001 entries took over 20 s beside make test's other tiers.
                checkpoints=CheckpointReader(
                    cluster, accounts, connect=connect_vault, wall_clock=time.time, ask_seconds=HANG_SECONDS
                ),
            )
            served = web.Application(middlewares=[refusals(GatewayMetrics())])
            oversight.add_routes(served)
            return served

        loop, runner, gateway_port = _serve(app, context)
        try:
            yield Gateway(
                f"https://127.0.0.1:{gateway_port}", root / "ca.crt", root / USER / "drop.jarvice.com", cluster
            )
        finally:

            async def stop() -> None:
                await runner.cleanup()
                await session[0].close()

            asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)


def ask(
    gateway: Gateway, uid: str = POD, *, token: str = CONTROLLER_TOKEN, name: str = "train-abcde"
) -> LastCheckpoint:
    with requests.Session() as session:
        session.trust_env = False
        access = GatewayAccess(gateway.url, str(gateway.ca_file), "token-file")
        return GatewayJobs(access, session=session, read_file=lambda _: token).newest_checkpoint("team", name, uid)


def write(gateway: Gateway, path: str, mtime: float, text: str = "{}") -> None:
    where = gateway.stored / path
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(text)
    os.utime(where, (mtime, mtime))


def lease(gateway: Gateway, holder: str) -> None:
    text = json.dumps({"format": 1, "pod": holder, "job_label": "k8s-x"}) + "\n"
    write(gateway, LEASE, time.time(), text)


def test_the_newest_complete_checkpoint_in_the_jobs_directory_its_pod_holds(gateway: Gateway) -> None:
    gateway.cluster.pods[("team", "train-abcde")] = a_pod(POD, job=JOB)
    gateway.cluster.jobs[("team", "train")] = JOB
    now = time.time()
    write(gateway, f"{SHARED}/{CKPT}/step-00000010.json", now - 20)
    write(gateway, f"{SHARED}/{CKPT}/step-00000020.json", now - 10)
    write(gateway, f"{SHARED}/{CKPT}/.step-00000030.json.tmp", now - 1)  # a write under way
    write(gateway, f"{SHARED}/{CKPT}/.hidden", now - 1)
    older = gateway.stored / SHARED / CKPT / "checkpoint-5"  # a directory checkpoint, older than step 20
    older.mkdir(exist_ok=True)
    os.utime(older, (now - 60, now - 60))
    (gateway.stored / SHARED / CKPT / "tmp-checkpoint-30").mkdir(exist_ok=True)  # a directory being written
    write(gateway, f"{OWN}/{CKPT}/step-00000099.json", now)  # not where the runner stages: never looked at
    lease(gateway, POD)
    assert ask(gateway) == LastCheckpoint("step-00000020.json", float(int(now - 10)))
    lease(gateway, OTHER_POD)  # another pod holds the Job's directory: the runner staged into its own
    assert ask(gateway) == LastCheckpoint("step-00000099.json", float(int(now)))


def test_a_checkpoint_dated_in_the_future_is_not_taken_for_the_newest(gateway: Gateway) -> None:
    """os.utime into the future (or a copy keeping another clock's times) must not keep a job fresh for
    ever: the answer is the newest file dated no later than the gateway's clock and the slack."""
    uid = str(uuid.UUID(int=41))
    gateway.cluster.pods[("team", "dated")] = {**a_pod(uid), "metadata": {**a_pod(uid)["metadata"], "name": "dated"}}
    now = time.time()
    write(gateway, f"nimbix-burst/pod-{uid}.main/{CKPT}/step-00000010.json", now - 600)
    write(gateway, f"nimbix-burst/pod-{uid}.main/{CKPT}/step-99999999.json", now + 10 * 365 * 24 * 3600)
    assert ask(gateway, uid, name="dated") == LastCheckpoint("step-00000010.json", float(int(now - 600)))


def test_a_directory_of_more_entries_than_a_listing_reads_is_not_known(gateway: Gateway) -> None:
    """A job can fill its checkpoint directory with files by the million: read whole at every homecoming
    round, it would hold the gateway's memory (256 Mi, shared by every tenant's submits) and its CPU.
    The listing stops at its bound: the age is not known (the controller's rule for an unanswered ask)."""
    uid = str(uuid.UUID(int=51))
    gateway.cluster.pods[("team", "full")] = {**a_pod(uid), "metadata": {**a_pod(uid)["metadata"], "name": "full"}}
    directory = gateway.stored / f"nimbix-burst/pod-{uid}.main/{CKPT}"
    directory.mkdir(parents=True)
    for n in range(MAX_LISTED_ENTRIES + 1):
        (directory / f"f{n}").touch()
    with pytest.raises(GatewayError, match=rf"HTTP 409: .*more than {MAX_LISTED_ENTRIES} entries"):
        ask(gateway, uid, name="full")
    (directory / "f0").unlink()  # at the bound: read, and answered
    assert ask(gateway, uid, name="full").name.startswith("f")


def test_no_checkpoint_yet_and_no_directory_yet_are_none(gateway: Gateway) -> None:
    uid = str(uuid.UUID(int=21))
    gateway.cluster.pods[("team", "fresh")] = {**a_pod(uid), "metadata": {**a_pod(uid)["metadata"], "name": "fresh"}}
    assert ask(gateway, uid, name="fresh") == LastCheckpoint()
    write(gateway, f"nimbix-burst/pod-{uid}.main/{CKPT}/.step-00000010.json.tmp", time.time())
    assert ask(gateway, uid, name="fresh") == LastCheckpoint()


def test_a_link_out_of_the_pods_directory_is_refused(gateway: Gateway) -> None:
    uid = str(uuid.UUID(int=31))
    gateway.cluster.pods[("team", "linked")] = {**a_pod(uid), "metadata": {**a_pod(uid)["metadata"], "name": "linked"}}
    write(gateway, f"{OTHER_OWN}/{CKPT}/step-00000010.json", time.time())
    workspace = gateway.stored / f"nimbix-burst/pod-{uid}.main/workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "ckpt").symlink_to(f"../../pod-{OTHER_POD}.main/workspace/ckpt")
    with pytest.raises(GatewayError, match=r"HTTP 403: .*a symbolic link on the path leads out of this pod's vault"):
        ask(gateway, uid, name="linked")


@pytest.mark.parametrize(
    ("token", "uid", "says"),
    [
        (POD_TOKEN, POD, r"HTTP 403: .*only the controller"),
        ("nobody", POD, r"HTTP 401: .*not accepted"),
        (CONTROLLER_TOKEN, OTHER_POD, rf"HTTP 404: .*no pod team/train-abcde with UID {OTHER_POD}"),
    ],
)
def test_anyone_but_the_controller_and_a_replaced_pod_are_refused(
    gateway: Gateway, token: str, uid: str, says: str
) -> None:
    gateway.cluster.pods[("team", "train-abcde")] = a_pod(POD, job=JOB)
    with pytest.raises(GatewayError, match=says):
        ask(gateway, uid, token=token)


def test_a_pod_without_a_checkpoint_place_or_vault_says_why(gateway: Gateway) -> None:
    bare = a_pod(POD)
    bare["metadata"] = {**bare["metadata"], "annotations": {}}
    gateway.cluster.pods[("team", "train-abcde")] = bare
    with pytest.raises(GatewayError, match=r"HTTP 409: .*names no nimbix-burst.io/checkpoint-dir"):
        ask(gateway)
    plain = a_pod(POD)
    plain["metadata"] = {**plain["metadata"], "namespace": "plain"}
    gateway.cluster.pods[("plain", "train-abcde")] = plain
    with requests.Session() as session:
        session.trust_env = False
        access = GatewayAccess(gateway.url, str(gateway.ca_file), "token-file")
        jobs = GatewayJobs(access, session=session, read_file=lambda _: CONTROLLER_TOKEN)
        with pytest.raises(
            GatewayError, match=r"HTTP 409: .*no account of this cluster with a vault pays for namespace"
        ):
            jobs.newest_checkpoint("plain", "train-abcde", POD)
