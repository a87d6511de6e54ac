"""Pure builders for the real node (node.py): containerd's config, the CNI conflist, the kubelet and
kube-proxy configs and argument lists, the certificates the node needs, the API bodies that finish
its registration, the pause image's OCI archive, and the host check.

Nothing here touches the filesystem, the network or processes: plain values in, plain values out
(node.py gathers inputs and applies the outputs). See docs in node.py for why each setting is what
it is; the non-obvious ones carry a comment here.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import ipaddress
import json
import shlex
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devplatform.cluster.rundir import RunDirectory

# The extended resource the fake nodes and the webhook count; advertised through the node's status.
GPU_RESOURCE = "nvidia.com/gpu"
REAL_NODE_LABEL = "nimbix-burst.io/real-node"
REAL_NODE_TAINT = f"{REAL_NODE_LABEL}=true:NoSchedule"
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
# A /24 from 10/8 that neither Docker (172.17/16), podman/buildah (10.88/16), flannel (10.244/16),
# Calico (192.168/16) nor this project's Service range (10.0.0.0/24) uses by default.
DEFAULT_POD_SUBNET = "10.213.0.0/24"
# Linux interface names are at most 15 bytes.
DEFAULT_BRIDGE = "nbburst0"
DEFAULT_NODE_NAME = "nimbix-burst-node"
DEFAULT_GPUS = 4
# The CRI namespace the kubelet's containers and images live in.
K8S_NAMESPACE = "k8s.io"
CNI_BIN_DIR = "/usr/lib/cni"
CNI_NETWORK_NAME = "nimbix-burst"
# Our own sandbox image (cmd/pause in gowrap), named after the binary's hash so a changed binary is a
# new image and an unchanged one is recognised as already imported.
PAUSE_IMAGE_REPOSITORY = "localhost/nimbix-burst/pause"
# Containerd's image-name annotation (ctr import names the image from it).
CONTAINERD_IMAGE_NAME_ANNOTATION = "io.containerd.image.name"
OCI_REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
OCI_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
# Sysctls the kubelet sets when protectKernelDefaults is false (the default; true makes it refuse to
# start here) and the bridge plugin's ip_forward: recorded before start and restored at stop.
HOST_SYSCTLS = (
    "net/ipv4/ip_forward",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
# Set by the e2e launcher for its shards' nodes: it saves the host sysctls before the first shard's node
# and restores them after the last (one node's restore would put back what another's kubelet set).
SYSCTLS_KEPT_ENV = "NIMBIX_BURST_SYSCTLS_KEPT_BY_LAUNCHER"
# Host paths the kubelet, containerd, the CNI plugins and libcni create outside the directories we
# give them (real-node.md section 5). Each one that did not exist before start is removed at stop.
HOST_PATHS = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/run/netns",
    "/var/lib/cni",
    "/opt/containerd",
)
# Only chains with this prefix are ever removed (the kubelet's and kube-proxy's).
KUBE_CHAIN_PREFIX = "KUBE-"
# The cgroup the kubelet (cgroupfs driver, cgroupsPerQOS) puts every pod under, in each hierarchy.
KUBEPODS_CGROUP = "kubepods"


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """What a caller may choose about the real node."""

    name: str = DEFAULT_NODE_NAME
    pod_subnet: str = DEFAULT_POD_SUBNET
    bridge: str = DEFAULT_BRIDGE
    gpus: int = DEFAULT_GPUS
    gpu_resource: str = GPU_RESOURCE
    # Taints the node registers with ("key=value:Effect"), e.g. REAL_NODE_TAINT so that only pods
    # that tolerate it (and select the node) run there while other tests count GPUs cluster-wide.
    register_taints: tuple[str, ...] = ()

    @property
    def gateway(self) -> str:
        """The bridge's address: the node IP, and where host servers that pods use must listen."""
        return str(next(ipaddress.ip_network(self.pod_subnet).hosts()))

    @property
    def gateway_prefix(self) -> str:
        return f"{self.gateway}/{ipaddress.ip_network(self.pod_subnet).prefixlen}"


