"""The account key stays with the add-on (docs/money-safety.md#who-holds-the-key), on the installed
add-on as `make dev-up` has it: the gateway holds the emulator's account, a test namespace holds no
Secret at all, and burst pods reach JARVICE only through the gateway with their projected token.

A namespace user can run any container in a burst pod (the image's ENTRYPOINT is theirs to replace):
the tests below do exactly that, and call the gateway with the pod's own token, as a user attacking
the promise would: asking for another size than counted, from a copy without the label, for another
pod's job, past the namespace's budget.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devplatform import demo, demo_data
from devplatform.cluster import addons, controlplane, install, node
from jarvice import contract
from tests.support.fault_matrix import FaultMatrix, Row
from tests.support.installed_controller import (
    ORPHAN_INTERVAL_SECONDS,
    annotations_of,
    app_container,
    pod_body,
    wait_admitted_as,
)
from tests.support.large_output import COMMAND, assert_streamed_whole_within_bounds, stream

WAIT_SECONDS = 180.0

# A pod's own client: the user's code in place of the runner, with what the pod holds (its projected
# token, the webhook's env). Prints one line `ANSWER <status> <body>` per call.
CLIENT = r"""
import json, os, ssl, sys, urllib.error, urllib.request
token_file = os.environ.get("TOKEN_FILE", "/var/run/secrets/nimbix-burst-gateway/token")
token = open(token_file).read().strip()
# What the webhook wrote, or the user's own copies of it (a copy of a burst pod loses the webhook's).
def own(name, product):
    return os.environ.get(name) or os.environ[product]
url = own("MY_GATEWAY", "JARVICE_API_URL")
ctx = ssl.create_default_context(cadata=own("MY_CA", "NIMBIX_BURST_GATEWAY_CA"))

def call(path, body=None, bearer=False):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if bearer:
        headers["Authorization"] = "Bearer " + token
    request = urllib.request.Request(url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=30) as response:
            print("ANSWER", response.status, response.read().decode(), flush=True)
    except urllib.error.HTTPError as error:
        print("ANSWER", error.code, error.read().decode(), flush=True)

def submit(attempt, machine, nodes, command):
    label = "k8s-%s.%s-%s-%d" % (
        own("MY_CLUSTER", "NIMBIX_BURST_CLUSTER"), own("MY_UID", "POD_UID"),
        own("MY_CONTAINER", "NIMBIX_BURST_CONTAINER"), attempt)
    call("/jarvice/submit", {
        "app": own("MY_APP", "APP_NAME"), "staging": False, "checkedout": False,
        "application": {"command": "run", "parameters": {"command": command}, "walltime": "99:00:00"},
        "machine": {"type": machine, "nodes": nodes}, "job_label": label,
        "user": {"username": "me", "apikey": token}})

for step in json.loads(os.environ["STEPS"]):
    if step[0] == "submit":
        submit(*step[1:])
    elif step[0] == "bearer":
        call(step[1], bearer=True)
    else:
        call(step[1] + ("&" if "?" in step[1] else "?") + "apikey=" + token)
"""


def client_pod(name: str, node_emulator: addons.EmulatorProcess, steps: list[Any], *, gpus: int = 1) -> dict[str, Any]:
    container = app_container(node_emulator, "unused", gpus=gpus)
    container["command"] = ["python3", "-c", CLIENT]
    container["env"] = [*container["env"], {"name": "STEPS", "value": json.dumps(steps)}]
    return pod_body(name, container, gated=False)


def answers(plane: controlplane.ControlPlane, namespace: str, name: str) -> list[tuple[int, str]]:
    logs = plane.kubectl("-n", namespace, "logs", name).stdout
    found = []
    for line in logs.splitlines():
        if line.startswith("ANSWER "):
            _, status, body = line.split(" ", 2)
            found.append((int(status), body))
    return found


@pytest.fixture(scope="module")
def node_emulator(
    control_plane: controlplane.ControlPlane, real_node: node.RealNode
) -> Iterator[addons.EmulatorProcess]:
    """This module's emulator serves its vault too, as `make dev-up`'s does (jobs in private roots, as
    root): the gateway's account names it, so pods here stage through the gateway."""
    emulator = demo.start_emulator_for_node(control_plane.run_dir / "test_gateway-emulator", real_node, vaults=True)
    try:
        yield emulator
    finally:
        addons.stop_jarvice_emulator(emulator)


