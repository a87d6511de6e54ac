"""Static checks on the Dockerfiles, the build context and the base image's JARVICE metadata: what
they install and run is what the tests exercise (`python -m entrypoint`, the console script, the
example app's command, the AppDef's run command). tests/e2e/test_images_build.py builds them
for real (devplatform/images/build.sh)."""

import importlib
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from devplatform import compiled_core
from tests.support.deadlines import HANG_SECONDS, PROGRAM_EXIT_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "images" / "base" / "Dockerfile"
APP = ROOT / "images" / "example-app" / "Dockerfile"
WEBHOOK = ROOT / "images" / "webhook" / "Dockerfile"
APPDEF = ROOT / "images" / "base" / "AppDef.json"
RUN_COMMAND = ROOT / "images" / "base" / "nimbix-burst-run-command"
# The files the base image copies besides the package build's inputs: its JARVICE application.
BASE_JARVICE_FILES = {
    "images/base/nimbix-burst-run-command": "/usr/local/bin/nimbix-burst-run-command",
    "images/base/nimbix-burst-signal": "/usr/local/bin/nimbix-burst-signal",
    "images/base/profile.sh": "/etc/profile.d/nimbix-burst.sh",
    "images/base/AppDef.json": "/etc/NAE/AppDef.json",
}


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    result = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def only(path: Path, keyword: str) -> list[str]:
    return [args for kw, args in instructions(path) if kw == keyword]


def pyproject() -> dict:  # type: ignore[type-arg]
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_base_image_python_matches_the_project() -> None:
    args = dict(a.split("=", 1) for a in only(BASE, "ARG") if "=" in a)
    assert args["PYTHON_IMAGE"] == f"python:{sys.version_info.major}.{sys.version_info.minor}-slim"
    assert pyproject()["project"]["requires-python"] == ">=3.11"
    assert all(f in ("${PYTHON_IMAGE}", "${PYTHON_IMAGE} AS build") for f in only(BASE, "FROM"))


def test_base_image_entrypoint_is_the_runner_module() -> None:
    (entrypoint,) = only(BASE, "ENTRYPOINT")
    assert json.loads(entrypoint) == ["python", "-m", "entrypoint"]
    module = importlib.import_module("entrypoint.__main__")
    assert callable(module.main)


def test_console_script_is_the_same_main() -> None:
    scripts = pyproject()["project"]["scripts"]
    assert scripts["nimbix-burst-run"] == "entrypoint.__main__:main"
    assert "entrypoint" in pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]


def test_base_image_installs_the_distribution_without_extras() -> None:
    runs = only(BASE, "RUN")
    installs = [r for r in runs if "pip install" in r]
    assert installs == ["/opt/venv/bin/pip install -c constraints.txt ."]
    copies = [shlex.split(c) for c in only(BASE, "COPY") if not c.startswith("--from")]
    sources = {src.rstrip("/") for copy in copies for src in copy[:-1]} - set(BASE_JARVICE_FILES)
    # The runner and what it imports, and the versions they are installed at.
    assert sources == {"pyproject.toml", "README.md", "constraints.txt", "entrypoint", "jarvice"}
    for source in sources:
        assert (ROOT / source).exists(), source
    assert pyproject()["project"]["readme"] == "README.md"


