"""The real node: containerd + the CNI bridge + kubelet + kube-proxy on this machine, registered
with a local ControlPlane, so pods really run (logs, exit codes, SIGTERM, Services).

One real node per machine: the bridge, the kubepods cgroups, kube-proxy's iptables chains and a
few kubelet paths are machine-wide. A claim file (``CLAIM_FILE``) names the node's state file; a
second start fails with the owner's run directory, or cleans up after one that died.

Everything the node creates is recorded in ``<run_dir>/node-state.json`` before it is created, and
``stop_node(state_file)`` removes it: processes by saved PID (never by name), then host state by
path (mounts under the run dir, kubepods cgroups in every hierarchy, the bridge, iptables chains via
``kube-proxy --cleanup``, sysctls restored, host directories that did not exist before).

Config files, argument lists and API bodies come from the pure builders in nodeconfig.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devplatform.cluster import nodeconfig, pki, processes
from devplatform.cluster.controlplane import ControlPlane, build_kubeconfig
from devplatform.cluster.nodeconfig import NodeLayout, NodePorts, NodeSettings
from devplatform.cluster.processes import ManagedProcess

CONTAINERD = "containerd"
KUBELET = "kubelet"
KUBE_PROXY = "kube-proxy"
PAUSE = "pause"
REQUIRED_COMMANDS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "iptables", "mount", "umount")
REQUIRED_CNI_PLUGINS = ("bridge", "host-local", "loopback")
INSTALL_PACKAGES = Path(__file__).resolve().parents[1] / "host" / "install-packages.sh"
# Builds the project's images (cached by content) and prints one OCI archive path per line.
IMAGES_BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "images" / "build.sh"
# A cold build of every image (Debian bootstrap, pip installs) on 2 busy cores; warm: seconds.
IMAGES_BUILD_TIMEOUT_SECONDS = 1800.0
# Machine-wide: which node (state file) currently owns the bridge, cgroups and iptables chains.
CLAIM_FILE = Path("/run/nimbix-burst-node.claim")
CGROUP_ROOT = Path("/sys/fs/cgroup")
IPTABLES_COMMANDS = ("iptables", "ip6tables")

CONTAINERD_READY_TIMEOUT_SECONDS = 30.0
NODE_READY_TIMEOUT_SECONDS = 90.0
PROXY_READY_TIMEOUT_SECONDS = 30.0
COMMAND_TIMEOUT_SECONDS = 60.0
# Importing a few hundred MB of layers on a busy 2-core machine.
IMPORT_TIMEOUT_SECONDS = 300.0
INSTALL_TIMEOUT_SECONDS = 600.0
POLL_SECONDS = 0.2
# A kubelet that is told to stop waits for nothing (shutdownGracePeriod 0); containerd needs a
# moment to close its shims' connections.
STOP_GRACE_SECONDS = 10.0
LOG_TAIL_LINES = 30


class NodeError(RuntimeError):
    """The real node failed to start or stop; the message says where and carries a log tail."""

    def __init__(self, problem: str, *, log_path: Path | None = None) -> None:
        message = problem
        if log_path is not None:
            tail = processes.read_log_tail(log_path, lines=LOG_TAIL_LINES) or "(log is empty)"
            message += f"\n--- last {LOG_TAIL_LINES} lines of {log_path} ---\n{tail}"
        super().__init__(message)


class NodeHostError(NodeError):
    """This machine cannot host the real node (the message lists every reason)."""


@dataclass(frozen=True, slots=True)
class NodeTimings:
    """Seconds from start() to: containerd answering, images imported, node Ready, all done."""

    containerd_seconds: float
    images_seconds: float
    ready_seconds: float
    total_seconds: float
    imported: tuple[str, ...]


class RealNode:
    """A kubelet node of ``control_plane`` on this machine. Also a context manager.

    ``gateway_address`` is the node IP and the bridge's address: a server that pods must reach
    (the JARVICE emulator, a host-run webhook) binds there.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        control_plane: ControlPlane,
        settings: NodeSettings | None = None,
        cache_dir: Path | None = None,
        image_archives: Sequence[Path] = (),
    ) -> None:
        cache = cache_dir or default_cache_dir()
        self._layout = NodeLayout(run_dir=run_dir.resolve(), containerd_root=cache / "node" / "containerd")
        self._cache = cache
        self._control_plane = control_plane
        self._bin_dir = control_plane.bin_dir
        self.settings = settings or NodeSettings()
        self._archives = tuple(image_archives)
        self._running = False
        self.timings: NodeTimings | None = None
        self.pause_image = ""

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def gateway_address(self) -> str:
        return self.settings.gateway

    @property
    def run_dir(self) -> Path:
        return self._layout.run_dir

    @property
    def state_file(self) -> Path:
        return self._layout.state_file

    @property
    def log_paths(self) -> dict[str, Path]:
        return {name: self._layout.log(name) for name in (CONTAINERD, KUBELET, KUBE_PROXY)}

    @property
    def processes(self) -> list[ManagedProcess]:
        if not self._layout.state_file.exists():
            return []
        return list(processes.load_state(self._layout.state_file).processes)

    def __enter__(self) -> RealNode:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, claim_wait_seconds: float = 0.0) -> None:
        """Starts containerd, imports images, starts kubelet and kube-proxy, waits for Ready.

        Raises NodeHostError if the machine cannot host a node (nothing was changed), NodeError if a
        step failed (everything started so far is stopped again). ``claim_wait_seconds``: how long
        to wait for another live node on this machine to go away.
        """
        if self._running:
            raise RuntimeError("the node is already running")
        check_root()
        _install_packages()
        began = time.monotonic()
        _take_claim(self._layout.state_file, wait_seconds=claim_wait_seconds)
        if self._layout.state_file.exists():
            # A node that ran from this directory before and was never stopped (its processes are
            # gone, or the claim would have been live): remove what it left behind.
            stop_node(self._layout.state_file)
            _take_claim(self._layout.state_file, wait_seconds=claim_wait_seconds)
        self._running = True
        try:
            self._start(began)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops everything and removes the host state it created. Safe to call more than once."""
        if self._layout.state_file.exists():
            stop_node(self._layout.state_file)
        elif self._running:
            _release_claim(self._layout.state_file)
        self._running = False

    def import_images(self, archives: Sequence[Path]) -> list[str]:
        """Imports OCI archives into the node's containerd, skipping images already present with the
        same digest; returns the names imported."""
        return _import_archives(self._layout, archives)

    def _start(self, began: float) -> None:
        layout, settings = self._layout, self.settings
        for stale in (layout.pki_dir, layout.logs_dir, layout.cni_conf_dir.parent, layout.containerd_state):
            shutil.rmtree(stale, ignore_errors=True)
        layout.logs_dir.mkdir(parents=True)
        problems = nodeconfig.find_host_problems(_gather_host_facts(settings), settings)
        if problems:
            raise NodeHostError("this machine cannot host the real node:\n  - " + "\n  - ".join(problems))
        # Record the host state before changing it, so stop_node knows what to undo.
        host = _snapshot_host(settings, layout)
        host["kube_proxy"] = str(self._bin_dir / KUBE_PROXY)
        _save(layout, procs=[], host=host)

        self._write_pki()
        self._control_plane.kubectl("apply", "-f", "-", input=json.dumps(nodeconfig.build_node_rbac()))
        _create_bridge(settings)
        # Only a bridge we created is ever deleted.
        _save(layout, procs=[], host={**host, "bridge": settings.bridge})

        self.pause_image = _ensure_pause_archive(self._bin_dir / PAUSE, self._cache)[0]
        layout.containerd_root.mkdir(parents=True, exist_ok=True)
        layout.containerd_config.write_text(nodeconfig.build_containerd_config(layout, sandbox_image=self.pause_image))
        layout.cni_conf_dir.mkdir(parents=True)
        _write_json(layout.cni_conf_dir / "10-nimbix-burst.conflist", nodeconfig.build_cni_conflist(settings, layout))
        containerd = self._launch(CONTAINERD, nodeconfig.build_containerd_args(layout))
        _wait(
            lambda: _ctr_ok(layout),
            proc=containerd,
            what="containerd answering",
            timeout=CONTAINERD_READY_TIMEOUT_SECONDS,
        )
        containerd_seconds = time.monotonic() - began

        imported = _import_archives(
            layout, [_ensure_pause_archive(self._bin_dir / PAUSE, self._cache)[1], *self._archives]
        )
        images_seconds = time.monotonic() - began

        ports = NodePorts(*processes.free_ports(4))
        _write_json(layout.kubelet_config, nodeconfig.build_kubelet_config(settings, layout, ports=ports))
        kubelet = self._launch(
            KUBELET, nodeconfig.build_kubelet_args(settings, layout, kubelet=self._bin_dir / KUBELET)
        )
        _wait(self._node_ready, proc=kubelet, what=f"node {self.name} Ready", timeout=NODE_READY_TIMEOUT_SECONDS)
        self._finish_registration()
        ready_seconds = time.monotonic() - began

        _write_json(layout.kube_proxy_config, nodeconfig.build_kube_proxy_config(settings, layout, ports=ports))
        proxy = self._launch(
            KUBE_PROXY, nodeconfig.build_kube_proxy_args(layout, kube_proxy=self._bin_dir / KUBE_PROXY)
        )
        _wait(
            lambda: _http_ok(f"http://127.0.0.1:{ports.proxy_healthz}/healthz"),
            proc=proxy,
            what="kube-proxy healthy",
            timeout=PROXY_READY_TIMEOUT_SECONDS,
        )
        self.timings = NodeTimings(
            containerd_seconds=containerd_seconds,
            images_seconds=images_seconds,
            ready_seconds=ready_seconds,
            total_seconds=time.monotonic() - began,
            imported=tuple(imported),
        )

    def _launch(self, name: str, argv: Sequence[str]) -> ManagedProcess:
        proc = processes.start_process(name, argv, log_path=self._layout.log(name))
        state = processes.load_state(self._layout.state_file)
        processes.save_state(self._layout.state_file, [*state.processes, proc], state.extra)
        return proc

    def _write_pki(self) -> None:
        layout, plane = self._layout, self._control_plane
        ca = pki.KeyPair(cert_pem=plane.ca_cert_path.read_bytes(), key_pem=plane.ca_key_path.read_bytes())
        (layout.pki_dir).mkdir(parents=True, exist_ok=True)
        (layout.cert("ca")).write_bytes(ca.cert_pem)
        for file_name, request in nodeconfig.build_cert_requests(self.settings).items():
            pair = pki.issue_cert(
                ca,
                common_name=request.common_name,
                organization=request.organization,
                dns_names=request.dns_names,
                ip_addresses=request.ip_addresses,
                server=request.server,
                client=request.client,
            )
            pki.write_pair(pair, cert_path=layout.cert(file_name), key_path=layout.key(file_name))
            if request.client:
                kubeconfig = build_kubeconfig(
                    server_url=plane.server_url, ca_pem=ca.cert_pem, client=pair, user=file_name
                )
                _write_json(layout.kubeconfig(file_name), kubeconfig, private=True)

    def _read_node(self) -> dict[str, Any] | None:
        return self._control_plane.read("nodes", self.name, missing_ok=True) or None

    def _node_ready(self) -> bool:
        node = self._read_node()
        return node is not None and nodeconfig.is_node_ready(node)

    def _finish_registration(self) -> None:
        """GPUs into capacity and allocatable; the not-ready taint off (no node-lifecycle controller)."""
        plane = self._control_plane
        capacity = nodeconfig.build_node_status_patch(self.settings)
        allocatable = [{**op, "path": op["path"].replace("/capacity/", "/allocatable/")} for op in capacity]
        plane.kubectl(
            "patch",
            "node",
            self.name,
            "--subresource=status",
            "--type=json",
            "-p",
            json.dumps([*capacity, *allocatable]),
        )
        for _ in range(10):
            node = self._read_node()
            if node is None:
                raise NodeError(f"node {self.name} disappeared")
            taints = node.get("spec", {}).get("taints", []) or []
            remaining = nodeconfig.build_taints_without(taints, nodeconfig.NOT_READY_TAINT_KEY)
            if len(remaining) == len(taints):
                return
            # The resourceVersion makes a concurrent change a conflict instead of a lost update.
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": remaining},
            }
            result = plane.kubectl("patch", "node", self.name, "--type=merge", "-p", json.dumps(patch), check=False)
            if result.returncode == 0:
                return
        raise NodeError(f"node {self.name}: could not remove the {nodeconfig.NOT_READY_TAINT_KEY} taint")


def build_image_archives() -> list[Path]:
    """Runs devplatform/images/build.sh (its progress passes through on stderr) and returns the OCI
    archives it printed: the images pods on the real node run."""
    if not IMAGES_BUILD_SCRIPT.exists():
        raise NodeError(f"{IMAGES_BUILD_SCRIPT} does not exist: the real node has no images to run")
    try:
        result = subprocess.run(
            [str(IMAGES_BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            check=False,
            timeout=IMAGES_BUILD_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired as error:
        raise NodeError(f"{IMAGES_BUILD_SCRIPT}: not done after {IMAGES_BUILD_TIMEOUT_SECONDS:g} s") from error
    if result.returncode != 0:
        raise NodeError(f"{IMAGES_BUILD_SCRIPT} exited with status {result.returncode} (its output is above)")
    archives = [Path(line.strip()) for line in result.stdout.splitlines() if line.strip()]
    missing = [str(path) for path in archives if not path.is_file()]
    if missing:
        raise NodeError(f"{IMAGES_BUILD_SCRIPT} printed archives that do not exist: {', '.join(missing)}")
    return archives


def default_cache_dir() -> Path:
    return Path(
        os.environ.get("NIMBIX_BURST_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nimbix-burst"
    )


# -- stop -------------------------------------------------------------------------------------------


def stop_node(state_file: Path) -> list[str]:
    """Stops the node recorded in ``state_file`` and removes its host state; returns what was done.

    Works from the file alone (``make dev-down`` runs in another process than ``make dev-up``).
    """
    try:
        state = processes.load_state(state_file)
    except FileNotFoundError:
        return []
    extra = state.extra
    run_dir = Path(extra["run_dir"])
    layout = NodeLayout(run_dir=run_dir, containerd_root=Path(extra["containerd_root"]))
    done: list[str] = []
    by_name = {proc.name: proc for proc in state.processes}
    for name in (KUBE_PROXY, KUBELET):
        if name in by_name:
            done.append(f"{name} pid {by_name[name].pid}: {processes.stop_process(by_name[name])}")
    if CONTAINERD in by_name and processes.is_running(by_name[CONTAINERD]):
        done.extend(_remove_all_containers(layout))
        done.append(f"containerd pid {by_name[CONTAINERD].pid}: {processes.stop_process(by_name[CONTAINERD])}")
    done.extend(_kill_shims(layout))
    done.extend(_kill_cgroup_processes())
    if extra.get("kube_proxy") and KUBE_PROXY in by_name:
        _run([extra["kube_proxy"], "--cleanup"], check=False)
        done.append("kube-proxy --cleanup (iptables chains)")
    done.extend(_remove_new_iptables_chains(json.loads(extra.get("iptables_chains", "{}"))))
    done.extend(_unmount_under((layout.run_dir, layout.containerd_root)))
    done.extend(_remove_kubepods_cgroups())
    bridge = extra.get("bridge", "")
    if bridge and link_exists(bridge):
        _run(["ip", "link", "delete", bridge], check=False)
        done.append(f"bridge {bridge} deleted")
    for key, value in json.loads(extra.get("sysctls", "{}")).items():
        path = Path("/proc/sys") / key
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value)
                done.append(f"sysctl {key} restored to {value}")
    for path in json.loads(extra.get("absent_paths", "[]")):
        if Path(path).exists():
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed {path}")
    for stale in (layout.containerd_state, layout.runc_root, layout.kubelet_root, layout.cni_ipam_dir):
        shutil.rmtree(stale, ignore_errors=True)
    processes.save_state(state_file, [], extra)
    _release_claim(state_file)
    return done


def _remove_all_containers(layout: NodeLayout) -> list[str]:
    """Kills and deletes every container in containerd's k8s.io namespace (the kubelet is gone), so
    the next start finds no stale sandboxes and the shims exit."""
    tasks = _ctr(layout, "tasks", "ls", "-q", check=False).stdout.split()
    if tasks:
        # --force kills a running task and deletes it once it has exited, in one call.
        _ctr(layout, "tasks", "delete", "--force", *tasks, check=False)
    containers = _ctr(layout, "containers", "ls", "-q", check=False).stdout.split()
    if containers:
        _ctr(layout, "containers", "delete", *containers, check=False)
    left = _ctr(layout, "containers", "ls", "-q", check=False).stdout.split()
    if not (tasks or containers):
        return []
    return [f"containerd: {len(tasks)} tasks and {len(containers) - len(left)} containers deleted"]


def _kill_shims(layout: NodeLayout) -> list[str]:
    """Shims that outlived containerd, by the PID files containerd wrote under our state dir."""
    done = []
    for pid_file in layout.containerd_state.glob("io.containerd.runtime.v2.task/*/*/shim.pid"):
        with contextlib.suppress(ValueError, OSError):
            pid = int(pid_file.read_text().strip())
            if "containerd-shim" in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)
                done.append(f"shim pid {pid} killed")
    return done


def _read_iptables(command: str) -> str:
    if shutil.which(f"{command}-save") is None:
        return ""
    result = _run([f"{command}-save"], check=False)
    return result.stdout if result.returncode == 0 else ""


def _snapshot_iptables() -> dict[str, dict[str, list[str]]]:
    return {
        command: {
            table: sorted(chains) for table, chains in nodeconfig.parse_iptables_chains(_read_iptables(command)).items()
        }
        for command in IPTABLES_COMMANDS
    }


def _remove_new_iptables_chains(before: Mapping[str, Mapping[str, Sequence[str]]]) -> list[str]:
    done = []
    for command in IPTABLES_COMMANDS:
        chains = {table: set(names) for table, names in before.get(command, {}).items()}
        cleanup = nodeconfig.build_iptables_cleanup(chains, _read_iptables(command))
        for args in cleanup:
            _run([command, "-w", "5", *args], check=False)
        if cleanup:
            done.append(f"{command}: {sum(1 for args in cleanup if args[2] == '-X')} chains removed")
    return done


def _kubepods_dirs() -> list[Path]:
    # v1: one per hierarchy (/sys/fs/cgroup/<controller>/kubepods); v2: /sys/fs/cgroup/kubepods.
    candidates = [CGROUP_ROOT / nodeconfig.KUBEPODS_CGROUP, *CGROUP_ROOT.glob(f"*/{nodeconfig.KUBEPODS_CGROUP}")]
    return [path for path in candidates if path.is_dir()]


def _cgroup_dirs_deepest_first(top: Path) -> list[Path]:
    """``top`` and every cgroup below it, children before parents. Directories that vanish while we
    look (the kubelet or another cleanup removing them) are simply skipped."""
    return [Path(root) for root, _, _ in os.walk(top, topdown=False)]


def _kill_cgroup_processes() -> list[str]:
    """Any process still in a kubepods cgroup is a container of ours: SIGKILL by PID."""
    pids: set[int] = set()
    for top in _kubepods_dirs():
        for directory in _cgroup_dirs_deepest_first(top):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(line) for line in (directory / "cgroup.procs").read_text().split())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return [f"killed {len(pids)} leftover container processes"] if pids else []


def _remove_kubepods_cgroups() -> list[str]:
    done = []
    for top in _kubepods_dirs():
        # Deepest first: a cgroup directory can only be removed once it has no children.
        for directory in _cgroup_dirs_deepest_first(top):
            _rmdir_cgroup(directory)
        done.append(f"removed cgroup {top}")
    return done


def _rmdir_cgroup(directory: Path) -> None:
    for _ in range(20):
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            # EBUSY while the last task is still exiting.
            time.sleep(0.05)


def _unmount_under(prefixes: Sequence[Path]) -> list[str]:
    """Unmounts every mount point under ``prefixes`` (deepest first), from /proc/self/mountinfo."""
    roots = [str(prefix.resolve()) for prefix in prefixes]
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == root or point.startswith(root + "/") for root in roots):
            points.append(point)
    done = []
    for point in sorted(set(points), key=lambda p: p.count("/"), reverse=True):
        # A bind mount can be stacked; unmount until it is gone (lazily if busy).
        for _ in range(5):
            if _run(["umount", point], check=False).returncode != 0:
                _run(["umount", "-l", point], check=False)
            if not _is_mount_point(point):
                break
        done.append(f"unmounted {point}")
    return done


def _is_mount_point(point: str) -> bool:
    return any(line.split()[4] == point for line in Path("/proc/self/mountinfo").read_text().splitlines())


# -- host -------------------------------------------------------------------------------------------


def check_root() -> None:
    """Raises NodeHostError unless we are root (checked first: everything else needs it)."""
    if os.geteuid() != 0:
        raise NodeHostError(
            f"this machine cannot host the real node:\n  - not root (uid {os.geteuid()}): containerd, runc, "
            "the CNI bridge and the kubelet's cgroups need root"
        )


def _install_packages() -> None:
    result = subprocess.run(
        [str(INSTALL_PACKAGES)], capture_output=True, text=True, check=False, timeout=INSTALL_TIMEOUT_SECONDS
    )
    if result.returncode != 0:
        raise NodeHostError(f"devplatform/host/install-packages.sh failed:\n{result.stderr.strip()}")


def _gather_host_facts(settings: NodeSettings) -> nodeconfig.HostFacts:
    mounts = tuple(
        (fields[2], fields[1])
        for fields in (line.split() for line in Path("/proc/self/mounts").read_text().splitlines())
        if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2")
    )
    missing = [command for command in REQUIRED_COMMANDS if shutil.which(command) is None]
    missing += [
        f"{nodeconfig.CNI_BIN_DIR}/{plugin}"
        for plugin in REQUIRED_CNI_PLUGINS
        if not Path(nodeconfig.CNI_BIN_DIR, plugin).exists()
    ]
    routes: tuple[tuple[str, str], ...] = ()
    result = _run(["ip", "-j", "route", "show", "table", "all"], check=False)
    if result.returncode == 0:
        routes = tuple(
            (str(route.get("dst", "")), str(route.get("dev", "")))
            for route in json.loads(result.stdout or "[]")
            if route.get("type", "unicast") == "unicast"
        )
    return nodeconfig.HostFacts(
        uid=os.geteuid(),
        filesystems=Path("/proc/filesystems").read_text(),
        cgroup_mounts=mounts,
        missing_commands=tuple(missing),
        routes=routes,
        bridge_exists=link_exists(settings.bridge),
        kubepods_cgroups=tuple(str(path) for path in _kubepods_dirs()),
    )


def _snapshot_host(settings: NodeSettings, layout: NodeLayout) -> dict[str, str]:
    sysctls = {}
    kept_by_launcher = os.environ.get(nodeconfig.SYSCTLS_KEPT_ENV) == "1"
    for key in () if kept_by_launcher else nodeconfig.HOST_SYSCTLS:
        with contextlib.suppress(OSError):
            sysctls[key] = (Path("/proc/sys") / key).read_text().strip()
    return {
        "run_dir": str(layout.run_dir),
        "containerd_root": str(layout.containerd_root),
        "containerd_socket": str(layout.containerd_socket),
        "node_name": settings.name,
        "gateway": settings.gateway,
        "sysctls": json.dumps(sysctls),
        "iptables_chains": json.dumps(_snapshot_iptables()),
        "absent_paths": json.dumps([path for path in nodeconfig.HOST_PATHS if not Path(path).exists()]),
    }


def _save(layout: NodeLayout, *, procs: Sequence[ManagedProcess], host: Mapping[str, str]) -> None:
    processes.save_state(layout.state_file, procs, host)


def _create_bridge(settings: NodeSettings) -> None:
    """The bridge exists before the kubelet starts, because the node IP (its address) must."""
    _run(["ip", "link", "add", "name", settings.bridge, "type", "bridge"])
    _run(["ip", "addr", "add", settings.gateway_prefix, "dev", settings.bridge])
    _run(["ip", "link", "set", settings.bridge, "up"])


def _take_claim(state_file: Path, *, wait_seconds: float) -> None:
    """Claims the machine for the node at ``state_file``: an exclusive create of ``CLAIM_FILE``,
    which records the state file and the claiming process.

    A claim is live while its claimant (the process starting or running the node: pytest, or
    ``dev-up`` until it exits) or any of its node's processes runs. A dead claim is cleaned up
    (``stop_node`` on its state file) and taken over.
    """
    deadline = time.monotonic() + wait_seconds
    claimant = processes.current_process("claimant")
    document = json.dumps(
        {"state_file": str(state_file), "pid": claimant.pid, "started_at_ticks": claimant.started_at_ticks}
    )
    while True:
        try:
            fd = os.open(CLAIM_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(document + "\n")
            return
        owner_state, live = _read_claim()
        if not live:
            if owner_state is not None and owner_state.is_file():
                # Its owner died without stopping its node: undo what it left behind first.
                stop_node(owner_state)
            CLAIM_FILE.unlink(missing_ok=True)
            continue
        if time.monotonic() >= deadline:
            raise NodeHostError(
                f"another real node is running on this machine ({', '.join(live)}; state {owner_state}); "
                "stop it first (make dev-down, or wait for the test session that started it)"
            )
        time.sleep(1.0)


def _read_claim() -> tuple[Path | None, list[str]]:
    """The claim's state file and what keeps it live (empty: the claim is dead)."""
    try:
        text = CLAIM_FILE.read_text().strip()
    except FileNotFoundError:
        return None, []
    claimant: ManagedProcess | None = None
    try:
        claim = json.loads(text)
        state_file = Path(claim["state_file"])
        claimant = ManagedProcess(
            name="claimant",
            pid=int(claim["pid"]),
            log_path=Path(os.devnull),
            started_at_ticks=int(claim["started_at_ticks"]),
        )
    except (ValueError, KeyError, TypeError):
        if not text.startswith("/"):
            # Being written right now (or garbage): give it a moment.
            return None, ["an unreadable claim file"]
        # The first format: the state file's path alone.
        state_file = Path(text)
    live = [f"claimed by pid {claimant.pid}"] if claimant is not None and processes.is_running(claimant) else []
    if state_file.is_file():
        live += [
            f"{proc.name} pid {proc.pid}"
            for proc in processes.load_state(state_file).processes
            if processes.is_running(proc)
        ]
    return state_file, live


