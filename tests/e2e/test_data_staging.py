"""A burst Job's data follows it: a hostPath PersistentVolume through a PVC, staged through the
emulator's vault (SFTP on the node's gateway) and copied back, as a user sees it with kubectl.

The emulator runs each job in a private mount namespace with its vault at /data (vault.py), so the
job's `/workspace/...` paths are links in its own root, never on this machine."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from devplatform import demo
from devplatform.cluster import addons, controlplane, node
from devplatform.emulator.vault import DEFAULT_VAULT
from tests.support.real_node_pods import RunnerMemory

STAGE_IN = "nimbix-burst.io/stage-in"
STAGE_OUT = "nimbix-burst.io/stage-out"
KNOWN_HOSTS_DIR = "/etc/nimbix-vault"
# The 1 GiB test's size (MB), and its bounds: SSH's encryption on the runner's CPU share (the webhook
# gives burst runners 1 core here, see `webhook`) moves ~10 MiB/s or more each way.
BIG_MB = int(os.environ.get("NIMBIX_BURST_STAGING_TEST_MB", "1024"))
BIG_TIMEOUT_SECONDS = 120 + BIG_MB * 1.2
RSS_GOAL_BYTES = 100 * 1024 * 1024


@pytest.fixture(scope="module")
def emulator(control_plane: controlplane.ControlPlane, real_node: node.RealNode) -> Iterator[addons.EmulatorProcess]:
    """The emulator on the gateway, with vaults (as root: private job roots)."""
    run_dir = control_plane.run_dir / "data-staging-emulator"
    args = (*demo.EMULATOR_ARGS, "--vaults-dir", str(run_dir / "vaults"))
    process = addons.start_jarvice_emulator(run_dir, host=real_node.gateway_address, args=args)
    try:
        yield process
    finally:
        addons.stop_jarvice_emulator(process)


@pytest.fixture(scope="module")
def webhook(control_plane: controlplane.ControlPlane, real_node: node.RealNode) -> Iterator[addons.WebhookProcess]:
    # A runner that stages data encrypts it (SSH): it gets a core, not the default 100m.
    with addons.registered_webhook(
        control_plane, control_plane.run_dir / "staging-webhook", name_suffix="-staging", args=("--remote-cpu", "1")
    ) as hook:
        yield hook


def vault_info(emulator: addons.EmulatorProcess) -> dict[str, Any]:
    session = requests.Session()
    session.trust_env = False
    return dict(session.get(f"{emulator.url}/_emulator/vault", timeout=10).json())


@pytest.fixture
def ns(
    namespace: str,
    control_plane: controlplane.ControlPlane,
    emulator: addons.EmulatorProcess,
    webhook: addons.WebhookProcess,
) -> str:
    info = vault_info(emulator)
    objects = [
        demo.build_secret(emulator, namespace=namespace),
        configmap(namespace, "vault-known-hosts", {"known_hosts": info["known_hosts"]}),
        configmap(namespace, "train-config", {"config.yaml": "epochs: 3\nlr: 0.01\n"}),
    ]
    apply(control_plane, *objects)
    return namespace


def configmap(namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def apply(plane: controlplane.ControlPlane, *objects: dict[str, Any]) -> str:
    listed = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    done = plane.kubectl("apply", "-f", "-", input=json.dumps(listed))
    return str(done.stderr)


def volume(plane: controlplane.ControlPlane, namespace: str, host_dir: Path) -> None:
    """A hostPath PersistentVolume bound to the PVC `training-data` of `namespace`."""
    host_dir.mkdir(parents=True, exist_ok=True)
    host_dir.chmod(0o777)  # the runner runs as uid 10001
    pv_name = f"pv-{namespace}"
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name, "labels": {"nimbix-burst-test": "1"}},
        "spec": {
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(host_dir), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": "training-data"},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "training-data", "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "5Gi"}},
        },
    }
    apply(plane, pv, pvc)


def train_pod(
    emulator: addons.EmulatorProcess,
    command: str,
    *,
    annotations: dict[str, str],
    config: bool = False,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The example app with 8 GPUs (the node has 4: burst), the PVC at /workspace."""
    info = vault_info(emulator)
    env = {
        "NIMBIX_BURST_VAULT_SFTP": info["sftp"],
        "NIMBIX_BURST_VAULT_KNOWN_HOSTS": f"{KNOWN_HOSTS_DIR}/known_hosts",
        "LOG_LEVEL": "INFO",
        **(extra_env or {}),
    }
    container = demo.build_app_container(command=command, gpus=8, app_name=emulator.runner_env()["APP_NAME"], env=env)
    mounts = [
        {"name": "data", "mountPath": "/workspace"},
        {"name": "known-hosts", "mountPath": KNOWN_HOSTS_DIR, "readOnly": True},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "training-data"}},
        {"name": "known-hosts", "configMap": {"name": "vault-known-hosts"}},
    ]
    if config:
        mounts.append({"name": "config", "mountPath": "/etc/train", "readOnly": True})
        volumes.append({"name": "config", "configMap": {"name": "train-config"}})
    container["volumeMounts"] = mounts
    spec = demo.build_real_node_placement({"restartPolicy": "Never", "containers": [container], "volumes": volumes})
    return {
        "metadata": {"labels": {"task-type": "Nimbix"}, "annotations": annotations},
        "spec": spec,
    }