def test_base_image_runs_as_non_root_with_bash() -> None:
    (user,) = only(BASE, "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert any("command -v bash" in r and f"--uid {uid}" in r for r in only(BASE, "RUN"))


def test_example_app_builds_from_the_base_and_its_command_runs_under_the_runner(tmp_path: Path) -> None:
    (base_arg,) = only(APP, "ARG")
    assert base_arg.startswith("BASE_IMAGE=nimbix-burst/base:")
    assert only(APP, "FROM") == ["${BASE_IMAGE}"]
    copy, appdef_copy = only(APP, "COPY")
    source = shlex.split(copy)[-2]  # relative to the build context, the repository root
    assert (ROOT / source).is_file()
    assert shlex.split(appdef_copy) == ["images/base/AppDef.json", "/etc/NAE/AppDef.json"]
    (cmd,) = only(APP, "CMD")
    argv = json.loads(cmd)
    assert argv[:2] == ["python", Path(source).name]
    # What the container would run: ENTRYPOINT + CMD, i.e. the runner with the app's argv, locally.
    result = subprocess.run(
        [sys.executable, "-m", "entrypoint", *argv, "--seconds-per-epoch", "0"],
        cwd=APP.parent,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        timeout=PROGRAM_EXIT_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines()[-1] == "training done"


def test_python_base_is_a_build_argument() -> None:
    """build.sh passes its Debian-packaged Python as PYTHON_IMAGE; both stages of the base use it."""
    assert any(a.startswith("PYTHON_IMAGE=") for a in only(BASE, "ARG"))
    assert {f.split()[0] for f in only(BASE, "FROM")} == {"${PYTHON_IMAGE}"}


def test_the_webhook_builds_on_build_image_and_runs_on_python_image() -> None:
    """The webhook's build stage compiles its decision core (gcc, Python's headers): BUILD_IMAGE, the
    same Python with a C toolchain; the runtime stage is PYTHON_IMAGE. build.sh passes both."""
    args = dict(a.split("=", 1) for a in only(WEBHOOK, "ARG") if "=" in a)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert (args["BUILD_IMAGE"], args["PYTHON_IMAGE"]) == (f"python:{version}", f"python:{version}-slim")
    assert [f.split()[0] for f in only(WEBHOOK, "FROM")] == ["${BUILD_IMAGE}", "${PYTHON_IMAGE}"]
    build_script = (ROOT / "devplatform" / "images" / "build.sh").read_text()
    # Each by the tag of the build made from exactly its inputs (the plain tag may be another checkout's).
    assert '"PYTHON_IMAGE=$python BUILD_IMAGE=$build"' in build_script
    assert 'python=$(keyed_tag "$PYTHON_IMAGE" "$python_key")' in build_script
    assert 'build=$(keyed_tag "$BUILD_IMAGE" "$build_key")' in build_script


def test_base_image_carries_its_jarvice_application() -> None:
    copies = {tuple(shlex.split(c)) for c in only(BASE, "COPY") if not c.startswith("--from")}
    for source, destination in BASE_JARVICE_FILES.items():
        assert (source, destination) in copies, source
        assert (ROOT / source).is_file()
    assert RUN_COMMAND.stat().st_mode & 0o111, "COPY keeps the mode: the script must be executable in git"
    # The AppDef's run command is the script the Dockerfile installs, taking the runner's parameter.
    appdef = json.loads(APPDEF.read_text())
    run = appdef["commands"]["run"]
    assert run["path"] == BASE_JARVICE_FILES["images/base/nimbix-burst-run-command"]
    assert list(run["parameters"]) == ["command"]
    # The AppDef's last filesystem change: JARVICE reads /etc/NAE from the image's final layer.
    last_copy = shlex.split(only(BASE, "COPY")[-1])
    assert last_copy[-1] == "/etc/NAE/AppDef.json"


@pytest.mark.parametrize(
    ("command", "status", "stdout"),
    [
        ('echo "$PWD"; exit 5', 5, "{workdir}\n"),
        ("printf '%s|' \"a b\" 'c'\"'\"'d'", 0, "a b|c'd|"),
        ("shopt -q login_shell && echo login", 0, "login\n"),
    ],
    ids=["workdir-and-status", "quoting", "login-shell"],
)
def test_run_command_script(tmp_path: Path, command: str, status: int, stdout: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NIMBIX_BURST_WORKDIR": str(tmp_path)}
    result = subprocess.run(
        [str(RUN_COMMAND), command], env=env, capture_output=True, text=True, timeout=PROGRAM_EXIT_SECONDS, check=False
    )
    assert (result.returncode, result.stdout) == (status, stdout.format(workdir=tmp_path)), result.stderr


@pytest.mark.parametrize(
    ("args", "workdir", "status", "message"),
    [
        ([], "{tmp}", 64, "usage: nimbix-burst-run-command COMMAND"),
        (["true", "extra"], "{tmp}", 64, "usage: nimbix-burst-run-command COMMAND"),
        (["true"], "{tmp}/missing", 66, "cannot enter {tmp}/missing"),
    ],
    ids=["no-argument", "two-arguments", "missing-workdir"],
)
def test_run_command_script_errors(tmp_path: Path, args: list[str], workdir: str, status: int, message: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NIMBIX_BURST_WORKDIR": workdir.format(tmp=tmp_path)}
    result = subprocess.run(
        [str(RUN_COMMAND), *args], env=env, capture_output=True, text=True, timeout=PROGRAM_EXIT_SECONDS, check=False
    )
    assert result.returncode == status
    assert message.format(tmp=tmp_path) in result.stderr


def test_the_webhook_image_installs_and_compiles_from_every_package_the_project_lists() -> None:
    """The webhook image (the controller's too) builds the distribution: every package pyproject.toml
    lists is copied in, and what compile-core.sh compiles is copied with all that it imports."""
    packages = set(pyproject()["tool"]["setuptools"]["packages"]["find"]["include"])
    copies = [shlex.split(c) for c in only(WEBHOOK, "COPY") if not c.startswith("--from")]
    sources = {src.rstrip("/") for copy in copies for src in copy[:-1]}
    assert packages <= sources, packages - sources
    (compile_run,) = [r for r in only(WEBHOOK, "RUN") if "compile-core.sh" in r]
    copied_for_mypyc = set(compile_run.split("cp -r ", 1)[1].split(" /compile/", 1)[0].split())
    # None is on a review's path: the controller runs rounds, the plugin runs on a laptop, the runner in
    # the applications' images, the gateway waits on JARVICE.
    not_compiled = {"controller", "kubectl_nimbix", "entrypoint", "gateway"}
    assert copied_for_mypyc == packages - not_compiled == set(compiled_core.PACKAGES)


def test_build_context_sends_what_the_dockerfiles_copy_and_nothing_heavy() -> None:
    """.dockerignore: everything excluded, then the COPY sources re-included."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    assert patterns[0] == "*"
    included = [p[1:].rstrip("/") for p in patterns if p.startswith("!")]

    def sent(path: str) -> bool:
        return any(path == inc or path.startswith(inc + "/") for inc in included)

    for dockerfile in (BASE, WEBHOOK, APP):
        for copy in only(dockerfile, "COPY"):
            if copy.startswith("--from"):
                continue
            sources = [s for s in shlex.split(copy)[:-1] if not s.startswith("--")]
            for source in sources:
                assert sent(source.rstrip("/")), f"{dockerfile.parent.name}: {source} is not in the build context"
    for heavy in (".venv", ".git", ".dev", ".test-runs", ".mypy_cache", "tests", "devplatform"):
        assert not sent(heavy), heavy
