"""Every tree a user has stages as it is, and what the job wrote is never lost: the runner's SFTP
transfers (entrypoint.sftp_transfer) against the emulator's vault, in process. Byte-string and
longest names, any modification time, permissions both ways, empty directories, partial files that
are the runner's own, outputs the pod cannot take (refused, named, left in the vault, without a
reconnect), and a vault copy that changes while it is read (never placed)."""

from __future__ import annotations

import io
import os
import resource
import shutil
import signal
import stat
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devplatform.emulator import EmulatorControl, Timing
from entrypoint import (
    local_tree,
    sftp_transfer,
    staging,
    transfer_pass,
    vault_download,
    vault_files,
    vault_settings,
    vault_staging,
)
from entrypoint.sftp_transfer import DownloadRoot, UploadRoot, VaultTransfer
from entrypoint.signals import CancelToken
from jarvice import exitcodes
from jarvice.redaction import Secret
from tests.support import vaults
from tests.support.runner_processes import API_KEY, APP, FAST_TIMING, USER

OLD = 1_500_000_000
BIG = 2 * 1024 * 1024  # larger than one block: goes through a partial file


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[vault_settings.VaultSettings, Path, str]]:
    """The vault's SFTP address (host key checked), the directory it stores the user's files in, and
    the emulator's URL (its faults)."""
    root = tmp_path_factory.mktemp("vaults")
    with vaults.vault_emulator(root, user=USER, apikey=API_KEY, app=APP, timing=Timing(**FAST_TIMING)) as emu:
        with EmulatorControl(emu.url) as ctl:
            info = ctl.session.get(f"{emu.url}/_emulator/vault", timeout=5).json()
        known_hosts = root / "known_hosts"
        known_hosts.write_text(info["known_hosts"])
        host, _, port = info["sftp"].rpartition(":")
        yield (
            vault_settings.VaultSettings(host, int(port), str(known_hosts), keep_job_dir=True),
            root / USER / "drop.jarvice.com",
            emu.url,
        )


def transfer(address: vault_settings.VaultSettings) -> VaultTransfer:
    return VaultTransfer(
        address, username=USER, apikey=Secret(API_KEY), clock=time.monotonic, progress_out=io.StringIO()
    )


def upload(address: vault_settings.VaultSettings, local: Path, vault_path: str) -> sftp_transfer.Report:
    roots = [UploadRoot(str(local), str(local), vault_path)]
    return transfer(address).upload(
        roots, totals=sftp_transfer.Totals(), never_staged=frozenset(), should_stop=lambda: False
    )


def download(address: vault_settings.VaultSettings, vault_path: str, local: Path) -> sftp_transfer.Report:
    return transfer(address).download([DownloadRoot(vault_path, str(local))], should_stop=lambda: False)


def fs_path(directory: Path, name: bytes) -> Path:
    return directory / os.fsdecode(name)


NON_UTF8 = b"caf\xe9-\xff.bin"  # Latin-1 bytes: no UTF-8 name
LONG_250 = b"L" * 250
LONG_255 = b"M" * 255  # NAME_MAX


def a_real_tree(top: Path) -> dict[str, tuple[bytes, int, int]]:
    """Files as users have them: relative name -> (content, mtime, permissions)."""
    made: dict[str, tuple[bytes, int, int]] = {}

    def put(relative: str, data: bytes, mtime: int, mode: int) -> None:
        path = top / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        os.utime(path, ns=(mtime * 1_000_000_000, mtime * 1_000_000_000))
        made[relative] = (data, mtime, mode)

    put("run.sh", b"#!/bin/sh\necho ran\n", OLD, 0o755)
    put(os.fsdecode(NON_UTF8), b"latin-1 name", OLD + 1, 0o644)
    put(os.fsdecode(LONG_250), os.urandom(BIG), OLD + 2, 0o640)  # a partial file beside it would be 258 bytes
    put(os.fsdecode(LONG_255), b"longest", OLD + 3, 0o600)
    put("before-1970.txt", b"old", -86_400, 0o644)
    put("after-2106.txt", b"new", 2**32 + 86_400, 0o644)
    (top / "empty" / "deeper").mkdir(parents=True)
    return made