def job(name: str, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": template},
    }


def job_pod(plane: controlplane.ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    listed = plane.read("pods", namespace=namespace, labels=f"job-name={name}")
    items = listed.get("items") or []
    return dict(items[0]) if items else None


def wait_job_pod(
    plane: controlplane.ControlPlane, namespace: str, name: str, *, timeout: float = 180.0
) -> dict[str, Any]:
    result: dict[str, Any] = demo.wait_for(
        lambda: (
            (pod := job_pod(plane, namespace, name)) is not None
            and pod["status"].get("phase") in ("Succeeded", "Failed")
            and pod
        ),
        what=f"job {name}'s pod finished",
        timeout=timeout,
    )
    return result


def logs(plane: controlplane.ControlPlane, namespace: str, pod: dict[str, Any]) -> str:
    return str(plane.kubectl("logs", "-n", namespace, pod["metadata"]["name"], check=False).stdout)


def create_job(plane: controlplane.ControlPlane, namespace: str, manifest: dict[str, Any]) -> None:
    plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def test_a_staged_job_reads_its_input_and_config_remotely_and_its_output_lands_on_the_pvc(
    control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str
) -> None:
    host_dir = control_plane.run_dir / "pv" / ns
    volume(control_plane, ns, host_dir)
    (host_dir / "data").mkdir()
    (host_dir / "data" / "input.txt").write_text("the training set\n")
    command = (
        "cat /workspace/data/input.txt /etc/train/config.yaml;"
        " mkdir -p /workspace/out/model && echo trained > /workspace/out/model/weights.txt"
    )
    annotations = {STAGE_IN: "/workspace/data", STAGE_OUT: "/workspace/out"}
    create_job(control_plane, ns, job("train", train_pod(emulator, command, annotations=annotations, config=True)))
    pod = wait_job_pod(control_plane, ns, "train")
    text = logs(control_plane, ns, pod)
    assert pod["metadata"]["annotations"]["nimbix-burst.io/decision"] == "remote"
    assert demo.read_exit_code(pod) == 0, text
    assert "the training set\nepochs: 3\nlr: 0.01\n" in text
    assert (host_dir / "out" / "model" / "weights.txt").read_text() == "trained\n"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["NIMBIX_BURST_STAGE_IN"] == f"/workspace/data,{KNOWN_HOSTS_DIR},/etc/train"
    assert not Path("/etc/train").exists()  # the job's links stayed in its own root


def test_keep_vault_dir_keeps_the_vault_directory_after_a_complete_copy_back(
    control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str
) -> None:
    """`NIMBIX_BURST_KEEP_VAULT_DIR=1`: after a success and a complete copy-back, the job's directory stays
    in the vault (input and output as the job left them), where it is otherwise removed."""
    host_dir = control_plane.run_dir / "pv" / ns
    volume(control_plane, ns, host_dir)
    (host_dir / "data").mkdir()
    (host_dir / "data" / "input.txt").write_text("kept input\n")
    command = "mkdir -p /workspace/out && echo kept-output > /workspace/out/result.txt"
    annotations = {STAGE_IN: "/workspace/data", STAGE_OUT: "/workspace/out"}
    template = train_pod(emulator, command, annotations=annotations, extra_env={"NIMBIX_BURST_KEEP_VAULT_DIR": "1"})
    create_job(control_plane, ns, job("kept", template))
    pod = wait_job_pod(control_plane, ns, "kept")
    text = logs(control_plane, ns, pod)
    assert demo.read_exit_code(pod) == 0, text
    assert (host_dir / "out" / "result.txt").read_text() == "kept-output\n"  # the copy-back was complete
    kept = [json.loads(line) for line in text.splitlines() if '"keeping the job\'s vault directory"' in line]
    assert len(kept) == 1, text[-4000:]
    info = vault_info(emulator)
    user = emulator.runner_env()["JARVICE_USERNAME"]
    directory = Path(info["root"]) / user / DEFAULT_VAULT / kept[0]["vault_dir"]
    contents = {path.name: path.read_text() for path in directory.rglob("*.txt")}
    assert contents == {"input.txt": "kept input\n", "result.txt": "kept-output\n"}, (directory, contents)


def test_a_pod_mounting_a_pvc_without_staging_is_not_burst_and_says_why(
    control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str
) -> None:
    volume(control_plane, ns, control_plane.run_dir / "pv" / ns)
    pod = {"apiVersion": "v1", "kind": "Pod", **train_pod(emulator, "true", annotations={})}
    pod["metadata"]["name"] = "unstaged"
    done = control_plane.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(pod))
    assert "persistentVolumeClaim data would not follow the job" in done.stderr
    annotations = demo.read_pod(control_plane, ns, "unstaged")["metadata"]["annotations"]
    assert annotations["nimbix-burst.io/decision"] == "local"
    assert annotations["nimbix-burst.io/data-not-staged"].startswith("persistentVolumeClaim data (container ")
    assert STAGE_IN in annotations["nimbix-burst.io/reason"]


