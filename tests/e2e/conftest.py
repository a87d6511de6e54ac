"""Fixtures for tests against the real local control plane (devplatform/cluster).

One ControlPlane per session, under ``<repo>/.test-runs/<timestamp>-<pid>/``. The run directory is
removed when the session passes, and kept (with its component logs listed in the terminal
summary) when anything failed. If the control plane cannot start, the fixture raises: the tests
ERROR, they are never skipped.

``real_node`` adds the real node (devplatform/cluster/node.py: containerd, kubelet, kube-proxy) to the
shared control plane, once per session, with the project's images imported. It registers with the
taint ``nimbix-burst.io/real-node=true:NoSchedule``, so pods of other tests (which count GPUs across
the fake nodes) never land there; a pod meant for it tolerates that taint and selects the label
``nimbix-burst.io/real-node=true`` (``tests.support.real_node_pods.real_node_pod_spec`` adds both).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from devplatform import certmanager, demo
from devplatform.cluster import addons, controlplane, install, node, nodeconfig, nodes
from tests.support.fault_matrix import FaultMatrix, table
from tests.support.gpus import GPU
from tests.support.installed_controller import configure_controller, gateway_pays_with, release_controller

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parents[1]
TEST_RUNS_DIR = REPO_ROOT / ".test-runs"
# Label on everything a test creates, so leftovers are easy to find (and delete) by hand.
TEST_LABEL = "nimbix-burst-test"
# Namespace and node names are DNS labels.
MAX_NAME_LENGTH = 63
# Another session (or make dev-up) may own the machine's one real node (a session holds it until it
# ends: the whole e2e tier in one session takes ~28 min here); wait this long for it. A shard of
# `make test` (devplatform/testshards) has a node claim of its own, in its private /run.
REAL_NODE_CLAIM_WAIT_SECONDS = 1800
# The fixture through which a module uses the kustomize-installed add-on (directly or through another).
INSTALLED_ADDON = "installed_addon"
# A module's mark for the pods each Deployment of the installed add-on runs: the shipped two where the module
# is about replicas (leader election, a follower's counters, a killed leader, replicas racing); one elsewhere,
# which saves the CPU of three more Python processes for the whole module.
ADDON_REPLICAS_MARK = "addon_replicas"
DEFAULT_ADDON_REPLICAS = 1


@dataclass
class _RunRecord:
    """What pytest_terminal_summary needs to keep or remove the run directory."""

    run_root: Path
    log_paths: dict[str, Path] = field(default_factory=dict)

    def add_logs(self, label: str, control_plane: controlplane.ControlPlane) -> None:
        self.add_log_paths(label, control_plane.log_paths)

    def add_log_paths(self, label: str, paths: dict[str, Path]) -> None:
        for component, path in paths.items():
            self.log_paths[f"{label}/{component}"] = path


_RUN_RECORD = pytest.StashKey[_RunRecord]()
_FAULT_MATRIX = pytest.StashKey[FaultMatrix]()


@dataclass
class _AddonSlot:
    """The kustomize-installed add-on of the session: installed by the first module that uses it, kept
    for the next one that does, uninstalled (docs/install.md's order) before a module that does not (its
    webhook answers for every namespace, its controller acts on every burst pod; test_helm_chart.py
    installs the same objects with the chart) and at the session's end. So each module meets the cluster
    it needs whatever ran before it, alone, under -k or in any order."""

    plane: controlplane.ControlPlane
    node: node.RealNode
    installed: install.Installed | None = None
    applied: bool = False  # anything of it may be in the cluster (an install that failed half-way too)
    replicas: int = 0  # of each Deployment, as installed or last scaled

    def ensure_installed(self, replicas: int) -> install.Installed:
        if self.installed is None:
            self.applied = True
            self.installed = install.install_addon(self.plane, self.node, replicas=replicas)
        elif self.replicas != replicas:
            self.installed = install.scale_addon(self.plane, self.installed, replicas=replicas)
        self.replicas = replicas
        return self.installed

    def ensure_uninstalled(self) -> None:
        if self.applied:
            self.installed = None
            install.uninstall(self.plane)
            self.applied = False


_ADDON_SLOT = pytest.StashKey[_AddonSlot]()


def _uses_installed_addon(item: pytest.Item) -> bool:
    return INSTALLED_ADDON in getattr(item, "fixturenames", ())


def addon_replicas(node: pytest.Item | pytest.Collector) -> int:
    """The replicas a module (or one of its tests) wants of each of the installed add-on's Deployments."""
    mark = node.get_closest_marker(ADDON_REPLICAS_MARK)
    return int(mark.args[0]) if mark else DEFAULT_ADDON_REPLICAS


