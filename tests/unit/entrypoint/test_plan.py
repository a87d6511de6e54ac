import hashlib
import json

import pytest

from entrypoint import plan
from entrypoint.settings import ArgvCommand, ShellCommand, parse_settings
from jarvice import labels
from jarvice.labels import PodIdentity
from jarvice.model import Machine
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)


def machine(name: str, cores: int, gpus: int, ram: int = 16, price: float = 1.0, **kw: object) -> Machine:
    return Machine(name=name, cores=cores, gpus=gpus, ram_gb=ram, price=price, **kw)  # type: ignore[arg-type]


CATALOGUE = {
    m.name: m
    for m in [
        machine("n0", 4, 0, 16, 0.35, arch="x86_64"),
        machine("n1", 8, 0, 32, 0.70, arch="x86_64", scale_max=8),
        machine("ng1", 8, 1, 64, 2.1, arch="x86_64"),
        machine("ng2", 16, 2, 128, 4.2, arch="x86_64"),
        machine("ng4", 32, 4, 256, 8.4, arch="x86_64", scale_max=8),
        machine("ng4a", 32, 4, 512, 12.8, arch="x86_64"),
        machine("np8g4", 160, 4, 512, 9.0, arch="ppc64le"),
    ]
}


@pytest.mark.parametrize(
    ("gpus", "cpus", "nodes", "arch", "expected"),
    [
        (0, 1, 1, None, "n0"),
        (0, 5, 1, None, "n1"),
        (0, 9, 1, None, "ng2"),  # no CPU-only machine has 9 cores: smallest with >= 9 cores
        (1, 1, 1, None, "ng1"),
        (1, 9, 1, None, "ng2"),
        (2, 1, 1, None, "ng2"),
        (3, 1, 1, None, "ng4"),  # ng4 and ng4a tie on GPUs/cores: less RAM wins
        (4, 33, 1, None, "np8g4"),
        (4, 1, 1, "ppc64le", "np8g4"),
        (0, 1, 4, None, "n1"),  # multi-node needs mc_scale_max >= nodes
        (4, 1, 2, None, "ng4"),
    ],
    ids=[
        "cpu-min",
        "cpu-5",
        "cpu-9",
        "gpu-1",
        "gpu-1-cpu-9",
        "gpu-2",
        "gpu-3-ram-tiebreak",
        "gpu-4-cpu-33",
        "arch",
        "nodes-4",
        "gpu-4-nodes-2",
    ],
)
def test_choose_machine(gpus: int, cpus: int, nodes: int, arch: str | None, expected: str) -> None:
    choice = plan.choose_machine(CATALOGUE, gpus=gpus, cpus=cpus, nodes=nodes, arch=arch)
    assert isinstance(choice, plan.MachineChoice), choice
    assert choice.machine == expected
    assert expected in choice.reason and "smallest of" in choice.reason


def test_choose_machine_is_deterministic_on_full_ties() -> None:
    twins = {"b": machine("b", 8, 1), "a": machine("a", 8, 1), "c": machine("c", 8, 1)}
    for _ in range(3):
        choice = plan.choose_machine(dict(reversed(list(twins.items()))), gpus=1, cpus=1)
        assert isinstance(choice, plan.MachineChoice)
        assert choice.machine == "a"


def test_price_breaks_ties_before_name() -> None:
    pair = {"a": machine("a", 8, 1, price=3.0), "z": machine("z", 8, 1, price=2.0)}
    choice = plan.choose_machine(pair, gpus=1, cpus=1)
    assert isinstance(choice, plan.MachineChoice) and choice.machine == "z"


@pytest.mark.parametrize(
    ("gpus", "cpus", "nodes", "arch", "fragment"),
    [
        (64, 1, 1, None, "64 GPU(s)"),
        (0, 1000, 1, None, "1000 core(s)"),
        (1, 1, 9, None, "9 node(s)"),
        (0, 1, 1, "arm64", "arch arm64"),
    ],
)
def test_no_machine_fits(gpus: int, cpus: int, nodes: int, arch: str | None, fragment: str) -> None:
    choice = plan.choose_machine(CATALOGUE, gpus=gpus, cpus=cpus, nodes=nodes, arch=arch)
    assert isinstance(choice, plan.NoMachineFits)
    assert fragment in choice.reason
    assert "largest available is np8g4" in choice.reason


def test_no_machine_in_empty_catalogue() -> None:
    choice = plan.choose_machine({}, gpus=0, cpus=1)
    assert isinstance(choice, plan.NoMachineFits) and "empty" in choice.reason


def test_pinned_machine() -> None:
    ok = plan.check_pinned_machine(CATALOGUE, name="ng2", gpus=1, cpus=4)
    assert isinstance(ok, plan.MachineChoice) and ok.machine == "ng2" and ok.warning is None
    small = plan.check_pinned_machine(CATALOGUE, name="n0", gpus=1, cpus=8)
    assert isinstance(small, plan.MachineChoice) and small.warning is not None
    assert "0 GPU(s) < NUM_GPUS=1" in small.warning and "4 core(s) < NUM_CPUS=8" in small.warning
    missing = plan.check_pinned_machine(CATALOGUE, name="nope", gpus=0, cpus=1)
    assert isinstance(missing, plan.NoMachineFits) and "'nope' is not in /jarvice/machines" in missing.reason


UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
# sha256("a-long-container-name")[:6], computed independently of the code under test.
LONG = "a-long-container-name"
LONG_HASH = hashlib.sha256(LONG.encode()).hexdigest()


@pytest.mark.parametrize(
    ("pod", "attempt", "expected"),
    [
        (PodIdentity(UID, "ns", "p", "h"), 1, f"k8s-{UID}-1"),
        (PodIdentity(UID, "ns", "p", "h", "trainer"), 1, f"k8s-{UID}-trainer-1"),
        (PodIdentity(UID, "ns", "p", "h", "trainer"), 2, f"k8s-{UID}-trainer-2"),
        (PodIdentity(UID, "ns", "p", "h", "w"), 123, f"k8s-{UID}-w-123"),
        # 7 characters are left for the container with a one-digit attempt ...
        (PodIdentity(UID, "ns", "p", "h", "seven-7"), 1, f"k8s-{UID}-seven-7-1"),
        # ... longer names become "~" + hash, the UID stays whole ...
        (
            PodIdentity(UID, "ns", "p", "h", "eight-88"),
            1,
            f"k8s-{UID}-~{hashlib.sha256(b'eight-88').hexdigest()[:6]}-1",
        ),
        (PodIdentity(UID, "ns", "p", "h", LONG), 1, f"k8s-{UID}-~{LONG_HASH[:6]}-1"),
        # ... and the hash gives way to longer attempt numbers.
        (PodIdentity(UID, "ns", "p", "h", LONG), 10, f"k8s-{UID}-~{LONG_HASH[:5]}-10"),
        (PodIdentity(UID, "ns", "p", "h", LONG), 9999, f"k8s-{UID}-~{LONG_HASH[:3]}-9999"),
        (PodIdentity("", "team-a", "train-0", "h", "c"), 1, "k8s-team-a/train-0-c-1"),
        (PodIdentity("", "team-a", "", "train-0-host"), 2, "k8s-train-0-host-2"),
        (PodIdentity("", "", "", ""), 1, "k8s-unknown-host-1"),
    ],
    ids=[
        "uid-no-container",
        "uid-container",
        "attempt-2",
        "attempt-3-digits",
        "container-fits-exactly",
        "container-one-too-long",
        "container-long",
        "attempt-10",
        "attempt-9999",
        "namespace-name",
        "hostname",
        "nothing",
    ],
)
def test_job_label(pod: PodIdentity, attempt: int, expected: str) -> None:
    label = labels.build_job_label(pod, attempt=attempt)
    assert label == expected
    assert len(label) <= 50


@pytest.mark.parametrize("container", ["", "a", "trainer", "seven-7", LONG, "x" * 63])
@pytest.mark.parametrize("attempt", [1, 9, 10, 99, 100, 99999])
def test_uid_labels_fit_and_parse_back(container: str, attempt: int) -> None:
    label = labels.build_job_label(PodIdentity(UID, "ns", "p", "h", container), attempt=attempt)
    assert len(label) <= 50
    assert label[4:40] == UID  # the documented fixed position of the UID
    parsed = labels.parse_job_label(label)
    assert parsed is not None
    assert (parsed.pod_uid, parsed.attempt) == (UID, attempt)
    if not container:
        assert parsed.container is None
    elif parsed.container_hashed:
        assert parsed.container == "~" + hashlib.sha256(container.encode()).hexdigest()[: len(parsed.container) - 1]
    else:
        assert parsed.container == container


def test_two_containers_of_one_pod_get_different_labels() -> None:
    a = labels.build_job_label(PodIdentity(UID, "ns", "p", "h", "gpu-worker-a"))
    b = labels.build_job_label(PodIdentity(UID, "ns", "p", "h", "gpu-worker-b"))
    assert a != b


@pytest.mark.parametrize("text", ["k8s-team-a/train-0-c-1", "hello", f"k8s-{UID}", f"k8s-{UID}-Bad_Name-1"])
def test_parse_job_label_rejects_other_text(text: str) -> None:
    assert labels.parse_job_label(text) is None


def test_long_job_label_is_shortened_deterministically() -> None:
    pod = PodIdentity("", "a-very-long-namespace-name-indeed", "and-an-even-longer-pod-name-xyz-12345", "h")
    label = labels.build_job_label(pod)
    assert len(label) == 50
    assert label.startswith("k8s-a-very-long-namespace")
    assert label == labels.build_job_label(pod)
    other = PodIdentity("", "a-very-long-namespace-name-indeed", "and-an-even-longer-pod-name-xyz-12346", "h")
    assert labels.build_job_label(other) != label


def _remote_settings(**env: str):
    base = {
        "REMOTE": "1",
        "JARVICE_USERNAME": "alice",
        "JARVICE_APIKEY": "secret-key-1",
        "APP_NAME": "app-1",
        "POD_UID": "uid-1",
    }
    return parse_settings({**base, **env}, argv=(), read_file=lambda p: "", hostname="h")