@dataclass(frozen=True, slots=True)
class NodePorts:
    kubelet: int
    kubelet_healthz: int
    proxy_healthz: int
    proxy_metrics: int


@dataclass(frozen=True, slots=True)
class NodeLayout(RunDirectory):
    """Every path of one node: per-run state under ``run_dir``; images under ``containerd_root``
    (kept between runs, so a warm start imports nothing)."""

    containerd_root: Path

    @property
    def containerd_state(self) -> Path:
        return self.run_dir / "containerd-state"

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.run_dir / "containerd.toml"

    @property
    def runc_root(self) -> Path:
        return self.run_dir / "runc"

    @property
    def containerd_opt(self) -> Path:
        return self.run_dir / "containerd-opt"

    @property
    def cni_conf_dir(self) -> Path:
        return self.run_dir / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.run_dir / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.run_dir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.run_dir / "kubelet-config.json"

    @property
    def kube_proxy_config(self) -> Path:
        return self.run_dir / "kube-proxy-config.json"

    @property
    def pod_logs_dir(self) -> Path:
        return self.run_dir / "pod-logs"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "node-state.json"

    def kubeconfig(self, user: str) -> Path:
        return self.pki_dir / f"{user}.kubeconfig"


@dataclass(frozen=True, slots=True)
class CertRequest:
    """Arguments for ``pki.issue_cert`` (signed by the cluster CA)."""

    common_name: str
    organization: str | None = None
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    server: bool = False
    client: bool = False


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What node.py finds out about the machine before touching it."""

    uid: int
    filesystems: str  # /proc/filesystems
    cgroup_mounts: tuple[tuple[str, str], ...]  # (fstype, mount point) from /proc/self/mounts
    missing_commands: tuple[str, ...]
    routes: tuple[tuple[str, str], ...]  # (destination prefix, device) from `ip -j route`
    bridge_exists: bool
    kubepods_cgroups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ArchiveImage:
    """One image an OCI archive's index.json names."""

    name: str
    digest: str


# -- host check -------------------------------------------------------------------------------------


def find_host_problems(facts: HostFacts, settings: NodeSettings) -> list[str]:
    """Every reason this machine cannot host the real node (empty when it can)."""
    problems = []
    if facts.uid != 0:
        problems.append(
            f"not root (uid {facts.uid}): containerd, runc, the CNI bridge and the kubelet's cgroups need root"
        )
    if not any(line.split()[-1:] == ["overlay"] for line in facts.filesystems.splitlines()):
        problems.append(
            "the kernel offers no overlay filesystem (/proc/filesystems): containerd's snapshotter needs it"
        )
    v1 = [point for fstype, point in facts.cgroup_mounts if fstype == "cgroup"]
    v2 = [point for fstype, point in facts.cgroup_mounts if fstype == "cgroup2"]
    if not v1 and not v2:
        problems.append("no cgroup filesystem is mounted (/proc/self/mounts): the kubelet needs cgroups")
    elif v1 and not any("memory" in point.rsplit("/", 1)[-1].split(",") for point in v1):
        problems.append("cgroup v1 without a memory hierarchy: the kubelet needs the memory controller")
    if facts.missing_commands:
        problems.append(
            f"missing commands: {', '.join(facts.missing_commands)} "
            "(devplatform/host/install-packages.sh installs them)"
        )
    subnet = ipaddress.ip_network(settings.pod_subnet)
    for destination, device in facts.routes:
        if device == settings.bridge or destination == "default":
            continue
        try:
            network = ipaddress.ip_network(destination, strict=False)
        except ValueError:
            continue
        if network.version == subnet.version and network.overlaps(subnet):
            problems.append(
                f"pod subnet {settings.pod_subnet} overlaps the route {destination} on {device}: choose another"
            )
    if facts.bridge_exists:
        problems.append(
            f"network device {settings.bridge} already exists: another real node is running, or one was not "
            "stopped (make dev-down, or `ip link delete` it)"
        )
    if facts.kubepods_cgroups:
        problems.append(
            f"pod cgroups already exist ({', '.join(facts.kubepods_cgroups)}): another kubelet runs here, or "
            "one was not cleaned up (stop it; rmdir the cgroups once empty)"
        )
    return problems


