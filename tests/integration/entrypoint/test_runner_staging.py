"""The runner stages a container's data through the emulator's vault: over SFTP before the submit,
linked at the same absolute paths in the job, copied back after it ends.

The runner runs as a real subprocess in a mount namespace of its own with a tmpfs at /srv (its
"pod volume"), so the staged paths (/srv/...) exist for the runner and, through the emulator's private
root (an empty host directory is the job's own), for the job, and nothing is written on the host.
Needs root (the emulator's private roots): the dev machine runs as root."""

import hashlib
import json
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devplatform.emulator import EmulatorControl, EmulatorThread, Timing
from jarvice import contract, vault_layout
from tests.support import vaults
from tests.support.runner_processes import API_KEY, APP, FAST_TIMING, ROOT, USER, base_env, label_of

# Only a hang guard: the runner measured by coverage on a loaded 2-core machine stages 8,000 names in ~40-70 s.
RUNNER_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def vault_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmulatorThread, Path]]:
    root = tmp_path_factory.mktemp("vaults")
    with vaults.vault_emulator(root, user=USER, apikey=API_KEY, app=APP, timing=Timing(**FAST_TIMING)) as emu:
        yield emu, root


def vault_info(url: str) -> dict[str, Any]:
    with EmulatorControl(url) as ctl:
        return dict(ctl.session.get(f"{url}/_emulator/vault", timeout=5).json())


def run_in_pod(env: dict[str, str], *, setup: str, collect: Path) -> tuple[int, str, str]:
    """The runner in its own mount namespace: a tmpfs at /srv, `setup` run first, /srv copied to
    `collect` afterwards (what the pod's volume holds)."""
    runner, copy = shlex.quote(sys.executable), shlex.quote(str(collect))
    script = (
        f"set -e; mount -t tmpfs pod-volume /srv; {setup}; set +e;"
        f" {runner} -m entrypoint; rc=$?; cp -a /srv/. {copy}/; exit $rc"
    )
    collect.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "bash", "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=RUNNER_TIMEOUT,
        check=False,
    )
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert API_KEY not in out + err
    return done.returncode, out, err