def test_build_plan_local() -> None:
    settings = parse_settings({"APP_COMMAND_ARGS": "echo hi", "NUM_GPUS": "1"}, argv=(), read_file=str, hostname="h")
    built = plan.build_plan(settings)
    assert built == plan.LocalPlan(argv=("bash", "-c", "echo hi"), num_gpus=1)
    argv_plan = plan.build_plan(parse_settings({}, argv=("python", "x.py"), read_file=str, hostname="h"))
    assert argv_plan == plan.LocalPlan(argv=("python", "x.py"), num_gpus=None)


def test_build_plan_remote_and_submit_body() -> None:
    command = 'echo "quoted \\"x\\"" \'single\' \\back $HOME\nprintf "ünï ✓\\n"'
    built = plan.build_plan(
        _remote_settings(
            APP_COMMAND_ARGS=command,
            NUM_GPUS="2",
            NUM_CPUS="1500m",
            JARVICE_VAULT="ephemeral",
            JARVICE_WALLTIME="1:00:00",
        )
    )
    assert isinstance(built, plan.RemotePlan)
    assert (built.num_gpus, built.num_cpus, built.job_label) == (2, 2, "k8s-uid-1-1")
    body = plan.build_submit_body(built, machine="ng2")
    assert body == {
        "app": "app-1",
        "staging": False,
        "checkedout": False,
        "application": {
            "command": "run",
            "parameters": {"command": command},
            "geometry": "1280x720",
            "walltime": "1:00:00",
        },
        "machine": {"type": "ng2", "nodes": 1},
        "job_label": "k8s-uid-1-1",
        "vault": {"name": "ephemeral", "readonly": False, "force": False},
    }
    assert "user" not in body  # credentials are added by the adapter only
    # The command survives a JSON round trip exactly.
    assert json.loads(json.dumps(body))["application"]["parameters"]["command"] == command


def test_remote_argv_command_is_shell_quoted() -> None:
    settings = parse_settings(
        {"REMOTE": "1", "JARVICE_USERNAME": "a", "JARVICE_APIKEY": "kkkk", "APP_NAME": "x"},
        argv=("python", "-c", "print('a b')"),
        read_file=str,
        hostname="h",
    )
    built = plan.build_plan(settings)
    assert isinstance(built, plan.RemotePlan)
    assert built.shell_command == "python -c 'print('\"'\"'a b'\"'\"')'"
    assert (built.num_gpus, built.num_cpus) == (0, 1)


def test_command_helpers() -> None:
    assert plan.build_shell_command(ShellCommand("a b")) == "a b"
    assert plan.build_shell_command(ArgvCommand(("echo", "a b", "$X"))) == "echo 'a b' '$X'"
    assert plan.build_local_argv(ShellCommand("exit 3")) == ("bash", "-c", "exit 3")


@pytest.mark.parametrize(
    ("smi", "env", "expected"),
    [
        ("GPU 0: Tesla T4 (UUID: GPU-1)\nGPU 1: Tesla T4 (UUID: GPU-2)\n", {}, 2),
        ("", {"NVIDIA_VISIBLE_DEVICES": "0,1"}, 0),  # nvidia-smi wins
        (None, {"NVIDIA_VISIBLE_DEVICES": "0,1,2"}, 3),
        (None, {"NVIDIA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb"}, 2),
        (None, {"NVIDIA_VISIBLE_DEVICES": "all"}, None),
        (None, {"NVIDIA_VISIBLE_DEVICES": "none"}, 0),
        (None, {"NVIDIA_VISIBLE_DEVICES": "void"}, 0),
        (None, {"CUDA_VISIBLE_DEVICES": ""}, 0),
        (None, {"CUDA_VISIBLE_DEVICES": "-1"}, 0),
        (None, {"CUDA_VISIBLE_DEVICES": "1"}, 1),
        (None, {}, 0),
    ],
    ids=[
        "smi-2",
        "smi-wins",
        "nvd-3",
        "nvd-uuids",
        "nvd-all",
        "nvd-none",
        "nvd-void",
        "cuda-empty",
        "cuda-neg",
        "cuda-1",
        "none",
    ],
)
def test_count_visible_gpus(smi: str | None, env: dict[str, str], expected: int | None) -> None:
    assert plan.count_visible_gpus(nvidia_smi_output=smi, env=env) == expected


@pytest.mark.parametrize(
    ("requested", "visible", "warns"),
    [(None, 0, False), (0, 0, False), (1, 1, False), (2, 1, True), (1, 0, True), (4, None, False)],
)
def test_gpu_warning(requested: int | None, visible: int | None, warns: bool) -> None:
    assert (plan.build_gpu_warning(requested=requested, visible=visible) is not None) == warns


def test_every_submit_body_has_a_walltime_and_the_plan_the_counted_gpus() -> None:
    built = plan.build_plan(_remote_settings(APP_COMMAND_ARGS="true", NIMBIX_BURST_COUNTED_GPUS="2"))
    assert isinstance(built, plan.RemotePlan)
    assert built.counted_gpus == 2
    assert plan.build_submit_body(built, machine="n0")["application"]["walltime"] == "24:00:00"