def finished_pod(plane: controlplane.ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        pod = demo.read_pod(plane, namespace, name)
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    finished: dict[str, Any] = demo.wait_for(done, what=f"pod {name} finished", timeout=WAIT_SECONDS)
    return finished


@pytest.fixture
def bare_namespace(
    installed_addon: install.Installed,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    namespace: str,
    gpus_gone: Callable[[], None],
) -> str:
    """A namespace with no Secret at all, on a cluster whose real node has no GPUs free."""
    gpus_gone()
    probe = pod_body("seen-probe", app_container(node_emulator, "echo probe", gpus=1), gated=False)
    wait_admitted_as(control_plane, namespace, probe, decision="remote", what="the real node without GPUs")
    return namespace


def test_a_burst_pod_runs_through_the_gateway_and_carries_no_key(
    bare_namespace: str, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess
) -> None:
    ns = bare_namespace
    body = pod_body("burst", app_container(node_emulator, "echo remote output; exit 3", gpus=1), gated=False)
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(body))
    pod = finished_pod(control_plane, ns, "burst")
    assert annotations_of(pod)[contract.ANNOTATION_DECISION] == "remote"
    logs = control_plane.kubectl("-n", ns, "logs", "burst").stdout
    assert "remote output" in logs and "unencrypted" not in logs, logs  # no warning that the key travels in clear
    assert demo.read_exit_code(pod) == 3, pod["status"]
    (job,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"])
    assert job["status"] == "COMPLETED WITH ERROR" and job["exitcode"] == 3, job  # a non-zero exit
    key = node_emulator.runner_env()["JARVICE_APIKEY"]
    assert key not in json.dumps(pod)
    secrets = json.loads(control_plane.kubectl("-n", ns, "get", "secrets", "-o", "json").stdout)["items"]
    assert secrets == [], [s["metadata"]["name"] for s in secrets]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["JARVICE_API_URL"]["value"] == "https://10.0.0.53"
    assert not env["JARVICE_APIKEY"].get("value") and "valueFrom" not in env["JARVICE_APIKEY"]  # blanked
    assert not [v for v in pod["spec"]["volumes"] if "secret" in v], pod["spec"]["volumes"]


def test_a_large_output_streams_through_the_gateway_within_the_runners_memory(
    bare_namespace: str, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess
) -> None:
    """The runner's memory bound for a large output holds when every tail call goes through the gateway."""
    ns = bare_namespace
    container = app_container(node_emulator, COMMAND, gpus=1)
    # A training container with CPU and memory limits: the webhook cuts them to the runner's footprint.
    container["resources"]["limits"].update({"cpu": "2", "memory": "4Gi"})
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(pod_body("big", container, gated=False)))
    streamed = stream(control_plane, ns, "big")
    print("\nthrough the gateway: " + streamed.summary())
    assert annotations_of(streamed.pod)[contract.ANNOTATION_DECISION] == "remote"
    assert_streamed_whole_within_bounds(streamed)


