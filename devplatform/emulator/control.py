"""The emulator's own controls under /_emulator/ (no credentials), for tests and demos: the fault
plan, timing and machine capacity, the submissions and jobs seen, request statistics, and a reset."""

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from aiohttp import web

from devplatform.emulator import jobs
from devplatform.emulator.faults import Faults
from devplatform.emulator.responses import error, json_response
from devplatform.emulator.state import STATE, Stats, redact_submission


async def handle_get_faults(request: web.Request) -> web.Response:
    return json_response(request.app[STATE].faults.to_json())


async def handle_set_faults(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        raw = await request.json()
        if not isinstance(raw, dict):
            raise TypeError("expected a JSON object")
        state.faults = Faults.from_json(raw)
    except (ValueError, TypeError) as exc:
        return error(400, str(exc))
    return json_response(state.faults.to_json())


def _timing_json(timing: jobs.Timing) -> dict[str, Any]:
    return asdict(timing)


async def handle_get_config(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return json_response(
        {
            **_timing_json(state.config.timing),
            "tail_preamble": state.config.tail_preamble,
            "machine_capacity": dict(state.config.machine_capacity),
        }
    )


def parse_machine_capacity(raw: object, machines: Mapping[str, object]) -> dict[str, int]:
    """`{"ng4": 0, ...}`: nodes per machine type of the catalogue, each a whole number >= 0.
    Raises ValueError saying what to fix."""
    if not isinstance(raw, dict):
        raise ValueError('machine_capacity: expected an object of machine type -> nodes, e.g. {"ng4": 0}')
    capacity: dict[str, int] = {}
    for name, nodes in raw.items():
        if name not in machines:
            raise ValueError(f"machine_capacity: {name!r} is not a machine of /jarvice/machines")
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0:
            raise ValueError(f"machine_capacity: {name}: {nodes!r} is not a whole number of nodes >= 0")
        capacity[name] = nodes
    return capacity


# What a job terminated while queued may end as (jobs.Timing.queued_end_status).
QUEUED_END_STATUSES = (jobs.TERMINATED, jobs.CANCELED)


async def handle_set_config(request: web.Request) -> web.Response:
    state = request.app[STATE]
    raw = await request.json()
    timing = state.config.timing
    allowed = {*_timing_json(timing), "tail_preamble", "machine_capacity"}
    if not isinstance(raw, dict) or set(raw) - allowed:
        return error(400, f"expected an object with keys among {sorted(allowed)}")
    if raw.get("queued_end_status", QUEUED_END_STATUSES[0]) not in QUEUED_END_STATUSES:
        return error(400, f"queued_end_status must be one of {list(QUEUED_END_STATUSES)}")
    if "machine_capacity" in raw:
        try:
            capacity = parse_machine_capacity(raw["machine_capacity"], state.config.machines)
        except ValueError as exc:
            return error(400, str(exc))
    for key, value in raw.items():
        if key == "machine_capacity":
            state.config.machine_capacity = capacity  # replaces the whole map: {} makes every machine unlimited
        elif key == "tail_preamble":
            state.config.tail_preamble = bool(value)
        elif key == "shutdown_kill_seconds" and value is None:
            timing.shutdown_kill_seconds = None
        elif key == "queued_end_status":
            timing.queued_end_status = str(value)
        else:
            setattr(timing, key, float(value))
    return await handle_get_config(request)


async def handle_submissions(request: web.Request) -> web.Response:
    state = request.app[STATE]
    label = request.query.get("job_label")
    accepted = [
        {"number": job.number, "job_label": job.label, "body": redact_submission(job.submission)}
        for job in state.jobs.values()
        if label is None or job.label == label
    ]
    rejected = [r for r in state.stats.submit_rejected if label is None or (r["body"] or {}).get("job_label") == label]
    return json_response(
        {
            "count": len(accepted),
            "attempts": state.stats.requests["submit"],
            "submissions": accepted,
            "rejected": rejected,
        }
    )


async def handle_emulator_jobs(request: web.Request) -> web.Response:
    state = request.app[STATE]
    label = request.query.get("job_label")
    listed = [
        {
            "number": job.number,
            "name": job.name,
            "owner": job.owner,
            "job_label": job.label,
            "status": job.status,
            "exitcode": job.exitcode,
            "stop_reason": job.stop_reason,
            "machine": job.machine,
            "nodes": list(job.node_names),
            "pid": job.process.pid if job.process is not None else None,
            "signals": list(job.signals),
        }
        for job in state.jobs.values()
        if label is None or job.label == label
    ]
    return json_response(listed)


async def handle_stats(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return json_response({"requests": dict(state.stats.requests), "injected": dict(state.stats.injected)})


async def handle_reset(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.faults = Faults()
    state.stats = Stats()
    state.config.machine_capacity = {}  # a test that filled a machine leaves none full for the next
    return json_response({"status": "reset"})
