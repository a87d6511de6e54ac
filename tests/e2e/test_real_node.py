"""The real node (kubelet + containerd + kube-proxy) runs pods the way a cluster does: output in
`kubectl logs`, exit codes in the pod status, SIGTERM on `kubectl delete`, extended GPU resources,
ClusterIP Services. Everything goes through kubectl, as a user would."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from typing import Any

from devplatform.cluster import controlplane, node
from tests.support.real_node_pods import real_node_pod_spec

# Built by devplatform/images/build.sh and imported by the real_node fixture: python3 on Debian.
IMAGE = "localhost/nimbix-burst/base:0.1.0"
WAIT = "90s"


def _pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": IMAGE,
        "imagePullPolicy": "Never",
        # `command` replaces the image's ENTRYPOINT (the runner): a plain Python process.
        "command": ["python3", "-u", "-c", script],
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": real_node_pod_spec({"restartPolicy": "Never", "containers": [container], **spec}),
    }


def _apply(plane: controlplane.ControlPlane, namespace: str, *objects: dict[str, Any]) -> None:
    document = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(document))


def _wait_phase(plane: controlplane.ControlPlane, namespace: str, name: str, phase: str) -> None:
    plane.kubectl(
        "wait", "-n", namespace, f"--for=jsonpath={{.status.phase}}={phase}", f"pod/{name}", f"--timeout={WAIT}"
    )


def _get(plane: controlplane.ControlPlane, namespace: str, name: str, path: str) -> str:
    return plane.kubectl("get", "-n", namespace, f"pod/{name}", "-o", f"jsonpath={{{path}}}").stdout


def test_pod_runs_on_the_real_node_and_its_output_is_in_kubectl_logs(
    real_node: node.RealNode, control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    started = time.monotonic()
    _apply(control_plane, namespace, _pod("hello", "print('hello from the real node')"))
    _wait_phase(control_plane, namespace, "hello", "Succeeded")
    elapsed = time.monotonic() - started

    assert _get(control_plane, namespace, "hello", ".spec.nodeName") == real_node.name
    logs = control_plane.kubectl("logs", "-n", namespace, "hello").stdout
    assert logs == "hello from the real node\n"
    assert elapsed < 60


def test_container_exit_code_is_reported(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    _apply(control_plane, namespace, _pod("exit3", "import sys; sys.exit(3)"))
    _wait_phase(control_plane, namespace, "exit3", "Failed")
    assert _get(control_plane, namespace, "exit3", ".status.containerStatuses[0].state.terminated.exitCode") == "3"


def test_kubectl_exec_works_and_delete_sends_sigterm_within_the_grace_period(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    # PID 1 ignores signals it has no handler for, so the handler exits the way a shell would: 128+15.
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('got SIGTERM', flush=True), sys.exit(143)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    _apply(control_plane, namespace, _pod("term", script, terminationGracePeriodSeconds=60))
    control_plane.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/term", f"--timeout={WAIT}")
    _wait_for_log(control_plane, namespace, "term", "ready")
    exec_result = control_plane.kubectl("exec", "-n", namespace, "term", "--", "python3", "-c", "print('exec ok')")
    assert exec_result.stdout == "exec ok\n"

    # Watch the pod's exit code while it is deleted: the pod object goes away right after.
    argv = [
        str(control_plane.bin_dir / "kubectl"),
        "--kubeconfig", str(control_plane.kubeconfig_path),
        "get", "-n", namespace, "pod/term", "--watch",
        "-o", "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}{'\\n'}",
    ]  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as watch:
        assert watch.stdout is not None
        listed = watch.stdout.readline()  # the watch has listed the pod (running: no exit code yet)
        started = time.monotonic()
        control_plane.kubectl("delete", "-n", namespace, "pod/term", "--wait=true", "--timeout=60s")
        elapsed = time.monotonic() - started
        watch.terminate()
        seen, _ = watch.communicate(timeout=10)

    assert "143" in (listed + seen).split()
    # Well inside the 60 s grace period: the process exited on SIGTERM, it was not killed at the end.
    assert elapsed < 30


def test_pod_asking_for_gpus_binds_to_the_real_node_and_runs(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    gpus = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    _apply(control_plane, namespace, _pod("gpu", "print('two GPUs')", container={"resources": gpus}))
    _wait_phase(control_plane, namespace, "gpu", "Succeeded")

    assert _get(control_plane, namespace, "gpu", ".spec.nodeName") == real_node.name
    allocatable = control_plane.kubectl(
        "get", "node", real_node.name, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}"
    ).stdout
    assert allocatable == str(real_node.settings.gpus)


def test_clusterip_service_reaches_a_pod(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    server = _pod(
        "web",
        "import http.server as h; h.ThreadingHTTPServer(('', 8080), h.SimpleHTTPRequestHandler).serve_forever()",
        container={"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}},
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    _apply(control_plane, namespace, server, service)
    control_plane.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/web", f"--timeout={WAIT}")
    cluster_ip = control_plane.kubectl("get", "-n", namespace, "service/web", "-o", "jsonpath={.spec.clusterIP}").stdout

    # kube-proxy programs the rules within a sync; the client retries for a while.
    client = (
        "import time, urllib.request\n"
        "for _ in range(60):\n"
        "    try:\n"
        f"        print('status', urllib.request.urlopen('http://{cluster_ip}/', timeout=2).status); break\n"
        "    except OSError as e:\n"
        "        print('retry', e); time.sleep(1)\n"
        "else:\n"
        "    raise SystemExit(1)\n"
    )
    _apply(control_plane, namespace, _pod("client", client))
    _wait_phase(control_plane, namespace, "client", "Succeeded")
    assert "status 200" in control_plane.kubectl("logs", "-n", namespace, "client").stdout


def test_node_advertises_its_gateway_for_servers_pods_use(
    control_plane: controlplane.ControlPlane, real_node: node.RealNode
) -> None:
    addresses = control_plane.kubectl(
        "get", "node", real_node.name, "-o", "jsonpath={.status.addresses[?(@.type=='InternalIP')].address}"
    ).stdout
    assert addresses == real_node.gateway_address


def _wait_for_log(plane: controlplane.ControlPlane, namespace: str, name: str, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in plane.read_log(namespace, name):
        assert time.monotonic() < deadline, f"{text!r} not in the logs of {name}"
        time.sleep(0.2)


def test_pod_reaches_a_host_server_bound_to_the_gateway(
    control_plane: controlplane.ControlPlane, namespace: str, real_node: node.RealNode
) -> None:
    """How pods reach the JARVICE emulator: a host server listening on the node's gateway address."""

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello from the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with http.server.ThreadingHTTPServer((real_node.gateway_address, 0), Hello) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        url = f"http://{real_node.gateway_address}:{server.server_address[1]}/"
        try:
            _apply(
                control_plane,
                namespace,
                _pod(
                    "host", f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
                ),
            )
            _wait_phase(control_plane, namespace, "host", "Succeeded")
        finally:
            server.shutdown()
    assert control_plane.kubectl("logs", "-n", namespace, "host").stdout == "hello from the host\n"
