"""The JARVICE emulator's HTTP surface (aiohttp), following shared/reference/jarvice-api.md, and
`create_app`, which puts it together.

Documented endpoints under /jarvice/ (submit, status, jobs, tail, output, shutdown, terminate,
machines, live, ready) with the documented shapes, status strings, errors and bare Content-Types
(`application/json`, `text/plain`). Non-submit endpoints take their parameters from the query
string or a form body, as the reference says both work. Faults are injected into them by
fault_injection.py; test controls live under /_emulator/ (control.py) and need no credentials.
"""

import json
import re
import secrets
import shlex
import string
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler

from devplatform.emulator import appdef, control, fault_injection, jobs, nodes, signalling, vault_api
from devplatform.emulator.config import EmulatorConfig
from devplatform.emulator.responses import TEXT_TYPE, Reject, error, json_response, text_response
from devplatform.emulator.state import STATE, EmulatorState, redact_submission

# job_label limit since 2021 (reference §5, J7 JAR-4699).
MAX_LABEL: Final = 255
# application.walltime: hours (up to 5 digits), minutes, seconds.
WALLTIME_RE: Final = re.compile(r"^(\d{1,5}):([0-5]\d):([0-5]\d)$")


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
        state.stats.submit_rejected.append({"status": reason.status, "body": redact_submission(body)})
        return reason
    assert isinstance(body, dict)
    application, machine = body["application"], body["machine"]
    owner = body["user"]["username"]
    number, workdir = state.numbers.allocate()
    suffix = "".join(state.rng.choice(string.ascii_uppercase) for _ in range(5))
    name = f"{time.strftime('%Y%m%d%H%M%S')}-{suffix}-{body['app']}-{owner}_s1"
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
        # The image's environment first, as a container's: the platform's own variables win.
        environment={**state.config.image_environment.get(body["app"], {}), **nodes.build_job_environment(jarvice_dir)},
        submission=body,
        workdir=workdir,
        walltime_limit=_walltime_seconds(application.get("walltime")),
    )
    job.vault = vault_api.job_vault(request.app, owner=owner, submission=body, workdir=workdir)
    state.jobs[number] = job
    job.task = state.spawn(jobs.run_job(job, state.config.timing, state.has_room))
    faulted = fault_injection.inject_after_submit(request, state)
    if faulted is not None:
        return faulted
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


async def handle_signal(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = await _params(request)
    job = _select_job(state, params, _authenticate(state, params))
    try:
        number = signalling.parse_signal(params.get("signal"))
    except signalling.SignalNotValid as exc:
        return json_response({"error": "Invalid parameter(s)", "detail": str(exc)}, status=400)
    delivery = signalling.plan_delivery(number, state.config.image_environment.get(job.app, {}))
    loaded = state.config.appdefs.get(job.app)
    beside = loaded.source.resolve().parent if loaded is not None else None
    try:
        pid = await signalling.deliver(job, delivery, beside=beside)
    except signalling.NotRunning:
        return error(404, "Running job is not found")
    except signalling.OverrideFailed as exc:
        # The emulator's answer: what JARVICE answers when the override cannot run is not documented.
        return json_response({"error": "Signal override failed", "detail": str(exc)}, status=500)
    job.signals.append(delivery.action)
    return json_response({"signal": number, "pid": pid})


async def handle_machines(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = await _params(request)
    _authenticate(state, params)
    name = params.get("name")
    machines = state.config.machines
    if name:
        machines = {k: v for k, v in machines.items() if k == name}
    return json_response(machines)


# --- app factory -------------------------------------------------------------------------------


async def _close_state(app: web.Application) -> None:
    await app[STATE].close()


def create_app(config: EmulatorConfig) -> web.Application:
    app = web.Application(middlewares=[fault_injection.fault_middleware])
    app[STATE] = EmulatorState(config)
    api: list[tuple[str, Handler]] = [
        ("status", handle_status),
        ("jobs", handle_jobs),
        ("tail", handle_tail),
        ("output", handle_output),
        ("shutdown", handle_shutdown),
        ("terminate", handle_terminate),
        ("signal", handle_signal),
        ("machines", handle_machines),
        ("live", handle_live),
        ("ready", handle_live),
    ]
    for endpoint, handler in api:
        app.router.add_get(f"/jarvice/{endpoint}", handler)
        app.router.add_post(f"/jarvice/{endpoint}", handler)
    app.router.add_post("/jarvice/submit", handle_submit)
    app.router.add_get("/_emulator/faults", control.handle_get_faults)
    app.router.add_post("/_emulator/faults", control.handle_set_faults)
    app.router.add_get("/_emulator/config", control.handle_get_config)
    app.router.add_post("/_emulator/config", control.handle_set_config)
    app.router.add_get("/_emulator/submissions", control.handle_submissions)
    app.router.add_get("/_emulator/jobs", control.handle_emulator_jobs)
    app.router.add_get("/_emulator/stats", control.handle_stats)
    app.router.add_post("/_emulator/reset", control.handle_reset)
    app.on_cleanup.append(_close_state)
    if config.vaults is not None:
        vault_api.setup(app, config.vaults, users=config.users)
    return app
