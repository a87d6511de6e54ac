"""Data staging's pure rules (entrypoint.staging, entrypoint.vault_files, entrypoint.vault_settings): the
variables, the vault layout, the job's prelude, the record that keeps a restart from uploading twice or
copying back twice, how one file is copied, and the vault settings."""

import subprocess
from pathlib import Path

import pytest

from entrypoint import staging, transfer_pass, vault_files, vault_settings
from entrypoint.staging import StagePaths, StagingError, StagingRecord
from jarvice import contract, vault_layout

LABEL = "k8s-prod-0123456789ab.6c67bbab-1abe-47db-9b2d-9e98ee17ef5b-train-1"


@pytest.mark.parametrize(
    ("stage_in", "stage_out", "expected"),
    [
        pytest.param("", "", StagePaths(), id="none"),
        pytest.param(
            "/w/data, /w/cfg.yaml,,/w/data/",
            "/w/out",
            StagePaths(("/w/data", "/w/cfg.yaml"), ("/w/out",)),
            id="normalised",
        ),
        pytest.param("//w//data", "", StagePaths(("/w/data",)), id="double-slashes"),
    ],
)
def test_parse_stage_paths(stage_in: str, stage_out: str, expected: StagePaths) -> None:
    env = {"NIMBIX_BURST_STAGE_IN": stage_in, "NIMBIX_BURST_STAGE_OUT": stage_out}
    assert staging.parse_stage_paths(env) == expected


@pytest.mark.parametrize(
    ("value", "says"),
    [
        pytest.param("w/data", "not an absolute path", id="relative"),
        pytest.param("/w/../etc", "not an absolute path", id="dot-dot"),
        pytest.param("/", "'/' cannot be staged", id="root"),
        pytest.param("/w/a\nb", "not an absolute path", id="newline"),
    ],
)
def test_parse_stage_paths_rejects(value: str, says: str) -> None:
    with pytest.raises(StagingError, match=says):
        staging.parse_stage_paths({"NIMBIX_BURST_STAGE_IN": value})


@pytest.mark.parametrize(
    ("label", "job_dir"),
    [
        pytest.param(LABEL, f"nimbix-burst/{LABEL}", id="uid-label-kept-whole"),
        pytest.param("k8s-ns/pod-app-1", "nimbix-burst/k8s-ns_pod-app-1", id="slash-becomes-underscore"),
        pytest.param("..", "nimbix-burst/job", id="dots-only"),
    ],
)
def test_build_job_dir(label: str, job_dir: str) -> None:
    assert staging.build_job_dir(label) == job_dir


JOB_UID = "0b5f6c1e-2a3b-4c5d-8e9f-a0b1c2d3e4f5"
POD_UID = "6c67bbab-1abe-47db-9b2d-9e98ee17ef5b"
OTHER_POD = "7d78ccbc-2bcf-48ec-8c3e-0f09ff28f06c"


@pytest.mark.parametrize(
    ("value", "key"),
    [
        pytest.param(None, None, id="unset"),
        pytest.param("", None, id="empty"),
        pytest.param(f"job-{JOB_UID}", f"job-{JOB_UID}", id="a-job"),
        pytest.param(f" job-{JOB_UID}-0 ", f"job-{JOB_UID}-0", id="an-indexed-job-s-index-0"),
        pytest.param(f"job-{JOB_UID}-123456789", f"job-{JOB_UID}-123456789", id="the-longest-index"),
    ],
)
def test_parse_data_key(value: str | None, key: str | None) -> None:
    env = {} if value is None else {"NIMBIX_BURST_DATA_KEY": value}
    assert staging.parse_data_key(env) == key


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(JOB_UID, id="no-prefix"),
        pytest.param(f"pod-{JOB_UID}", id="a-pod-is-not-named-by-the-webhook"),
        pytest.param(f"job-{JOB_UID.upper()}", id="upper-case"),
        pytest.param(f"job-{JOB_UID}-01", id="a-leading-zero"),
        pytest.param(f"job-{JOB_UID}-1234567890", id="an-index-too-long"),
        pytest.param(f"job-{JOB_UID}/../x", id="a-path"),
        pytest.param("job-x", id="no-uid"),
    ],
)
def test_parse_data_key_rejects(value: str) -> None:
    with pytest.raises(StagingError, match="NIMBIX_BURST_DATA_KEY must be job-<Job UID>"):
        staging.parse_data_key({"NIMBIX_BURST_DATA_KEY": value})