def _release_claim(state_file: Path) -> None:
    owner, _ = _read_claim()
    if owner == state_file:
        CLAIM_FILE.unlink(missing_ok=True)


# -- images -----------------------------------------------------------------------------------------


def _ensure_pause_archive(binary_path: Path, cache: Path) -> tuple[str, Path]:
    """The pause image's name and its OCI archive (built once per binary, cached)."""
    binary = binary_path.read_bytes()
    name = nodeconfig.build_pause_image_name(binary)
    archive = cache / "node" / f"pause-{name.rsplit(':', 1)[1]}.tar"
    if not archive.exists():
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_suffix(".partial")
        partial.write_bytes(nodeconfig.build_pause_image_archive(binary, name=name))
        partial.replace(archive)
    return name, archive


def _import_archives(layout: NodeLayout, archives: Sequence[Path]) -> list[str]:
    present = nodeconfig.parse_ctr_images(_ctr(layout, "images", "ls").stdout)
    imported = []
    for archive in archives:
        with tarfile.open(archive) as tar:
            member = tar.extractfile("index.json")
            if member is None:
                raise NodeError(f"{archive}: no index.json (not an OCI archive)")
            wanted = nodeconfig.parse_archive_index(json.load(member))
        if not wanted:
            raise NodeError(f"{archive}: its index.json names no image")
        for image in nodeconfig.find_images_to_import(wanted, present):
            _ctr(
                layout,
                "images",
                "import",
                *nodeconfig.build_import_args(image.name),
                str(archive),
                timeout=IMPORT_TIMEOUT_SECONDS,
            )
            imported.append(image.name)
    return imported


