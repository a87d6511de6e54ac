"""What JARVICE answers, read (pure): the adapter's errors, and the answers' JSON checked and
converted to `jarvice.model` values (`Any` goes no further than this module).

Split from `jarvice.client` (the HTTP adapter, which raises these errors and calls these
parsers); callers import both from there.
"""

import math
from typing import Any, Final

from jarvice import contract
from jarvice.model import JobEntry, JobStatus, Machine, SignalSent, SubmitResult

# Error texts are quoted in messages; a server that sends a whole HTML page gets truncated.
MAX_ERROR_TEXT: Final = 300


class JarviceError(Exception):
    """Base of every adapter error. Messages are already redacted and name the endpoint."""

    def __init__(self, message: str, *, endpoint: str) -> None:
        super().__init__(message)
        self.endpoint = endpoint


class CredentialsRejected(JarviceError):
    """HTTP 401: wrong username or API key (or billing inactive)."""


class ApplicationNotFound(JarviceError):
    """HTTP 404 from submit: APP_NAME is not a JARVICE application this user can run."""


class JobNotFound(JarviceError):
    """HTTP 404 from a per-job call."""


class RequestRejected(JarviceError):
    """Any other 4xx: the request itself was refused."""

    def __init__(self, message: str, *, endpoint: str, status: int) -> None:
        super().__init__(message, endpoint=endpoint)
        self.status = status


class ProtocolError(JarviceError):
    """A 2xx answer that is not what the API documents (type, shape)."""


class Unavailable(JarviceError):
    """JARVICE stayed unreachable (or kept answering 5xx/429) past the outage budget or deadline."""


class StreamBroken(JarviceError):
    """The connection died in the middle of an output body (what was read before stays valid)."""


class SubmitOutcomeUnknown(JarviceError):
    """The submit may or may not have created a job (timeout, dropped connection, 5xx, unreadable 2xx).

    `answered` is True when something did reply (a 5xx or an unreadable 2xx). A reply does not
    settle it: a gateway's 502/504 comes while JARVICE may still be creating the job, so the caller
    looks for the job by its label through its whole resolve window either way.
    """

    def __init__(self, message: str, *, endpoint: str, answered: bool) -> None:
        super().__init__(message, endpoint=endpoint)
        self.answered = answered


class SubmitRefused(JarviceError):
    """HTTP 429 on submit ("Only one active job allowed per VM"): refused, no job was created."""