@pytest.mark.parametrize(
    ("data_key", "pod_uid", "container", "dirs"),
    [
        pytest.param(
            f"job-{JOB_UID}",
            POD_UID,
            "train",
            vault_layout.WorkDirs(own=f"nimbix-burst/pod-{POD_UID}.train", shared=f"nimbix-burst/job-{JOB_UID}.train"),
            id="a-job-s-pod",
        ),
        pytest.param(
            f"job-{JOB_UID}-3",
            POD_UID,
            "",
            vault_layout.WorkDirs(own=f"nimbix-burst/pod-{POD_UID}", shared=f"nimbix-burst/job-{JOB_UID}-3"),
            id="no-container-named",
        ),
        pytest.param(
            None, POD_UID, "train", vault_layout.WorkDirs(own=f"nimbix-burst/pod-{POD_UID}.train"), id="no-job"
        ),
        pytest.param(
            f"job-{JOB_UID}", "", "train", vault_layout.WorkDirs(own=f"nimbix-burst/{LABEL}"), id="no-pod-uid"
        ),
        pytest.param(
            None, POD_UID, "Bad/Name", vault_layout.WorkDirs(own=f"nimbix-burst/pod-{POD_UID}"), id="no-container-name"
        ),
    ],
)
def test_build_work_dirs(data_key: str | None, pod_uid: str, container: str, dirs: vault_layout.WorkDirs) -> None:
    assert staging.build_work_dirs(data_key=data_key, pod_uid=pod_uid, container=container, job_label=LABEL) == dirs


def test_two_containers_of_one_job_never_share_a_directory_nor_a_lease() -> None:
    one, two = (
        staging.build_work_dirs(data_key=f"job-{JOB_UID}", pod_uid=POD_UID, container=c, job_label=LABEL)
        for c in ("a", "b")
    )
    assert len({one.own, one.shared, two.own, two.shared}) == 4
    assert one.lease == f"nimbix-burst/.leases/job-{JOB_UID}.a" != two.lease


@pytest.mark.parametrize(
    ("existing", "action"),
    [
        pytest.param(None, "take", id="no-lease-ours-was-made"),
        pytest.param(
            vault_layout.render_lease(pod_uid=POD_UID, job_label="old"), "take", id="this-pod-s-earlier-runner"
        ),
        pytest.param(
            vault_layout.render_lease(pod_uid=OTHER_POD, job_label=LABEL), "own_dir", id="another-pod-holds-it"
        ),
        pytest.param("garbage", "own_dir", id="unreadable-is-held"),
        pytest.param('{"format": 9, "pod": "' + POD_UID + '"}', "own_dir", id="another-format-is-held"),
        pytest.param("", "own_dir", id="empty-is-held"),
    ],
)
def test_decide_lease(existing: str | None, action: str) -> None:
    assert staging.decide_lease(existing, pod_uid=POD_UID) == action


def test_a_lease_names_its_pod() -> None:
    assert vault_layout.lease_holder(vault_layout.render_lease(pod_uid=POD_UID, job_label=LABEL)) == POD_UID
    assert len(vault_layout.render_lease(pod_uid=POD_UID, job_label="x" * 512)) < 4096


@pytest.mark.parametrize(
    ("shared", "exit_code", "removed"),
    [
        pytest.param(True, 0, True, id="job-dir-after-a-success"),
        pytest.param(True, 3, False, id="job-dir-kept-for-a-retry"),
        pytest.param(True, 143, False, id="job-dir-kept-after-a-deletion"),
        pytest.param(False, 0, True, id="own-dir-after-a-success"),
        pytest.param(False, 3, True, id="own-dir-after-a-failure-no-pod-reads-it"),
    ],
)
def test_removes_work_dir(shared: bool, exit_code: int, removed: bool) -> None:
    assert staging.removes_work_dir(shared=shared, exit_code=exit_code) is removed


def test_paths_live_under_the_job_dir_in_the_vault_and_under_data_in_the_job() -> None:
    assert vault_layout.vault_path("nimbix-burst/j", "/w/data") == "nimbix-burst/j/w/data"
    assert staging.remote_path("nimbix-burst/j", "/w/data") == "/data/nimbix-burst/j/w/data"