# -- containerd and CNI -----------------------------------------------------------------------------


def build_containerd_config(layout: NodeLayout, *, sandbox_image: str) -> str:
    """containerd's config (version 2, TOML) with every path under the node's directories."""

    def q(value: object) -> str:
        # A TOML basic string is a JSON string for the characters we use.
        return json.dumps(str(value))

    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    return "\n".join(
        [
            "version = 2",
            f"root = {q(layout.containerd_root)}",
            f"state = {q(layout.containerd_state)}",
            # Snapshotters we do not use would create directories (or fail noisily) on start.
            'disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",'
            ' "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",'
            ' "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
            "",
            "[grpc]",
            f"  address = {q(layout.containerd_socket)}",
            "",
            '[plugins."io.containerd.internal.v1.opt"]',
            f"  path = {q(layout.containerd_opt)}",
            "",
            cri,
            f"  sandbox_image = {q(sandbox_image)}",
            # Root here lacks CAP_SYS_RESOURCE: without this, runc fails to lower oom_score_adj and
            # every sandbox fails with "can't get final child's PID from pipe: EOF".
            "  restrict_oom_score_adj = true",
            # Network namespaces under our state dir instead of /run/netns.
            "  netns_mounts_under_state_dir = true",
            "  enable_tls_streaming = false",
            '  stream_server_address = "127.0.0.1"',
            "",
            f"{cri[:-1]}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            "",
            f"{cri[:-1]}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            "",
            f"{cri[:-1]}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            # runc's own state (default /run/containerd/runc) under our run dir.
            f"  Root = {q(layout.runc_root)}",
            "",
            f"{cri[:-1]}.cni]",
            f"  bin_dir = {q(CNI_BIN_DIR)}",
            f"  conf_dir = {q(layout.cni_conf_dir)}",
            "  max_conf_num = 1",
            "",
        ]
    )


def build_cni_conflist(settings: NodeSettings, layout: NodeLayout) -> dict[str, Any]:
    """One bridge network: pods on ``pod_subnet``, the bridge as their gateway, no masquerading."""
    return {
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": settings.bridge,
                "isGateway": True,
                # Pods only talk to each other and to the host; nothing to masquerade.
                "ipMasq": False,
                # A pod reaching itself through a Service IP comes back over the same port.
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": settings.pod_subnet, "gateway": settings.gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.cni_ipam_dir),
                },
            },
            {"type": "loopback"},
        ],
    }


def build_containerd_args(layout: NodeLayout) -> list[str]:
    return ["containerd", "--config", str(layout.containerd_config), "--log-level", "warn"]


# -- kubelet ----------------------------------------------------------------------------------------


