"""The Dockerfiles cannot be built here (no engine): check that what they install and run is what
the tests exercise (`python -m entrypoint`, the console script, the example app's command)."""

import importlib
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(20)

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "images" / "base" / "Dockerfile"
APP = ROOT / "images" / "example-app" / "Dockerfile"


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
    assert installs == ["/opt/venv/bin/pip install ."]
    copies = [shlex.split(c) for c in only(BASE, "COPY") if not c.startswith("--from")]
    sources = {src.rstrip("/") for copy in copies for src in copy[:-1]}
    assert sources == {"pyproject.toml", "README.md", "entrypoint"}
    for source in sources - {"README.md"}:  # README.md is assembled from docs/_parts
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
    (copy,) = only(APP, "COPY")
    source = shlex.split(copy)[-2]
    assert (APP.parent / source).is_file()
    (cmd,) = only(APP, "CMD")
    argv = json.loads(cmd)
    assert argv[:2] == ["python", source]
    # What the container would run: ENTRYPOINT + CMD, i.e. the runner with the app's argv, locally.
    result = subprocess.run(
        [sys.executable, "-m", "entrypoint", *argv, "--seconds-per-epoch", "0"],
        cwd=APP.parent,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        timeout=15,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines()[-1] == "training done"