def test_a_pod_stages_through_the_gateway_with_nothing_but_its_stage_annotations(
    bare_namespace: str,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
) -> None:
    """docs/data.md's gateway example: the pod names what to stage and nothing else (no vault address,
    host key or credentials); its input reaches the remote job and the job's output lands on its volume."""
    ns = bare_namespace
    host_dir = control_plane.run_dir / "pv" / ns  # where the other staging tests keep their volumes
    (host_dir / "in").mkdir(parents=True)
    (host_dir / "in" / "input.txt").write_text("staged input\n")
    for path in (host_dir, host_dir / "in"):
        path.chmod(0o777)  # the runner runs as uid 10001
    pv, pvc = demo_data.build_host_volume(ns, host_dir)
    try:
        listed = {"apiVersion": "v1", "kind": "List", "items": [pv, pvc]}
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(listed))
        command = "cat /workspace/in/input.txt; mkdir -p /workspace/out; echo trained > /workspace/out/model.txt"
        container = app_container(node_emulator, command, gpus=1)
        container["volumeMounts"] = [{"name": "data", "mountPath": "/workspace"}]
        body = pod_body("staged", container, gated=False)
        body["metadata"]["annotations"] = {
            contract.ANNOTATION_STAGE_IN: "/workspace/in",
            contract.ANNOTATION_STAGE_OUT: "/workspace/out",
        }
        body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "training-data"}}]
        control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(body))
        pod = finished_pod(control_plane, ns, "staged")
        logs = control_plane.kubectl("-n", ns, "logs", "staged").stdout
        assert annotations_of(pod)[contract.ANNOTATION_DECISION] == "remote"
        assert demo.read_exit_code(pod) == 0, logs
        assert "staged input" in logs, logs  # the remote job read the staged input
        assert (host_dir / "out" / "model.txt").read_text() == "trained\n"  # and its output came back
        env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}
        assert env[contract.ENV_VAULT_SFTP] == f"{install.GATEWAY_SERVICE_IP}:2222", env
        assert env[contract.ENV_VAULT_HOST_KEY].startswith("ssh-ed25519 "), env
        secrets = json.loads(control_plane.kubectl("-n", ns, "get", "secrets", "-o", "json").stdout)["items"]
        assert secrets == [], [s["metadata"]["name"] for s in secrets]
    finally:
        control_plane.kubectl("-n", ns, "delete", "pod", "staged", "--ignore-not-found", "--wait=false")
        control_plane.kubectl("-n", ns, "delete", "pvc", "training-data", "--ignore-not-found", "--wait=false")
        control_plane.kubectl("delete", "pv", pv["metadata"]["name"], "--ignore-not-found", "--wait=false")


