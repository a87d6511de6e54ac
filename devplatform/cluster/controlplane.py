"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler (no nodes until a test fakes them, see nodes.py, or starts the real node, node.py).

Every instance has its own run directory and its own free ports, so several can run at once. The
argument lists and kubeconfigs are built by pure functions from a ``_Layout`` (paths) and
``_Ports``; ``ControlPlane`` is the shell that writes files, starts processes and waits for health.

Run directory layout::

    <run_dir>/admin.kubeconfig        self-contained (certificates embedded)
    <run_dir>/pki/                    CA, serving and client certificates, service-account keys
    <run_dir>/etcd-data/              wiped on every start
    <run_dir>/logs/<component>.log    stdout+stderr of each component
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from devplatform.cluster import apipaths, pki, processes
from devplatform.cluster.processes import ManagedProcess
from devplatform.cluster.rundir import RunDirectory

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
KUBECTL = "kubectl"
REQUIRED_BINARIES = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, KUBECTL)

BUILD_SCRIPT = Path(__file__).resolve().parent / "build-controlplane.sh"

# The first address of the service range is the `kubernetes` Service's ClusterIP, which is why it is
# a SAN of the serving certificate: in-cluster clients on the real node (the installed webhook) dial
# it, and kube-proxy translates it to the endpoint that devplatform/cluster/install.py publishes (the
# node's bridge gateway and the apiserver's port).
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Added to the default-on set (TaintNodesByCondition, PodSecurity, ... stay on).
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "ServiceAccount",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
)
# Everything except node lifecycle: with no kubelet heartbeats it would mark the fake nodes
# unreachable (and taint them) about 40 s after they are created.
CONTROLLERS = "*,-node-lifecycle-controller"
# The front-proxy CN kube-apiserver would trust for requestheader authentication. No such client
# certificate is ever issued; the flags exist only to stop "missing content for CA bundle" log spam.
FRONT_PROXY_CLIENT_NAME = "front-proxy-client"

# A single member needs no slack for network latency; short timers bring etcd to healthy in ~150 ms.
ETCD_HEARTBEAT_MS = 20
ETCD_ELECTION_MS = 200

# Health timeouts are generous for a 2-core machine that may be busy with other test processes.
ETCD_HEALTH_TIMEOUT_SECONDS = 30.0
APISERVER_READY_TIMEOUT_SECONDS = 90.0
COMPONENT_HEALTH_TIMEOUT_SECONDS = 60.0
PROBE_INTERVAL_SECONDS = 0.05
PROBE_REQUEST_TIMEOUT_SECONDS = 2.0
KUBECTL_TIMEOUT_SECONDS = 120.0
HTTP_NOT_FOUND = 404
READER_POOL_SIZE = 8  # read()'s connections: the e2e tier's threads wait side by side
LOG_TAIL_LINES = 40


class ControlPlaneError(RuntimeError):
    """A component failed to start. The message names it and carries the tail of its log."""

    def __init__(self, component: str, problem: str, *, log_path: Path | None = None) -> None:
        self.component = component
        self.log_path = log_path
        message = f"{component}: {problem}"
        if log_path is not None:
            tail = processes.read_log_tail(log_path, lines=LOG_TAIL_LINES) or "(log is empty)"
            message += f"\n--- last {LOG_TAIL_LINES} lines of {log_path} ---\n{tail}"
        super().__init__(message)


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call; unlike CalledProcessError, its message includes kubectl's stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


@dataclass(frozen=True, slots=True)
class StartupTimings:
    """Seconds from the start() call until the apiserver's /readyz was ok, and until every
    component was healthy."""

    readyz_seconds: float
    healthy_seconds: float


@dataclass(frozen=True, slots=True)
class _Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int