def test_every_tree_stages_as_it_is_both_ways(
    vault: tuple[vault_settings.VaultSettings, Path, str], tmp_path: Path
) -> None:
    address, stored, _url = vault
    made = a_real_tree(tmp_path / "data")
    report = upload(address, tmp_path / "data", "trees/as-is")
    assert report.complete, report.error
    assert report.copied == len(made)
    copy = stored / "trees" / "as-is"
    for relative, (data, mtime, mode) in made.items():
        assert (copy / relative).read_bytes() == data, relative
        assert stat.S_IMODE((copy / relative).stat().st_mode) == mode, relative
        assert int((copy / relative).stat().st_mtime) == min(max(mtime, 0), 2**32 - 1), relative
    assert (copy / "empty" / "deeper").is_dir()
    assert not [p for p in copy.rglob("*") if vault_files.is_part_name(p.name)]
    again = upload(address, tmp_path / "data", "trees/as-is")
    assert again.complete, again.error
    assert (again.copied, again.skipped) == (0, len(made))  # a clamped time is current too

    pod = tmp_path / "pod"
    back = download(address, "trees/as-is", pod)
    assert back.complete, back.error
    for relative, (data, _mtime, mode) in made.items():
        assert (pod / relative).read_bytes() == data, relative
        assert stat.S_IMODE((pod / relative).stat().st_mode) == mode, relative
    assert (pod / "empty" / "deeper").is_dir()
    assert not [p for p in pod.rglob("*") if vault_files.is_part_name(p.name)]


def test_a_tree_whose_kinds_changed_since_the_last_stage_in_is_staged_as_it_is_now(
    vault: tuple[vault_settings.VaultSettings, Path, str], tmp_path: Path
) -> None:
    """The Job's vault directory holds the failed pod's tree: a file where the pod now has a
    directory, and a directory where it now has a file."""
    address, stored, _url = vault
    earlier = stored / "trees" / "kinds"
    (earlier / "was-a-dir" / "deep").mkdir(parents=True)
    (earlier / "was-a-dir" / "deep" / "x").write_text("old")
    (earlier / "was-a-file").write_text("old")
    data = tmp_path / "data"
    (data / "was-a-file" / "sub").mkdir(parents=True)
    (data / "was-a-file" / "sub" / "new.txt").write_text("new file")
    (data / "was-a-dir").write_text("now a file")
    report = upload(address, data, "trees/kinds")
    assert report.complete, report.error
    assert (earlier / "was-a-dir").read_text() == "now a file"
    assert (earlier / "was-a-file" / "sub" / "new.txt").read_text() == "new file"


def test_a_mode_change_alone_is_staged_again(
    vault: tuple[vault_settings.VaultSettings, Path, str], tmp_path: Path
) -> None:
    address, stored, _url = vault
    script = tmp_path / "data" / "train.sh"
    script.parent.mkdir()
    script.write_bytes(b"#!/bin/sh\n")
    os.utime(script, (OLD, OLD))
    assert upload(address, tmp_path / "data", "trees/chmod").complete
    script.chmod(0o755)
    report = upload(address, tmp_path / "data", "trees/chmod")
    assert (report.copied, report.skipped) == (1, 0)
    assert stat.S_IMODE((stored / "trees" / "chmod" / "train.sh").stat().st_mode) == 0o755