def staged_env(url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    info = vault_info(url)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(info["known_hosts"])
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return base_env(
        url,
        NIMBIX_BURST_VAULT_SFTP=info["sftp"],
        NIMBIX_BURST_VAULT_KNOWN_HOSTS=str(known_hosts),
        NIMBIX_BURST_STATE_DIR=str(state),
        **extra,
    )


def test_inputs_are_read_remotely_and_outputs_land_in_the_pod_volume(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, root = vault_emulator
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_IN="/srv/ws/data,/srv/ws/config.yaml",
        NIMBIX_BURST_STAGE_OUT="/srv/ws/out",
        APP_COMMAND_ARGS="cat /srv/ws/data/a.txt /srv/ws/data/sub/b.txt /srv/ws/config.yaml;"
        " mkdir -p /srv/ws/out/nested && echo model > /srv/ws/out/nested/model.txt && ls -ld /srv/ws/data",
    )
    setup = (
        "mkdir -p /srv/ws/data/sub && echo alpha > /srv/ws/data/a.txt && echo beta > /srv/ws/data/sub/b.txt"
        " && echo 'epochs: 3' > /srv/ws/config.yaml"
    )
    code, out, err = run_in_pod(env, setup=setup, collect=tmp_path / "pod")
    assert code == 0, err
    assert "alpha\nbeta\nepochs: 3\n" in out
    assert "->" in out  # the job saw a link to its vault copy
    assert (tmp_path / "pod" / "ws" / "out" / "nested" / "model.txt").read_text() == "model\n"
    assert "nimbix-burst: stage-in" in err and "nimbix-burst: copy-back" in err
    # The per-job directory is removed after a complete copy-back.
    job_dir = root / USER / "drop.jarvice.com" / "nimbix-burst" / f"pod-{env['POD_UID']}"
    assert (job_dir.parent).is_dir() and not job_dir.exists()
    assert not Path("/srv/ws").exists()  # nothing on the host


def test_a_dropped_sftp_connection_resumes_and_the_file_arrives_whole(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, _root = vault_emulator
    with EmulatorControl(emu.url) as ctl:
        cut_before = vault_info(emu.url)["faults"]["cut"]
        ctl.session.post(f"{emu.url}/_emulator/vault-faults", json={"after_bytes": 1 << 20, "sessions": 2}, timeout=5)
    size = 8 << 20
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_IN="/srv/big.bin",
        APP_COMMAND_ARGS="sha256sum /srv/big.bin",
    )
    setup = f"head -c {size} /dev/urandom > /srv/big.bin && sha256sum /srv/big.bin > /srv/sum"
    code, out, err = run_in_pod(env, setup=setup, collect=tmp_path / "pod")
    assert code == 0, err
    expected = (tmp_path / "pod" / "sum").read_text().split()[0]
    assert expected in out
    assert vault_info(emu.url)["faults"]["cut"] >= cut_before + 1
    assert "vault connection lost; resuming" in err


def test_a_missing_stage_in_path_submits_nothing(vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path) -> None:
    emu, _root = vault_emulator
    env = staged_env(emu.url, tmp_path, NIMBIX_BURST_STAGE_IN="/srv/absent", APP_COMMAND_ARGS="true")
    code, _out, err = run_in_pod(env, setup="true", collect=tmp_path / "pod")
    assert code == 78, err
    with EmulatorControl(emu.url) as ctl:
        assert ctl.session.get(f"{emu.url}/_emulator/jobs", params={"job_label": label_of(env)}, timeout=5).json() == []


def test_a_deleted_pod_shuts_the_job_down_and_copies_back_what_it_wrote(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, _root = vault_emulator
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_OUT="/srv/ws/out",
        APP_COMMAND_ARGS="echo epoch-1 > /srv/ws/out/checkpoint-1; echo checkpointed; sleep 60",
    )
    collect = tmp_path / "pod"
    collect.mkdir()
    runner, copy = shlex.quote(sys.executable), shlex.quote(str(collect))
    # The kubelet's SIGTERM goes to the runner; the shell waits for it, then reads the "volume".
    script = (
        f"mount -t tmpfs pod-volume /srv; mkdir -p /srv/ws; {runner} -m entrypoint & pid=$!;"
        f" trap 'kill -TERM $pid' TERM; wait $pid; wait $pid; rc=$?; cp -a /srv/. {copy}/; exit $rc"
    )
    process = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "bash", "-c", script],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if b"checkpointed" in line:
            break
    process.send_signal(15)
    _out, err_bytes = process.communicate(timeout=RUNNER_TIMEOUT)
    err = err_bytes.decode(errors="replace")
    assert process.returncode == 143, err
    assert (collect / "ws" / "out" / "checkpoint-1").read_text() == "epoch-1\n"
    assert "shutdown requested" in err and "copy-back complete" in err
    with EmulatorControl(emu.url) as ctl:
        jobs = ctl.session.get(f"{emu.url}/_emulator/jobs", params={"job_label": label_of(env)}, timeout=5).json()
    assert [job["stop_reason"] for job in jobs] == ["shutdown"]


def test_the_jarvice_credentials_are_never_staged(vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path) -> None:
    emu, _root = vault_emulator
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_IN="/srv/ws",
        JARVICE_APIKEY=None,  # type: ignore[arg-type]  # base_env drops None: the key comes from the file
        JARVICE_APIKEY_FILE="/srv/ws/creds/apikey",
        APP_COMMAND_ARGS="ls /srv/ws /srv/ws/creds",
    )
    setup = f"mkdir -p /srv/ws/creds && printf %s {API_KEY} > /srv/ws/creds/apikey && echo x > /srv/ws/input"
    code, out, err = run_in_pod(env, setup=setup, collect=tmp_path / "pod")
    assert code == 0, err
    assert "input" in out and "apikey" not in out
    assert "not staging the JARVICE credentials" in err


# The pod's service-account token, the bait of the symlink tests: a tmpfs at its real path in the
# runner's own mount namespace (never the host's).
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN = "bait-service-account-token"
MOUNT_TOKEN = f"mkdir -p {TOKEN_DIR} && mount -t tmpfs sa-token {TOKEN_DIR} && printf %s {TOKEN} > {TOKEN_DIR}/token"


def vault_holds(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and text in p.read_text(errors="replace")]