def run_prelude(
    tmp_path: Path, paths: StagePaths, *, out_files: tuple[str, ...] = (), before: str = ""
) -> subprocess.CompletedProcess[str]:
    """The prelude in bash with / and /data moved under tmp_path (sed on the generated text): what
    the job's shell does, on files this test can look at."""
    prelude = staging.build_prelude(paths, job_dir="nimbix-burst/j", out_files=out_files)
    rooted = (
        prelude.replace("/data/", f"{tmp_path}/data/").replace(" /w", f" {tmp_path}/w").replace("'/w", f"'{tmp_path}/w")
    )
    return subprocess.run(["bash", "-c", before + rooted + "echo ran"], capture_output=True, text=True, check=False)


def test_the_prelude_links_each_path_to_its_vault_copy(tmp_path: Path) -> None:
    (tmp_path / "data/nimbix-burst/j/w/data").mkdir(parents=True)
    (tmp_path / "data/nimbix-burst/j/w/data/x").write_text("x")
    done = run_prelude(tmp_path, StagePaths(("/w/data",), ("/w/out", "/w/model.pt")), out_files=("/w/model.pt",))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "w/data/x").read_text() == "x"
    assert (tmp_path / "w/out").is_symlink() and (tmp_path / "data/nimbix-burst/j/w/out").is_dir()
    assert (tmp_path / "w/model.pt").is_symlink() and not (tmp_path / "data/nimbix-burst/j/w/model.pt").exists()
    assert (tmp_path / "data/nimbix-burst/j/w").is_dir()  # a file's parent is made: the job can write it
    assert done.stdout == "ran\n"


@pytest.mark.parametrize(
    "paths",
    [
        StagePaths(("/w/out/ckpt",), ("/w/out",)),  # resume from the checkpoint the job writes
        StagePaths(("/w/out",), ("/w/out/ckpt",)),
        StagePaths(("/w/out", "/w/out/ckpt"), ("/w/out/ckpt", "/w/out")),  # both ways, and both
        StagePaths((), ("/w/out/ckpt", "/w/out")),
    ],
)
def test_the_prelude_links_nested_stage_paths_through_the_outermost(tmp_path: Path, paths: StagePaths) -> None:
    (tmp_path / "data/nimbix-burst/j/w/out/ckpt").mkdir(parents=True)
    (tmp_path / "data/nimbix-burst/j/w/out/ckpt/epoch-1").write_text("1")
    done = run_prelude(tmp_path, paths)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "w/out").is_symlink()
    assert (tmp_path / "w/out/ckpt/epoch-1").read_text() == "1"


@pytest.mark.parametrize(
    ("paths", "outermost"),
    [
        (("/w/out", "/w/out/ckpt"), ("/w/out",)),
        (("/w/out/ckpt", "/w/out"), ("/w/out",)),
        (("/w/out", "/w/outside"), ("/w/out", "/w/outside")),  # a shared prefix is no nesting
        (("/a/b/c", "/a", "/d"), ("/a", "/d")),
        ((), ()),
    ],
)
def test_outermost(paths: tuple[str, ...], outermost: tuple[str, ...]) -> None:
    assert staging.outermost(paths) == outermost


def test_the_prelude_replaces_an_empty_directory_but_never_deletes_content(tmp_path: Path) -> None:
    (tmp_path / "w/out").mkdir(parents=True)
    assert run_prelude(tmp_path, StagePaths((), ("/w/out",))).returncode == 0
    (tmp_path / "w/keep").mkdir()
    (tmp_path / "w/keep/file").write_text("mine")
    done = run_prelude(tmp_path, StagePaths(("/w/keep",)))
    assert done.returncode == staging.EXIT_LINK_FAILED
    assert "w/keep exists in the image and is not an empty directory" in done.stderr
    assert "cannot make" in done.stderr
    assert (tmp_path / "w/keep/file").read_text() == "mine"


def test_the_command_follows_the_prelude_unchanged() -> None:
    command = 'python train.py --name "a b" # trailing comment\ncat <<EOF\nx\nEOF'
    wrapped = staging.wrap_shell_command(command, prelude="PRELUDE\n")
    assert wrapped == "PRELUDE\n" + command


RECORD = StagingRecord(
    job_label=LABEL,
    stage_in_done=True,
    copy_back="pending",
    exit_code=3,
)


