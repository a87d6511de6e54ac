"""The JARVICE emulator's HTTP surface (aiohttp), following shared/reference/jarvice-api.md.

Documented endpoints under /jarvice/ (submit, status, jobs, tail, output, shutdown, terminate,
machines, live, ready) with the documented shapes, status strings, errors and bare Content-Types
(`application/json`, `text/plain`). Non-submit endpoints take their parameters from the query
string or a form body, as the reference says both work. Test controls live under /_emulator/
(fault injection, timing, introspection) and need no credentials.
"""

import asyncio
import json
import random
import re
import secrets
import shlex
import shutil
import string
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from devplatform.emulator import appdef, jobs, nodes, vault, vault_api
from devplatform.emulator.catalogue import default_machines

JSON_TYPE: Final = "application/json"
TEXT_TYPE: Final = "text/plain"
# job_label limit since 2021 (reference §5, J7 JAR-4699).
MAX_LABEL: Final = 255
FAULT_KINDS: Final = ("drop", "status503", "status429", "status500", "html", "status401", "status404")
# Faults of /jarvice/submit that come after the job was created (the outcome the runner cannot see).
AFTER_SUBMIT_FAULTS: Final = ("drop_after_submit", "status502_after_submit")
# What a proxy or login portal in front of the API may answer instead of JARVICE.
HTML_PAGE: Final = b"<!DOCTYPE html><html><body><h1>Gateway</h1><p>Please sign in.</p></body></html>\n"
# Endpoints that faults never hit unless named explicitly (they are probes, not API calls).
PROBES: Final = frozenset({"live", "ready"})
REDACTED: Final = "***"
# application.walltime: hours (up to 5 digits), minutes, seconds.
WALLTIME_RE: Final = re.compile(r"^(\d{1,5}):([0-5]\d):([0-5]\d)$")


@dataclass
class EmulatorConfig:
    users: dict[str, str]  # username -> API key
    apps: dict[str, frozenset[str]]  # application id -> AppDef command keys
    machines: dict[str, dict[str, Any]] = field(default_factory=default_machines)
    timing: jobs.Timing = field(default_factory=jobs.Timing)
    # Whether /jarvice/tail includes the INIT preamble, as /jarvice/output does (UNCONFIRMED).
    tail_preamble: bool = True
    workdir: Path | None = None
    first_job_number: int = 1000
    seed: int | None = None
    # Applications defined by AppDef files (see appdef.py): submissions are checked against the
    # AppDef's commands and parameters, and run through the command's `path`.
    appdefs: dict[str, appdef.LoadedAppDef] = field(default_factory=dict)
    # Vaults (vault.py): SFTP, /jarvice/vault, each job's /data. None: no vaults, jobs run on the host.
    vaults: vault.VaultConfig | None = None

    def app_commands(self) -> dict[str, frozenset[str]]:
        """Every application id (catalogue and AppDef) -> its command keys."""
        from_appdefs = {app: frozenset(loaded.appdef.commands) for app, loaded in self.appdefs.items()}
        return {**self.apps, **from_appdefs}