def test_a_pods_own_client_gets_the_size_it_was_counted_for(
    bare_namespace: str,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    fault_matrix: FaultMatrix,
) -> None:
    """The review's case: a 1-GPU burst pod asking for a 0-GPU machine on 32 nodes, and 99 hours."""
    ns = bare_namespace
    control_plane.kubectl(
        "-n",
        ns,
        "create",
        "-f",
        "-",
        input=json.dumps(client_pod("asks-more", node_emulator, [["submit", 1, "n0", 32, "echo hi"]])),
    )
    pod = finished_pod(control_plane, ns, "asks-more")
    ((status, body),) = answers(control_plane, ns, "asks-more")
    assert status == 200, body
    (job,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"])
    submitted = demo.fetch_emulator(node_emulator.url, f"/_emulator/submissions?job_label={job['job_label']}")
    (sent,) = submitted["submissions"]
    assert sent["body"]["machine"] == {"type": "ng1", "nodes": 1}, sent  # the cheapest 1-GPU machine
    assert sent["body"]["application"]["walltime"] == "24:00:00", sent  # the add-on's default walltime
    machine_gpus = {"ng1": 1}.get(sent["body"]["machine"]["type"], 99)  # anything else would be a miss
    held = machine_gpus * sent["body"]["machine"]["nodes"]
    fault_matrix.record(
        Row(
            "a burst pod's own client asking for 32 nodes of a 0-GPU machine",
            submitted=len(demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"])),
            completed=int(job["status"] == "COMPLETED"),
            billing_late=0,
            over_budget=max(0, held - 1),  # the pod was counted 1 GPU
        )
    )


def test_a_copy_without_the_label_gets_no_job(
    bare_namespace: str,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    fault_matrix: FaultMatrix,
) -> None:
    """A burst pod's stored spec, created again without `task-type` and with a token of the gateway's
    audience the user projected themselves: the gateway refuses it, and no job exists."""
    ns = bare_namespace
    control_plane.kubectl(
        "-n",
        ns,
        "create",
        "-f",
        "-",
        input=json.dumps(client_pod("original", node_emulator, [["get", "/jarvice/machines"]])),
    )
    original = finished_pod(control_plane, ns, "original")
    spec: dict[str, Any] = {k: v for k, v in original["spec"].items() if k != "nodeName"}
    copy = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "copy"}, "spec": spec}  # no label: no webhook
    (container,) = spec["containers"]
    written = {e["name"]: e.get("value") for e in container["env"]}
    # The webhook removes its own marks from a copy: the user keeps what they need under their own names.
    mine = {
        "MY_GATEWAY": written["JARVICE_API_URL"],
        "MY_CA": written[contract.ENV_GATEWAY_CA],
        "MY_CLUSTER": written[contract.ENV_CLUSTER],
        "MY_CONTAINER": written[contract.ENV_CONTAINER_NAME],
        "MY_APP": written["APP_NAME"],
        "STEPS": json.dumps([["submit", 1, "ng1", 1, "echo x"]]),
    }
    container["env"] = [
        *container["env"],
        *({"name": k, "value": v} for k, v in mine.items()),
        {"name": "MY_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(copy))
    pod = finished_pod(control_plane, ns, "copy")
    ((status, body),) = answers(control_plane, ns, "copy")
    assert status == 403 and "task-type: Nimbix label" in body, body
    assert demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"]) == []
    fault_matrix.record(
        Row(
            "a label-less copy of a burst pod submitting with a token it projected",
            submitted=len(demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"])),
            completed=0,
            billing_late=0,
        )
    )


def test_a_pod_sees_only_its_own_jobs_and_never_the_key(
    bare_namespace: str, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess
) -> None:
    ns = bare_namespace
    control_plane.kubectl(
        "-n",
        ns,
        "create",
        "-f",
        "-",
        input=json.dumps(client_pod("first", node_emulator, [["submit", 1, "ng1", 1, "sleep 1"]])),
    )
    first = finished_pod(control_plane, ns, "first")
    (job,) = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=first["metadata"]["uid"])
    steps = [
        ["get", "/jarvice/jobs?completed=true"],
        ["get", f"/jarvice/status?number={job['number']}"],
        ["get", f"/jarvice/terminate?number={job['number']}"],
    ]
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(client_pod("second", node_emulator, steps)))
    finished_pod(control_plane, ns, "second")
    (listed, status, terminate) = answers(control_plane, ns, "second")
    assert listed[0] == 200 and json.loads(listed[1]) == {}, listed  # the other pod's job is not listed
    assert status[0] == 404 and terminate[0] == 404, (status, terminate)
    key = node_emulator.runner_env()["JARVICE_APIKEY"]
    assert key not in control_plane.kubectl("-n", ns, "logs", "second").stdout


def test_the_namespaces_budget_is_checked_where_the_tenant_cannot_reach(
    bare_namespace: str,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    fault_matrix: FaultMatrix,
) -> None:
    """A budget of 1 GPU: the pod's own client submits a second attempt while its first job runs."""
    ns = bare_namespace
    control_plane.kubectl("annotate", "namespace", ns, "nimbix-burst.io/max-remote-gpus=1")
    steps = [["submit", 1, "ng1", 1, "sleep 20"], ["submit", 2, "ng1", 1, "sleep 20"]]
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(client_pod("twice", node_emulator, steps)))
    pod = finished_pod(control_plane, ns, "twice")
    (first, second) = answers(control_plane, ns, "twice")
    assert first[0] == 200, first
    assert second[0] == 403 and "burst budget is 1 GPU(s); its jobs hold 1, this one needs 1" in second[1], second
    jobs = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=pod["metadata"]["uid"])
    assert [j["job_label"].rsplit("-", 1)[-1] for j in jobs] == ["1"], jobs
    fault_matrix.record(
        Row(
            "a burst pod's own client submitting a second job past a 1-GPU budget",
            submitted=len(jobs),
            completed=0,
            billing_late=0,
            over_budget=max(0, len(jobs) - 1),  # one 1-GPU job per submit (ng1), a budget of 1
        )
    )