# -- small helpers ----------------------------------------------------------------------------------


def _ctr(
    layout: NodeLayout, *args: str, check: bool = True, timeout: float = COMMAND_TIMEOUT_SECONDS
) -> subprocess.CompletedProcess[str]:
    return _run(
        ["ctr", "--address", str(layout.containerd_socket), "--namespace", nodeconfig.K8S_NAMESPACE, *args],
        check=check,
        timeout=timeout,
    )


def _ctr_ok(layout: NodeLayout) -> bool:
    return layout.containerd_socket.exists() and _ctr(layout, "version", check=False, timeout=5).returncode == 0


def link_exists(name: str) -> bool:
    """Whether this process's network namespace has a device `name`. Asked over netlink (`ip`), not
    read from /sys/class/net: /sys shows the namespace of whoever mounted it, so an e2e session in a
    network namespace of its own would see the host's devices (a dev cluster's bridge) as its own."""
    return _run(["ip", "-j", "link", "show", "dev", name], check=False).returncode == 0


def _run(
    argv: Sequence[str], *, check: bool = True, timeout: float = COMMAND_TIMEOUT_SECONDS
) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        raise NodeError(f"{' '.join(argv)}: no answer after {timeout:g} s") from error
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _wait(probe: Callable[[], bool], *, proc: ManagedProcess, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if not processes.is_running(proc):
            raise NodeError(f"{proc.name} exited while waiting for {what}", log_path=proc.log_path)
        if time.monotonic() >= deadline:
            raise NodeError(f"no {what} after {timeout:g} s", log_path=proc.log_path)
        time.sleep(POLL_SECONDS)


def _http_ok(url: str) -> bool:
    import urllib.request  # noqa: PLC0415 - only the kube-proxy probe needs it

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _write_json(path: Path, document: Mapping[str, Any], *, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if private:
        path.touch(mode=0o600)
        path.chmod(0o600)
    path.write_text(json.dumps(document, indent=2) + "\n")