def test_a_link_out_of_the_staged_tree_is_never_followed_and_one_inside_is_staged_as_a_link(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, root = vault_emulator
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_IN="/srv/ws/data,/srv/ws/linked-root",
        NIMBIX_BURST_KEEP_VAULT_DIR="1",
        APP_COMMAND_ARGS="ls -l /srv/ws/data/; cat /srv/ws/data/inside; test -e /srv/ws/data/token || echo no-token;"
        " test -e /srv/ws/data/tokens || echo no-tokens; test -e /srv/ws/linked-root || echo no-linked-root",
    )
    setup = (
        f"{MOUNT_TOKEN} && mkdir -p /srv/ws/data && echo alpha > /srv/ws/data/a.txt"
        f" && ln -s a.txt /srv/ws/data/inside && ln -s {TOKEN_DIR}/token /srv/ws/data/token"
        f" && ln -s {TOKEN_DIR} /srv/ws/data/tokens && ln -s {TOKEN_DIR} /srv/ws/linked-root"
    )
    code, out, err = run_in_pod(env, setup=setup, collect=tmp_path / "pod")
    assert code == 0, err
    assert "inside -> a.txt" in out and "alpha\n" in out
    assert "no-token\n" in out and "no-tokens\n" in out and "no-linked-root\n" in out
    assert "not staging a link that leads out of the staged path" in err
    assert "not staging a link that leads out of its directory" in err
    assert TOKEN not in out + err
    assert vault_holds(root, TOKEN) == []


def test_the_copy_back_never_writes_through_a_link_in_the_pod_volume_and_keeps_what_it_refused(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, root = vault_emulator
    message = tmp_path / "termination-log"
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_OUT="/srv/ws/out,/srv/ws/model.pt",
        APP_COMMAND_ARGS="mkdir -p /srv/ws/out/sub && echo overwritten > /srv/ws/out/sub/token"
        " && echo overwritten > /srv/ws/out/token && echo result > /srv/ws/out/result.txt",
        NIMBIX_BURST_TERMINATION_LOG=str(message),
    )
    # The volume holds links planted before the run: a directory and a file leading to the token.
    setup = (
        f"{MOUNT_TOKEN} && mkdir -p /srv/ws/out && ln -s {TOKEN_DIR} /srv/ws/out/sub"
        f" && ln -s {TOKEN_DIR}/token /srv/ws/out/token"
    )
    collect = tmp_path / "pod"
    runner, copy = shlex.quote(sys.executable), shlex.quote(str(collect))
    script = (
        f"set -e; mount -t tmpfs pod-volume /srv; {setup}; set +e; {runner} -m entrypoint; rc=$?;"
        f" cp -a /srv/. {copy}/; cat {TOKEN_DIR}/token > {copy}/token-after; exit $rc"
    )
    collect.mkdir()
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "bash", "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=RUNNER_TIMEOUT,
        check=False,
    )
    err = done.stderr.decode(errors="replace")
    # What the link kept out of the pod is an output not placed: the runner says so and where it is.
    assert done.returncode == 75, err
    assert (collect / "token-after").read_text() == TOKEN
    assert (collect / "ws" / "out" / "result.txt").read_text() == "result\n"
    # The planted file link was replaced by the job's file, never written through.
    assert (collect / "ws" / "out" / "token").read_text() == "overwritten\n"
    assert (collect / "ws" / "out" / "sub").is_symlink()
    assert "not copying back through a symbolic link" in err
    # Nothing refused is deleted: the vault directory keeps it, and the log names the vault path.
    vault_dir = f"nimbix-burst/pod-{env['POD_UID']}"
    kept = root / USER / "drop.jarvice.com" / vault_dir / "srv" / "ws" / "out" / "sub" / "token"
    assert kept.read_text() == "overwritten\n"
    refusal = next(line for line in err.splitlines() if "could not place some outputs" in line)
    assert json.loads(refusal)["first_kept_in_vault"] == [f"{vault_dir}/srv/ws/out/sub"]
    # The pod's exit says it too (`kubectl describe pod`: the terminated state's message).
    said = json.loads(message.read_text())["nimbix_burst"]
    assert said["exit_code"] == 75
    assert said["kept_in_vault"] == {"vault_dir": vault_dir, "refused": 1, "first": [f"{vault_dir}/srv/ws/out/sub"]}