def _submit_with_the_account_key(emulator: addons.EmulatorProcess, *, label: str, machine: str) -> int:
    """What whoever holds the account's key can do around the product: submit on the account directly."""
    env = emulator.runner_env()
    body = {
        "app": env["APP_NAME"],
        "staging": False,
        "checkedout": False,
        "application": {"command": env.get("APP_COMMAND", "run"), "parameters": {"command": "sleep 600"}},
        "machine": {"type": machine, "nodes": 1},
        "job_label": label,
        "user": {"username": env["JARVICE_USERNAME"], "apikey": env["JARVICE_APIKEY"]},
    }
    request = urllib.request.Request(
        env["JARVICE_API_URL"].rstrip("/") + "/jarvice/submit",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as response:
        return int(json.loads(response.read())["number"])


def test_a_job_submitted_around_the_gateway_is_stopped_within_two_rounds(
    controller: None,
    bare_namespace: str,
    control_plane: controlplane.ControlPlane,
    node_emulator: addons.EmulatorProcess,
    fault_matrix: FaultMatrix,
) -> None:
    """A 1-GPU burst pod runs through the gateway; with the account's key, a 4-GPU job is submitted under
    the label of that pod's next attempt (the gateway counted none). The controller stops it within two
    of its rounds, with an Event on the pod; the pod's own job runs on."""
    ns = bare_namespace
    body = pod_body("counted", app_container(node_emulator, "sleep 300", gpus=1), gated=False)
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(body))
    pod = demo.read_pod(control_plane, ns, "counted")
    uid = pod["metadata"]["uid"]

    def own_job() -> dict[str, Any] | None:
        jobs = demo.fetch_emulator_jobs(node_emulator.url, pod_uid=uid)
        return jobs[0] if len(jobs) == 1 and jobs[0]["status"] == "PROCESSING STARTING" else None

    counted_job: dict[str, Any] = demo.wait_for(own_job, what="the pod's own job running", timeout=WAIT_SECONDS)
    around = counted_job["job_label"].rsplit("-", 1)[0] + "-2"
    number = _submit_with_the_account_key(node_emulator, label=around, machine="ng4")
    submitted_at = time.monotonic()

    def state(job_number: int) -> str:
        (job,) = [
            j for j in demo.fetch_emulator(node_emulator.url, "/_emulator/jobs") if int(j["number"]) == job_number
        ]
        return str(job["status"])

    # Two rounds, and the slack of one more for a round that began just before the submit.
    bound = 3 * ORPHAN_INTERVAL_SECONDS + 20
    demo.wait_for(
        lambda: state(number) == "TERMINATED", what="the job submitted around the gateway stopped", timeout=bound + 60
    )
    took = time.monotonic() - submitted_at

    def event() -> dict[str, Any] | None:
        listed = json.loads(
            control_plane.kubectl(
                "-n", ns, "get", "events", "--field-selector", "reason=NimbixUnaccountedJobStopped", "-o", "json"
            ).stdout
        )["items"]
        return listed[0] if listed else None

    found: dict[str, Any] = demo.wait_for(event, what="the stop's Event", timeout=30)
    assert found["involvedObject"]["uid"] == uid, found
    assert f"JARVICE job {number} (ng4 x 1" in found["message"] and "not-decided" in found["message"], found
    assert state(int(counted_job["number"])) == "PROCESSING STARTING"  # what was counted runs on
    fault_matrix.record(
        Row(
            "a 4-GPU job submitted with the account's key around the gateway, under a burst pod's next label",
            submitted=1,
            completed=0,
            billing_late=int(took > bound),
            others_stopped=int(state(int(counted_job["number"])) != "PROCESSING STARTING"),
            note=f"stopped {took:.0f}s after the submit (controller rounds every {ORPHAN_INTERVAL_SECONDS}s)",
        )
    )
    control_plane.kubectl("-n", ns, "delete", "pod", "counted", "--wait=false")


def test_only_the_controller_may_list_and_stop_the_accounts_jobs(
    bare_namespace: str, control_plane: controlplane.ControlPlane, node_emulator: addons.EmulatorProcess
) -> None:
    """A user's pod projects a token of the controller's audience itself: the API server vouches for it,
    as the namespace's ServiceAccount, and the gateway refuses it (403); with no token, 401."""
    ns = bare_namespace
    body = client_pod(
        "not-the-controller", node_emulator, [["bearer", "/controller/jobs"], ["get", "/controller/jobs"]]
    )
    spec = body["spec"]
    spec["volumes"] = [
        *spec.get("volumes", []),
        {
            "name": "mine",
            "projected": {
                "sources": [{"serviceAccountToken": {"audience": "nimbix-burst-gateway-controller", "path": "token"}}]
            },
        },
    ]
    (container,) = spec["containers"]
    container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": "mine", "mountPath": "/mine"}]
    container["env"] = [*container["env"], {"name": "TOKEN_FILE", "value": "/mine/token"}]
    control_plane.kubectl("-n", ns, "create", "-f", "-", input=json.dumps(body))
    finished_pod(control_plane, ns, "not-the-controller")
    (with_token, without) = answers(control_plane, ns, "not-the-controller")
    assert with_token[0] == 403 and "only the controller" in with_token[1], with_token
    assert without[0] == 401, without