# --- response parsing (pure; Any is converted here and goes no further) ------------------------


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _as_number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def expect_object(raw: object, *, endpoint: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ProtocolError(f"{endpoint}: expected a JSON object, got {type(raw).__name__}", endpoint=endpoint)
    if isinstance(raw.get("error"), str):
        raise ProtocolError(
            f"{endpoint}: JARVICE reported an error: {raw['error'][:MAX_ERROR_TEXT]}", endpoint=endpoint
        )
    return raw


def parse_submit(raw: object) -> SubmitResult:
    obj = expect_object(raw, endpoint="submit")
    number = _as_int(obj.get("number"))
    name = obj.get("name")
    if number is None or not isinstance(name, str):
        raise ProtocolError(
            f"submit: expected {{'name': str, 'number': int}}, got keys {sorted(obj)}", endpoint="submit"
        )
    return SubmitResult(number=number, name=name)


def parse_signal(raw: object, *, asked: int) -> SignalSent:
    """`{"signal": n, "pid": p}`; the signal must be the one asked for."""
    obj = expect_object(raw, endpoint="signal")
    number = _as_int(obj.get("signal"))
    if number != asked:
        raise ProtocolError(f"signal: asked for {asked}, JARVICE answered {obj.get('signal')!r}", endpoint="signal")
    return SignalSent(signal=number, pid=_as_int(obj.get("pid")))


def parse_machines(raw: object) -> dict[str, Machine]:
    obj = expect_object(raw, endpoint="machines")
    machines = {}
    for name, entry in obj.items():
        if not isinstance(entry, dict):
            raise ProtocolError(f"machines: entry {name!r} is not an object", endpoint="machines")
        cores = _as_int(entry.get("mc_cores"))
        gpus = _as_int(entry.get("mc_gpus"))
        if cores is None or gpus is None or cores < 0 or gpus < 0:
            raise ProtocolError(
                f"machines: entry {name!r} lacks integer mc_cores/mc_gpus "
                f"(got {entry.get('mc_cores')!r}/{entry.get('mc_gpus')!r})",
                endpoint="machines",
            )
        ram = _as_number(entry.get("mc_ram"))
        price = _as_number(entry.get("mc_price"))
        scale_min = _as_int(entry.get("mc_scale_min"))
        scale_max = _as_int(entry.get("mc_scale_max"))
        slave_gpus = _as_int(entry.get("mc_slave_gpus"))
        arch = entry.get("mc_arch")
        description = entry.get("mc_description")
        machines[name] = Machine(
            name=name,
            cores=cores,
            gpus=gpus,
            ram_gb=int(ram) if ram is not None else 0,
            price=price if price is not None and price >= 0 else None,
            arch=arch if isinstance(arch, str) else "",
            scale_min=scale_min if scale_min is not None and scale_min >= 1 else 1,
            scale_max=scale_max if scale_max is not None and scale_max >= 1 else 1,
            description=description if isinstance(description, str) else "",
            slave_gpus=slave_gpus if slave_gpus is not None and slave_gpus >= 0 else None,
        )
    return machines


def _status_fields(entry: dict[str, Any], *, number: int, endpoint: str) -> tuple[str, str]:
    state = entry.get("job_status")
    if not isinstance(state, str) or not state.strip():
        raise ProtocolError(f"{endpoint}: job {number} has no job_status string", endpoint=endpoint)
    name = entry.get("job_name")
    return state.strip().upper(), name if isinstance(name, str) else ""


def parse_status(raw: object, *, number: int) -> JobStatus:
    obj = expect_object(raw, endpoint="status")
    entry = obj.get(str(number))
    if not isinstance(entry, dict):
        raise ProtocolError(
            f"status: expected an object keyed by the job number {number!r}, got keys {sorted(obj)[:5]}",
            endpoint="status",
        )
    state, name = _status_fields(entry, number=number, endpoint="status")
    return JobStatus(
        number=number,
        name=name,
        state=state,
        substatus=_as_int(entry.get("job_substatus")) or 0,
        submit_time=_as_int(entry.get("job_submit_time")) or 0,
        start_time=_as_int(entry.get("job_start_time")) or 0,
        end_time=_as_int(entry.get("job_end_time")) or 0,
    )


def parse_jobs(raw: object) -> dict[int, JobEntry]:
    obj = expect_object(raw, endpoint="jobs")
    jobs = {}
    for key, entry in obj.items():
        number = _as_int(key)
        if number is None or not isinstance(entry, dict):
            raise ProtocolError(f"jobs: expected job-number keys with object values, got {key!r}", endpoint="jobs")
        state, name = _status_fields(entry, number=number, endpoint="jobs")
        label = entry.get("job_label")
        exitcode = entry.get("job_exitcode")
        substatus_text = entry.get("job_substatus_text")
        submission = entry.get("job_api_submission")
        machine, nodes = _submitted_machine(submission)
        jobs[number] = JobEntry(
            number=number,
            name=name,
            state=state,
            label=label if isinstance(label, str) else None,
            exitcode=_as_int(exitcode) if exitcode is not None else None,
            substatus_text=substatus_text[:MAX_ERROR_TEXT] if isinstance(substatus_text, str) else "",
            machine=machine,
            nodes=nodes,
            start_time=_as_int(entry.get("job_start_time")) or 0,
            end_time=_as_int(entry.get("job_end_time")) or 0,
            walltime_limit=_submitted_walltime(submission),
            job_price=_as_price(entry.get("job_price")),
        )
    return jobs


def _submitted_walltime(submission: object) -> int | None:
    """The walltime limit (seconds) of a job's submit body's `application.walltime` (`HH:MM:SS`);
    None when it does not say or says something else."""
    application = submission.get("application") if isinstance(submission, dict) else None
    text = application.get("walltime") if isinstance(application, dict) else None
    return contract.parse_walltime_seconds(text) if isinstance(text, str) else None


def _as_price(value: object) -> float | None:
    """JARVICE's `job_price`: a number >= 0 (or its text); None for null, absent or anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _submitted_machine(submission: object) -> tuple[str, int]:
    """The machine type and node count from a job's `job_api_submission` (the submit body, which may
    echo credentials: nothing else of it is read or kept); ("", 1) when it does not say."""
    machine = submission.get("machine") if isinstance(submission, dict) else None
    if not isinstance(machine, dict):
        return "", 1
    name = machine.get("type")
    nodes = _as_int(machine.get("nodes"))
    if not (isinstance(name, str) and contract.is_machine_name(name)):
        name = ""
    return name, (nodes if nodes is not None and nodes >= 1 else 1)
