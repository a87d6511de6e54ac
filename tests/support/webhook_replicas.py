"""Two webhook replicas with leader election behind one address, as the e2e tests run them: real
`python -m webhook` processes on this host, their Lease in a namespace of their own, and a TCP proxy in
front that spreads connections over both (as a Service does), registered with the real API server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devplatform.cluster import addons, nodes
from devplatform.cluster.controlplane import ControlPlane
from devplatform.cluster.pki import KeyPair, make_ca
from devplatform.cluster.processes import free_port, stop_process
from devplatform.cluster.tcpproxy import CuttableProxy
from tests.support.at_once import run_at_once
from tests.support.gpus import GPU

REPLICAS = 2


@dataclass
class Replicas:
    control_plane: ControlPlane
    run_dir: Path
    namespace: str  # the Lease's
    lease_name: str
    ca: KeyPair
    ports: list[int]
    args: Sequence[str]  # given to every replica, after the leader election's own
    hooks: dict[int, addons.WebhookProcess] = field(default_factory=dict)

    def start(self, index: int) -> addons.WebhookProcess:
        """Starts replica `index` (again, after a test stopped it)."""
        port = self.ports[index]
        hook = addons.start_webhook(
            self.run_dir / f"replica-{index}",
            kubeconfig=self.control_plane.kubeconfig_path,
            port=port,
            ca=self.ca,
            args=[
                "--strip-toleration-keys", GPU,
                "--leader-election", "true",
                "--lease-namespace", self.namespace,
                "--lease-name", self.lease_name,
                "--pod-name", f"replica-{index}",
                "--advertise-url", f"https://127.0.0.1:{port}",
                "--peer-server-name", "localhost",
                *self.args,
            ],
        )  # fmt: skip
        self.hooks[index] = hook
        return hook

    def leader_index(self) -> int:
        """Which replica holds the Lease."""
        lease = self.control_plane.read("leases", self.lease_name, namespace=self.namespace)
        holder = str(lease.get("spec", {}).get("holderIdentity") or "")
        assert holder in [f"replica-{index}" for index in range(REPLICAS)], holder
        return int(holder.rsplit("-", 1)[1])


@contextmanager
def serving_replicas(
    control_plane: ControlPlane, core: Any, *, name: str, args: Sequence[str] = ()
) -> Iterator[Replicas]:
    """Both replicas started and registered (`name` tells this group's namespace, Lease, CA and webhook
    configuration apart); all of it removed afterwards."""
    namespace = f"{name}-{uuid.uuid4().hex[:6]}"
    nodes.create_namespace(core, namespace)
    run_dir = control_plane.run_dir / f"{name}-replicas"
    ports = [free_port() for _ in range(REPLICAS)]
    replicas = Replicas(
        control_plane, run_dir, namespace, f"webhook-{name}", make_ca(f"nimbix-burst-e2e-{name}"), ports, args
    )
    for index in range(REPLICAS):
        replicas.start(index)
    with CuttableProxy("127.0.0.1", ports[0], ("127.0.0.1", ports[1])) as proxy:
        front = addons.WebhookProcess(
            process=replicas.hooks[0].process, url=f"https://127.0.0.1:{proxy.port}", ca=replicas.ca, tls_dir=run_dir
        )
        configuration = addons.register_webhook(control_plane, front, name_suffix=f"-{name}")
        try:
            yield replicas
        finally:
            control_plane.kubectl("delete", "mutatingwebhookconfiguration", configuration, "--ignore-not-found")
            for hook in replicas.hooks.values():
                stop_process(hook.process)
            core.delete_namespace(namespace)


def create_at_once(plane: ControlPlane, bodies: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every body created at once with kubectl (a thread each); the created objects, and kubectl's
    stderr for each create the API server refused."""

    def create(body: dict[str, Any]) -> dict[str, Any]:
        result = plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body), check=False)
        if result.returncode != 0:
            raise RuntimeError(result.stderr.strip())
        created: dict[str, Any] = json.loads(result.stdout)
        return created

    created, errors = run_at_once(create, bodies)
    return created, [str(error) for error in errors]
