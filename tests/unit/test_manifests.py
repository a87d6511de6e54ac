"""What goes into the images, from the repository alone (no cluster, no kubectl): the webhook's
Dockerfile, the distribution's dependencies against what the product and the tests import, and the
example Job. The rendered install (`kubectl kustomize deploy/`) is checked in
tests/e2e/test_install_structure.py, where the project-built kubectl is at hand."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path

import jsonpatch

from devplatform import manifests
from jarvice import contract
from tests.support.dockerfiles import DOCKERFILE, dockerfile_stages, dockerfile_user_id, stage_instructions
from webhook.mutation import build_remote_patch
from webhook.rewrite_terms import BurstTerms, RewritePolicy
from webhook.types import Decision
from webhook.walltime import Walltime

EXAMPLES_DIR = manifests.DEPLOY_DIR / "examples"


# --- the image ----------------------------------------------------------------------------------


def test_dockerfile_runs_the_webhook_as_a_numeric_non_root_user() -> None:
    stages = dockerfile_stages()
    final = stages[-1]
    assert stage_instructions(final, "ENTRYPOINT") == ['["python", "-m", "webhook"]']
    assert json.loads(stage_instructions(final, "ENTRYPOINT")[0]) == ["python", "-m", "webhook"]
    assert stage_instructions(final, "EXPOSE") == ["8443"]
    assert stage_instructions(final, "RUN") == []  # the runtime stage only copies the built virtualenv
    assert stage_instructions(final, "CMD") == []
    assert dockerfile_user_id() > 0


def test_dockerfile_runs_on_python_311_slim_and_installs_the_webhook_extra_only() -> None:
    text = DOCKERFILE.read_text()
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, flags=re.MULTILINE)
    assert base == "python:3.11-slim"
    build, runtime = dockerfile_stages()
    assert stage_instructions(runtime, "FROM")[0].split()[0] == "${PYTHON_IMAGE}"
    # The runtime venv gets the distribution with the webhook extra; the compiler's tools (mypy, in
    # /opt/mypyc) stay in the build stage, which the runtime stage copies /opt/venv from, only.
    installs = [run for run in stage_instructions(build, "RUN") if "/opt/venv/bin/pip" in run]
    assert installs == ["/opt/venv/bin/pip install -c constraints.txt '.[webhook]'"]
    assert stage_instructions(runtime, "COPY") == ["--from=build /opt/venv /opt/venv"]


def test_webhook_image_carries_every_package_the_distribution_installs() -> None:
    """The controller runs from the webhook image (deploy/controller.yaml): a package the build does
    not COPY would make `python -m controller` fail at start."""
    packages = tomllib.loads((manifests.REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    wanted = set(packages["packages"]["find"]["include"])
    copied = {
        shlex.split(c)[0].rstrip("/")
        for stage in dockerfile_stages()
        for c in stage_instructions(stage, "COPY")
        if not c.startswith("--from")
    }
    assert wanted <= copied
    ignore = (manifests.REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert {f"!{name}/" for name in wanted} <= set(ignore)


def _normalize(name: str) -> str:  # PEP 503
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(*extras: str) -> set[str]:
    """Distributions the core dependencies plus the given extras install (self-references expanded)."""
    project = tomllib.loads((manifests.REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"]]
    pending = list(extras)
    while pending:
        for requirement in project["optional-dependencies"][pending.pop()]:
            self_reference = re.fullmatch(r"nimbix-burst\[([a-z,]+)\]", requirement)
            if self_reference:
                pending += self_reference.group(1).split(",")
            else:
                requirements.append(requirement)
    return {_normalize(re.split(r"[<>=\[; ]", requirement)[0]) for requirement in requirements}


def _imported_distributions(*directories: str) -> set[str]:
    """The distributions that the third-party top-level imports under `directories` come from."""
    local = {
        "jarvice",
        "webhook",
        "entrypoint",
        "controller",
        "kubeplumbing",
        "kubectl_nimbix",
        "gateway",
        "devplatform",
        "bench",
        "replay",
        "tests",
    }
    imported: set[str] = set()
    for directory in directories:
        for path in (manifests.REPO_ROOT / directory).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    imported.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in local}
    assert third_party  # the scan found something
    distributions = importlib.metadata.packages_distributions()
    return {_normalize(distributions[m][0]) for m in third_party}


def test_the_webhook_extra_covers_every_third_party_import_of_the_webhook() -> None:
    """The image installs core deps + the webhook extra: anything else the webhook imports would be
    missing at run time, which no test in this checkout (where the test extra is installed) would see."""
    needed = _imported_distributions("webhook", "gateway", "kubeplumbing", "jarvice")  # the image's programs
    declared = _declared("webhook")
    assert needed <= declared, needed - declared


def test_the_kubectl_extra_covers_every_third_party_import_of_the_plugin() -> None:
    """`pip install 'nimbix-burst[kubectl]'` must be enough for `kubectl nimbix` (it counts budgets
    with the webhook's own pure rules, so their imports count too)."""
    needed = _imported_distributions("kubectl_nimbix", "webhook")
    needed -= {"aiohttp", "prometheus-client", "uvloop"}  # the webhook's server only: the plugin never imports it
    declared = _declared("kubectl")
    assert needed <= declared, needed - declared


def test_the_webhook_extra_holds_only_what_the_product_imports() -> None:
    """Every package in the webhook image is attack surface and weight: nothing only tests use."""
    project = tomllib.loads((manifests.REPO_ROOT / "pyproject.toml").read_text())["project"]
    extra = {_normalize(re.split(r"[<>=\[; ]", r)[0]) for r in project["optional-dependencies"]["webhook"]}
    unused = extra - _imported_distributions("webhook", "gateway", "entrypoint", "kubeplumbing", "jarvice")
    assert not unused, f"in the webhook extra but imported only by tests or tools: {unused}"


def test_the_test_extra_covers_every_third_party_import_of_the_tests_and_tools() -> None:
    """`pip install '.[test]'` (make test, CI) must be enough for the tests, the local platform, the
    benchmarks and the replay; a package that happens to be installed here would hide the gap."""
    needed = _imported_distributions("tests", "devplatform", "bench", "replay")
    declared = _declared("test")
    assert needed <= declared, needed - declared


def _pins() -> dict[str, str]:
    """constraints.txt as distribution -> pinned version."""
    lines = (manifests.REPO_ROOT / "constraints.txt").read_text().splitlines()
    pins = [line.split("==") for line in lines if line.strip() and not line.startswith("#")]
    assert all(len(pin) == 2 for pin in pins), "constraints.txt: every line is name==version or a comment"
    return {_normalize(name): version for name, version in pins}


def test_constraints_pin_every_declared_distribution_at_the_version_the_tests_run_with() -> None:
    """A clean clone (CI) and the images install with `-c constraints.txt`: a declared distribution it
    does not pin would come in at whatever PyPI has that day, untested."""
    pins = _pins()
    declared = _declared("webhook", "kubectl", "test")
    assert declared <= set(pins), f"not pinned in constraints.txt (make lock): {declared - set(pins)}"
    installed = {name: importlib.metadata.version(name) for name in declared}
    differ = {name: (installed[name], pins[name]) for name in declared if installed[name] != pins[name]}
    assert not differ, f"installed here vs constraints.txt (make venv reinstalls): {differ}"


def test_every_pip_install_of_the_images_uses_the_constraints() -> None:
    base = (manifests.REPO_ROOT / "images" / "base" / "Dockerfile").read_text()
    for text in (DOCKERFILE.read_text(), base):
        installs = re.findall(r"/pip install [^\\\n]*", text)
        assert installs and all(" -c constraints.txt " in install for install in installs), installs
        assert re.search(r"^COPY [^\n]*constraints\.txt", text, flags=re.MULTILINE)


# --- examples -----------------------------------------------------------------------------------


def test_example_job_holds_only_what_a_user_decides_and_the_webhook_writes_the_rest() -> None:
    """The example is the label, the image, the command and the GPU request; bursting it, the webhook
    mounts the Secret the credentials example creates and points the runner at its files."""
    (job,) = manifests.parse_manifests((EXAMPLES_DIR / "job.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["spec"]["backoffLimit"] == 0
    template = job["spec"]["template"]
    assert template["metadata"]["labels"] == {contract.LABEL_TASK_TYPE: contract.LABEL_TASK_TYPE_VALUE}
    (app,) = template["spec"]["containers"]
    assert set(app) == {"name", "image", "args", "resources"}
    assert app["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert "volumes" not in template["spec"] and "securityContext" not in template["spec"]

    pod = {"metadata": {"name": "p", "namespace": "my-team", **template["metadata"]}, "spec": template["spec"]}
    pod = json.loads(json.dumps(pod).replace('"nvidia.com/gpu": 2', '"nvidia.com/gpu": "2"'))
    policy = RewritePolicy(gpu_resources=("nvidia.com/gpu",), remote_cpu="100m", remote_memory="128Mi")
    terms = BurstTerms(cluster="c-0f1e2d3c4b5a", limit=Walltime(3600, "default"), app="team-app")
    decision = Decision(kind="remote", reason="no node has 2 free nvidia.com/gpu")
    ops = build_remote_patch(pod, gpus={"nvidia.com/gpu": 2}, decision=decision, policy=policy, terms=terms)
    burst = jsonpatch.apply_patch(pod, ops)
    (runner,) = burst["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in runner["env"]}
    assert env[contract.ENV_NUM_GPUS] == "2" and env[contract.ENV_REMOTE] == "1" and env["APP_NAME"] == "team-app"
    (secret_example,) = manifests.parse_manifests((EXAMPLES_DIR / "jarvice-credentials.yaml.example").read_text())
    volumes = {v["name"]: v for v in burst["spec"]["volumes"]}
    (mount,) = [m for m in runner["volumeMounts"] if m["name"] == contract.CREDENTIALS_VOLUME_NAME]
    assert volumes[mount["name"]]["secret"]["secretName"] == secret_example["metadata"]["name"]
    assert mount["readOnly"] is True
    for name in ("JARVICE_USERNAME_FILE", "JARVICE_APIKEY_FILE"):
        path = Path(str(env[name]))
        assert path.parent == Path(mount["mountPath"])
        assert path.name in secret_example["stringData"]


def test_the_webhook_extra_covers_every_third_party_import_of_the_controller() -> None:
    """The controller runs from the webhook image (core deps + the webhook extra)."""
    needed = _imported_distributions("controller", "kubeplumbing", "jarvice")  # so does the controller
    assert needed <= _declared("webhook"), needed - _declared("webhook")