def test_a_dropped_sftp_connection_resumes(
    control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str
) -> None:
    host_dir = control_plane.run_dir / "pv" / ns
    volume(control_plane, ns, host_dir)
    data = os.urandom(6 << 20)
    (host_dir / "data").mkdir()
    (host_dir / "data" / "shard.bin").write_bytes(data)
    session = requests.Session()
    session.trust_env = False
    # The runner's first session takes the Job's vault directory (its lease: a few bytes, never cut);
    # the second (the first of the upload's sessions, which share the file's blocks) is cut after 1 MiB.
    session.post(f"{emulator.url}/_emulator/vault-faults", json={"after_bytes": 1 << 20, "sessions": 2}, timeout=10)
    cut_before = vault_info(emulator)["faults"]["cut"]
    annotations = {STAGE_IN: "/workspace/data"}
    template = train_pod(emulator, "sha256sum /workspace/data/shard.bin", annotations=annotations)
    create_job(control_plane, ns, job("resume", template))
    pod = wait_job_pod(control_plane, ns, "resume")
    text = logs(control_plane, ns, pod)
    assert demo.read_exit_code(pod) == 0, text
    assert hashlib.sha256(data).hexdigest() in text
    assert vault_info(emulator)["faults"]["cut"] == cut_before + 1
    assert "vault connection lost; resuming" in text