def test_a_checkpoint_directory_that_does_not_exist_yet_is_staged_as_empty(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, _root = vault_emulator
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_IN="/srv/ws/ckpt",
        NIMBIX_BURST_STAGE_OUT="/srv/ws/ckpt",
        APP_COMMAND_ARGS="ls -A /srv/ws/ckpt | wc -l; echo epoch-1 > /srv/ws/ckpt/epoch-1",
    )
    code, out, err = run_in_pod(env, setup="mkdir -p /srv/ws", collect=tmp_path / "pod")
    assert code == 0, err
    assert out.strip().startswith("0")
    assert "a stage-in path under a stage-out path does not exist yet; staged as empty" in err
    assert (tmp_path / "pod" / "ws" / "ckpt" / "epoch-1").read_text() == "epoch-1\n"


@pytest.mark.parametrize(
    ("stage_in", "stage_out"),
    [
        ("/srv/ws/out/ckpt", "/srv/ws/out"),  # resume from the checkpoint the job writes
        ("/srv/ws/out", "/srv/ws/out/ckpt"),
        ("/srv/ws/out,/srv/ws/out/ckpt", "/srv/ws/out,/srv/ws/out/ckpt"),
    ],
)
def test_nested_stage_paths_stage_in_and_come_back(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path, stage_in: str, stage_out: str
) -> None:
    emu, _root = vault_emulator
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_IN=stage_in,
        NIMBIX_BURST_STAGE_OUT=stage_out,
        APP_COMMAND_ARGS="cat /srv/ws/out/ckpt/epoch-1 && echo 2 > /srv/ws/out/ckpt/epoch-2"
        " && echo log > /srv/ws/out/ckpt/log.txt",
    )
    code, out, err = run_in_pod(
        env, setup="mkdir -p /srv/ws/out/ckpt && echo 1 > /srv/ws/out/ckpt/epoch-1", collect=tmp_path / "pod"
    )
    assert code == 0, err
    assert out.strip() == "1"
    ckpt = tmp_path / "pod" / "ws" / "out" / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch-1", "epoch-2", "log.txt"]
    assert (ckpt / "epoch-2").read_text() == "2\n"


MANY_FILES = 8000


def test_many_files_keep_the_state_within_its_share_of_the_volume(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, _root = vault_emulator
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_IN="/srv/imagenet",
        APP_COMMAND_ARGS="find /srv/imagenet/ -type f | wc -l",
    )
    # ImageNet-style paths: a class directory of files with long names.
    setup = (
        "mkdir -p /srv/imagenet/train/n01440764 && cd /srv/imagenet/train/n01440764"
        f" && seq -f 'n01440764_%010g_augmented_crop_224x224.JPEG' 1 {MANY_FILES} | xargs touch"
    )
    code, out, err = run_in_pod(env, setup=setup, collect=tmp_path / "pod")
    assert code == 0, err
    assert out.split()[-1] == str(MANY_FILES)
    state = tmp_path / "state"
    files = list(state.iterdir())
    assert files
    for path in files:  # each within its share: contract.STATE_VOLUME_SIZE_LIMIT holds 4 per container
        assert path.stat().st_size <= contract.STATE_FILE_MAX_BYTES, path.name


# --- a Job's retry: the vault directory is the Job's, kept after a failure, taken under a lease ---

RETRY_FILES = 50
# The same command for every pod of the Job: the first attempt writes its output and fails; the retry
# finds the output (it came back to the volume) and succeeds.
RETRY_COMMAND = (
    "ls /srv/ws/data | wc -l; if [ -f /srv/ws/out/o ]; then echo retried; exit 0; fi;"
    " echo first > /srv/ws/out/o; exit 3"
)