@dataclass
class Faults:
    """Counters of faults still to inject. Each /jarvice/ request (filtered by `endpoints`) draws
    one fault with probability `rate` from the non-empty counters; `latency_ms` delays requests
    (the next `latency_requests` of them, or all while set when that is None)."""

    drop: int = 0
    status503: int = 0
    status429: int = 0
    status500: int = 0
    # Answers that are not transient by their look (the runner must still not abandon its job):
    # a 200 HTML page (a proxy), 401 (an auth backend hiccup), 404 "Job not found".
    html: int = 0
    status401: int = 0
    status404: int = 0
    drop_after_submit: int = 0
    # Creates the job, then answers 502 Bad Gateway (a gateway that gave up waiting on JARVICE).
    status502_after_submit: int = 0
    latency_ms: float = 0.0
    latency_requests: int | None = None
    rate: float = 1.0
    endpoints: frozenset[str] | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "Faults":
        unknown = set(raw) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise ValueError(f"unknown fault keys: {sorted(unknown)}")
        drop_after = raw.get("drop_after_submit", 0)
        endpoints = raw.get("endpoints")
        faults = cls(
            drop=int(raw.get("drop", 0)),
            status503=int(raw.get("status503", 0)),
            status429=int(raw.get("status429", 0)),
            status500=int(raw.get("status500", 0)),
            html=int(raw.get("html", 0)),
            status401=int(raw.get("status401", 0)),
            status404=int(raw.get("status404", 0)),
            drop_after_submit=int(drop_after is True) if isinstance(drop_after, bool) else int(drop_after),
            status502_after_submit=int(raw.get("status502_after_submit", 0)),
            latency_ms=float(raw.get("latency_ms", 0.0)),
            latency_requests=None if raw.get("latency_requests") is None else int(raw["latency_requests"]),
            rate=float(raw.get("rate", 1.0)),
            endpoints=None if endpoints is None else frozenset(str(e) for e in endpoints),
        )
        if not 0.0 <= faults.rate <= 1.0:
            raise ValueError("rate must be within [0, 1]")
        negative = sorted(kind for kind in (*FAULT_KINDS, *AFTER_SUBMIT_FAULTS) if getattr(faults, kind) < 0)
        if negative:
            raise ValueError(f"fault counts must be >= 0: {negative}")
        return faults

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["endpoints"] = None if self.endpoints is None else sorted(self.endpoints)
        return data

    def applies(self, endpoint: str) -> bool:
        if self.endpoints is not None:
            return endpoint in self.endpoints
        return endpoint not in PROBES

    def take_latency(self) -> float:
        if self.latency_ms <= 0:
            return 0.0
        if self.latency_requests is not None:
            if self.latency_requests <= 0:
                return 0.0
            self.latency_requests -= 1
        return self.latency_ms / 1000

    def take(self, rng: random.Random) -> str | None:
        available = [kind for kind in FAULT_KINDS if getattr(self, kind) > 0]
        if not available or rng.random() >= self.rate:
            return None
        kind = rng.choice(available)
        setattr(self, kind, getattr(self, kind) - 1)
        return kind


@dataclass
class Stats:
    requests: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    submit_rejected: list[dict[str, Any]] = field(default_factory=list)


