"""Runs the real cert-manager (controller + cainjector, built from its Go module by ../build.sh)
beside a local ControlPlane: applies the CRDs, starts both as managed processes, stops them by PID.

Logs go to ``<plane.run_dir>/logs/cert-manager-{controller,cainjector}.log``. Both processes use
the plane's admin kubeconfig: cert-manager needs cluster-wide read/write on its own kinds, Secrets,
Events and the injectable kinds, and on this local plane there is no RBAC worth modelling for it.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from devplatform.certmanager import config
from devplatform.cluster import processes
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.processes import ManagedProcess

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"
GROUP = "cert-manager.io"
VERSION = "v1"

# A 2-core machine busy with other builds and tests: generous, but bounded.
ESTABLISHED_TIMEOUT_SECONDS = 60
READY_TIMEOUT_SECONDS = 90.0
PROBE_INTERVAL_SECONDS = 0.1
PROBE_REQUEST_TIMEOUT_SECONDS = 2.0
LOG_TAIL_LINES = 40
RENEW_ATTEMPTS = 5  # reads and writes of a Certificate's status, when cert-manager changes it meanwhile
# How long a renewal waits for an issuance already in flight (the first one, right after Ready) to end.
ISSUANCE_SETTLE_TIMEOUT_SECONDS = 90.0


class CertManagerError(RuntimeError):
    """cert-manager could not be built, installed or started. Carries the tail of the log, if any."""

    def __init__(self, component: str, problem: str, *, log_path: Path | None = None) -> None:
        message = f"{component}: {problem}"
        if log_path is not None:
            tail = processes.read_log_tail(log_path, lines=LOG_TAIL_LINES) or "(log is empty)"
            message += f"\n--- last {LOG_TAIL_LINES} lines of {log_path} ---\n{tail}"
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class InstallTimings:
    """Seconds from the install() call until the CRDs were Established, and until both processes
    reported ready (informers synced)."""

    crds_established_seconds: float
    ready_seconds: float


@dataclass(frozen=True, slots=True)
class CertManager:
    """A running cert-manager: what ``stop()`` needs, and where to look when something fails."""

    controller: ManagedProcess
    cainjector: ManagedProcess
    bin_dir: Path
    crd_names: tuple[str, ...]
    timings: InstallTimings

    @property
    def processes(self) -> tuple[ManagedProcess, ...]:
        return (self.controller, self.cainjector)

    @property
    def log_paths(self) -> dict[str, Path]:
        return {proc.name: proc.log_path for proc in self.processes}


def ensure_binaries() -> Path:
    """Builds the controller and cainjector if the cache misses; returns their directory.

    The CRDs are in ``crds_dir(bin_dir)``. The build script's progress (stderr) passes through.
    """
    result = subprocess.run([str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if result.returncode != 0:
        raise CertManagerError("build.sh", f"exited with status {result.returncode} (its output is above)")
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise CertManagerError("build.sh", "printed no bin directory")
    bin_dir = Path(lines[-1])
    missing = [name for name in config.REQUIRED_BINARIES if not (bin_dir / name).is_file()]
    if missing:
        raise CertManagerError("build.sh", f"{bin_dir} lacks {', '.join(missing)}")
    return bin_dir


def crds_dir(bin_dir: Path) -> Path:
    """Where build.sh keeps the module's CRDs (as shipped), next to the binaries."""
    return bin_dir.parent / "crds"


def install_crds(plane: ControlPlane, *, bin_dir: Path) -> tuple[str, ...]:
    """Applies cert-manager's CRDs (server-side) and waits until each is Established."""
    texts = [path.read_text() for path in sorted(crds_dir(bin_dir).glob("*.yaml"))]
    crds = config.build_crds(texts)
    if not crds:
        raise CertManagerError("crds", f"no CustomResourceDefinitions in {crds_dir(bin_dir)}")
    objects = [*crds, config.build_namespace(config.CLUSTER_RESOURCE_NAMESPACE)]
    plane.kubectl(
        "apply",
        "--server-side",
        f"--field-manager={config.FIELD_MANAGER}",
        "-f",
        "-",
        input=json.dumps(config.build_apply_list(objects)),
    )
    names = tuple(str(crd["metadata"]["name"]) for crd in crds)
    plane.kubectl(
        "wait",
        "--for=condition=Established",
        f"--timeout={ESTABLISHED_TIMEOUT_SECONDS}s",
        *(f"customresourcedefinition/{name}" for name in names),
    )
    return names


def log_paths(plane: ControlPlane) -> dict[str, Path]:
    """Where install() writes each component's log (known before it starts, for failure reports)."""
    return {name: plane.run_dir / "logs" / f"{name}.log" for name in config.REQUIRED_BINARIES}


