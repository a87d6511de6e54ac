"""Build the project's images for real (devplatform/images/build.sh: mmdebstrap + buildah, no Docker,
no registry) and check what is inside: the runner, the example app, the JARVICE AppDef and its run
command. A cold build takes minutes (Debian bootstrap, pip from PyPI); a warm one reuses the archives.
Needs root, buildah and mmdebstrap (devplatform/host/install-packages.sh installs them): a machine
without them fails with the reason, nothing is skipped."""

import json
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from devplatform import images

pytestmark = pytest.mark.timeout(1900)

ROOT = Path(__file__).resolve().parents[2]
# A warm build only hashes inputs and checks that the archives exist (measured: ~2 s).
RUN_TIMEOUT = 120.0
# The base image's OCI archive (measured: 82 MB, OpenSSH included).
BASE_ARCHIVE_MAX_BYTES = 90_000_000
# Where run_in's command writes its output inside the container (a host directory mounted there).
RUN_IN_OUTPUT = "/run/nimbix-burst-run-in"


@pytest.fixture(scope="module")
def archives() -> dict[str, images.ImageArchive]:
    built = images.build_images()
    return {archive.name: archive for archive in built}


def run_in(image: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run `argv` in a throw-away container of `image` (buildah, chroot isolation), as the image's
    USER in its WORKDIR with its environment, the way the kubelet or JARVICE starts the command.

    Its output goes to files in a directory bind-mounted from the host, not through `buildah run`'s
    own relay: on a loaded 2-core machine that relay was seen to return a command's stdout cut short
    (two of four lines, exit 0)."""
    buildah = images.buildah_command()
    container = subprocess.run(
        [*buildah, "from", "--pull-never", "--quiet", image],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="nimbix-burst-run-in-") as scratch:
        out = Path(scratch)
        out.chmod(0o755)
        for name in ("stdout", "stderr"):
            (out / name).touch(mode=0o666)
            (out / name).chmod(0o666)  # the image's user (10001) writes them; umask would narrow touch's mode
        redirect = f'exec "$@" >{RUN_IN_OUTPUT}/stdout 2>{RUN_IN_OUTPUT}/stderr'
        try:
            relayed = subprocess.run(
                [
                    *buildah,
                    *("run", "--isolation", "chroot", "--network", "host"),
                    *("--volume", f"{out}:{RUN_IN_OUTPUT}"),
                    *(container, "--", "/bin/sh", "-c", redirect, "sh", *argv),
                ],
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
                check=False,
            )
        finally:
            subprocess.run([*buildah, "rm", container], capture_output=True, timeout=RUN_TIMEOUT, check=False)
        stderr = (out / "stderr").read_text(errors="replace")
        return subprocess.CompletedProcess(
            relayed.args,
            relayed.returncode,
            (out / "stdout").read_text(errors="replace"),
            stderr + relayed.stderr,
        )


def image_config(image: str) -> dict[str, object]:
    out = subprocess.run(
        [*images.buildah_command(), "inspect", "--type", "image", image],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=True,
    ).stdout
    config: dict[str, object] = json.loads(out)["OCIv1"]["config"]
    return config


def test_every_image_has_an_archive_named_for_containerd(archives: dict[str, images.ImageArchive]) -> None:
    assert set(archives) == set(images.NAMES)
    for name, archive in archives.items():
        assert archive.path.is_relative_to(images.default_cache_dir() / "images")
        assert not archive.path.is_relative_to(ROOT), "archives stay outside the checkout"
        with tarfile.open(archive.path) as tar:
            member = tar.extractfile("index.json")
            assert member is not None
            index = json.load(member)
        # `ctr images import` names the image after this annotation.
        (manifest,) = index["manifests"]
        assert manifest["annotations"]["org.opencontainers.image.ref.name"] == name


def test_a_warm_build_reuses_the_archives(archives: dict[str, images.ImageArchive]) -> None:
    """Unchanged inputs: the same archives, not rewritten (a rebuild would move a new file into place:
    a new inode; a reuse only touches the file, whose age says when a build last used it)."""
    before = {name: archives[name].path.stat().st_ino for name in images.NAMES}
    again = images.build_images()
    assert [a.path for a in again] == [archives[name].path for name in images.NAMES]
    assert {name: archives[name].path.stat().st_ino for name in images.NAMES} == before


def test_base_image_runs_the_runner_as_non_root(archives: dict[str, images.ImageArchive]) -> None:
    config = image_config(images.BASE)
    assert config["Entrypoint"] == ["python", "-m", "entrypoint"]
    assert config["User"] == "10001:10001"
    assert config["WorkingDir"] == "/home/app"
    result = run_in(images.BASE, ["python", "-m", "entrypoint", "bash", "-c", "id -u; echo $PYTHONUNBUFFERED"])
    assert (result.returncode, result.stdout) == (0, "10001\n1\n"), result.stderr


def test_base_image_has_openssh_for_the_fan_out(archives: dict[str, images.ImageArchive]) -> None:
    """What a gang's fan-out over several JARVICE nodes uses: the ssh client, on the PATH of the
    user's shell, and the server with its host keys and a configuration `sshd -t` accepts."""
    result = run_in(images.BASE, ["bash", "-c", "command -v ssh sshd; ssh -V 2>&1; test -d /run/sshd && echo privsep"])
    assert result.returncode == 0, result.stderr
    ssh, sshd, version, privsep = result.stdout.splitlines()
    assert (ssh, sshd, privsep) == ("/usr/bin/ssh", "/usr/sbin/sshd", "privsep")
    assert version.startswith("OpenSSH_"), version
    # As the image's user, who cannot read the host keys (root's, mode 600): a key of its own.
    check = "ssh-keygen -q -t ed25519 -N '' -f /tmp/key && /usr/sbin/sshd -t -f /etc/ssh/sshd_config -h /tmp/key"
    config = run_in(images.BASE, ["bash", "-c", f"{check} && ls /etc/ssh/ssh_host_ed25519_key"])
    assert config.returncode == 0, config.stderr


def test_base_image_leaves_apts_lists_and_caches_out(archives: dict[str, images.ImageArchive]) -> None:
    """`apt-get update` alone leaves ~80 MB of package caches behind; the archive stays small: 82 MB
    with OpenSSH (78 MB without it), this bound catches such a leftover."""
    # What the image's user can see (the `partial` directories are apt's own).
    listing = "find /var/lib/apt/lists /var/cache/apt -mindepth 1 -maxdepth 2 -printf '%P\\n' 2>/dev/null; true"
    result = run_in(images.BASE, ["bash", "-c", listing])
    assert result.returncode == 0, result.stderr
    left = set(result.stdout.split())
    assert left and left <= {"lock", "partial", "archives", "archives/lock", "archives/partial"}, result.stdout
    assert archives[images.BASE].path.stat().st_size < BASE_ARCHIVE_MAX_BYTES


def test_base_image_carries_the_appdef_the_emulator_loads(archives: dict[str, images.ImageArchive]) -> None:
    result = run_in(images.BASE, ["cat", "/etc/NAE/AppDef.json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads((ROOT / "images" / "base" / "AppDef.json").read_text())


def test_appdef_run_command_uses_the_image_python_in_workdir(archives: dict[str, images.ImageArchive]) -> None:
    """What JARVICE runs for the runner's submission: the AppDef path with parameters.command."""
    command = 'pwd; python -c "import entrypoint, sys; print(sys.prefix)"; exit 7'
    result = run_in(images.BASE, ["/usr/local/bin/nimbix-burst-run-command", command])
    assert (result.returncode, result.stdout) == (7, "/home/app\n/opt/venv\n"), result.stderr


def test_example_app_trains_locally_and_through_the_appdef(archives: dict[str, images.ImageArchive]) -> None:
    config = image_config(images.EXAMPLE_APP)
    assert config["Cmd"] == ["python", "train.py", "--epochs", "3"]
    assert config["Entrypoint"] == ["python", "-m", "entrypoint"]
    local = run_in(images.EXAMPLE_APP, ["python", "-m", "entrypoint", "python", "train.py", "--seconds-per-epoch", "0"])
    assert local.returncode == 0, local.stderr
    assert local.stdout.splitlines()[-1:] == ["training done"], (local.stdout, local.stderr)
    remote = run_in(
        images.EXAMPLE_APP,
        ["/usr/local/bin/nimbix-burst-run-command", "python train.py --epochs 1 --seconds-per-epoch 0 --exit-code 3"],
    )
    assert remote.returncode == 3, remote.stderr
    assert remote.stdout.splitlines()[-1:] == ["training done"], (remote.stdout, remote.stderr)


def test_webhook_image_runs_the_webhook_as_non_root(archives: dict[str, images.ImageArchive]) -> None:
    config = image_config(images.WEBHOOK)
    assert config["Entrypoint"] == ["python", "-m", "webhook"]
    assert config["User"] == "65532:65532"
    result = run_in(images.WEBHOOK, ["python", "-c", "import webhook.app, jarvice.contract; print('ok')"])
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