def test_the_record_survives_its_text() -> None:
    assert staging.parse_record(staging.render_record(RECORD)) == RECORD
    shared = StagingRecord(LABEL, stage_in_done=True, vault_dir=f"nimbix-burst/job-{JOB_UID}.train", shared=True)
    assert staging.parse_record(staging.render_record(shared)) == shared


def test_a_record_without_its_directory_names_the_label_s_as_runners_before_wrote() -> None:
    record = staging.parse_record(f'{{"format": 2, "job_label": "{LABEL}", "stage_in_done": true}}')
    assert record.work_dir == f"nimbix-burst/{LABEL}" and not record.shared


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("not json", id="not-json"),
        pytest.param('{"format": 9, "job_label": "x"}', id="other-format"),
        pytest.param('{"format": 2}', id="no-label"),
        pytest.param('{"format": 2, "job_label": "x", "copy_back": "maybe"}', id="bad-copy-back"),
        pytest.param('{"format": 1, "job_label": "x", "uploaded": {}}', id="the-old-format-with-its-file-list"),
        pytest.param('{"format": 2, "job_label": "x", "vault_dir": "/etc"}', id="a-directory-outside-ours"),
        pytest.param('{"format": 2, "job_label": "x", "vault_dir": 3}', id="a-directory-not-text"),
    ],
)
def test_an_unreadable_record_is_an_error(text: str) -> None:
    with pytest.raises(StagingError):
        staging.parse_record(text)


@pytest.mark.parametrize(
    ("record", "label", "action"),
    [
        pytest.param(None, LABEL, "stage_in", id="first-run"),
        pytest.param(StagingRecord(LABEL), LABEL, "stage_in", id="upload-unfinished-resumes"),
        pytest.param(
            StagingRecord(LABEL, stage_in_done=True), LABEL, "skip_stage_in", id="restart-never-uploads-twice"
        ),
        pytest.param(StagingRecord("old", stage_in_done=True), LABEL, "stage_in", id="a-retry-uploads-for-its-own-job"),
        pytest.param(
            StagingRecord("old", copy_back="pending", exit_code=1),
            LABEL,
            "copy_back_only",
            id="pending-copy-back-first",
        ),
        pytest.param(
            StagingRecord(LABEL, stage_in_done=True, copy_back="done"), LABEL, "skip_stage_in", id="copied-back-once"
        ),
    ],
)
def test_decide_start(record: StagingRecord | None, label: str, action: str) -> None:
    assert staging.decide_start(record, job_label=label) == action


def test_the_record_never_outgrows_its_share_of_the_state_volume() -> None:
    assert staging.MAX_RECORD_BYTES <= contract.STATE_FILE_MAX_BYTES
    assert contract.STATE_VOLUME_SIZE_LIMIT == "1Mi"  # 4 files of 4 KiB for each of 64 containers


@pytest.mark.parametrize(
    ("size", "mtime", "copy", "current"),
    [
        pytest.param(3, 17, (3, 17), True, id="unchanged"),
        pytest.param(4, 17, (3, 17), False, id="size-changed"),
        pytest.param(3, 18, (3, 17), False, id="touched"),
        pytest.param(3, 17, None, False, id="no-copy"),
    ],
)
def test_is_current(size: int, mtime: int, copy: tuple[int, int] | None, current: bool) -> None:
    assert vault_files.is_current(size=size, mtime=mtime, copy=copy) is current


@pytest.mark.parametrize(
    ("path", "tree", "inside"),
    [
        ("/w/data", "/w/data", True),
        ("/w/data/a/b", "/w/data", True),
        ("/w/data2", "/w/data", False),
        ("/var/run/secrets/kubernetes.io/serviceaccount/token", "/w/data", False),
        ("/w/data/x", "/", True),
    ],
)
def test_is_inside(path: str, tree: str, inside: bool) -> None:
    assert staging.is_inside(path, tree) is inside


@pytest.mark.parametrize(
    ("path", "action"),
    [
        pytest.param("/w/ckpt", "empty", id="a-checkpoint-directory-in-both-lists"),
        pytest.param("/w/out/ckpt", "empty", id="under-a-stage-out-path"),
        pytest.param("/w/data", "error", id="an-input-elsewhere"),
        pytest.param("/w/outside", "error", id="a-sibling-of-the-stage-out-path"),
    ],
)
def test_a_missing_stage_in_path(path: str, action: str) -> None:
    paths = StagePaths(stage_in=("/w/ckpt", "/w/out/ckpt", "/w/data", "/w/outside"), stage_out=("/w/ckpt", "/w/out"))
    assert staging.missing_stage_in(path, paths) == action