def test_partial_files_are_the_runner_s_own_never_staged_in_or_copied_back(
    vault: tuple[vault_settings.VaultSettings, Path, str], tmp_path: Path
) -> None:
    address, stored, _url = vault
    ckpt = tmp_path / "data" / "ckpt"
    ckpt.mkdir(parents=True)
    good = os.urandom(BIG)
    (ckpt / "model.bin").write_bytes(good)
    # Left by copy-backs cut short: an earlier runner's name, and this runner's own.
    (ckpt / "model.bin.nbpart").write_bytes(os.urandom(BIG))
    (ckpt / vault_files.part_name("model.bin")).write_bytes(os.urandom(BIG // 2))
    report = upload(address, tmp_path / "data", "trees/parts")
    assert report.complete, report.error
    copy = stored / "trees" / "parts" / "ckpt"
    assert sorted(p.name for p in copy.iterdir()) == ["model.bin"]
    assert (copy / "model.bin").read_bytes() == good

    # The vault holds a stale partial file too: the pod's good checkpoint is what comes back.
    (copy / vault_files.part_name("model.bin")).write_bytes(b"partial")
    (copy / "model.bin.nbpart").write_bytes(b"partial")
    pod = tmp_path / "pod"
    (pod / "ckpt").mkdir(parents=True)
    back = download(address, "trees/parts", pod)
    assert back.complete, back.error
    assert (pod / "ckpt" / "model.bin").read_bytes() == good
    assert sorted(p.name for p in (pod / "ckpt").iterdir()) == ["model.bin"]


def test_outputs_the_pod_cannot_take_are_refused_named_and_kept_and_the_rest_comes_back(
    vault: tuple[vault_settings.VaultSettings, Path, str], tmp_path: Path
) -> None:
    """A directory in the vault where the pod has a file, a file where it has a directory: each is
    refused at once (no reconnect: the pod's side is no network failure), named, and left in the vault."""
    address, stored, _url = vault
    out = stored / "trees" / "refused"
    (out / "a").mkdir(parents=True)
    (out / "a" / "inner.txt").write_text("in a directory")
    (out / "b").write_text("a file")
    (out / "ok.txt").write_text("fine")
    pod = tmp_path / "pod"
    (pod / "b").mkdir(parents=True)
    (pod / "a").write_text("the pod's file")
    report = download(address, "trees/refused", pod)
    assert report.error == ""
    assert report.refused == 2 and not report.complete
    assert sorted(report.not_copied) == [f"{pod}/a", f"{pod}/b"]
    assert sorted(report.kept_in_vault) == ["trees/refused/a", "trees/refused/b"]
    assert (pod / "ok.txt").read_text() == "fine"
    assert (pod / "a").read_text() == "the pod's file" and (pod / "b").is_dir()
    assert (out / "a" / "inner.txt").read_text() == "in a directory"


def test_a_vault_copy_that_changes_while_it_is_read_never_replaces_the_pod_s(
    vault: tuple[vault_settings.VaultSettings, Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job still writing after it was listed (a pod deleted while its job ran): the second look
    sees another time, so the pod keeps its complete file and the vault keeps the newer one."""
    address, stored, _url = vault
    out = stored / "trees" / "racing"
    out.mkdir(parents=True)
    for name, size in (("small.ckpt", 100), ("large.ckpt", BIG)):
        (out / name).write_bytes(b"n" * size)
        os.utime(out / name, (OLD, OLD))
    pod = tmp_path / "pod"
    pod.mkdir()
    for name in ("small.ckpt", "large.ckpt"):
        (pod / name).write_bytes(b"complete and good")
    listing = transfer_pass.remote_listing

    async def listed_then_written(sftp: object, directory: str) -> dict[str, tuple[int, int, int]]:
        found = await listing(sftp, directory)  # type: ignore[arg-type]
        for name in ("small.ckpt", "large.ckpt"):
            os.utime(out / name, (OLD + 60, OLD + 60))  # the job writes again after the listing
        return found

    monkeypatch.setattr(vault_download, "remote_listing", listed_then_written)
    report = download(address, "trees/racing", pod)
    assert report.error == ""
    assert report.refused == 2 and report.copied == 0
    for name in ("small.ckpt", "large.ckpt"):
        assert (pod / name).read_bytes() == b"complete and good"
    assert not [p for p in pod.iterdir() if vault_files.is_part_name(p.name)]


def test_a_vault_that_stops_answering_is_handled_like_a_dropped_one(
    vault: tuple[vault_settings.VaultSettings, Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its TCP connection and SSH layer alive, its file server silent: the watch ends the session
    and the transfer resumes on a new one, both ways."""
    address, stored, url = vault
    # Long enough that a healthy session's answer is never taken for a stall under make test's load (at
    # 0.5 s a third, spurious "connection lost" was seen), short enough for the two real stalls.
    monkeypatch.setattr(sftp_transfer, "REQUEST_TIMEOUT_SECONDS", 3.0)
    monkeypatch.setattr(sftp_transfer, "WATCH_SECONDS", 0.1)
    data = os.urandom(8 * BIG)  # every session (lane) has blocks past the fault
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(data)
    with EmulatorControl(url) as ctl:
        stalled_before = ctl.session.get(f"{url}/_emulator/vault", timeout=5).json()["faults"]["cut"]
        faults = {"after_bytes": BIG, "sessions": 1, "stall": True}
        ctl.session.post(f"{url}/_emulator/vault-faults", json=faults, timeout=5)
        report = upload(address, tmp_path / "data", "trees/stalled")
        assert report.complete, report.error
        assert (stored / "trees" / "stalled" / "big.bin").read_bytes() == data
        ctl.session.post(f"{url}/_emulator/vault-faults", json=faults, timeout=5)
        back = download(address, "trees/stalled", tmp_path / "pod")
        assert back.complete, back.error
        assert (tmp_path / "pod" / "big.bin").read_bytes() == data
        stalled = ctl.session.get(f"{url}/_emulator/vault", timeout=5).json()["faults"]["cut"] - stalled_before
        ctl.session.post(f"{url}/_emulator/vault-faults", json={"after_bytes": 0, "sessions": 0}, timeout=5)
    assert stalled == 2
    lost = [r for r in caplog.records if r.getMessage() == "vault connection lost; resuming"]
    assert len(lost) == 2
    assert all("answered no request" in r.__dict__["error"] for r in lost)


def test_a_new_file_that_fails_mid_write_is_not_left_under_its_name(tmp_path: Path) -> None:
    """The volume takes part of a file new to the pod (here: a file size limit): nothing is left
    truncated under its real name."""
    out = tmp_path / "out"
    out.mkdir()
    writer = local_tree.BeneathWriter(str(out))
    item = vault_download.Get(writer, "model.bin", "vault/model.bin", 8192, OLD, 0o644, fresh=True)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
    try:
        with pytest.raises(OSError):
            vault_download.write_whole(item, b"x" * 8192)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
        writer.close()
    assert os.listdir(out) == []


def test_a_directory_swapped_for_a_link_during_the_walk_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "secrets"
    outside.mkdir()
    (outside / "token").write_text("bait")
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "b.txt").write_text("beta")
    walk = local_tree.walk_tree("/ws/data", str(data))
    first = next(walk)
    assert first.path == "/ws/data"
    (data / "sub" / "b.txt").unlink()
    (data / "sub").rmdir()
    (data / "sub").symlink_to(outside)  # between the listing and the descent
    rest = list(walk)
    assert [entry.name for directory in rest for entry in directory.entries] == []


def test_a_directory_the_runner_may_not_read_is_a_local_failure_naming_it() -> None:
    # Where nobody may go: pytest's own directories are root's alone.
    top = Path(tempfile.mkdtemp(prefix="locked-tree-", dir="/tmp"))
    top.chmod(0o755)
    data = top / "data"
    (data / "locked").mkdir(parents=True)
    (data / "locked" / "x").write_text("x")
    (data / "locked").chmod(0)
    os.setegid(65534)
    os.seteuid(65534)  # root reads anything: the walk runs as nobody
    try:
        with pytest.raises(local_tree.LocalFailure, match="/ws/data/locked cannot be read"):
            list(local_tree.walk_tree("/ws/data", str(data)))
    finally:
        os.seteuid(0)
        os.setegid(0)
        (data / "locked").chmod(0o755)
        shutil.rmtree(top)


def deeper_than_path_max(top: Path) -> str:
    """A directory whose absolute path is longer than PATH_MAX (made relative to its parent, as the
    kernel allows), with a file in it; returns the name of its first level."""
    first = "d" * 255
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(18):  # 18 x 256 bytes > 4096
            os.mkdir(first, dir_fd=fd)
            child = os.open(first, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("file", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as out:
            out.write(b"deep")
    finally:
        os.close(fd)
    return first


def test_a_staged_tree_the_runner_cannot_read_ends_the_stage_in_naming_it_and_gives_the_lease_back(
    vault: tuple[vault_settings.VaultSettings, Path, str], tmp_path: Path
) -> None:
    """A local error (here ENAMETOOLONG: a path past PATH_MAX) is no network failure: no reconnect,
    exit 78 naming the path, nothing submitted, and the Job's vault directory's lease released."""
    address, stored, _url = vault
    data = tmp_path / "data"
    data.mkdir()
    deeper_than_path_max(data)
    pod_uid = str(uuid.uuid4())
    dirs = staging.build_work_dirs(data_key=f"job-{uuid.uuid4()}", pod_uid=pod_uid, container="train", job_label="deep")
    stage = vault_staging.VaultStaging(
        staging.StagePaths((str(data),)),
        job_label="deep",
        dirs=dirs,
        pod_uid=pod_uid,
        transfer=transfer(address),
        state_dir=tmp_path,
        container="train",
        keep_job_dir=False,
        cancel=CancelToken(),
        clock=time.monotonic,
    )
    early = stage.prepare()
    assert early is not None and early.code == exitcodes.EXIT_CONFIG
    assert dirs.lease is not None and not (stored / dirs.lease).exists()


def test_a_resume_continues_only_the_version_it_began() -> None:
    state = transfer_pass.Pass(
        transfer_pass.Report(),
        transfer_pass.Meter("copy-back", transfer_pass.Totals(), clock=time.monotonic, out=io.StringIO()),
    )
    first = state.resume_key("/w/out/model.bin", 10 << 20, OLD)
    state.acked[first] = 4 << 20
    assert state.acked[state.resume_key("/w/out/model.bin", 10 << 20, OLD)] == 4 << 20
    changed = state.resume_key("/w/out/model.bin", 10 << 20, OLD + 1)  # the job wrote it again
    assert state.acked[changed] == 0
    assert list(state.acked) == [changed]