def test_a_deleted_running_job_copies_back_what_it_had(
    control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str
) -> None:
    host_dir = control_plane.run_dir / "pv" / ns
    volume(control_plane, ns, host_dir)
    command = "mkdir -p /workspace/ckpt && echo epoch-1 > /workspace/ckpt/epoch-1.txt; echo checkpointed; sleep 300"
    create_job(control_plane, ns, job("long", train_pod(emulator, command, annotations={STAGE_OUT: "/workspace/ckpt"})))
    demo.wait_for(
        lambda: (
            (pod := job_pod(control_plane, ns, "long")) is not None and "checkpointed" in logs(control_plane, ns, pod)
        ),
        what="the job's checkpoint",
        timeout=180,
    )
    control_plane.kubectl("delete", "-n", ns, "job", "long", "--wait=false")
    demo.wait_for((host_dir / "ckpt" / "epoch-1.txt").exists, what="the checkpoint on the PVC", timeout=120)
    assert (host_dir / "ckpt" / "epoch-1.txt").read_text() == "epoch-1\n"
    jobs = [j for j in demo.fetch_emulator(emulator.url, "/_emulator/jobs") if j.get("stop_reason")]
    assert "shutdown" in [j["stop_reason"] for j in jobs]


def test_a_large_input_is_staged_in_bounded_memory(
    control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str
) -> None:
    host_dir = control_plane.run_dir / "pv" / ns
    volume(control_plane, ns, host_dir)
    (host_dir / "data").mkdir()
    big = host_dir / "data" / "big.bin"
    block = os.urandom(1 << 20)
    digest = hashlib.sha256()
    with big.open("wb") as out:
        for _ in range(BIG_MB):
            out.write(block)
            digest.update(block)
    template = train_pod(emulator, "sha256sum /workspace/data/big.bin", annotations={STAGE_IN: "/workspace/data"})
    create_job(control_plane, ns, job("big", template))
    pod = demo.wait_for(
        lambda: (p := job_pod(control_plane, ns, "big")) is not None and p["metadata"].get("uid") and p,
        what="job big's pod",
        timeout=60,
    )
    sampler = RunnerMemory(pod["metadata"]["uid"], interval=0.5)
    started = time.monotonic()
    try:
        finished = wait_job_pod(control_plane, ns, "big", timeout=BIG_TIMEOUT_SECONDS)
    finally:
        sampler.stop()
    text = logs(control_plane, ns, finished)
    print(
        f"\n{BIG_MB} MiB staged in and checked in {time.monotonic() - started:.0f} s;"
        f" the runner's peak RSS (VmHWM) {sampler.vm_hwm_kib / 1024:.1f} MiB"
    )
    assert demo.read_exit_code(finished) == 0, text[-4000:]
    assert digest.hexdigest() in text
    assert 0 < sampler.vm_hwm_kib * 1024 < RSS_GOAL_BYTES


SMALL_FILES = 20_000
CHECKPOINTED_BIG_MB = 256
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"
# The job: check its inputs; on the first attempt write the outputs and a checkpoint and fail; on the
# retry (the checkpoint came back to the PVC and was staged in again) resume from it and succeed.
CHECKPOINTED_COMMAND = (
    'echo "inputs $(find /workspace/data/files -type f | wc -l)"; sha256sum /workspace/data/big.bin;'
    " test -e /workspace/data/token-link && echo TOKEN-STAGED;"
    " if [ -f /workspace/ckpt/epoch-1 ]; then echo resumed-from-$(cat /workspace/ckpt/epoch-1); exit 0; fi;"
    f" mkdir -p /workspace/out && cd /workspace/out && seq -f 'out-%06g' 1 {SMALL_FILES} | xargs touch;"
    " echo epoch-1 > /workspace/ckpt/epoch-1; echo checkpointed; exit 3"
)


def finished_pod(plane: controlplane.ControlPlane, namespace: str, uid: str) -> dict[str, Any] | None:
    listed = plane.read("pods", namespace=namespace)
    for pod in listed.get("items") or []:
        if pod["metadata"]["uid"] == uid and pod["status"].get("phase") in ("Succeeded", "Failed"):
            return dict(pod)
    return None


