"""devplatform/cluster/nodeconfig.py: the real node's configs, certificates, API bodies, pause image and
host check, checked against the rules in docs/real-node (expected values written out, not computed)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from devplatform.cluster import nodeconfig
from devplatform.cluster.nodeconfig import HostFacts, NodeLayout, NodePorts, NodeSettings

LAYOUT = NodeLayout(run_dir=Path("/runs/n1"), containerd_root=Path("/cache/node/containerd"))
PORTS = NodePorts(kubelet=20250, kubelet_healthz=20248, proxy_healthz=20256, proxy_metrics=20249)
SETTINGS = NodeSettings(name="node-a", pod_subnet="10.213.0.0/24", bridge="nbtest0", gpus=4)


def _facts(**overrides: Any) -> HostFacts:
    values: dict[str, Any] = {
        "uid": 0,
        "filesystems": "nodev\tsysfs\nnodev\toverlay\n\text4\n",
        "cgroup_mounts": (("cgroup", "/sys/fs/cgroup/memory"), ("cgroup", "/sys/fs/cgroup/cpu")),
        "missing_commands": (),
        "routes": (("default", "eth0"), ("192.0.2.0/24", "eth0")),
        "bridge_exists": False,
    }
    values.update(overrides)
    return HostFacts(**values)


# -- settings ---------------------------------------------------------------------------------------


def test_gateway_is_the_first_address_of_the_pod_subnet() -> None:
    assert SETTINGS.gateway == "10.213.0.1"
    assert SETTINGS.gateway_prefix == "10.213.0.1/24"
    assert NodeSettings(pod_subnet="172.30.5.0/28").gateway == "172.30.5.1"


# -- containerd and CNI -----------------------------------------------------------------------------


def test_containerd_config_keeps_everything_under_our_directories() -> None:
    config = tomllib.loads(nodeconfig.build_containerd_config(LAYOUT, sandbox_image="localhost/p:1"))
    assert config["version"] == 2
    assert config["root"] == "/cache/node/containerd"
    assert config["state"] == "/runs/n1/containerd-state"
    assert config["grpc"]["address"] == "/runs/n1/containerd.sock"
    assert config["plugins"]["io.containerd.internal.v1.opt"]["path"] == "/runs/n1/containerd-opt"
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "localhost/p:1"
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["containerd"]["snapshotter"] == "overlayfs"
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {"SystemdCgroup": False, "Root": "/runs/n1/runc"}
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"
    assert cri["cni"]["conf_dir"] == "/runs/n1/cni/net.d"


def test_cni_conflist_is_a_bridge_gateway_without_masquerade() -> None:
    conflist = nodeconfig.build_cni_conflist(SETTINGS, LAYOUT)
    bridge = conflist["plugins"][0]
    assert conflist["cniVersion"] == "0.4.0"
    assert bridge["type"] == "bridge"
    assert bridge["bridge"] == "nbtest0"
    assert (bridge["isGateway"], bridge["ipMasq"], bridge["hairpinMode"]) == (True, False, True)
    assert bridge["ipam"] == {
        "type": "host-local",
        "ranges": [[{"subnet": "10.213.0.0/24", "gateway": "10.213.0.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "/runs/n1/cni/ipam",
    }


# -- kubelet ----------------------------------------------------------------------------------------


def test_kubelet_serves_securely_on_the_node_ip() -> None:
    config = nodeconfig.build_kubelet_config(SETTINGS, LAYOUT, ports=PORTS)
    assert (config["address"], config["port"], config["readOnlyPort"]) == ("10.213.0.1", 20250, 0)
    assert config["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": "/runs/n1/pki/ca.crt"},
    }
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["tlsCertFile"] == "/runs/n1/pki/kubelet-serving.crt"
    assert config["containerRuntimeEndpoint"] == "unix:///runs/n1/containerd.sock"
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["failSwapOn"] is False
    assert config["podLogsDir"] == "/runs/n1/pod-logs"
    # Imported images can never be pulled again.
    assert config["imageGCHighThresholdPercent"] == 100


def test_kubelet_args_name_the_node_and_its_ip() -> None:
    args = nodeconfig.build_kubelet_args(SETTINGS, LAYOUT, kubelet=Path("/bin/kubelet"))
    assert args[0] == "/bin/kubelet"
    assert "--hostname-override=node-a" in args
    assert "--node-ip=10.213.0.1" in args
    assert "--root-dir=/runs/n1/kubelet" in args
    assert "--kubeconfig=/runs/n1/pki/kubelet.kubeconfig" in args
    assert "--node-labels=nimbix-burst.io/real-node=true" in args
    assert not [arg for arg in args if arg.startswith("--register-with-taints")]


def test_kubelet_registers_with_the_requested_taints() -> None:
    settings = NodeSettings(register_taints=("a=b:NoSchedule", "c=d:NoExecute"))
    args = nodeconfig.build_kubelet_args(settings, LAYOUT, kubelet=Path("/bin/kubelet"))
    assert "--register-with-taints=a=b:NoSchedule,c=d:NoExecute" in args


def test_certificates_identify_the_node_and_kube_proxy() -> None:
    requests = nodeconfig.build_cert_requests(SETTINGS)
    client = requests["kubelet"]
    assert (client.common_name, client.organization, client.client, client.server) == (
        "system:node:node-a",
        "system:nodes",
        True,
        False,
    )
    serving = requests["kubelet-serving"]
    assert serving.server and not serving.client
    assert serving.dns_names == ("node-a",)
    assert serving.ip_addresses == ("10.213.0.1",)
    assert requests["kube-proxy"].common_name == "system:kube-proxy"


def test_nodes_group_gets_the_system_node_role() -> None:
    binding = nodeconfig.build_node_rbac()
    assert binding["roleRef"]["name"] == "system:node"
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]


@pytest.mark.parametrize(
    ("resource", "gpus", "path"),
    [
        ("nvidia.com/gpu", 4, "/status/capacity/nvidia.com~1gpu"),
        ("example.com/a~b", 1, "/status/capacity/example.com~1a~0b"),
    ],
    ids=["slash-escaped", "tilde-escaped-first"],
)
def test_gpu_capacity_patch_escapes_the_resource_name(resource: str, gpus: int, path: str) -> None:
    settings = NodeSettings(gpu_resource=resource, gpus=gpus)
    assert nodeconfig.build_node_status_patch(settings) == [{"op": "add", "path": path, "value": str(gpus)}]


def test_only_the_named_taint_is_removed() -> None:
    taints = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    ]
    assert nodeconfig.build_taints_without(taints, "node.kubernetes.io/not-ready") == [taints[1]]


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "MemoryPressure", "status": "False"}], False),
        ([], False),
    ],
    ids=["ready", "not-ready", "no-ready-condition", "no-conditions"],
)
def test_node_readiness(conditions: list[dict[str, str]], ready: bool) -> None:
    assert nodeconfig.is_node_ready({"status": {"conditions": conditions}}) is ready


# -- kube-proxy -------------------------------------------------------------------------------------


def test_kube_proxy_runs_iptables_mode_for_the_pod_subnet() -> None:
    config = nodeconfig.build_kube_proxy_config(SETTINGS, LAYOUT, ports=PORTS)
    assert config["mode"] == "iptables"
    assert config["clusterCIDR"] == "10.213.0.0/24"
    assert config["hostnameOverride"] == "node-a"
    assert config["iptables"]["masqueradeAll"] is True
    assert config["healthzBindAddress"] == "127.0.0.1:20256"
    assert config["clientConnection"]["kubeconfig"] == "/runs/n1/pki/kube-proxy.kubeconfig"


# -- images -----------------------------------------------------------------------------------------


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_pause_archive_is_an_oci_layout_whose_digests_match() -> None:
    archive = nodeconfig.build_pause_image_archive(b"\x7fELF-binary", name="localhost/nimbix-burst/pause:abc")
    files = _members(archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/nimbix-burst/pause:abc"
    manifest_bytes = files[f"blobs/sha256/{entry['digest'].removeprefix('sha256:')}"]
    assert hashlib.sha256(manifest_bytes).hexdigest() == entry["digest"].removeprefix("sha256:")
    manifest = json.loads(manifest_bytes)
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}"])
    assert config["config"]["Entrypoint"] == ["/pause"]
    layer = gzip.decompress(files[f"blobs/sha256/{manifest['layers'][0]['digest'].removeprefix('sha256:')}"])
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert _members(layer) == {"pause": b"\x7fELF-binary"}


def test_pause_archive_is_deterministic() -> None:
    first = nodeconfig.build_pause_image_archive(b"x", name="n:1")
    assert first == nodeconfig.build_pause_image_archive(b"x", name="n:1")
    expected_tag = hashlib.sha256(b"x").hexdigest()[:12]
    assert nodeconfig.build_pause_image_name(b"x") == f"localhost/nimbix-burst/pause:{expected_tag}"


def test_archive_index_names_come_from_either_annotation() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:aa", "annotations": {"org.opencontainers.image.ref.name": "localhost/a:1"}},
            {"digest": "sha256:bb", "annotations": {"io.containerd.image.name": "localhost/b:2"}},
            {"digest": "sha256:cc"},
        ]
    }
    assert nodeconfig.parse_archive_index(index) == [
        nodeconfig.ArchiveImage(name="localhost/a:1", digest="sha256:aa"),
        nodeconfig.ArchiveImage(name="localhost/b:2", digest="sha256:bb"),
    ]


def test_images_present_with_the_same_digest_are_not_imported_again() -> None:
    listing = (
        "REF                TYPE                                       DIGEST      SIZE    PLATFORMS   LABELS\n"
        "localhost/a:1      application/vnd.oci.image.manifest.v1+json sha256:aa   1.0 MiB linux/amd64 -\n"
        "localhost/b:2      application/vnd.oci.image.manifest.v1+json sha256:old  1.0 MiB linux/amd64 -\n"
    )
    present = nodeconfig.parse_ctr_images(listing)
    assert present == {"localhost/a:1": "sha256:aa", "localhost/b:2": "sha256:old"}
    wanted = [
        nodeconfig.ArchiveImage(name="localhost/a:1", digest="sha256:aa"),
        nodeconfig.ArchiveImage(name="localhost/b:2", digest="sha256:new"),
        nodeconfig.ArchiveImage(name="localhost/c:3", digest="sha256:cc"),
    ]
    assert [image.name for image in nodeconfig.find_images_to_import(wanted, present)] == [
        "localhost/b:2",
        "localhost/c:3",
    ]


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("localhost/nimbix-burst/base:0.1.0", "localhost/nimbix-burst/base"),
        ("localhost:5000/x/y:tag", "localhost:5000/x/y"),
        ("localhost:5000/x/y", "localhost:5000/x/y"),
    ],
    ids=["tagged", "registry-port-and-tag", "registry-port-no-tag"],
)
def test_import_base_name_is_the_repository(name: str, base: str) -> None:
    assert nodeconfig.build_import_args(name) == ["--base-name", base]


# -- iptables ---------------------------------------------------------------------------------------

BEFORE_SAVE = """*filter
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:KUBE-OLD - [0:0]
-A INPUT -j DOCKER
COMMIT
"""
AFTER_SAVE = """*filter
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:KUBE-OLD - [0:0]
:KUBE-FIREWALL - [0:0]
:OTHER-NEW - [0:0]
-A INPUT -j DOCKER
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -m comment --comment "kube fw" -j KUBE-FIREWALL
-A KUBE-FIREWALL -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -j KUBE-SERVICES
COMMIT
"""


def test_iptables_cleanup_removes_only_new_kube_chains_and_jumps_to_them() -> None:
    before = nodeconfig.parse_iptables_chains(BEFORE_SAVE)
    assert before == {"filter": {"INPUT", "OUTPUT", "DOCKER", "KUBE-OLD"}}
    assert nodeconfig.build_iptables_cleanup(before, AFTER_SAVE) == [
        ["-t", "filter", "-D", "INPUT", "-j", "KUBE-FIREWALL"],
        ["-t", "filter", "-D", "OUTPUT", "-m", "comment", "--comment", "kube fw", "-j", "KUBE-FIREWALL"],
        ["-t", "nat", "-D", "PREROUTING", "-j", "KUBE-SERVICES"],
        ["-t", "filter", "-F", "KUBE-FIREWALL"],
        ["-t", "filter", "-X", "KUBE-FIREWALL"],
        ["-t", "nat", "-F", "KUBE-SERVICES"],
        ["-t", "nat", "-X", "KUBE-SERVICES"],
    ]


# -- host check -------------------------------------------------------------------------------------


def test_a_capable_host_has_no_problems() -> None:
    assert nodeconfig.find_host_problems(_facts(), SETTINGS) == []


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"uid": 1000}, "not root (uid 1000)"),
        ({"filesystems": "nodev\tsysfs\n\text4\n"}, "no overlay filesystem"),
        ({"cgroup_mounts": ()}, "no cgroup filesystem"),
        ({"missing_commands": ("runc",)}, "missing commands: runc"),
        ({"routes": (("10.213.0.0/16", "eth1"),)}, "overlaps the route 10.213.0.0/16 on eth1"),
        ({"bridge_exists": True}, "network device nbtest0 already exists"),
        ({"kubepods_cgroups": ("/sys/fs/cgroup/memory/kubepods",)}, "pod cgroups already exist"),
    ],
    ids=["not-root", "no-overlay", "no-cgroups", "missing-command", "subnet-overlap", "bridge-exists", "kubepods"],
)
def test_each_host_problem_is_named(overrides: dict[str, Any], fragment: str) -> None:
    problems = nodeconfig.find_host_problems(_facts(**overrides), SETTINGS)
    assert len(problems) == 1
    assert fragment in problems[0]


def test_cgroup_v2_only_hosts_are_accepted() -> None:
    facts = _facts(cgroup_mounts=(("cgroup2", "/sys/fs/cgroup"),))
    assert nodeconfig.find_host_problems(facts, SETTINGS) == []
