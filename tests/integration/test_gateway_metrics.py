"""The gateway's /metrics, through its real app and a real JARVICE emulator: a refused call is counted
by route and reason, and a JARVICE call's time is observed by endpoint."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import kubernetes
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devplatform.emulator.config import EmulatorConfig
from devplatform.emulator.harness import EmulatorThread
from gateway.accounts import Account, Accounts
from gateway.callers import CallerCacheTiming, Callers
from gateway.kube import KubeAdapter
from gateway.metrics import GatewayMetrics
from gateway.oversight import Oversight, controller_user
from gateway.server import GatewayParts, create_app
from gateway.submits import Submits, SubmitTiming
from gateway.upstream import Upstream
from jarvice.redaction import Secret

USER, KEY = "alice", "alice-key-0123456789"


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorThread]:
    with EmulatorThread(EmulatorConfig(users={USER: KEY}, apps={"app": frozenset({"run"})})) as running:
        yield running


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_refusals_and_jarvice_calls_are_measured(aiohttp_client: Any, emulator: EmulatorThread) -> None:
    account = Account(name="shared", username=USER, apikey=Secret(KEY), url=emulator.url, namespaces=("*",))
    metrics = GatewayMetrics()
    # No API server is reached: every call below is refused before a token would be reviewed.
    kube = KubeAdapter(kubernetes.client.ApiClient(), namespace="nimbix-burst")
    async with aiohttp.ClientSession() as session:
        upstream = Upstream(session, metrics)
        submits = Submits(
            kube, upstream, clock=time.monotonic, wall_clock=time.time, timing=SubmitTiming(), metrics=metrics
        )
        parts = GatewayParts(
            accounts=Accounts((account,)),
            callers=Callers(kube, audience="nimbix-burst-gateway", clock=time.monotonic, timing=CallerCacheTiming()),
            submits=submits,
            upstream=upstream,
            metrics=metrics,
        )
        oversight = Oversight(
            kube=kube,
            upstream=upstream,
            submits=submits,
            accounts=parts.accounts,
            audience="nimbix-burst-gateway-controller",
            user=controller_user("nimbix-burst", "nimbix-burst-controller"),
        )
        client = await aiohttp_client(create_app(parts, oversight))
        assert (await client.post("/jarvice/submit", json={"job_label": "x"})).status == 401
        assert (await client.get("/controller/jobs")).status == 401
        await submits.catalogue(account)  # one JARVICE call: /jarvice/machines
        response = await client.get("/metrics")
        assert response.status == 200
        samples = _samples(await response.text())
    refused = "nimbix_burst_gateway_refusals_total"
    assert samples[(refused, (("reason", "not-authenticated"), ("route", "submit")))] == 1
    assert samples[(refused, (("reason", "not-authenticated"), ("route", "controller")))] == 1
    assert samples[(refused, (("reason", "ledger"), ("route", "submit")))] == 0
    assert samples[("nimbix_burst_gateway_upstream_seconds_count", (("endpoint", "machines"),))] == 1
    assert samples[("nimbix_burst_gateway_submits_total", (("answer", "answered"),))] == 0
    assert samples[("nimbix_burst_gateway_ledger_conflicts_total", ())] == 0