def test_a_job_that_fails_after_a_checkpoint_is_resumed_by_its_retry(
    control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess, ns: str
) -> None:
    """Acceptance: 20,000 small files and one 256 MiB file in, 20,000 outputs and a checkpoint
    back after a failure, the retry resumes from the checkpoint; a link to the pod's
    service-account token is not staged; the runner stays under 100 MB."""
    host_dir = control_plane.run_dir / "pv" / ns
    volume(control_plane, ns, host_dir)
    files = host_dir / "data" / "files"
    for shard in range(SMALL_FILES // 1000):
        (files / f"class-{shard:03d}").mkdir(parents=True)
        for i in range(1000):
            (files / f"class-{shard:03d}" / f"img-{i:04d}.jpg").write_bytes(b"%d-%d" % (shard, i))
    block, digest = os.urandom(1 << 20), hashlib.sha256()
    with (host_dir / "data" / "big.bin").open("wb") as out:
        for _ in range(CHECKPOINTED_BIG_MB):
            out.write(block)
            digest.update(block)
    (host_dir / "data" / "token-link").symlink_to(TOKEN_PATH)  # in the pod: its own token
    annotations = {STAGE_IN: "/workspace/data,/workspace/ckpt", STAGE_OUT: "/workspace/out,/workspace/ckpt"}
    manifest = job("checkpointed", train_pod(emulator, CHECKPOINTED_COMMAND, annotations=annotations))
    manifest["spec"]["backoffLimit"] = 1
    create_job(control_plane, ns, manifest)

    peaks: dict[str, float] = {}
    texts: dict[str, str] = {}
    deadline = time.monotonic() + 900
    while len(texts) < 2 and time.monotonic() < deadline:
        listed = control_plane.read("pods", namespace=ns, labels="job-name=checkpointed")
        for pod in listed.get("items") or []:
            uid = pod["metadata"]["uid"]
            if uid in texts:
                continue
            sampler = RunnerMemory(uid, interval=0.5)
            try:
                finished = demo.wait_for(
                    functools.partial(finished_pod, control_plane, ns, uid),
                    what="an attempt of Job checkpointed finished",
                    timeout=max(1.0, deadline - time.monotonic()),
                )
            finally:
                sampler.stop()
            peaks[uid] = sampler.vm_hwm_kib / 1024
            texts[uid] = logs(control_plane, ns, finished) + f"\nexit {demo.read_exit_code(finished)}"
        time.sleep(1)
    first, retry = list(texts.values())
    print(f"\nthe runners' peak RSS (VmHWM): {', '.join(f'{p:.1f} MiB' for p in peaks.values())}")
    assert f"inputs {SMALL_FILES}" in first and digest.hexdigest() in first, first[-4000:]
    assert "checkpointed" in first and first.endswith("exit 3"), first[-4000:]
    assert "resumed-from-epoch-1" in retry and retry.endswith("exit 0"), retry[-4000:]
    for text in (first, retry):
        assert "TOKEN-STAGED" not in text
        assert "not staging a link that leads out of the staged path" in text
    assert len(list((host_dir / "out").iterdir())) == SMALL_FILES
    assert (host_dir / "ckpt" / "epoch-1").read_text() == "epoch-1\n"
    assert all(0 < peak < RSS_GOAL_BYTES / (1 << 20) for peak in peaks.values()), peaks
    # The retry found the Job's vault directory as the failed pod left it: every input already there.
    staged = stage_in_complete(retry)
    print(
        f"the retry's stage-in: {staged['files']} files sent, {staged['unchanged']} unchanged, {staged['bytes']} bytes"
    )
    assert staged["unchanged"] >= SMALL_FILES + 1 and staged["bytes"] < (1 << 20), staged
    assert "keeping the Job's vault directory for a retry" in first


def stage_in_complete(text: str) -> dict[str, Any]:
    """The runner's `stage-in complete` log line."""
    for line in text.splitlines():
        if line.startswith("{") and '"stage-in complete"' in line:
            return dict(json.loads(line))
    raise AssertionError(f"no stage-in complete line:\n{text[-3000:]}")