def job_pod_env(url: str, tmp_path: Path, *, data_key: str) -> dict[str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return staged_env(
        url,
        tmp_path,
        NIMBIX_BURST_DATA_KEY=data_key,
        NIMBIX_BURST_CONTAINER="train",
        NIMBIX_BURST_STAGE_IN="/srv/ws/data",
        NIMBIX_BURST_STAGE_OUT="/srv/ws/out",
        APP_COMMAND_ARGS=RETRY_COMMAND,
    )


def logged(err: str, message: str) -> dict[str, Any]:
    """The runner's JSON log line with `message` (the last one)."""
    found = [json.loads(line) for line in err.splitlines() if line.startswith("{") and f'"{message}"' in line]
    assert found, f"no {message!r} in the runner's log:\n{err[-3000:]}"
    return dict(found[-1])


def test_a_job_s_retry_sends_only_what_changed_and_its_success_removes_the_job_s_directory(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, root = vault_emulator
    data_key = f"job-{uuid.uuid4()}"
    jobs = root / USER / "drop.jarvice.com" / "nimbix-burst"
    job_dir, lease = jobs / f"{data_key}.train", jobs / ".leases" / f"{data_key}.train"
    setup = (
        f"mkdir -p /srv/ws/data /srv/ws/out && for i in $(seq 1 {RETRY_FILES}); do echo $i > /srv/ws/data/f$i; done"
        " && touch -d @1700000000 /srv/ws/data/*"
    )
    first = job_pod_env(emu.url, tmp_path / "first", data_key=data_key)
    code, out, err = run_in_pod(first, setup=setup, collect=tmp_path / "first" / "pod")
    assert code == 3, err
    assert out.split()[0] == str(RETRY_FILES)
    assert logged(err, "stage-in complete")["files"] == RETRY_FILES
    assert "keeping the Job's vault directory for a retry" in err
    assert (job_dir / "srv" / "ws" / "out" / "o").read_text() == "first\n"
    assert not lease.exists()  # given back: the retry may take it

    # The retry: a new pod (UID, state) of the same Job, its volume as the first left it.
    retry = job_pod_env(emu.url, tmp_path / "retry", data_key=data_key)
    pvc = shlex.quote(str(tmp_path / "first" / "pod"))
    code, out, err = run_in_pod(retry, setup=f"cp -a {pvc}/. /srv/", collect=tmp_path / "retry" / "pod")
    assert code == 0, err
    assert "retried" in out
    done = logged(err, "stage-in complete")
    assert (done["files"], done["unchanged"], done["bytes"]) == (0, RETRY_FILES, 0)
    assert logged(err, "copy-back complete")["unchanged"] == 1
    assert not job_dir.exists() and not lease.exists()  # a success removes it
    assert not list(jobs.glob(f"pod-{retry['POD_UID']}*"))


def test_a_job_s_directory_another_pod_holds_is_left_alone(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, root = vault_emulator
    data_key = f"job-{uuid.uuid4()}"
    jobs = root / USER / "drop.jarvice.com" / "nimbix-burst"
    held = vault_layout.render_lease(pod_uid=str(uuid.uuid4()), job_label="k8s-another-pod-1")
    (jobs / ".leases").mkdir(parents=True, exist_ok=True)
    (jobs / ".leases" / f"{data_key}.train").write_text(held)
    env = job_pod_env(emu.url, tmp_path, data_key=data_key)
    code, out, err = run_in_pod(
        env, setup="mkdir -p /srv/ws/data /srv/ws/out && echo x > /srv/ws/data/a", collect=tmp_path / "pod"
    )
    assert code == 3, err
    assert out.split()[0] == "1"
    assert "another pod holds the Job's vault directory" in err
    assert logged(err, "staging in")["vault_dir"] == f"nimbix-burst/pod-{env['POD_UID']}.train"
    assert not (jobs / f"{data_key}.train").exists()
    assert (jobs / ".leases" / f"{data_key}.train").read_text() == held  # never taken nor released
    assert (tmp_path / "pod" / "ws" / "out" / "o").read_text() == "first\n"
    assert not list(jobs.glob(f"pod-{env['POD_UID']}*"))  # its own directory: removed once the data is home


def test_a_data_key_not_from_the_webhook_is_refused(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, _root = vault_emulator
    env = job_pod_env(emu.url, tmp_path, data_key="job-../../etc")
    code, _out, err = run_in_pod(env, setup="mkdir -p /srv/ws/data", collect=tmp_path / "pod")
    assert code == 78, err
    assert "NIMBIX_BURST_DATA_KEY must be job-<Job UID>" in err


def configmap_layout(stamp: str) -> str:
    """How the kubelet lays out a configMap volume at /srv/cfg (a new timestamped directory per pod)."""
    return (
        f"mkdir -p /srv/cfg/..{stamp} && echo 'epochs: 3' > /srv/cfg/..{stamp}/config.yaml"
        f" && ln -s ..{stamp} /srv/cfg/..data && ln -s ..data/config.yaml /srv/cfg/config.yaml"
    )


def test_a_retry_s_new_configmap_layout_replaces_the_links_of_the_failed_pod_s(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    emu, _root = vault_emulator
    data_key = f"job-{uuid.uuid4()}"
    command = "cat /srv/cfg/config.yaml; test -f /srv/ws/out/o && exit 0; echo first > /srv/ws/out/o; exit 3"
    runs = []
    for run, stamp in (("first", "2026_11_27_20_30_00.1"), ("retry", "2026_11_27_20_32_00.2")):
        env = job_pod_env(emu.url, tmp_path / run, data_key=data_key)
        env["NIMBIX_BURST_STAGE_IN"] = "/srv/ws/data,/srv/cfg"
        env["APP_COMMAND_ARGS"] = command
        setup = f"mkdir -p /srv/ws/data /srv/ws/out && {configmap_layout(stamp)}"
        if run == "retry":
            setup = f"cp -a {shlex.quote(str(tmp_path / 'first' / 'pod' / 'ws'))} /srv/ && {setup}"
        runs.append(run_in_pod(env, setup=setup, collect=tmp_path / run / "pod"))
    (first_code, first_out, first_err), (code, out, err) = runs
    assert first_code == 3 and "epochs: 3" in first_out, first_err
    assert code == 0, err
    assert "epochs: 3" in out


def test_a_real_tree_stages_as_it_is_and_what_cannot_come_back_stays_in_the_vault(
    vault_emulator: tuple[EmulatorThread, Path], tmp_path: Path
) -> None:
    """A stale partial file beside a good checkpoint, an executable script, a name that is not UTF-8
    and one of 250 bytes: the job sees the good checkpoint and every file, runs the script directly,
    and the pod's checkpoint is intact afterwards. An output the pod cannot take (a directory where
    the pod has a file) stays in the vault, and the runner says where (exit 75)."""
    emu, root = vault_emulator
    long_name = "L" * 250
    env = staged_env(
        emu.url,
        tmp_path,
        NIMBIX_BURST_STAGE_IN="/srv/ws/in",
        NIMBIX_BURST_STAGE_OUT="/srv/ws/out,/srv/ws/in/ckpt",
        APP_COMMAND_ARGS="cd /srv/ws/in && ./run.sh && sha256sum ckpt/model.bin && ls ckpt && cat caf*"
        f" && cat {long_name} && mkdir -p /srv/ws/out/clash && echo inner > /srv/ws/out/clash/inner",
    )
    setup = (
        "mkdir -p /srv/ws/in/ckpt /srv/ws/out && head -c 3000000 /dev/urandom > /srv/ws/in/ckpt/model.bin"
        " && head -c 2000000 /dev/urandom > /srv/ws/in/ckpt/model.bin.nbpart"
        " && sha256sum /srv/ws/in/ckpt/model.bin > /srv/good.sum"
        " && printf '#!/bin/sh\\necho ran the script\\n' > /srv/ws/in/run.sh && chmod 755 /srv/ws/in/run.sh"
        " && echo latin-1 > /srv/ws/in/$'caf\\xe9.txt'"
        f" && echo longest > /srv/ws/in/{long_name} && echo the pod file > /srv/ws/out/clash"
    )
    code, out, err = run_in_pod(env, setup=setup, collect=tmp_path / "pod")
    assert code == 75, err
    pod = tmp_path / "pod"
    good = (pod / "good.sum").read_text().split()[0]
    assert "ran the script" in out
    assert good in out  # the job read the good checkpoint
    assert "model.bin\n" in out and "nbpart" not in out  # the stale partial file never went
    assert "latin-1\nlongest\n" in out
    assert hashlib.sha256((pod / "ws" / "in" / "ckpt" / "model.bin").read_bytes()).hexdigest() == good
    assert (pod / "ws" / "out" / "clash").read_text() == "the pod file\n"
    refusal = json.loads(next(line for line in err.splitlines() if "could not place some outputs" in line))
    kept = refusal["first_kept_in_vault"]
    assert kept == [f"nimbix-burst/pod-{env['POD_UID']}/srv/ws/out/clash"]
    assert (root / USER / "drop.jarvice.com" / kept[0] / "inner").read_text() == "inner\n"