class EmulatorState:
    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.faults = Faults()
        self.stats = Stats()
        self.jobs: dict[int, jobs.Job] = {}
        self.next_number = config.first_job_number
        self.rng = random.Random(config.seed)
        self.background: set[asyncio.Task[None]] = set()
        self._owned_workdir = config.workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="jarvice-emulator-")) if config.workdir is None else config.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)

    def spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    async def close(self) -> None:
        """Kill every job's process group and wait for the job tasks; remove an owned workdir."""
        for job in self.jobs.values():
            if not job.terminal:
                jobs.terminate(job)
        tasks = [t for t in self.background if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._owned_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


STATE: Final = web.AppKey("state", EmulatorState)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# --- responses ---------------------------------------------------------------------------------


def json_response(obj: object, *, status: int = 200) -> web.Response:
    # Bare Content-Type (no "; charset="): Nimbix's own client rejects anything else.
    return web.Response(body=json.dumps(obj).encode(), status=status, headers={"Content-Type": JSON_TYPE})


def text_response(data: bytes, *, status: int = 200) -> web.Response:
    return web.Response(body=data, status=status, headers={"Content-Type": TEXT_TYPE})


def error(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status=status)


class Reject(Exception):
    """A control-flow signal carrying the response to send."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def drop_connection(request: web.Request) -> web.Response:
    """Close the TCP connection without an HTTP response."""
    transport = request.transport
    if transport is not None:
        transport.abort()
    return web.Response(status=500)


def _redact_submission(body: Any) -> Any:
    if isinstance(body, dict):
        return {k: (REDACTED if k == "apikey" else _redact_submission(v)) for k, v in body.items()}
    if isinstance(body, list):
        return [_redact_submission(v) for v in body]
    return body


# --- middleware: fault injection ---------------------------------------------------------------


@web.middleware
async def fault_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/jarvice/"):
        return await handler(request)
    state = request.app[STATE]
    endpoint = request.path.removeprefix("/jarvice/")
    state.stats.requests[endpoint] += 1
    faults = state.faults
    if faults.applies(endpoint):
        delay = faults.take_latency()
        if delay:
            state.stats.injected["latency"] += 1
            await asyncio.sleep(delay)
        kind = faults.take(state.rng)
        if kind is not None:
            state.stats.injected[kind] += 1
            if kind == "drop":
                return drop_connection(request)
            if kind == "status503":
                # The self-hosted API's concurrency limiter; plain text, like a proxy would send.
                return text_response(b"Service Unavailable\n", status=503)
            if kind == "status429":
                return error(429, "Too Many Requests")
            if kind == "html":
                return web.Response(body=HTML_PAGE, headers={"Content-Type": "text/html; charset=utf-8"})
            if kind == "status401":
                return error(401, "Not Authorized")
            if kind == "status404":
                return error(404, "Job not found")
            return error(500, "Internal Server Error")
    try:
        return await handler(request)
    except Reject as reject:
        return reject.response


# --- request helpers ---------------------------------------------------------------------------


async def _params(request: web.Request) -> dict[str, str]:
    params = dict(request.query)
    if request.method == "POST" and request.content_type == "application/x-www-form-urlencoded":
        form = await request.post()
        params.update({k: v for k, v in form.items() if isinstance(v, str)})
    return params


def _authenticate(state: EmulatorState, params: Mapping[str, str]) -> str:
    username, apikey = params.get("username"), params.get("apikey")
    if not username or not apikey:
        raise Reject(error(400, "User required"))
    expected = state.config.users.get(username)
    if expected is None or not secrets.compare_digest(expected, apikey):
        raise Reject(error(401, "Not Authorized"))
    return username


def _select_job(state: EmulatorState, params: Mapping[str, str], owner: str) -> jobs.Job:
    number_text, name = params.get("number"), params.get("name")
    if not number_text and not name:
        raise Reject(error(400, "No job specified"))
    job: jobs.Job | None = None
    if number_text:
        try:
            job = state.jobs.get(int(number_text))
        except ValueError:
            raise Reject(error(400, "Invalid parameter(s)")) from None
    else:
        job = next((j for j in state.jobs.values() if j.name == name), None)
    if job is None or job.owner != owner:
        raise Reject(error(404, "Job not found"))
    return job


def _lines_param(params: Mapping[str, str]) -> int:
    raw = params.get("lines", "100")
    try:
        lines = int(raw)
    except ValueError:
        raise Reject(error(400, "Invalid parameter(s)")) from None
    if lines < 0:
        raise Reject(error(400, "Invalid parameter(s)"))
    return lines


# --- /jarvice/ handlers ------------------------------------------------------------------------


async def handle_live(_request: web.Request) -> web.Response:
    return json_response({"status": "OK"})


async def handle_submit(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        body = json.loads(await request.read())
    except ValueError:
        body = None
    reason = _validate_submit(state, body)
    if reason is not None:
        state.stats.submit_rejected.append({"status": reason.status, "body": _redact_submission(body)})
        return reason
    assert isinstance(body, dict)
    application, machine = body["application"], body["machine"]
    owner = body["user"]["username"]
    number = state.next_number
    state.next_number += 1
    suffix = "".join(state.rng.choice(string.ascii_uppercase) for _ in range(5))
    name = f"{time.strftime('%Y%m%d%H%M%S')}-{suffix}-{body['app']}-{owner}_s1"
    workdir = state.workdir / str(number)
    workdir.mkdir(parents=True, exist_ok=True)
    node_names = nodes.build_node_names(int(machine.get("nodes", 1)))
    cores = int(state.config.machines[machine["type"]]["mc_cores"])
    jarvice_dir = nodes.write_jarvice_dir(workdir, nodes=node_names, cores_per_node=cores)
    job = jobs.Job(
        number=number,
        name=name,
        owner=owner,
        app=body["app"],
        command_key=application["command"],
        command=_job_command(state, body, workdir),
        label=body.get("job_label"),
        machine=machine["type"],
        nodes=len(node_names),
        node_names=node_names,
        environment=nodes.build_job_environment(jarvice_dir),
        submission=body,
        workdir=workdir,
        walltime_limit=_walltime_seconds(application.get("walltime")),
    )
    job.vault = vault_api.job_vault(request.app, owner=owner, submission=body, workdir=workdir)
    state.jobs[number] = job
    job.task = state.spawn(jobs.run_job(job, state.config.timing))
    if state.faults.drop_after_submit > 0 and state.faults.applies("submit"):
        state.faults.drop_after_submit -= 1
        state.stats.injected["drop_after_submit"] += 1
        return drop_connection(request)
    if state.faults.status502_after_submit > 0 and state.faults.applies("submit"):
        state.faults.status502_after_submit -= 1
        state.stats.injected["status502_after_submit"] += 1
        return text_response(b"Bad Gateway\n", status=502)
    return json_response({"name": name, "number": number})


def _validate_submit(state: EmulatorState, body: Any) -> web.Response | None:
    malformed = error(400, "Missing or Malformed API Syntax")
    if not isinstance(body, dict):
        return malformed
    user = body.get("user")
    if (
        not isinstance(user, dict)
        or not isinstance(user.get("username"), str)
        or not isinstance(user.get("apikey"), str)
    ):
        return malformed
    expected = state.config.users.get(user["username"])
    if expected is None or not secrets.compare_digest(expected, user["apikey"]):
        return error(401, "Not Authorized")
    app = body.get("app")
    if not isinstance(app, str):
        return malformed
    if app not in state.config.apps and app not in state.config.appdefs:
        return error(404, "Application Not Found")
    application = body.get("application")
    loaded = state.config.appdefs.get(app)
    if loaded is not None:
        if not isinstance(application, dict):
            return malformed
        detail = appdef.check_submission(
            loaded.appdef, command=application.get("command"), parameters=application.get("parameters")
        )
        if detail is not None:
            # The documented status and message (reference §8); `detail` is the emulator's own, to
            # say what to fix. That JARVICE answers exactly this for AppDef mismatches is UNCONFIRMED.
            return json_response({"error": "Missing or Malformed API Syntax", "detail": detail}, status=400)
    elif not isinstance(application, dict) or application.get("command") not in state.config.apps[app]:
        return malformed
    else:
        parameters = application.get("parameters")
        if not isinstance(parameters, dict) or not isinstance(parameters.get("command"), str):
            return malformed
    machine = body.get("machine")
    if not isinstance(machine, dict) or machine.get("type") not in state.config.machines:
        return malformed
    # JARVICE's documented answer, nothing more (the emulator's reason is in the rejected submissions).
    if nodes.check_scale(machine["type"], state.config.machines[machine["type"]], machine.get("nodes", 1)) is not None:
        return malformed
    label = body.get("job_label")
    if label is not None and (not isinstance(label, str) or len(label) > MAX_LABEL):
        return malformed
    walltime = application.get("walltime")
    if walltime is not None and _walltime_seconds(walltime) is None:
        return json_response(
            {
                "error": "Missing or Malformed API Syntax",
                "detail": f"application.walltime {walltime!r} is not HH:MM:SS",
            },
            status=400,
        )
    vault = body.get("vault")
    if vault is not None and (not isinstance(vault, dict) or not isinstance(vault.get("name"), str)):
        return malformed
    return None


def _walltime_seconds(raw: object) -> int | None:
    """`HH:MM:SS` to seconds; None when absent or not that shape."""
    match = WALLTIME_RE.match(raw) if isinstance(raw, str) else None
    if match is None:
        return None
    hours, minutes, seconds = (int(part) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _job_command(state: EmulatorState, body: Mapping[str, Any], workdir: Path) -> str:
    """The shell string jobs.run_job runs with `bash -c`.

    Catalogue apps: `parameters.command` itself; with more than one node, through the fan-out.
    AppDef apps: the command line JARVICE would run (the AppDef `path` and its parameters), with
    `path` mapped to its host executable, variable parameters in the environment, and
    NIMBIX_BURST_WORKDIR set to the job's directory (the stand-in for the image's WORKDIR, which
    images/base's run-command script enters; it fans a multi-node job out itself).
    """
    application = body["application"]
    loaded = state.config.appdefs.get(body["app"])
    if loaded is None:
        command: str = application["parameters"]["command"]
        if int(body["machine"].get("nodes", 1)) > 1:
            return nodes.build_fanout_command(command, python=sys.executable)
        return command
    key = application["command"]
    invocation = appdef.build_invocation(loaded.appdef.commands[key], application.get("parameters") or {})
    environment = {"NIMBIX_BURST_WORKDIR": str(workdir), **invocation.variables}
    argv = [str(loaded.host_paths[key]), *invocation.argv[1:]]
    assignments = [f"{name}={value}" for name, value in environment.items()]
    return "exec " + shlex.join(["env", *assignments, *argv])


async def handle_status(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = await _params(request)
    job = _select_job(state, params, _authenticate(state, params))
    return json_response({str(job.number): job.status_entry()})


async def handle_jobs(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = await _params(request)
    owner = _authenticate(state, params)
    completed = params.get("completed") == "true"  # case-sensitive, as documented
    listed = {
        str(job.number): job.jobs_entry()
        for job in state.jobs.values()
        if job.owner == owner and job.terminal == completed
    }
    return json_response(listed)


async def handle_tail(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    params = await _params(request)
    job = _select_job(state, params, _authenticate(state, params))
    lines = _lines_param(params)
    if job.status != jobs.RUNNING:
        return error(404, "Running job is not found")
    offset = 0
    if not state.config.tail_preamble:
        offset = jobs.application_offset(job.output_path)
        if offset < 0:
            return text_response(b"")
    if lines == 0:
        return await stream_file(request, job.output_path, offset=offset)
    data = jobs.tail_of_file(job.output_path, lines)
    if offset:
        # The window may reach back into the preamble: cut it at the separator.
        whole = jobs.tail_of_file(job.output_path, lines + len(jobs.PREAMBLE) + 1)
        marker = whole.find(jobs.SEPARATOR)
        if marker >= 0:
            data = jobs.last_lines(whole[marker + len(jobs.SEPARATOR) :], lines)
    return text_response(data)


async def stream_file(request: web.Request, path: Path, *, offset: int = 0) -> web.StreamResponse:
    """A whole output as a text/plain stream, never held in memory at once."""
    response = web.StreamResponse(headers={"Content-Type": TEXT_TYPE})
    await response.prepare(request)
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            while block := handle.read(jobs.READ_BLOCK_BYTES):
                await response.write(block)
    except FileNotFoundError:
        pass
    await response.write_eof()
    return response


async def handle_output(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    params = await _params(request)
    job = _select_job(state, params, _authenticate(state, params))
    lines = _lines_param(params)
    if not job.terminal:
        return error(404, "Completed job is not found")
    if lines == 0:
        return await stream_file(request, job.output_path)
    return text_response(jobs.tail_of_file(job.output_path, lines))


async def handle_shutdown(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = await _params(request)
    job = _select_job(state, params, _authenticate(state, params))
    if job.status != jobs.RUNNING:
        return error(404, "Running job is not found")
    killer = jobs.shutdown(job, state.config.timing)
    if killer is not None:
        state.background.add(killer)
        killer.add_done_callback(state.background.discard)
    return json_response({"status": "shutdown requested"})


async def handle_terminate(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = await _params(request)
    job = _select_job(state, params, _authenticate(state, params))
    if job.terminal:
        return error(404, "Running job is not found")
    jobs.terminate(job)
    return json_response({"status": "terminated"})


async def handle_machines(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = await _params(request)
    _authenticate(state, params)
    name = params.get("name")
    machines = state.config.machines
    if name:
        machines = {k: v for k, v in machines.items() if k == name}
    return json_response(machines)


# --- /_emulator/ controls ----------------------------------------------------------------------


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
    return json_response({**_timing_json(state.config.timing), "tail_preamble": state.config.tail_preamble})


async def handle_set_config(request: web.Request) -> web.Response:
    state = request.app[STATE]
    raw = await request.json()
    timing = state.config.timing
    allowed = {*_timing_json(timing), "tail_preamble"}
    if not isinstance(raw, dict) or set(raw) - allowed:
        return error(400, f"expected an object with keys among {sorted(allowed)}")
    for key, value in raw.items():
        if key == "tail_preamble":
            state.config.tail_preamble = bool(value)
        elif key == "shutdown_kill_seconds" and value is None:
            timing.shutdown_kill_seconds = None
        else:
            setattr(timing, key, float(value))
    return await handle_get_config(request)


async def handle_submissions(request: web.Request) -> web.Response:
    state = request.app[STATE]
    label = request.query.get("job_label")
    accepted = [
        {"number": job.number, "job_label": job.label, "body": _redact_submission(job.submission)}
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
    return json_response({"status": "reset"})


# --- app factory -------------------------------------------------------------------------------


async def _close_state(app: web.Application) -> None:
    await app[STATE].close()


def create_app(config: EmulatorConfig) -> web.Application:
    app = web.Application(middlewares=[fault_middleware])
    app[STATE] = EmulatorState(config)
    api: list[tuple[str, Handler]] = [
        ("status", handle_status),
        ("jobs", handle_jobs),
        ("tail", handle_tail),
        ("output", handle_output),
        ("shutdown", handle_shutdown),
        ("terminate", handle_terminate),
        ("machines", handle_machines),
        ("live", handle_live),
        ("ready", handle_live),
    ]
    for endpoint, handler in api:
        app.router.add_get(f"/jarvice/{endpoint}", handler)
        app.router.add_post(f"/jarvice/{endpoint}", handler)
    app.router.add_post("/jarvice/submit", handle_submit)
    app.router.add_get("/_emulator/faults", handle_get_faults)
    app.router.add_post("/_emulator/faults", handle_set_faults)
    app.router.add_get("/_emulator/config", handle_get_config)
    app.router.add_post("/_emulator/config", handle_set_config)
    app.router.add_get("/_emulator/submissions", handle_submissions)
    app.router.add_get("/_emulator/jobs", handle_emulator_jobs)
    app.router.add_get("/_emulator/stats", handle_stats)
    app.router.add_post("/_emulator/reset", handle_reset)
    app.on_cleanup.append(_close_state)
    if config.vaults is not None:
        vault_api.setup(app, config.vaults, users=config.users)
    return app


def parse_users(text: str) -> dict[str, str]:
    """ "alice:KEY,bob:KEY2" -> {"alice": "KEY", "bob": "KEY2"}."""
    users = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        username, sep, apikey = item.partition(":")
        if not sep or not username or not apikey:
            raise ValueError(f"expected USER:APIKEY, got {item!r}")
        users[username] = apikey
    return users


def parse_apps(items: list[str]) -> dict[str, frozenset[str]]:
    """["app:run,batch", "other:run"] -> {"app": {"run", "batch"}, "other": {"run"}}."""
    apps: dict[str, frozenset[str]] = {}
    for item in items:
        app, sep, commands = item.partition(":")
        keys = frozenset(filter(None, (c.strip() for c in commands.split(","))))
        if not sep or not app or not keys:
            raise ValueError(f"expected APPID:COMMAND[,COMMAND...], got {item!r}")
        apps[app] = apps.get(app, frozenset()) | keys
    return apps
