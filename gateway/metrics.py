"""The gateway's Prometheus metrics, on a registry owned by the app (no global default registry).

Served at /metrics on the gateway's HTTPS port, scraped like the webhook's (job `nimbix-burst-gateway`)."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

# A JARVICE call's round trip: tens of milliseconds on a near API, seconds on a slow one.
UPSTREAM_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Why a call was refused: the token proves no pod (401), the pod may not (403: not decided, outside its
# terms, refused by the ledger's check: budget, caps, one job per attempt; not the controller), or JARVICE
# could not be reached (502).
REFUSALS: Final = ("not-authenticated", "not-decided", "not-allowed", "ledger", "not-the-controller", "upstream")


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.submits = Counter(
            "nimbix_burst_gateway_submits",
            "Submits forwarded to JARVICE, by JARVICE's answer (answered: 2xx, rejected: 4xx, failed: 5xx)",
            ["answer"],
            registry=r,
        )
        self.refusals = Counter(
            "nimbix_burst_gateway_refusals",
            "Calls the gateway refused, by route (submit, jobs, controller, other) and reason (not-authenticated,"
            " not-decided, not-allowed, over-budget, not-the-controller, upstream)",
            ["route", "reason"],
            registry=r,
        )
        self.upstream_seconds = Histogram(
            "nimbix_burst_gateway_upstream_seconds",
            "JARVICE calls' time to the answer's headers, by endpoint (submit, jobs, machines, terminate, other)",
            ["endpoint"],
            buckets=UPSTREAM_BUCKETS,
            registry=r,
        )
        self.ledger_conflicts = Counter(
            "nimbix_burst_gateway_ledger_conflicts",
            "Ledger writes refused because another replica wrote it first (the submit re-reads and checks again)",
            registry=r,
        )
        for answer in ("answered", "rejected", "failed"):
            self.submits.labels(answer=answer)
        for reason in REFUSALS:
            self.refusals.labels(route="submit", reason=reason)


def route_of(path: str) -> str:
    """A request path as the refusals' `route` label (a bounded set)."""
    if path == "/jarvice/submit":
        return "submit"
    if path.startswith("/controller/"):
        return "controller"
    if path.startswith("/jarvice/"):
        return "jobs"
    return "other"


def endpoint_of(endpoint: str) -> str:
    """A JARVICE endpoint as the latency's `endpoint` label (a bounded set)."""
    return endpoint if endpoint in ("submit", "jobs", "machines", "terminate") else "other"