def install(
    plane: ControlPlane,
    *,
    bin_dir: Path | None = None,
    on_start: Callable[[ManagedProcess], None] | None = None,
) -> CertManager:
    """Installs cert-manager on a running ``plane``: CRDs, then the controller and cainjector.

    Returns once both processes report ready. On failure, stops whatever had started and raises
    CertManagerError. ``bin_dir`` defaults to ``ensure_binaries()`` (a build on a cold cache).
    ``on_start``: called with each process the moment it is started (dev-up records it).
    """
    record = on_start or (lambda _proc: None)
    bin_dir = bin_dir or ensure_binaries()
    began = time.monotonic()
    names = install_crds(plane, bin_dir=bin_dir)
    established = time.monotonic() - began

    logs = log_paths(plane)
    controller_port, cainjector_port = processes.free_ports(2)
    started: list[ManagedProcess] = []
    try:
        controller = processes.start_process(
            config.CONTROLLER,
            config.build_controller_args(bin_dir, kubeconfig=plane.kubeconfig_path, healthz_port=controller_port),
            log_path=logs[config.CONTROLLER],
        )
        started.append(controller)
        record(controller)
        cainjector = processes.start_process(
            config.CAINJECTOR,
            config.build_cainjector_args(bin_dir, kubeconfig=plane.kubeconfig_path, healthz_port=cainjector_port),
            log_path=logs[config.CAINJECTOR],
        )
        started.append(cainjector)
        record(cainjector)
        _wait_ready([(controller, controller_port), (cainjector, cainjector_port)])
    except BaseException:
        for proc in reversed(started):
            processes.stop_process(proc)
        raise
    return CertManager(
        controller=controller,
        cainjector=cainjector,
        bin_dir=bin_dir,
        crd_names=names,
        timings=InstallTimings(crds_established_seconds=established, ready_seconds=time.monotonic() - began),
    )


def stop(cert_manager: CertManager) -> None:
    """Stops cainjector, then the controller, by PID. Safe to call more than once. The CRDs (and
    every cert-manager object) stay: they go with the control plane's etcd."""
    for proc in reversed(cert_manager.processes):
        processes.stop_process(proc)


def renew(plane: ControlPlane, *, namespace: str, name: str, attempts: int = RENEW_ATTEMPTS) -> None:
    """Asks cert-manager to re-issue a Certificate now, as ``cmctl renew`` does: sets the Issuing
    condition through the status subresource. An update: when cert-manager changed the Certificate
    between our read and our write (409 Conflict), it is read again and the condition set again.

    While an issuance is still in flight (``Issuing=True``, e.g. the first one just after Ready), the
    request would merge into it and bring no new certificate: renew waits for it to end first."""
    api = plane.api_client()
    try:
        custom = k8s_client.CustomObjectsApi(api)
        for attempt in range(1, attempts + 1):
            certificate = _settled_certificate(custom, namespace, name)
            body = config.build_renewal_status(certificate, now=datetime.now(UTC))
            try:
                custom.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, "certificates", name, body)
                return
            except ApiException as exc:
                if exc.status != 409 or attempt == attempts:
                    raise
    finally:
        api.close()


def _settled_certificate(custom: Any, namespace: str, name: str) -> dict[str, Any]:
    """The Certificate once no issuance is in flight."""
    deadline = time.monotonic() + ISSUANCE_SETTLE_TIMEOUT_SECONDS
    while True:
        certificate: dict[str, Any] = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "certificates", name
        )
        if not config.is_issuing(certificate):
            return certificate
        if time.monotonic() >= deadline:
            raise CertManagerError(
                f"certificate {namespace}/{name}",
                f"still Issuing after {ISSUANCE_SETTLE_TIMEOUT_SECONDS:.0f} s; renewal not requested",
            )
        time.sleep(PROBE_INTERVAL_SECONDS)


def _wait_ready(pending: list[tuple[ManagedProcess, int]]) -> None:
    waiting = list(pending)
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while waiting:
        for proc, port in list(waiting):
            if not processes.is_running(proc):
                raise CertManagerError(proc.name, "exited during startup", log_path=proc.log_path)
            if _probe_ready(port):
                waiting.remove((proc, port))
        if not waiting:
            return
        if time.monotonic() >= deadline:
            proc = waiting[0][0]
            raise CertManagerError(proc.name, f"not ready after {READY_TIMEOUT_SECONDS:.0f} s", log_path=proc.log_path)
        time.sleep(PROBE_INTERVAL_SECONDS)


def _probe_ready(port: int) -> bool:
    # An empty ProxyHandler ignores proxy variables in our own environment.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/readyz", timeout=PROBE_REQUEST_TIMEOUT_SECONDS) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        # Refused or 503 while the informers sync: simply not ready yet.
        return False