def pytest_configure(config: pytest.Config) -> None:
    # Registered here, beside its one reader, not in pyproject.toml: that file is an input of every image's
    # cache key (devplatform/images/build.sh), and a test mark is no reason to rebuild them.
    config.addinivalue_line(
        "markers", f"{ADDON_REPLICAS_MARK}(n): pods of each Deployment of the installed add-on for this module"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees every collected item, not only this directory's.
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)
    # Only to install the add-on once, not for correctness (_AddonSlot: each module sets up the cluster it
    # needs): the modules that use it run after the others, those with one replica of it first (scaling up
    # adds pods; scaling down would stop one, maybe the leader, and wait for the next). A stable sort: the
    # order within each part is what collection (or pytest-randomly's shuffle) gave.
    addon_modules = {item.path for item in items if _uses_installed_addon(item)}
    items.sort(key=lambda item: (item.path in addon_modules, item.path in addon_modules and addon_replicas(item)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    matrix = config.stash.get(_FAULT_MATRIX, None)
    if matrix is not None and matrix.rows:
        terminalreporter.section("money-safety fault matrix (real node, installed add-on)")
        for line in table(matrix.rows):
            terminalreporter.write_line(line)
    record = config.stash.get(_RUN_RECORD, None)
    if record is None:
        return
    if exitstatus == pytest.ExitCode.OK:
        shutil.rmtree(record.run_root, ignore_errors=True)
        return
    terminalreporter.section("local control plane: run directory kept")
    terminalreporter.write_line(f"run dir: {record.run_root}")
    for label, path in record.log_paths.items():
        terminalreporter.write_line(f"  {label:<36} {path}")


@pytest.fixture(scope="session")
def e2e_run_root(pytestconfig: pytest.Config) -> Path:
    root = TEST_RUNS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    root.mkdir(parents=True)
    pytestconfig.stash[_RUN_RECORD] = _RunRecord(run_root=root)
    return root


@pytest.fixture(scope="session")
def fault_matrix(pytestconfig: pytest.Config) -> FaultMatrix:
    """The money-safety rows of this session: each row's test records (and checks) its own; the terminal
    summary prints the table of those that ran."""
    return pytestconfig.stash.setdefault(_FAULT_MATRIX, FaultMatrix())


@pytest.fixture(scope="session")
def control_plane_bin_dir() -> Path:
    return controlplane.ensure_binaries()


@pytest.fixture(scope="session")
def control_plane(
    pytestconfig: pytest.Config, e2e_run_root: Path, control_plane_bin_dir: Path
) -> Iterator[controlplane.ControlPlane]:
    plane = controlplane.ControlPlane(e2e_run_root / "main", bin_dir=control_plane_bin_dir)
    pytestconfig.stash[_RUN_RECORD].add_logs("main", plane)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def make_control_plane(
    pytestconfig: pytest.Config, e2e_run_root: Path, control_plane_bin_dir: Path
) -> Iterator[Callable[..., controlplane.ControlPlane]]:
    """Starts extra control planes (run dirs under the session's); stops them after the test."""
    started: list[controlplane.ControlPlane] = []

    def make(
        label: str, *, controller_manager: bool = True, apiserver_args: tuple[str, ...] = ()
    ) -> controlplane.ControlPlane:
        plane = controlplane.ControlPlane(
            e2e_run_root / label,
            bin_dir=control_plane_bin_dir,
            controller_manager=controller_manager,
            apiserver_args=apiserver_args,
        )
        pytestconfig.stash[_RUN_RECORD].add_logs(label, plane)
        started.append(plane)
        plane.start()
        return plane

    try:
        yield make
    finally:
        for plane in reversed(started):
            plane.stop()


@pytest.fixture(scope="session")
def image_archives() -> list[Path]:
    """The project's images as OCI archives, from devplatform/images/build.sh (cached by content)."""
    return node.build_image_archives()


@pytest.fixture(scope="session")
def real_node(
    pytestconfig: pytest.Config,
    e2e_run_root: Path,
    control_plane: controlplane.ControlPlane,
    image_archives: list[Path],
) -> Iterator[node.RealNode]:
    """The real node on the shared control plane (tainted: see the module docstring)."""
    settings = nodeconfig.NodeSettings(register_taints=(nodeconfig.REAL_NODE_TAINT,))
    real = node.RealNode(
        e2e_run_root / "real-node", control_plane=control_plane, settings=settings, image_archives=image_archives
    )
    pytestconfig.stash[_RUN_RECORD].add_log_paths("real-node", real.log_paths)
    real.start(claim_wait_seconds=REAL_NODE_CLAIM_WAIT_SECONDS)
    try:
        yield real
    finally:
        real.stop()


@pytest.fixture(scope="module")
def node_emulator(
    request: pytest.FixtureRequest, real_node: node.RealNode, control_plane: controlplane.ControlPlane
) -> Iterator[addons.EmulatorProcess]:
    """The JARVICE emulator on the real node's bridge gateway, where runners in pods (and the
    installed controller) reach it; one per module, its run dir named after the module."""
    module = request.module.__name__.rsplit(".", 1)[-1]
    emulator = demo.start_emulator_for_node(control_plane.run_dir / f"{module}-emulator", real_node)
    try:
        yield emulator
    finally:
        addons.stop_jarvice_emulator(emulator)


@pytest.fixture(scope="session")
def api_client(control_plane: controlplane.ControlPlane) -> Iterator[Any]:
    api = control_plane.api_client()
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def core(api_client: Any) -> Any:
    return k8s_client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch(api_client: Any) -> Any:
    return k8s_client.BatchV1Api(api_client)


@pytest.fixture
def namespace(core: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount) for one test.

    Deleted afterwards without waiting: bound pods on fake nodes never finish terminating.
    """
    name = _unique_name("t", request.node.name)
    nodes.create_namespace(core, name, labels={TEST_LABEL: "1"})
    yield name
    with _ignoring_not_found():
        core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def ns(namespace: str, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess) -> str:
    """The test's namespace with the runners' JARVICE credentials (the emulator on the gateway)."""
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(demo.build_secret(node_emulator, namespace=namespace)))
    return namespace


@pytest.fixture
def make_gpu_node(core: Any, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """Creates uniquely named fake GPU nodes (kwargs go to nodes.create_gpu_node); deletes them after.

    Nodes are cluster-wide, so each carries ``kubernetes.io/hostname=<name>``: pin test pods to
    their own node with a nodeSelector to stay independent of other tests' nodes.
    """
    created: list[str] = []

    def make(*, gpus: int, **kwargs: Any) -> str:
        name = _unique_name("gpu", request.node.name)
        labels = {TEST_LABEL: "1", "kubernetes.io/hostname": name, **kwargs.pop("labels", {})}
        created.append(name)
        nodes.create_gpu_node(core, name, gpus=gpus, labels=labels, **kwargs)
        return name

    try:
        yield make
    finally:
        for name in created:
            with _ignoring_not_found():
                core.delete_node(name)


def _unique_name(prefix: str, test_name: str) -> str:
    suffix = uuid.uuid4().hex[:6]
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")
    room = MAX_NAME_LENGTH - len(prefix) - len(suffix) - 2
    slug = slug[:room].strip("-")
    return f"{prefix}-{slug}-{suffix}"


@contextlib.contextmanager
def _ignoring_not_found() -> Iterator[None]:
    try:
        yield
    except ApiException as error:
        if error.status != nodes.HTTP_NOT_FOUND:
            raise


# --- cert-manager (devplatform.certmanager) ----------------------------------------------------------
# The real cert-manager controller and cainjector, built from cert-manager's Go module, installed once
# per session on the session control plane (CRDs included). Their logs are listed with the control
# plane's when a run fails.


@pytest.fixture(scope="session")
def cert_manager_bin_dir() -> Path:
    return certmanager.ensure_binaries()


@pytest.fixture(scope="session")
def cert_manager(
    pytestconfig: pytest.Config, control_plane: controlplane.ControlPlane, cert_manager_bin_dir: Path
) -> Iterator[certmanager.CertManager]:
    record = pytestconfig.stash[_RUN_RECORD]
    for component, path in certmanager.log_paths(control_plane).items():
        record.log_paths[f"main/{component}"] = path
    installed = certmanager.install(control_plane, bin_dir=cert_manager_bin_dir)
    try:
        yield installed
    finally:
        certmanager.stop(installed)


# --- the installed add-on (devplatform.cluster.install) ---------------------------------------------
# nimbix-burst installed as a user installs it: `kubectl apply -k devplatform/overlay` (deploy/ plus
# local-only patches) after cert-manager; the webhook's pods on the real node behind the Service, TLS
# from cert-manager. Each Deployment runs the pods the module's mark asks (ADDON_REPLICAS_MARK), one
# unless it is about replicas. Once per session, for the modules that run last; uninstalled (docs/install.md's order)
# at the end.


@pytest.fixture(scope="session")
def addon_slot(
    pytestconfig: pytest.Config,
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    cert_manager: certmanager.CertManager,
) -> Iterator[_AddonSlot]:
    slot = pytestconfig.stash[_ADDON_SLOT] = _AddonSlot(control_plane, real_node)
    try:
        yield slot
    finally:
        slot.ensure_uninstalled()


@pytest.fixture(scope="module")
def installed_addon(addon_slot: _AddonSlot, request: pytest.FixtureRequest) -> install.Installed:
    """The add-on as a user installs it, for this module (installed now unless the module before used it too),
    with the replicas the module's mark asks."""
    return addon_slot.ensure_installed(addon_replicas(request.node))


@pytest.fixture(scope="module", autouse=True)
def _gateway_pays_with_this_modules_emulator(request: pytest.FixtureRequest) -> None:
    """A module using the installed add-on gets the gateway's accounts Secret for its own emulator
    (every namespace paid by it, as `make dev-up` has it), and the gateway restarted to read it."""
    if not any(_uses_installed_addon(item) for item in request.session.items if item.path == request.path):
        return
    request.getfixturevalue("installed_addon")
    plane: controlplane.ControlPlane = request.getfixturevalue("control_plane")
    gateway_pays_with(plane, request.getfixturevalue("node_emulator"))


@pytest.fixture(scope="module", autouse=True)
def _addon_only_where_used(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> None:
    """Uninstalls the add-on an earlier module left before a module none of whose tests uses it."""
    slot = pytestconfig.stash.get(_ADDON_SLOT, None)
    if slot is None:
        return
    if not any(_uses_installed_addon(item) for item in request.session.items if item.path == request.path):
        slot.ensure_uninstalled()


# --- the installed controller (test_controller_installed.py, test_money_safety.py) -----------------


@pytest.fixture(scope="module")
def controller(
    installed_addon: install.Installed, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess
) -> Iterator[None]:
    """The installed controller given the reaper's Secret and the test's thresholds; rolled out with
    its replicas Ready and one of them holding the Lease."""
    configure_controller(control_plane, node_emulator, replicas=len(installed_addon.pods))
    yield
    release_controller(control_plane)


@pytest.fixture
def gpus_gone(control_plane: controlplane.ControlPlane, real_node: node.RealNode) -> Iterator[Callable[[], None]]:
    """Call it to take the real node's GPUs away; they come back after the test."""

    def set_gpus(count: int) -> None:
        value = {GPU: str(count)}  # a merge patch keeps keys it does not name: say it explicitly
        patch = {"status": {"capacity": value, "allocatable": value}}
        control_plane.kubectl("patch", "node", real_node.name, "--subresource=status", "-p", json.dumps(patch))

    try:
        yield lambda: set_gpus(0)
    finally:
        set_gpus(real_node.settings.gpus)
