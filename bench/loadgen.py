"""HTTPS load generator: a separate process that POSTs AdmissionReviews to a webhook.

    python -m bench.loadgen --url https://127.0.0.1:8443/mutate --ca ca.crt --body review.json \
        --rates 250,500,1000 --seconds 2 --connections 8 --saturation-seconds 3

aiohttp client with keep-alive. Phases, in order:
  warm-up       a few hundred closed-loop requests (opens the connections, TLS handshakes done)
  open loop     one phase per offered rate: request i is due at start + i/rate, whether or not
                earlier ones have returned (no coordinated omission); latency is reported from
                the actual send and from the due time
  saturation    closed loop: --connections workers, each sending its next request as soon as
                the previous one returns; throughput = completed / elapsed
Each request gets a fresh UUID in place of clusters.UID_PLACEHOLDER. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import ssl
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench import clusters, stats

HEADERS = {"Content-Type": "application/json"}
WARMUP_REQUESTS = 600
# The connection pool, all opened during the warm-up: the open loop never waits for a TLS
# handshake unless more than this many requests are in flight at once.
POOL_CONNECTIONS = 32
REQUEST_TIMEOUT_SECONDS = 10.0
PAUSE_BETWEEN_PHASES_SECONDS = 0.3


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)  # from the actual send
    from_due: list[float] = field(default_factory=list)  # from when the request was due
    errors: int = 0
    remote: int = 0  # responses carrying warnings: the webhook's remote decisions
    first_error: str = ""

    def add_error(self, text: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or text[:300]


class Target:
    def __init__(self, session: aiohttp.ClientSession, url: str, body: bytes) -> None:
        self.session = session
        self.url = url
        self.body = body
        self.placeholder = clusters.UID_PLACEHOLDER.encode()

    async def send(self, tally: Tally, due: float | None = None) -> None:
        data = self.body.replace(self.placeholder, str(uuid.uuid4()).encode(), 1)
        started = time.perf_counter()
        try:
            async with self.session.post(self.url, data=data, headers=HEADERS) as response:
                payload = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            tally.add_error(f"{type(exc).__name__}: {exc}")
            return
        done = time.perf_counter()
        if status != 200 or (b'"allowed": true' not in payload and b'"allowed":true' not in payload):
            tally.add_error(f"HTTP {status}: {payload[:200]!r}")
            return
        tally.latencies.append(done - started)
        tally.from_due.append(done - (started if due is None else due))
        if b'"warnings"' in payload:
            tally.remote += 1


async def run_closed(target: Target, *, connections: int, seconds: float, count: int = 0) -> tuple[Tally, float]:
    """`connections` workers back to back, for `seconds` (or until `count` requests in all)."""
    tally = Tally()
    deadline = time.perf_counter() + seconds
    remaining = [count]

    async def worker() -> None:
        while time.perf_counter() < deadline:
            if count:
                if remaining[0] <= 0:
                    return
                remaining[0] -= 1
            await target.send(tally)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return tally, time.perf_counter() - began


async def run_open(target: Target, *, rate: float, seconds: float) -> tuple[Tally, float, float]:
    """Requests due every 1/rate s for `seconds`; returns the tally, elapsed time and the worst
    lateness of a send (the generator's own lag, which the from-due latency includes)."""
    tally = Tally()
    total = max(1, int(rate * seconds))
    interval = 1.0 / rate
    began = time.perf_counter() + 0.005
    worst_lag = 0.0
    tasks = []
    for i in range(total):
        due = began + i * interval
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        worst_lag = max(worst_lag, time.perf_counter() - due)
        tasks.append(asyncio.create_task(target.send(tally, due)))
    await asyncio.gather(*tasks)
    return tally, time.perf_counter() - began, worst_lag


def _phase_record(tally: Tally, elapsed: float) -> dict[str, Any]:
    return {
        "completed": len(tally.latencies),
        "errors": tally.errors,
        "first_error": tally.first_error,
        "remote_responses": tally.remote,
        "elapsed_s": round(elapsed, 3),
        "throughput_rps": round(len(tally.latencies) / elapsed, 1) if elapsed > 0 else 0.0,
        "latency": stats.summarize_seconds(tally.latencies),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(args.ca))
    body = Path(args.body).read_bytes()
    rates = [float(r) for r in args.rates.split(",") if r]
    result: dict[str, Any] = {"body_bytes": len(body), "open_loop": [], "saturation": None}
    sent = 0
    began = time.perf_counter()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
    connector = aiohttp.TCPConnector(ssl=context, limit=max(POOL_CONNECTIONS, args.connections))
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        target = Target(session, args.url, body)
        warm, _ = await run_closed(target, connections=POOL_CONNECTIONS, seconds=30.0, count=WARMUP_REQUESTS)
        if warm.errors:
            raise RuntimeError(f"warm-up failed: {warm.errors} errors, first: {warm.first_error}")
        sent += len(warm.latencies)
        for rate in rates:
            await asyncio.sleep(PAUSE_BETWEEN_PHASES_SECONDS)
            tally, elapsed, lag = await run_open(target, rate=rate, seconds=args.seconds)
            record = _phase_record(tally, elapsed)
            record["offered_rps"] = rate
            record["latency_from_due"] = stats.summarize_seconds(tally.from_due)
            record["max_send_lag_ms"] = round(lag * 1000, 3)
            sent += len(tally.latencies) + tally.errors
            result["open_loop"].append(record)
            _progress(f"open {rate:g}/s", record)
        if args.saturation_seconds > 0:
            await asyncio.sleep(PAUSE_BETWEEN_PHASES_SECONDS)
            tally, elapsed = await run_closed(target, connections=args.connections, seconds=args.saturation_seconds)
            record = _phase_record(tally, elapsed)
            record["connections"] = args.connections
            result["saturation"] = record
            sent += len(tally.latencies) + tally.errors
            _progress(f"closed x{args.connections}", record)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["requests_total"] = sent
    result["client_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 3)
    result["elapsed_s"] = round(time.perf_counter() - began, 3)
    return result


def summarize_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """bench/goloadgen's output (raw latencies per phase) as this generator's own report, summarized
    by the same code, so the two clients' figures mean the same."""
    result: dict[str, Any] = {"client": "go", "body_bytes": raw["body_bytes"], "open_loop": [], "saturation": None}
    for phase in raw["phases"]:
        tally = Tally(
            latencies=phase["latencies_s"] or [],
            from_due=phase["from_due_s"] or [],
            errors=phase["errors"],
            remote=phase["remote_responses"],
            first_error=phase["first_error"],
        )
        record = _phase_record(tally, phase["elapsed_s"])
        if phase["kind"] == "open":
            record["offered_rps"] = phase["offered_rps"]
            record["latency_from_due"] = stats.summarize_seconds(tally.from_due)
            record["max_send_lag_ms"] = round(phase["max_send_lag_s"] * 1000, 3)
            result["open_loop"].append(record)
        else:
            record["connections"] = phase["connections"]
            result["saturation"] = record
    result["requests_total"] = raw["requests_total"]
    result["client_cpu_s"] = round(raw["client_cpu_s"], 3)
    result["elapsed_s"] = round(raw["elapsed_s"], 3)
    return result


def _progress(label: str, record: dict[str, Any]) -> None:
    latency = record["latency"]
    print(
        f"      {label:<14} {record['throughput_rps']:>8.1f} req/s  p50 {latency['p50_ms']:.2f} ms"
        f"  p99 {latency['p99_ms']:.2f} ms  max {latency['max_ms']:.2f} ms  errors {record['errors']}",
        file=sys.stderr,
        flush=True,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description="HTTPS load for a webhook")
    parser.add_argument("--url", required=True, help="https://127.0.0.1:<port>/mutate")
    parser.add_argument("--ca", type=Path, required=True, help="CA certificate that signed the server's")
    parser.add_argument("--body", type=Path, required=True, help="AdmissionReview JSON to send")
    parser.add_argument("--rates", default="250,500,1000", help="offered rates (req/s), comma-separated")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each open-loop phase")
    parser.add_argument("--connections", type=int, default=8, help="closed-loop concurrency")
    parser.add_argument("--saturation-seconds", type=float, default=3.0, help="0 skips the closed loop")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = asyncio.run(run(args))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