@dataclass(frozen=True, slots=True)
class _Layout(RunDirectory):
    """Every path of one control plane, derived from its run directory."""

    @property
    def etcd_data_dir(self) -> Path:
        return self.run_dir / "etcd-data"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.run_dir / "admin.kubeconfig"

    @property
    def scheduler_kubeconfig(self) -> Path:
        return self.pki_dir / "kube-scheduler.kubeconfig"

    @property
    def controller_manager_kubeconfig(self) -> Path:
        return self.pki_dir / "kube-controller-manager.kubeconfig"


def ensure_binaries() -> Path:
    """Builds the control-plane binaries if the cache misses, and returns their directory.

    The build script's progress (stderr) passes through; a cold build takes several minutes.
    """
    result = subprocess.run([str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(
            "build-controlplane.sh", f"exited with status {result.returncode} (its output is above)"
        )
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise ControlPlaneError("build-controlplane.sh", "printed no bin directory")
    bin_dir = Path(lines[-1])
    missing = [name for name in REQUIRED_BINARIES if not (bin_dir / name).is_file()]
    if missing:
        raise ControlPlaneError("build-controlplane.sh", f"{bin_dir} lacks {', '.join(missing)}")
    return bin_dir


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager) + kube-scheduler under one run directory.

    ``start()`` begins from an empty etcd and fresh certificates; ``stop()`` stops every process it
    started, by PID. Also a context manager.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        bin_dir: Path,
        controller_manager: bool = True,
        on_start: Callable[[ManagedProcess], None] | None = None,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        """``on_start``: called with each component's process the moment it is started (dev-up
        records it, so a start that never finishes can still be stopped). ``apiserver_args``: more
        kube-apiserver flags, after the platform's (e.g. an ``--admission-control-config-file``)."""
        self._layout = _Layout(run_dir.resolve())
        self._apiserver_args = tuple(apiserver_args)
        self._on_start = on_start
        self._bin_dir = bin_dir
        self._with_controller_manager = controller_manager
        self._processes: list[ManagedProcess] = []
        self._ports: _Ports | None = None
        self._reader: k8s_client.ApiClient | None = None  # read()'s, made on its first use
        self.startup_timings: StartupTimings | None = None

    # -- properties -------------------------------------------------------------------------------

    @property
    def run_dir(self) -> Path:
        return self._layout.run_dir

    @property
    def bin_dir(self) -> Path:
        return self._bin_dir

    @property
    def kubeconfig_path(self) -> Path:
        return self._layout.admin_kubeconfig

    @property
    def ca_cert_path(self) -> Path:
        return self._layout.cert("ca")

    @property
    def ca_key_path(self) -> Path:
        """The cluster CA's private key: the real node (node.py) signs its certificates with it."""
        return self._layout.key("ca")

    @property
    def server_url(self) -> str:
        if self._ports is None:
            raise RuntimeError("the control plane has not been started")
        return _https_url(self._ports.apiserver)

    @property
    def log_paths(self) -> dict[str, Path]:
        return {name: self._layout.log(name) for name in self._component_names()}

    @property
    def processes(self) -> list[ManagedProcess]:
        return list(self._processes)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Starts every component and waits until each is healthy.

        On failure, stops whatever had started and raises ControlPlaneError.
        """
        if self._processes:
            raise RuntimeError("the control plane is already running")
        self.startup_timings = None
        began = time.monotonic()
        try:
            self._start_components(began)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops every started process, newest first. Safe to call more than once."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        while self._processes:
            processes.stop_process(self._processes.pop())

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- clients ----------------------------------------------------------------------------------

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Runs this control plane's kubectl against it as cluster admin."""
        argv = [str(self._bin_dir / KUBECTL), "--kubeconfig", str(self.kubeconfig_path), *args]
        result = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            check=False,
            env=processes.build_child_environment(None),
            timeout=KUBECTL_TIMEOUT_SECONDS,
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, output=result.stdout, stderr=result.stderr)
        return result

    def api_client(self, *, pool_size: int | None = None) -> k8s_client.ApiClient:
        """A new ``kubernetes.client.ApiClient`` for the admin kubeconfig (no global configuration);
        the one way the demo, dev-up, tests, bench and replay talk to the control plane.

        ``pool_size``: connections kept per host, for callers that share the client across threads.
        The caller owns it and should ``close()`` it.
        """
        client = k8s_config.new_client_from_config(config_file=str(self.kubeconfig_path), persist_config=False)
        if pool_size is not None:
            client.rest_client.pool_manager.connection_pool_kw["maxsize"] = pool_size
        return client

    def read(
        self,
        resource: str,
        name: str | None = None,
        *,
        namespace: str | None = None,
        labels: str | None = None,
        fields: str | None = None,
        missing_ok: bool = False,
    ) -> dict[str, Any]:
        """What ``kubectl get <resource> [name] -o json`` prints (a list's items with their kind), read
        through one client this control plane keeps: the way waits look, without a process per look.
        Raises ApiException on an error; ``missing_ok``: an object that is not there reads as ``{}``."""
        path = apipaths.build_path(resource, name=name, namespace=namespace)
        try:
            response = self._call(path, "GET", query=apipaths.build_query(labels=labels, fields=fields))
        except k8s_client.ApiException as error:
            if missing_ok and error.status == HTTP_NOT_FOUND:
                return {}
            raise
        document: dict[str, Any] = json.loads(response.data)
        return apipaths.as_kubectl_prints(document)

    def dry_run_create(self, namespace: str, body: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """What ``kubectl create --dry-run=server -o json`` prints of a namespaced object (``body``, with its
        kind's path) and its warnings as kubectl writes them (``Warning: <text>`` lines): admission runs,
        nothing is stored. Through read()'s client, for waits that probe admission."""
        resource = str(body["kind"]).lower() + "s"
        path = apipaths.build_path(resource, namespace=namespace)
        response = self._call(path, "POST", query=[("dryRun", "All")], body=dict(body))
        warnings = apipaths.parse_warnings(response.headers.getlist("Warning"))
        document: dict[str, Any] = json.loads(response.data)
        return document, "".join(f"Warning: {text}\n" for text in warnings)

    def _call(self, path: str, method: str, *, query: list[tuple[str, str]], body: dict[str, Any] | None = None) -> Any:
        """One JSON request through read()'s client; the raw response (the caller parses its body)."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return self._client().call_api(
            path,
            method,
            query_params=query,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=KUBECTL_TIMEOUT_SECONDS,
        )

    def _client(self) -> k8s_client.ApiClient:
        if self._reader is None:
            self._reader = self.api_client(pool_size=READER_POOL_SIZE)
        return self._reader

    def read_log(self, namespace: str, name: str) -> str:
        """What ``kubectl logs`` prints of the pod's one container, through read()'s client: for waits that
        look for a line; ``""`` while there is none to read (the container not started yet)."""
        try:  # the raw bytes: the client would parse a log that is one JSON line into a dict's repr
            response = k8s_client.CoreV1Api(self._client()).read_namespaced_pod_log(
                name, namespace, _preload_content=False, _request_timeout=KUBECTL_TIMEOUT_SECONDS
            )
        except k8s_client.ApiException:
            return ""
        return bytes(response.data).decode(errors="replace")

    # -- internals --------------------------------------------------------------------------------

    def _component_names(self) -> list[str]:
        names = [ETCD, APISERVER]
        if self._with_controller_manager:
            names.append(CONTROLLER_MANAGER)
        names.append(SCHEDULER)
        return names

    def _start_components(self, began: float) -> None:
        layout = self._layout
        _prepare_run_dir(layout)
        _write_pki(layout)
        ports = _Ports(*processes.free_ports(5))
        self._ports = ports
        _write_json(
            layout.scheduler_kubeconfig,
            _component_kubeconfig(layout, ports=ports, client_name="kube-scheduler"),
        )
        _write_json(
            layout.controller_manager_kubeconfig,
            _component_kubeconfig(layout, ports=ports, client_name="kube-controller-manager"),
        )

        etcd = self._launch(ETCD, _build_etcd_args(self._bin_dir, layout, ports))
        self._wait_healthy(etcd, lambda: _probe_etcd(ports.etcd_client), timeout=ETCD_HEALTH_TIMEOUT_SECONDS)

        admin_tls = _client_tls_context(layout, client_name="admin")
        apiserver = self._launch(
            APISERVER, [*_build_apiserver_args(self._bin_dir, layout, ports), *self._apiserver_args]
        )
        self._wait_healthy(
            apiserver,
            lambda: _probe_https(f"{_https_url(ports.apiserver)}/readyz", admin_tls),
            timeout=APISERVER_READY_TIMEOUT_SECONDS,
        )
        readyz_seconds = time.monotonic() - began
        _write_json(layout.admin_kubeconfig, _component_kubeconfig(layout, ports=ports, client_name="admin"))

        # /healthz is on the default always-allow list, so the probes need no client certificate.
        serving_tls = _server_tls_context(layout)
        pending: list[tuple[ManagedProcess, Callable[[], bool]]] = []
        if self._with_controller_manager:
            controller_manager = self._launch(
                CONTROLLER_MANAGER, _build_controller_manager_args(self._bin_dir, layout, ports)
            )
            pending.append(
                (
                    controller_manager,
                    lambda: _probe_https(f"{_https_url(ports.controller_manager)}/healthz", serving_tls),
                )
            )
        scheduler = self._launch(SCHEDULER, _build_scheduler_args(self._bin_dir, layout, ports))
        pending.append((scheduler, lambda: _probe_https(f"{_https_url(ports.scheduler)}/healthz", serving_tls)))
        self._wait_all_healthy(pending, timeout=COMPONENT_HEALTH_TIMEOUT_SECONDS)
        self.startup_timings = StartupTimings(readyz_seconds=readyz_seconds, healthy_seconds=time.monotonic() - began)

    def _launch(self, component: str, argv: Sequence[str]) -> ManagedProcess:
        proc = processes.start_process(component, argv, log_path=self._layout.log(component))
        self._processes.append(proc)
        if self._on_start is not None:
            self._on_start(proc)
        return proc

    def _wait_healthy(self, proc: ManagedProcess, probe: Callable[[], bool], *, timeout: float) -> None:
        self._wait_all_healthy([(proc, probe)], timeout=timeout)

    def _wait_all_healthy(
        self,
        pending: Sequence[tuple[ManagedProcess, Callable[[], bool]]],
        *,
        timeout: float,
    ) -> None:
        waiting = list(pending)
        deadline = time.monotonic() + timeout
        while waiting:
            for proc, probe in list(waiting):
                if not processes.is_alive(proc.pid):
                    raise ControlPlaneError(proc.name, "exited during startup", log_path=proc.log_path)
                if probe():
                    waiting.remove((proc, probe))
            if not waiting:
                return
            if time.monotonic() >= deadline:
                proc = waiting[0][0]
                raise ControlPlaneError(proc.name, f"not healthy after {timeout:.0f} s", log_path=proc.log_path)
            time.sleep(PROBE_INTERVAL_SECONDS)


# -- pure builders ------------------------------------------------------------------------------------


def _build_etcd_args(bin_dir: Path, layout: _Layout, ports: _Ports) -> list[str]:
    client_url = _http_url(ports.etcd_client)
    peer_url = _http_url(ports.etcd_peer)
    return [
        str(bin_dir / ETCD),
        "--name=controlplane",
        f"--data-dir={layout.etcd_data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=controlplane={peer_url}",
        "--initial-cluster-state=new",
        "--enable-v2=false",
        # Metrics stay on the client URL; no extra listener.
        "--listen-metrics-urls=",
        f"--heartbeat-interval={ETCD_HEARTBEAT_MS}",
        f"--election-timeout={ETCD_ELECTION_MS}",
        # The data dir is thrown away on every start, so durability buys nothing; fsync is the
        # slowest part of every write.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def _build_apiserver_args(bin_dir: Path, layout: _Layout, ports: _Ports) -> list[str]:
    return [
        str(bin_dir / APISERVER),
        # All addresses, not 127.0.0.1: pods on the real node reach the apiserver at the bridge gateway
        # (the `kubernetes` Service's endpoint), an address that only exists once the node has started.
        # Every request still needs a client certificate or token (anonymous requests reach /healthz,
        # /readyz, /livez and /version only, as in any cluster).
        "--bind-address=0.0.0.0",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--etcd-servers={_http_url(ports.etcd_client)}",
        f"--tls-cert-file={layout.cert('kube-apiserver')}",
        f"--tls-private-key-file={layout.key('kube-apiserver')}",
        f"--client-ca-file={layout.cert('ca')}",
        f"--service-account-key-file={layout.pki_dir / 'service-account.pub'}",
        f"--service-account-signing-key-file={layout.key('service-account')}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        "--authorization-mode=RBAC",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        # Don't publish Endpoints for the `kubernetes` Service: nothing could reach them.
        "--endpoint-reconciler-type=none",
        f"--requestheader-client-ca-file={layout.cert('front-proxy-ca')}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT_NAME}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        # Calls to a real node's kubelet (logs, exec, port-forward): the apiserver authenticates as
        # a system:masters client and verifies the kubelet's serving certificate against the CA.
        f"--kubelet-client-certificate={layout.cert('apiserver-kubelet-client')}",
        f"--kubelet-client-key={layout.key('apiserver-kubelet-client')}",
        f"--kubelet-certificate-authority={layout.cert('ca')}",
        # The real node's Hostname address is its name, which no resolver knows.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        # Webhook and aggregated-API Services are called at an endpoint's pod IP (reachable through
        # the node's bridge) instead of the ClusterIP, which only kube-proxy's rules translate.
        "--enable-aggregator-routing=true",
        "--profiling=false",
        f"--cert-dir={layout.pki_dir}",
        "--v=1",
    ]


def _build_controller_manager_args(bin_dir: Path, layout: _Layout, ports: _Ports) -> list[str]:
    kubeconfig = layout.controller_manager_kubeconfig
    return [
        str(bin_dir / CONTROLLER_MANAGER),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--tls-cert-file={layout.cert('components-serving')}",
        f"--tls-private-key-file={layout.key('components-serving')}",
        "--leader-elect=false",
        f"--controllers={CONTROLLERS}",
        # Each controller acts as its own service account, as in a real cluster.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={layout.key('service-account')}",
        f"--root-ca-file={layout.cert('ca')}",
        f"--cluster-signing-cert-file={layout.cert('ca')}",
        f"--cluster-signing-key-file={layout.key('ca')}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--profiling=false",
        "--v=1",
    ]


def _build_scheduler_args(bin_dir: Path, layout: _Layout, ports: _Ports) -> list[str]:
    kubeconfig = layout.scheduler_kubeconfig
    return [
        str(bin_dir / SCHEDULER),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--tls-cert-file={layout.cert('components-serving')}",
        f"--tls-private-key-file={layout.key('components-serving')}",
        "--leader-elect=false",
        "--v=1",
    ]


def build_kubeconfig(*, server_url: str, ca_pem: bytes, client: pki.KeyPair, user: str) -> dict[str, Any]:
    """A self-contained kubeconfig (certificates embedded as base64 data)."""
    cluster_name = "nimbix-burst-local"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {
                    "server": server_url,
                    "certificate-authority-data": _b64(ca_pem),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert_pem),
                    "client-key-data": _b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
    }


# -- shell helpers ------------------------------------------------------------------------------------


def _prepare_run_dir(layout: _Layout) -> None:
    # A fresh start: no etcd data, certificates or logs from a previous run.
    for stale in (layout.etcd_data_dir, layout.pki_dir, layout.logs_dir):
        shutil.rmtree(stale, ignore_errors=True)
    layout.admin_kubeconfig.unlink(missing_ok=True)
    layout.logs_dir.mkdir(parents=True)


def _write_pki(layout: _Layout) -> None:
    ca = pki.make_ca("nimbix-burst-local-ca")
    front_proxy_ca = pki.make_ca("nimbix-burst-local-front-proxy-ca")
    apiserver = pki.issue_cert(
        ca,
        common_name="kube-apiserver",
        dns_names=APISERVER_DNS_NAMES,
        ip_addresses=("127.0.0.1", KUBERNETES_SERVICE_IP),
        server=True,
    )
    # One serving certificate for the scheduler's and controller-manager's health/metrics ports.
    components_serving = pki.issue_cert(
        ca,
        common_name="controlplane-components",
        dns_names=("localhost",),
        ip_addresses=("127.0.0.1",),
        server=True,
    )
    clients = {
        "admin": pki.issue_cert(ca, common_name="nimbix-burst-admin", organization="system:masters", client=True),
        "apiserver-kubelet-client": pki.issue_cert(
            ca, common_name="kube-apiserver-kubelet-client", organization="system:masters", client=True
        ),
        "kube-scheduler": pki.issue_cert(ca, common_name="system:kube-scheduler", client=True),
        "kube-controller-manager": pki.issue_cert(ca, common_name="system:kube-controller-manager", client=True),
    }
    pairs = {
        "ca": ca,
        "front-proxy-ca": front_proxy_ca,
        "kube-apiserver": apiserver,
        "components-serving": components_serving,
        **clients,
    }
    for name, pair in pairs.items():
        pki.write_pair(pair, cert_path=layout.cert(name), key_path=layout.key(name))
    pki.write_signing_pair(
        pki.make_service_account_keypair(),
        public_key_path=layout.pki_dir / "service-account.pub",
        private_key_path=layout.key("service-account"),
    )


def _component_kubeconfig(layout: _Layout, *, ports: _Ports, client_name: str) -> dict[str, Any]:
    client = pki.KeyPair(cert_pem=layout.cert(client_name).read_bytes(), key_pem=layout.key(client_name).read_bytes())
    return build_kubeconfig(
        server_url=_https_url(ports.apiserver),
        ca_pem=layout.cert("ca").read_bytes(),
        client=client,
        user=client_name,
    )


def _write_json(path: Path, document: Mapping[str, Any]) -> None:
    # JSON is valid YAML, so kubectl and the Python client read it as a kubeconfig. It holds a
    # private key, hence 0600.
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(json.dumps(document, indent=2) + "\n")


def _server_tls_context(layout: _Layout) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(layout.cert("ca")))


def _client_tls_context(layout: _Layout, *, client_name: str) -> ssl.SSLContext:
    context = _server_tls_context(layout)
    context.load_cert_chain(str(layout.cert(client_name)), str(layout.key(client_name)))
    return context


def _probe_etcd(port: int) -> bool:
    body = _fetch(f"{_http_url(port)}/health", context=None)
    if body is None:
        return False
    try:
        return bool(json.loads(body).get("health") == "true")
    except ValueError:
        return False


def _probe_https(url: str, context: ssl.SSLContext) -> bool:
    body = _fetch(url, context=context)
    return body is not None and body.strip() == "ok"


def _fetch(url: str, *, context: ssl.SSLContext | None) -> str | None:
    """GET ``url`` and return the body of a 200 response, or None for any failure."""
    # An empty ProxyHandler ignores proxy variables in our own environment.
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=PROBE_REQUEST_TIMEOUT_SECONDS) as response:
            return str(response.read().decode(errors="replace")) if response.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        # Connection refused / reset / 5xx while starting up: simply not healthy yet.
        return None


def _http_url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def _https_url(port: int) -> str:
    return f"https://127.0.0.1:{port}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
