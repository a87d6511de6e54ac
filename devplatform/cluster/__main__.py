"""``python -m devplatform.cluster up|down|status --dir DIR``: the dev cluster behind make dev-up/down.

``up [--install kustomize|helm]`` starts a ControlPlane whose processes outlive this command, the
real node (node.py: containerd, kubelet, kube-proxy, with the project's images imported), then
whatever ``start_extras`` adds (the JARVICE emulator, fake GPU nodes), then ``install_addon``:
cert-manager and nimbix-burst itself, installed from deploy/ through devplatform/overlay as a user
installs it (two webhook pods on the real node), or with ``--install helm`` from the Helm chart
(charts/nimbix-burst) with the same local-only changes as values (``DIR/helm`` then links the helm
it used). It writes ``DIR/state.json`` as each component starts (devstate.py: every PID the moment
its process exists; the real node keeps its own state file, named there before the node starts), so a
dev-up that fails or is killed half-way leaves what ``down`` needs; a failed ``up`` stops it itself.
``down`` stops the real node and removes its host state, then stops exactly the saved PIDs. Nothing is
ever stopped by name.

Pods run only on the real node: the fake nodes carry the taint ``FAKE_NODE_TAINT`` (they have no
kubelet), so a pod lands on one only if it tolerates that taint, and the webhook does not count
their GPUs for pods that do not.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kubernetes import client as k8s_client

from devplatform import certmanager, demo, demo_data, gotools, helmchart
from devplatform.cluster import addons, controlplane, devstate, install, node, nodes, processes
from jarvice import contract

STATE_FILE = "state.json"
KUBECONFIG_FILE = "kubeconfig"
JARVICE_ENV_FILE = "jarvice.env"
KUBECTL_LINK = "kubectl"  # a symlink to the control plane's kubectl
HELM_LINK = "helm"  # a symlink to the project-built helm (with --install helm)
INSTALL_METHODS = ("kustomize", "helm")
DEMO_NAMESPACE = "demo"
# Namespace `demo-data` pays with its own key and vault settings: the bring-your-own-key example of docs/data.md.
DEMO_DATA_NAMESPACE = "demo-data"
DEV_NODES = (("gpu-node-1", 4), ("gpu-node-2", 4), ("cpu-node-1", 0))
# Fake nodes have no kubelet: nothing scheduled there would ever run.
FAKE_NODE_TAINT = {"key": "nimbix-burst.io/fake-node", "value": "true", "effect": "NoSchedule"}
CONTROL_PLANE_DIR = "controlplane"
NODE_DIR = "node"
STATUS_PROBE_TIMEOUT_SECONDS = 10
# The stopped processes were orphaned when `up` exited; their new parent (PID 1 here) may reap
# only every couple of seconds. Waiting a little leaves `ps` clean when `down` returns.
REAP_WAIT_SECONDS = 5.0


# -- extension point: processes dev-up runs next to the control plane ---------------------------------


def start_extras(
    control_plane: controlplane.ControlPlane,
    dev_dir: Path,
    *,
    emulator_host: str,
    on_start: Callable[[processes.ManagedProcess], None],
) -> list[processes.ManagedProcess]:
    """Starts the processes that ``make dev-up`` runs beside the control plane and returns them.

    This is where the JARVICE emulator gets started (with
    ``processes.start_process``, logs under ``dev_dir / "logs"``). Give each process to ``on_start``
    the moment it exists (state.json records it, after the control-plane components; ``down`` stops
    them first) and return them in start order. If one fails to start, stop the ones this function
    already started, then raise; ``up`` then stops the rest.
    """
    started: list[processes.ManagedProcess] = []
    try:
        # The webhook is no longer a host process here: install_addon (below) installs it from
        # devplatform/overlay as docs/install.md says, two pods on the real node behind the Service.
        # On the node's gateway: burst pods reach it there, and so does the host (a local address).
        jarvice_dir = dev_dir / "jarvice"
        emulator = addons.start_jarvice_emulator(
            jarvice_dir,
            host=emulator_host,
            args=("--vaults-dir", str(jarvice_dir / "vaults"), *addons.SIGNAL_OVERRIDE_ARGS),
            on_start=on_start,
        )
        started.append(emulator.process)
        shutil.copyfile(emulator.env_file, dev_dir / JARVICE_ENV_FILE)
        _create_dev_nodes(control_plane)
        _create_demo_namespace(control_plane, emulator)
        _create_controller_secret(control_plane, emulator)
    except BaseException:
        for proc in reversed(started):
            processes.stop_process(proc)
        raise
    return started


# -- the add-on, installed as a user installs it (devplatform/cluster/install.py) ----------------------


def install_addon(
    control_plane: controlplane.ControlPlane,
    real_node: node.RealNode,
    *,
    helm: Path | None = None,
    on_start: Callable[[processes.ManagedProcess], None] | None = None,
) -> list[processes.ManagedProcess]:
    """cert-manager (docs/install.md's prerequisite), then ``kubectl apply -k devplatform/overlay`` (or,
    given ``helm``, ``helm install`` of the chart) and the install page's checks: Certificates Ready,
    caBundle injected, two webhook pods Running and Ready on the real node, the leader Lease held.
    Returns cert-manager's processes (each given to ``on_start`` as it starts, so state.json names
    them and ``down`` stops them); if the install fails they are stopped and the error is raised."""
    began = time.monotonic()
    cert_manager = certmanager.install(control_plane, on_start=on_start)
    try:
        installed = install.install_addon(control_plane, real_node, helm=helm)
    except BaseException:
        certmanager.stop(cert_manager)
        raise
    t = installed.timings
    how = f"helm install {helmchart.RELEASE} charts/nimbix-burst" if helm else "kubectl apply -k devplatform/overlay"
    print(
        f"nimbix-burst installed ({how}) in {time.monotonic() - began:.1f} s: "
        f"cert-manager ready {cert_manager.timings.ready_seconds:.1f} s; then Certificates Ready "
        f"{t.certificates_seconds:.1f} s, caBundle {t.ca_bundle_seconds:.1f} s, "
        f"pods Ready {t.pods_ready_seconds:.1f} s, Lease {t.lease_seconds:.1f} s"
    )
    pods = ", ".join(installed.pods)
    print(f"  namespace {installed.namespace}: pods {pods} on {installed.node}; leader {installed.leader}")
    return list(cert_manager.processes)


def _create_demo_namespace(control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess) -> None:
    """Namespace `demo`, holding nothing: its burst pods pay through the gateway (docs/install.md step
    3), and namespace `demo-data`, which pays with its own key (`nimbix-burst.io/jarvice-account: own`,
    the `jarvice-credentials` Secret) and holds the `jarvice-vault` ConfigMap (the vault's address and
    host key) docs/data.md names: labeled Jobs there can stage data at once."""
    api = control_plane.api_client()
    try:
        core = k8s_client.CoreV1Api(api)
        nodes.create_namespace(core, DEMO_NAMESPACE)
        nodes.create_namespace(core, DEMO_DATA_NAMESPACE)
        core.patch_namespace(
            DEMO_DATA_NAMESPACE,
            {"metadata": {"annotations": {contract.ANNOTATION_JARVICE_ACCOUNT: contract.JARVICE_ACCOUNT_OWN}}},
        )
        core.create_namespaced_secret(DEMO_DATA_NAMESPACE, demo.build_secret(emulator, namespace=DEMO_DATA_NAMESPACE))
        # Where the vault is, as docs/data.md has a user write it: a staged Job runs unchanged.
        core.create_namespaced_config_map(
            DEMO_DATA_NAMESPACE, demo_data.build_vault_config(emulator, namespace=DEMO_DATA_NAMESPACE)
        )
    finally:
        api.close()


def _create_controller_secret(control_plane: controlplane.ControlPlane, emulator: addons.EmulatorProcess) -> None:
    """The burst controller's JARVICE Secret (docs/install.md step 4), before the add-on is applied, so
    its reaper runs here as in a user's cluster (the same account as namespace `demo`'s runners)."""
    api = control_plane.api_client()
    try:
        core = k8s_client.CoreV1Api(api)
        nodes.create_namespace(core, install.NAMESPACE)
        secret = demo.build_secret(emulator, namespace=install.NAMESPACE)
        secret["metadata"]["name"] = install.CONTROLLER_SECRET
        core.create_namespaced_secret(install.NAMESPACE, secret)
        # The gateway's accounts (docs/install.md): the only place the key lives for burst pods.
        accounts = demo.build_gateway_accounts(
            emulator, namespace=install.NAMESPACE, name=install.GATEWAY_ACCOUNTS_SECRET
        )
        core.create_namespaced_secret(install.NAMESPACE, accounts)
    finally:
        api.close()


def _create_dev_nodes(control_plane: controlplane.ControlPlane) -> None:
    """A small fake cluster, so `kubectl apply` of a GPU pod shows a real decision at once."""
    api = control_plane.api_client()
    try:
        core = k8s_client.CoreV1Api(api)
        for name, gpus in DEV_NODES:
            nodes.create_gpu_node(
                core, name, gpus=gpus, labels={"kubernetes.io/hostname": name}, taints=[FAKE_NODE_TAINT]
            )
        nodes.ensure_default_service_account(core, "default")
    finally:
        api.close()


# -- commands -----------------------------------------------------------------------------------------


def run_up(dev_dir: Path, *, install_with: str = "kustomize") -> int:
    state_path = dev_dir / STATE_FILE
    running = _running_processes(state_path)
    if running:
        pids = ", ".join(f"{proc.name}={proc.pid}" for proc in running)
        print(f"already running ({pids}); run make dev-down first", file=sys.stderr)
        return 1

    try:
        node.check_root()
    except node.NodeHostError as error:
        print(error, file=sys.stderr)
        return 1
    bin_dir = controlplane.ensure_binaries()
    try:
        helm = gotools.ensure_tool("helm") if install_with == "helm" else None
    except gotools.GoToolError as error:
        print(f"helm: {error}", file=sys.stderr)
        return 1
    try:
        archives = node.build_image_archives()
    except node.NodeError as error:
        print(f"images: {error}", file=sys.stderr)
        return 1

    processes.exit_through_cleanup_on_hangup("dev-up")
    record = devstate.StartRecord(state_path)
    try:
        control_plane, real_node, extras = _start_stack(dev_dir, record, bin_dir=bin_dir, helm=helm, archives=archives)
    except (controlplane.ControlPlaneError, node.NodeError) as error:
        print(f"dev-up failed: {error}", file=sys.stderr)
        _stop_after_failed_up(dev_dir)
        return 1
    except BaseException:
        _stop_after_failed_up(dev_dir)
        raise

    kubeconfig = dev_dir / KUBECONFIG_FILE
    _print_up_summary(control_plane, extras, kubeconfig=kubeconfig.resolve(), state_path=state_path)
    _print_node_summary(real_node)
    # Last line: the kubeconfig path alone, for scripts.
    print(kubeconfig.resolve())
    return 0


def _start_stack(
    dev_dir: Path,
    record: devstate.StartRecord,
    *,
    bin_dir: Path,
    helm: Path | None,
    archives: Sequence[Path],
) -> tuple[controlplane.ControlPlane, node.RealNode, list[processes.ManagedProcess]]:
    """Control plane, real node, extras, the add-on: each recorded in state.json as it starts."""
    control_plane = controlplane.ControlPlane(dev_dir / CONTROL_PLANE_DIR, bin_dir=bin_dir, on_start=record.add)
    record.note(run_dir=str(control_plane.run_dir), bin_dir=str(bin_dir))
    control_plane.start()
    timings = control_plane.startup_timings
    record.note(
        server_url=control_plane.server_url,
        ca_cert=str(control_plane.ca_cert_path),
        readyz_seconds=f"{timings.readyz_seconds:.2f}" if timings else "",
        healthy_seconds=f"{timings.healthy_seconds:.2f}" if timings else "",
    )

    real_node = node.RealNode(dev_dir / NODE_DIR, control_plane=control_plane, image_archives=archives)
    # Before it starts: a node that was starting when dev-up died is stopped by down too.
    record.note(node_state=str(real_node.state_file), node_name=real_node.name)
    real_node.start()
    record.note(
        node_gateway=real_node.gateway_address,
        node_seconds=f"{real_node.timings.total_seconds:.2f}" if real_node.timings else "",
    )

    extras = start_extras(control_plane, dev_dir, emulator_host=real_node.gateway_address, on_start=record.add)
    extras.extend(install_addon(control_plane, real_node, helm=helm, on_start=record.add))
    kubeconfig = dev_dir / KUBECONFIG_FILE
    shutil.copyfile(control_plane.kubeconfig_path, kubeconfig)
    kubeconfig.chmod(0o600)
    # The kubectl of this control plane under a fixed name: the cache may hold other versions.
    kubectl = dev_dir / KUBECTL_LINK
    kubectl.unlink(missing_ok=True)
    kubectl.symlink_to(control_plane.bin_dir / "kubectl")
    (dev_dir / HELM_LINK).unlink(missing_ok=True)
    if helm is not None:
        (dev_dir / HELM_LINK).symlink_to(helm)
    record.finish(kubeconfig=str(kubeconfig.resolve()))
    return control_plane, real_node, extras


def _stop_after_failed_up(dev_dir: Path) -> None:
    """Stops what a failed dev-up started, from state.json as make dev-down would; if this is cut
    short too, state.json stays for make dev-down."""
    print("dev-up failed; stopping what it started", file=sys.stderr)
    run_down(dev_dir)


def run_down(dev_dir: Path) -> int:
    state_path = dev_dir / STATE_FILE
    if not state_path.exists():
        print(f"nothing to stop: {state_path} does not exist")
        return 0
    state = processes.load_state(state_path)
    if state.extra.get(devstate.PHASE) == devstate.STARTING:
        print("dev-up did not finish; stopping what it had started")
    node_state = Path(state.extra.get("node_state", ""))
    if node_state.is_file():
        # First, while the apiserver still answers nothing needs it: the kubelet and its containers,
        # then the host state (mounts, cgroups, bridge, iptables chains).
        for step in node.stop_node(node_state):
            print(f"real node: {step}")
    survivors = []
    for proc in reversed(state.processes):
        outcome = processes.stop_process(proc)
        print(f"{proc.name:<24} pid {proc.pid:<8} {outcome}")
        if outcome == "still-running":
            survivors.append(proc)
    if survivors:
        print(f"some processes did not exit; {state_path} kept", file=sys.stderr)
        return 1
    unreaped = processes.wait_until_gone(state.processes, timeout=REAP_WAIT_SECONDS)
    for proc in unreaped:
        print(f"{proc.name:<24} pid {proc.pid:<8} exited, not yet reaped by its parent (harmless zombie)")
    state_path.unlink()
    (dev_dir / KUBECONFIG_FILE).unlink(missing_ok=True)
    (dev_dir / KUBECTL_LINK).unlink(missing_ok=True)
    (dev_dir / HELM_LINK).unlink(missing_ok=True)
    (dev_dir / JARVICE_ENV_FILE).unlink(missing_ok=True)
    print("stopped")
    return 0


def run_status(dev_dir: Path) -> int:
    state_path = dev_dir / STATE_FILE
    if not state_path.exists():
        print("not running (no state file; start with make dev-up)")
        return 1
    state = processes.load_state(state_path)
    all_running = True
    node_state = Path(state.extra.get("node_state", ""))
    node_processes = processes.load_state(node_state).processes if node_state.is_file() else ()
    for proc in [*state.processes, *node_processes]:
        running = processes.is_running(proc)
        all_running = all_running and running
        label = "running" if running else "NOT RUNNING"
        print(f"{proc.name:<24} pid {proc.pid:<8} {label:<12} {proc.log_path}")
    for key, value in sorted(state.extra.items()):
        print(f"{key:<24} {value}")
    readyz = _probe_readyz(state.extra) if all_running else "skipped"
    print(f"{'apiserver /readyz':<24} {readyz}")
    return 0 if all_running and readyz == "ok" else 1


# -- helpers ------------------------------------------------------------------------------------------


def _running_processes(state_path: Path) -> list[processes.ManagedProcess]:
    if not state_path.exists():
        return []
    return [proc for proc in processes.load_state(state_path).processes if processes.is_running(proc)]


def _probe_readyz(extra: dict[str, str]) -> str:
    try:
        kubectl = str(Path(extra["bin_dir"]) / "kubectl")
        result = subprocess.run(
            [kubectl, "--kubeconfig", extra["kubeconfig"], "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
            check=False,
            env=processes.build_child_environment(None),
            timeout=STATUS_PROBE_TIMEOUT_SECONDS,
        )
    except (OSError, KeyError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    return result.stdout.strip() if result.returncode == 0 else f"failed: {result.stderr.strip()}"


def _print_up_summary(
    control_plane: controlplane.ControlPlane,
    extras: Sequence[processes.ManagedProcess],
    *,
    kubeconfig: Path,
    state_path: Path,
) -> None:
    timings = control_plane.startup_timings
    if timings is not None:
        print(
            f"control plane ready at {control_plane.server_url} (/readyz after "
            f"{timings.readyz_seconds:.1f} s, all healthy after {timings.healthy_seconds:.1f} s)"
        )
    for proc in [*control_plane.processes, *extras]:
        print(f"  {proc.name:<24} pid {proc.pid:<8} log {proc.log_path}")
    print(f"state: {state_path.resolve()}")
    print(f"kubectl: {kubeconfig.parent / KUBECTL_LINK} -> {control_plane.bin_dir / 'kubectl'}")
    helm = kubeconfig.parent / HELM_LINK
    if helm.is_symlink():
        print(f"helm: {helm} -> {helm.resolve()} (release {helmchart.RELEASE} in namespace {helmchart.NAMESPACE})")
    print(f"fake nodes: {', '.join(f'{name} ({gpus} GPUs)' for name, gpus in DEV_NODES)}")
    print("use it with:")
    print(f"  export KUBECONFIG={kubeconfig}")
    print(f"  {kubeconfig.parent / KUBECTL_LINK} create -f deploy/examples/gpu-pod.yaml")
    print("run the remote-burst runner against the JARVICE emulator:")
    print(f"  set -a; . {kubeconfig.parent / JARVICE_ENV_FILE}; set +a")
    print("  REMOTE=1 APP_COMMAND_ARGS='echo hi' .venv/bin/python -m entrypoint")
    print("stop it with: make dev-down")


def _print_node_summary(real_node: node.RealNode) -> None:
    timings = real_node.timings
    if timings is not None:
        imported = ", ".join(timings.imported) or "none (all present)"
        print(f"real node {real_node.name} Ready after {timings.ready_seconds:.1f} s (imported: {imported})")
    for proc in real_node.processes:
        print(f"  {proc.name:<24} pid {proc.pid:<8} log {proc.log_path}")
    print(f"  node IP / bridge gateway {real_node.gateway_address}: host servers that pods use listen there")
    print("  pods run there (fake nodes are tainted nimbix-burst.io/fake-node=true:NoSchedule); images:")
    print("  localhost/nimbix-burst/base:0.1.0, localhost/nimbix-burst/example-app:0.1.0 (imagePullPolicy: Never)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devplatform.cluster", description=__doc__)
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--dir", type=Path, default=Path(".dev"), help="state directory (default: .dev)")
    parser.add_argument(
        "--install",
        choices=INSTALL_METHODS,
        default="kustomize",
        help="up: how to install the add-on: kubectl apply -k (default) or the Helm chart",
    )
    args = parser.parse_args(argv)
    dev_dir: Path = args.dir.resolve()
    dev_dir.mkdir(parents=True, exist_ok=True)
    if args.command == "up":
        return run_up(dev_dir, install_with=args.install)
    commands = {"down": run_down, "status": run_status}
    return commands[args.command](dev_dir)


if __name__ == "__main__":
    sys.exit(main())
