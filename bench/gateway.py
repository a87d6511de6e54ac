"""What the JARVICE gateway adds to a submit, measured side by side with the runner's own client.

    python -m bench.gateway [--rounds 7] [--submits 10]

A real control plane (no node: the pods stay Pending), the real webhook registered with the gateway's
URL (it decides each labelled GPU pod remote), the gateway on loopback, the JARVICE emulator on
loopback. Each round submits `--submits` jobs directly to the emulator with the account's key, and
as many through the gateway with a pod's projected-style token (`kubectl create token
--bound-object-kind Pod`), one after the other, in an order that alternates by round; every job is
terminated after its round. Reported: per round, the p50 and p95 of each and their difference, then
the median of the rounds' differences with their spread (min..max). Every server is started and
stopped by PID. Prints one JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from bench.stats import percentile
from devplatform import demo
from devplatform.cluster import addons, controlplane
from devplatform.cluster.pki import make_ca
from gateway.settings import DEFAULT_AUDIENCE
from jarvice import contract
from jarvice.client import JarviceClient, RetryPolicy
from jarvice.labels import PodIdentity, build_job_label
from jarvice.model import SubmitBody
from jarvice.redaction import Secret

NAMESPACE, ADDON_NAMESPACE = "bench-gateway", "nimbix-burst"


def log(message: str) -> None:
    print(f"[bench.gateway] {message}", file=sys.stderr, flush=True)


def _client(url: str, *, username: str, key: str, session: requests.Session) -> JarviceClient:
    return JarviceClient(
        base_url=url,
        username=username,
        apikey=Secret(key),
        session=session,
        connect_timeout=5,
        read_timeout=30,
        retry=RetryPolicy(base_seconds=0.1, cap_seconds=0.5, outage_seconds=5),
        sleep=time.sleep,
        clock=time.monotonic,
        rng=random.Random(1),
    )


def _burst_pod(plane: controlplane.ControlPlane) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bench", "labels": {contract.LABEL_TASK_TYPE: contract.LABEL_TASK_TYPE_VALUE}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "trainer", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    out = plane.kubectl("-n", NAMESPACE, "create", "-o", "json", "-f", "-", input=json.dumps(body)).stdout
    pod: dict[str, Any] = json.loads(out)
    if pod["metadata"]["annotations"].get(contract.ANNOTATION_DECISION) != "remote":
        raise RuntimeError(f"the webhook did not decide the bench pod remote: {pod['metadata']}")
    return pod


def _body(pod: dict[str, Any], app: str, attempt: int) -> SubmitBody:
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    identity = PodIdentity(
        uid=pod["metadata"]["uid"],
        namespace=NAMESPACE,
        name="bench",
        hostname="h",
        container="trainer",
        cluster=str(env[contract.ENV_CLUSTER]),
    )
    return {
        "app": app,
        "staging": False,
        "checkedout": False,
        "application": {"command": "run", "parameters": {"command": "true"}, "walltime": "01:00:00"},
        "machine": {"type": "ng1", "nodes": 1},
        "job_label": build_job_label(identity, attempt=attempt),
    }


def _timed_submits(client: JarviceClient, bodies: list[SubmitBody]) -> tuple[list[float], list[int]]:
    seconds, numbers = [], []
    for body in bodies:
        began = time.perf_counter()
        numbers.append(client.submit(body).number)
        seconds.append(time.perf_counter() - began)
    return seconds, numbers


def _p(values: list[float], fraction: float) -> float:
    return round(percentile(sorted(values), fraction) * 1000, 2)


def measure(*, rounds: int, submits: int, run_dir: Path) -> dict[str, Any]:
    plane = controlplane.ControlPlane(
        run_dir / "controlplane", bin_dir=controlplane.ensure_binaries(), controller_manager=False
    )
    plane.start()
    emulator = addons.start_jarvice_emulator(run_dir / "emulator")
    gateway: addons.WebhookProcess | None = None
    try:
        env = emulator.runner_env()
        plane.kubectl("create", "namespace", ADDON_NAMESPACE)
        plane.kubectl("create", "namespace", NAMESPACE)
        plane.kubectl("-n", NAMESPACE, "create", "serviceaccount", "default", check=False)
        ca = make_ca("bench-gateway-ca")
        gateway = addons.start_gateway(
            run_dir / "gateway",
            kubeconfig=plane.kubeconfig_path,
            accounts_json=demo.build_gateway_accounts_file(emulator),
            namespace=ADDON_NAMESPACE,
            ca=ca,
        )
        ca_file = run_dir / "gateway-ca.crt"
        ca_file.write_bytes(ca.cert_pem)
        args = ["--gateway-url", gateway.url, "--gateway-ca-file", str(ca_file)]
        with addons.registered_webhook(plane, run_dir / "webhook", name_suffix="-bench", args=args):
            pod = _burst_pod(plane)
        meta = pod["metadata"]
        token = plane.kubectl(
            "-n", NAMESPACE, "create", "token", "default", f"--audience={DEFAULT_AUDIENCE}", "--duration=2h",
            "--bound-object-kind=Pod", f"--bound-object-name={meta['name']}", f"--bound-object-uid={meta['uid']}",
        ).stdout.strip()  # fmt: skip
        attempt = 0

        def bodies() -> list[SubmitBody]:
            nonlocal attempt
            made = [_body(pod, env["APP_NAME"], attempt + i + 1) for i in range(submits)]
            attempt += submits
            return made

        results: list[dict[str, Any]] = []
        with requests.Session() as direct_session, requests.Session() as gateway_session:
            gateway_session.verify = str(ca_file)
            gateway_session.trust_env = False  # as the runner does: REQUESTS_CA_BUNDLE would override the CA
            direct = _client(
                env["JARVICE_API_URL"],
                username=env["JARVICE_USERNAME"],
                key=env["JARVICE_APIKEY"],
                session=direct_session,
            )
            through = _client(gateway.url, username="pod", key=token, session=gateway_session)
            _timed_submits(through, bodies())  # warm: TokenReview cached, connections open, catalogue read
            for number in range(rounds):
                order: list[tuple[str, JarviceClient]] = [("direct", direct), ("gateway", through)]
                if number % 2:
                    order.reverse()
                timings: dict[str, list[float]] = {}
                for name, client in order:
                    timings[name], numbers = _timed_submits(client, bodies())
                    for job in numbers:
                        direct.terminate(job)
                row: dict[str, Any] = {
                    name: {"p50_ms": _p(values, 0.5), "p95_ms": _p(values, 0.95)} for name, values in timings.items()
                }
                row["added_p95_ms"] = round(row["gateway"]["p95_ms"] - row["direct"]["p95_ms"], 2)
                row["added_p50_ms"] = round(row["gateway"]["p50_ms"] - row["direct"]["p50_ms"], 2)
                results.append(row)
                log(f"round {number + 1}/{rounds}: {row}")
        added = [r["added_p95_ms"] for r in results]
        return {
            "rounds": results,
            "submits_per_round": submits,
            "added_p95_ms_median": round(statistics.median(added), 2),
            "added_p95_ms_spread": [min(added), max(added)],
            "added_p50_ms_median": round(statistics.median(r["added_p50_ms"] for r in results), 2),
        }
    finally:
        if gateway is not None:
            addons.stop_webhook(gateway)
        addons.stop_jarvice_emulator(emulator)
        plane.stop()


def main(argv: list[str] | None = None, *, run: Callable[..., dict[str, Any]] = measure) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--submits", type=int, default=10)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as scratch:
        result = run(rounds=options.rounds, submits=options.submits, run_dir=Path(scratch))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