@pytest.mark.parametrize(
    ("job_may_run", "job_known", "action"),
    [(False, True, "copy_back"), (True, True, "leave"), (False, False, "leave")],
    ids=["ended", "may-still-run", "never-submitted"],
)
def test_decide_end(job_may_run: bool, job_known: bool, action: str) -> None:
    assert staging.decide_end(job_may_run=job_may_run, job_known=job_known) == action


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, vault_settings.VaultSettings("api.example", 22, None, False), id="default-api-host"),
        pytest.param(
            {"NIMBIX_BURST_VAULT_SFTP": "10.0.0.1:2222", "NIMBIX_BURST_KEEP_VAULT_DIR": "1"},
            vault_settings.VaultSettings("10.0.0.1", 2222, None, True),
            id="host-port-keep",
        ),
        pytest.param(
            {"NIMBIX_BURST_VAULT_SFTP": "[fd00::1]:2222", "NIMBIX_BURST_VAULT_KNOWN_HOSTS": "/etc/kh"},
            vault_settings.VaultSettings("fd00::1", 2222, "/etc/kh", False),
            id="ipv6",
        ),
        pytest.param(
            {"NIMBIX_BURST_VAULT_SFTP": "10.0.0.53:2222", "NIMBIX_BURST_VAULT_HOST_KEY": "ssh-ed25519 AAAAC3Nz gw"},
            vault_settings.VaultSettings("10.0.0.53", 2222, None, False, host_key="ssh-ed25519 AAAAC3Nz"),
            id="the-gateways-host-key",
        ),
    ],
)
def test_parse_vault_settings(env: dict[str, str], expected: vault_settings.VaultSettings) -> None:
    assert vault_settings.parse_vault_settings(env, api_host="api.example") == expected


@pytest.mark.parametrize(("port", "line"), [(22, "v ssh-ed25519 AAAA\n"), (2222, "[v]:2222 ssh-ed25519 AAAA\n")])
def test_a_host_key_is_a_known_hosts_line_for_the_address(port: int, line: str) -> None:
    assert vault_settings.VaultSettings("v", port, None, False, host_key="ssh-ed25519 AAAA").known_hosts_line() == line
    assert vault_settings.VaultSettings("v", port, "/kh", False).known_hosts_line() is None


@pytest.mark.parametrize(
    ("env", "says"),
    [
        pytest.param({"NIMBIX_BURST_VAULT_SFTP": "h:99999"}, "host or host:port", id="port-range"),
        pytest.param({"NIMBIX_BURST_VAULT_KNOWN_HOSTS": "kh"}, "absolute path", id="relative-known-hosts"),
        pytest.param({"NIMBIX_BURST_KEEP_VAULT_DIR": "yes"}, "0 or 1", id="keep-typo"),
        pytest.param({"NIMBIX_BURST_VAULT_HOST_KEY": "AAAAC3Nz"}, "public host key", id="host-key-without-type"),
    ],
)
def test_parse_vault_settings_rejects(env: dict[str, str], says: str) -> None:
    with pytest.raises(StagingError, match=says):
        vault_settings.parse_vault_settings(env, api_host="api.example")


@pytest.mark.parametrize(
    ("done", "total", "seconds", "line"),
    [
        (512 << 20, 1 << 30, 6.0, "1 of 2 files, 512.0 MiB of 1.0 GiB (50%), 85.3 MiB/s, ETA 6 s"),
        (0, 100, 0.0, "1 of 2 files, 0 B of 100 B (0%), 0 B/s, ETA unknown"),
        (0, 0, 1.0, "1 of 2 files, 0 B of 0 B (100%), 0 B/s, ETA unknown"),
    ],
)
def test_format_progress(done: int, total: int, seconds: float, line: str) -> None:
    shown = vault_files.format_progress("stage-in", done=done, total=total, seconds=seconds, files_done=1, files=2)
    assert shown == "nimbix-burst: stage-in " + line


def test_credential_files_are_the_runner_s_file_variables() -> None:
    env = {"JARVICE_APIKEY_FILE": " /etc/jarvice/apikey ", "JARVICE_USERNAME_FILE": "", "OTHER_FILE": "/x"}
    assert vault_settings.credential_files(env) == frozenset({"/etc/jarvice/apikey"})