def build_kubelet_config(settings: NodeSettings, layout: NodeLayout, *, ports: NodePorts) -> dict[str, Any]:
    """KubeletConfiguration: secure serving (x509 + webhook authn/authz, no anonymous access)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The apiserver reaches the kubelet (logs, exec) on the node IP; nothing else listens.
        "address": settings.gateway,
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.kubelet_healthz,
        "tlsCertFile": str(layout.cert("kubelet-serving")),
        "tlsPrivateKeyFile": str(layout.key("kubelet-serving")),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(layout.cert("ca"))},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        # A dev machine's disk is often fuller than the defaults allow; never evict our pods for it.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        # Images are imported, not pulled: garbage-collecting them would lose them for good.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "podLogsDir": str(layout.pod_logs_dir),
        # Its iptables chains are for the old dockershim networking; kube-proxy does the work.
        "makeIPTablesUtilChains": False,
        "serializeImagePulls": False,
        "resolvConf": "",
        "maxPods": 110,
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "1m",
        "syncFrequency": "10s",
        "fileCheckFrequency": "1h",
        "shutdownGracePeriod": "0s",
    }


def build_kubelet_args(settings: NodeSettings, layout: NodeLayout, *, kubelet: Path) -> list[str]:
    return [
        str(kubelet),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubeconfig('kubelet')}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.pki_dir}",
        f"--hostname-override={settings.name}",
        # The bridge's address: pods and the apiserver reach it; a loopback node IP is refused.
        f"--node-ip={settings.gateway}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        *([f"--register-with-taints={','.join(settings.register_taints)}"] if settings.register_taints else []),
        "--v=1",
    ]


def build_node_status_patch(settings: NodeSettings) -> list[dict[str, Any]]:
    """JSON patch for ``nodes/<name>/status``: GPUs as an extended resource in capacity (Kubernetes'
    "advertise extended resources for a node"); the kubelet copies capacity into allocatable."""
    escaped = settings.gpu_resource.replace("~", "~0").replace("/", "~1")
    return [{"op": "add", "path": f"/status/capacity/{escaped}", "value": str(settings.gpus)}]


def build_taints_without(taints: Sequence[Mapping[str, Any]], key: str) -> list[dict[str, Any]]:
    return [dict(taint) for taint in taints if taint.get("key") != key]


def is_node_ready(node: Mapping[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions", []) or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def build_node_rbac() -> dict[str, Any]:
    """The apiserver authorizes with RBAC only (no Node authorizer), so nodes get ``system:node``."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "nimbix-burst:nodes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
    }


def build_cert_requests(settings: NodeSettings) -> dict[str, CertRequest]:
    """The node's certificates, by file name."""
    return {
        # NodeRestriction-style identity: user system:node:<name> in group system:nodes.
        "kubelet": CertRequest(common_name=f"system:node:{settings.name}", organization="system:nodes", client=True),
        # What the apiserver verifies when it calls the kubelet (--kubelet-certificate-authority).
        "kubelet-serving": CertRequest(
            common_name=f"system:node:{settings.name}",
            dns_names=(settings.name,),
            ip_addresses=(settings.gateway,),
            server=True,
        ),
        # Bound to ClusterRole system:node-proxier by the default RBAC policy.
        "kube-proxy": CertRequest(common_name="system:kube-proxy", client=True),
    }


# -- kube-proxy -------------------------------------------------------------------------------------


def build_kube_proxy_config(settings: NodeSettings, layout: NodeLayout, *, ports: NodePorts) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig("kube-proxy"))},
        "hostnameOverride": settings.name,
        "bindAddress": settings.gateway,
        "clusterCIDR": settings.pod_subnet,
        "healthzBindAddress": f"127.0.0.1:{ports.proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{ports.proxy_metrics}",
        # Leave the host's conntrack table size alone (setting it needs a writable /proc/sys/net).
        "conntrack": {"maxPerCore": 0, "min": 0},
        "iptables": {
            # Service traffic between two pods on the same bridge would otherwise answer straight
            # over the bridge, bypassing the reverse NAT: masquerade it through the host.
            "masqueradeAll": True,
            # Would set route_localnet on the host.
            "localhostNodePorts": False,
            "syncPeriod": "30s",
            "minSyncPeriod": "0s",
        },
        "nodePortAddresses": [f"{settings.gateway}/32"],
    }


def build_kube_proxy_args(layout: NodeLayout, *, kube_proxy: Path) -> list[str]:
    return [str(kube_proxy), f"--config={layout.kube_proxy_config}", "--v=1"]


# -- images -----------------------------------------------------------------------------------------


def build_pause_image_name(binary: bytes) -> str:
    return f"{PAUSE_IMAGE_REPOSITORY}:{hashlib.sha256(binary).hexdigest()[:12]}"