@pytest.mark.parametrize(
    "name",
    ["model.bin", "x" * 255, "caf\udce9.bin", "", ".nbpart-0123456789abcdef"],
)
def test_a_partial_file_s_name_is_short_stable_and_the_runner_s_own(name: str) -> None:
    part = vault_files.part_name(name)
    assert len(part.encode()) == 24  # beside a name of 255 bytes too
    assert part == vault_files.part_name(name)  # a resume finds it
    assert vault_files.is_part_name(part)


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        ("model.bin.nbpart", True),  # an earlier runner's
        (".nbpart-0123456789abcdef", True),
        (".nbpart-0123456789ABCDEF", False),
        (".nbpart-0123", False),
        ("nbpart", False),
        ("model.bin", False),
    ],
)
def test_is_part_name(name: str, ours: bool) -> None:
    assert vault_files.is_part_name(name) is ours


@pytest.mark.parametrize(
    ("mtime_ns", "seconds"),
    [
        (1_500_000_000_999_999_999, 1_500_000_000),
        (0, 0),
        (-1, 0),  # before 1970: SFTP has no negative time
        (-86_400 * 10**9, 0),
        ((2**32 - 1) * 10**9, 2**32 - 1),
        ((2**32 + 5) * 10**9, 2**32 - 1),  # after 2106
    ],
)
def test_sftp_time_clamps_what_sftp_cannot_carry(mtime_ns: int, seconds: int) -> None:
    assert vault_files.sftp_time(mtime_ns) == seconds


@pytest.mark.parametrize(
    ("mode", "carried"), [(0o100755, 0o755), (0o104755, 0o755), (0o40700, 0o700), (0o100644, 0o644)]
)
def test_file_mode_carries_permissions_never_set_id_bits(mode: int, carried: int) -> None:
    assert vault_files.file_mode(mode) == carried


@pytest.mark.parametrize(
    ("rtt", "depth"),
    [
        (0.0001, vault_files.Depth(1, 3, 6)),  # loopback: the CPU per packet sets the pace
        (0.0049, vault_files.Depth(1, 3, 6)),
        (0.005, vault_files.Depth(4, 6, 6)),  # a WAN: what is in flight does, six blocks at least
        (0.020, vault_files.Depth(4, 6, 6)),  # 2.5 MiB wanted
        (0.050, vault_files.Depth(5, 7, 7)),  # 6.4 MiB: seven blocks, over five 2 MiB windows
        (0.080, vault_files.Depth(8, 11, 11)),  # 10.24 MiB: eleven blocks, eight windows
        (0.094, vault_files.Depth(8, 12, 12)),  # 12.03 MiB: at the bound
        (0.150, vault_files.Depth(8, 12, 12)),  # bounded: memory, and OpenSSH's 10 sessions a connection
        (3.0, vault_files.Depth(8, 12, 12)),
    ],
)
def test_transfer_depth_follows_the_measured_round_trip(rtt: float, depth: vault_files.Depth) -> None:
    assert vault_files.transfer_depth(rtt) == depth


@pytest.mark.parametrize(
    ("rate", "depth"),
    [
        (32 << 20, vault_files.Depth(4, 6, 6)),
        (256 << 20, vault_files.Depth(8, 12, 12)),
        (160 << 20, vault_files.Depth(6, 8, 8)),
    ],
)
def test_transfer_depth_puts_the_rate_aimed_at_in_flight(rate: int, depth: vault_files.Depth) -> None:
    assert vault_files.transfer_depth(0.05, target_bytes_per_second=rate) == depth


async def test_block_memory_widens_for_a_far_vault_and_never_narrows() -> None:
    memory = transfer_pass.BlockMemory()
    for _ in range(transfer_pass.CHUNKS_IN_MEMORY):
        await memory.acquire(transfer_pass.CHUNK_BYTES)
    assert memory.locked()
    memory.widen(transfer_pass.CHUNKS_IN_MEMORY + 2)
    await memory.acquire(transfer_pass.CHUNK_BYTES)
    await memory.acquire(transfer_pass.CHUNK_BYTES)
    assert memory.locked()
    memory.widen(transfer_pass.CHUNKS_IN_MEMORY)  # a reconnect to a nearer vault: the blocks held stay counted
    memory.release(transfer_pass.CHUNK_BYTES)
    assert not memory.locked()