def build_pause_image_archive(binary: bytes, *, name: str) -> bytes:
    """An OCI image-layout tar with one layer holding ``/pause``: deterministic (fixed times and
    owners), so the same binary always gives the same digest and a re-import is recognised."""
    layer = gzip.compress(_tar({"pause": (binary, 0o755)}), mtime=0)
    diff_id = "sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest()
    config = _json_bytes(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "devplatform/cluster/nodeconfig.py (gowrap cmd/pause)"}],
        }
    )
    manifest = _json_bytes(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar+gzip", layer)],
        }
    )
    index = _json_bytes(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    **_descriptor(OCI_MANIFEST_MEDIA_TYPE, manifest),
                    "annotations": {CONTAINERD_IMAGE_NAME_ANNOTATION: name, OCI_REF_NAME_ANNOTATION: name},
                }
            ],
        }
    )
    files: dict[str, tuple[bytes, int]] = {
        "oci-layout": (_json_bytes({"imageLayoutVersion": "1.0.0"}), 0o644),
        "index.json": (index, 0o644),
    }
    for blob in (layer, config, manifest):
        files[f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}"] = (blob, 0o644)
    return _tar(files)


def parse_archive_index(index: Mapping[str, Any]) -> list[ArchiveImage]:
    """The named images in an OCI archive's index.json (name from containerd's or OCI's annotation)."""
    images = []
    for manifest in index.get("manifests", []) or []:
        annotations = manifest.get("annotations", {}) or {}
        name = annotations.get(CONTAINERD_IMAGE_NAME_ANNOTATION) or annotations.get(OCI_REF_NAME_ANNOTATION)
        if name:
            images.append(ArchiveImage(name=str(name), digest=str(manifest["digest"])))
    return images


def parse_ctr_images(output: str) -> dict[str, str]:
    """``ctr images ls`` output -> {name: digest}."""
    images = {}
    for line in output.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3:
            images[fields[0]] = fields[2]
    return images


def find_images_to_import(wanted: Sequence[ArchiveImage], present: Mapping[str, str]) -> list[ArchiveImage]:
    return [image for image in wanted if present.get(image.name) != image.digest]


def build_import_args(name: str) -> list[str]:
    """Extra ``ctr images import`` arguments so the image is named ``name``: containerd 1.6 drops a
    fully qualified OCI ref name unless ``--base-name`` is that name's repository."""
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return ["--base-name", repository]


# -- iptables ---------------------------------------------------------------------------------------


def parse_iptables_chains(save_output: str) -> dict[str, set[str]]:
    """``iptables-save`` output -> {table: chain names}."""
    chains: dict[str, set[str]] = {}
    table = ""
    for line in save_output.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
            chains.setdefault(table, set())
        elif line.startswith(":") and table:
            chains[table].add(line[1:].split()[0])
    return chains


def build_iptables_cleanup(before: Mapping[str, set[str]], after_save: str) -> list[list[str]]:
    """iptables arguments that remove the ``KUBE-*`` chains that did not exist ``before`` (the
    kubelet's and kube-proxy's), and every rule that jumps to them, leaving other chains alone."""
    after = parse_iptables_chains(after_save)
    new = {
        table: {c for c in chains - before.get(table, set()) if c.startswith(KUBE_CHAIN_PREFIX)}
        for table, chains in after.items()
    }
    commands: list[list[str]] = []
    table = ""
    for line in after_save.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
        elif line.startswith("-A ") and table:
            words = shlex.split(line)
            chain = words[1]
            target = words[words.index("-j") + 1] if "-j" in words else ""
            if chain not in new.get(table, set()) and target in new.get(table, set()):
                commands.append(["-t", table, "-D", chain, *words[2:]])
    for table, chains in sorted(new.items()):
        commands.extend(["-t", table, "-F", chain] for chain in sorted(chains))
        commands.extend(["-t", table, "-X", chain] for chain in sorted(chains))
    return commands


# -- helpers ----------------------------------------------------------------------------------------


def _json_bytes(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, blob: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(blob).hexdigest(), "size": len(blob)}


def _tar(files: Mapping[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
