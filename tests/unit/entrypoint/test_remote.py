"""The remote shell against a fake JARVICE backend and a fake clock (no network, no real time)."""

import json
import random
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from entrypoint import ports, remote, restart, signals
from entrypoint.output import SEPARATOR
from entrypoint.plan import RemotePlan
from entrypoint.remote_settings import Tuning
from jarvice import exitcodes
from jarvice.client import (
    CredentialsRejected,
    JobNotFound,
    ProtocolError,
    RequestRejected,
    SubmitOutcomeUnknown,
    SubmitRefused,
    Unavailable,
)
from jarvice.model import JobEntry, JobStatus, Machine, SignalSent, SubmitBody, SubmitResult
from tests.support.clocks import Clock
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

LABEL = "k8s-test-uid"
PREAMBLE = f"INIT[1]: starting\n{SEPARATOR}\n"
MACHINES = {
    "n0": Machine("n0", cores=4, gpus=0, ram_gb=16),
    "ng1": Machine("ng1", cores=8, gpus=1, ram_gb=64),
}


def _lines(text: str) -> list[str]:
    """Split on \"\\n\" only, keeping it, like the JARVICE adapter does."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


@dataclass
class FakeJob:
    number: int
    label: str | None
    submitted: float
    queue: float = 2.0
    lines: list[str] = field(default_factory=list)
    line_interval: float = 0.1
    exitcode: int = 0
    final: str | None = None  # default: COMPLETED / COMPLETED WITH ERROR from exitcode
    honours_shutdown: bool = True
    stopped: tuple[float, str] | None = None  # (when, why)
    tail_fails: bool = False
    substatus_text: str = ""
    checkpointed: float | None = None  # when its program wrote a checkpoint and exited 0 (asked by SIGUSR1)

    def start(self) -> float:
        return self.submitted + self.queue

    def end(self) -> float:
        return self.start() + self.line_interval * (len(self.lines) + 1)

    def state(self, now: float) -> str:
        if self.stopped is not None and now >= self.stopped[0]:
            return "TERMINATED"
        if now < self.start():
            return "SUBMITTED"
        if self.checkpointed is not None and now >= self.checkpointed:
            return "COMPLETED"
        if now < self.end():
            return "PROCESSING STARTING"
        return self.final or ("COMPLETED" if self.exitcode == 0 else "COMPLETED WITH ERROR")

    def text(self, now: float) -> str:
        if now < self.start():
            return ""
        until = now if self.stopped is None else min(now, self.stopped[0])
        count = int((until - self.start()) / self.line_interval)
        return PREAMBLE + "".join(self.lines[: max(0, count)])


class FakeBackend:
    def __init__(self, clock: Clock, *, machines: dict[str, Machine] | None = None) -> None:
        self.clock = clock
        self.machines = MACHINES if machines is None else machines
        self.jobs: dict[int, FakeJob] = {}
        self.next_number = 100
        self.calls: list[str] = []
        self.template = FakeJob(0, None, 0.0)
        self.submit_script: list[str] = []  # "503" (not created), "drop-created", "drop-lost"
        self.fail: dict[str, Exception] = {}
        self.on_submit: Callable[[], None] | None = None
        self.bodies: list[SubmitBody] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    def add_job(self, **kw: object) -> FakeJob:
        number = self.next_number
        self.next_number += 1
        fields = {k: v for k, v in vars(self.template).items() if k not in ("number", "label", "submitted")}
        fields.update(kw)
        job = FakeJob(number=number, **{"label": LABEL, "submitted": self.clock.now, **fields})  # type: ignore[arg-type]
        self.jobs[number] = job
        return job

    def fetch_machines(self) -> dict[str, Machine]:
        self._call("machines")
        return self.machines

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        self._call("jobs-completed" if completed else "jobs")
        now = self.clock.now
        result = {}
        for n, job in self.jobs.items():
            state = job.state(now)
            terminal = state in ("COMPLETED", "COMPLETED WITH ERROR", "TERMINATED", "CANCELED")
            if terminal == completed:
                exitcode = job.exitcode if terminal else 0
                result[n] = JobEntry(n, f"job-{n}", state, job.label, exitcode, substatus_text=job.substatus_text)
        return result

    def submit(self, body: SubmitBody) -> SubmitResult:
        self._call("submit")
        self.bodies.append(body)
        if self.on_submit:
            self.on_submit()
        action = self.submit_script.pop(0) if self.submit_script else "ok"
        if action == "503":
            raise SubmitOutcomeUnknown("submit: HTTP 503: busy", endpoint="submit", answered=True)
        if action == "drop-lost":
            raise SubmitOutcomeUnknown("submit: no answer", endpoint="submit", answered=False)
        job = self.add_job(label=body["job_label"])
        if action == "drop-created":
            raise SubmitOutcomeUnknown("submit: no answer", endpoint="submit", answered=False)
        return SubmitResult(job.number, f"job-{job.number}")

    def _job(self, number: int) -> FakeJob:
        if number not in self.jobs:
            raise JobNotFound("Job not found", endpoint="status")
        return self.jobs[number]

    def fetch_status(self, number: int, *, deadline: float | None = None) -> JobStatus:
        self._call("status")
        job = self._job(number)
        return JobStatus(number, f"job-{number}", job.state(self.clock.now))

    def fetch_tail(self, number: int, *, lines: int) -> str:
        self._call(f"tail:{lines}")
        job = self._job(number)
        if job.state(self.clock.now) != "PROCESSING STARTING" or job.tail_fails:
            raise JobNotFound("Running job is not found", endpoint="tail")
        text = job.text(self.clock.now)
        if lines == 0:
            return text
        return "".join(_lines(text)[-lines:])

    def fetch_output(self, number: int) -> str:
        self._call("output")
        job = self._job(number)
        if job.state(self.clock.now) == "PROCESSING STARTING":
            raise JobNotFound("Completed job is not found", endpoint="output")
        return job.text(self.clock.now)

    @contextmanager
    def open_output(self, number: int, *, endpoint: str, deadline: float | None = None) -> Iterator[Iterator[str]]:
        text = self.fetch_tail(number, lines=0) if endpoint == "tail" else self.fetch_output(number)
        yield iter(_lines(text))

    def shutdown(self, number: int, *, deadline: float | None = None) -> None:
        self._call("shutdown")
        job = self._job(number)
        if job.state(self.clock.now) != "PROCESSING STARTING":
            raise JobNotFound("Running job is not found", endpoint="shutdown")
        if job.honours_shutdown:
            job.stopped = (self.clock.now + 0.5, "shutdown")

    def terminate(self, number: int, *, deadline: float | None = None) -> None:
        self._call("terminate")
        job = self._job(number)
        job.stopped = (self.clock.now, "terminate")

    def signal(self, number: int, signal: int, *, deadline: float | None = None) -> SignalSent:
        """The job's image runs its JARVICE_SIGNAL_OVERRIDE: SIGUSR1 makes the program checkpoint and exit 0."""
        self._call(f"signal:{signal}")
        job = self._job(number)
        if job.state(self.clock.now) != "PROCESSING STARTING":
            raise JobNotFound("Running job is not found", endpoint="signal")
        if signal == 10 and job.checkpointed is None:
            job.checkpointed = self.clock.now + 0.5
        return SignalSent(signal, 4242)


class Sink:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, lines: list[str]) -> None:
        self.lines.extend(lines)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def make_plan(
    *, machine: str | None = None, nodes: int = 1, counted_gpus: int | None = None, **tuning: float
) -> RemotePlan:
    return RemotePlan(
        shell_command="python train.py",
        job_label=LABEL,
        app_name="app",
        app_command="run",
        command_parameter="command",
        machine=machine,
        nodes=nodes,
        vault=None,
        walltime="24:00:00",
        geometry=None,
        arch=None,
        num_gpus=1,
        num_cpus=2,
        tuning=Tuning(**{"poll_seconds": 1.0, "tail_lines": 5, "cancel_grace_seconds": 10.0, **tuning}),  # type: ignore[arg-type]
        counted_gpus=counted_gpus,
    )


@dataclass
class World:
    clock: Clock
    backend: FakeBackend
    sink: Sink
    token: signals.CancelToken
    messages: list[str] = field(default_factory=list)

    def deps(
        self,
        *,
        journal: ports.Journal | None = None,
        data: ports.DataStage | None = None,
        move_mark: Callable[[], int | None] = ports.no_move_mark,
        checkpoints: bool = False,
    ) -> ports.RemoteDeps:
        """The runner's ports on this world: its fake JARVICE, clock and cancel token; the world itself
        takes the termination message."""
        return ports.RemoteDeps(
            backend=self.backend,
            out=self.sink,
            sleep=self.clock.sleep,
            clock=self.clock,
            rng=random.Random(7),
            cancel=self.token,
            journal=journal or ports.NoJournal(),
            termination=self,
            data=data,
            move_mark=move_mark,
            checkpoints=checkpoints,
        )

    def run(self, plan: RemotePlan | None = None) -> int:
        return remote.run_remote(plan or make_plan(), self.deps())

    def write(self, message: str) -> None:
        self.messages.append(message)

    def signal_at(self, when: float, signum: int = signal.SIGTERM) -> None:
        self.clock.alarms.append((self.clock.now + when, lambda: self.token.request(signum)))


@pytest.fixture
def world() -> World:
    clock = Clock()
    return World(clock, FakeBackend(clock), Sink(), signals.CancelToken())


LINES = [f"epoch {i}\n" for i in range(30)]


def test_success_streams_every_line_once(world: World) -> None:
    world.backend.template.lines = LINES
    assert world.run() == 0
    assert world.sink.text == "".join(LINES)
    calls = world.backend.calls
    assert calls.count("submit") == 1
    assert any(c.startswith("tail:") for c in calls)
    # Machine selection: NUM_GPUS=1, NUM_CPUS=2 -> ng1.
    assert world.backend.bodies[0]["machine"]["type"] == "ng1"
    assert world.backend.bodies[0]["job_label"] == LABEL


def test_streaming_happens_while_running(world: World) -> None:
    world.backend.template.lines = LINES
    seen_while_running: list[int] = []
    original = world.backend.fetch_tail

    def spy(number: int, *, lines: int) -> str:
        seen_while_running.append(len(world.sink.lines))
        return original(number, lines=lines)

    world.backend.fetch_tail = spy  # type: ignore[method-assign]
    world.run()
    assert max(seen_while_running) > 0  # lines had been printed before the job finished


def test_many_lines_per_poll_fall_back_to_whole_output(world: World) -> None:
    world.backend.template.lines = ["same\n" if i % 3 else f"n {i}\n" for i in range(200)]
    world.backend.template.line_interval = 0.01  # ~100 lines per poll, window of 5
    assert world.run() == 0
    assert world.sink.text == "".join(world.backend.template.lines)
    assert "tail:0" in world.backend.calls


@pytest.mark.parametrize(
    ("exitcode", "final", "expected"),
    [
        (7, None, 7),
        (0, "CANCELED", exitcodes.EXIT_CANCELED),
        (3, "CANCELED", 3),
        (-9, "COMPLETED WITH ERROR", 137),
    ],
)
def test_exit_code_from_job(world: World, exitcode: int, final: str | None, expected: int) -> None:
    world.backend.template.lines = LINES[:3]
    world.backend.template.exitcode = exitcode
    world.backend.template.final = final
    assert world.run() == expected
    assert world.sink.text == "".join(LINES[:3])


def test_reattaches_to_live_job_instead_of_submitting(world: World) -> None:
    world.backend.add_job(lines=LINES, queue=0.0)
    world.clock.now += 1.0  # already running, some lines produced
    assert world.run() == 0
    assert "submit" not in world.backend.calls
    assert "machines" not in world.backend.calls
    assert world.sink.text == "".join(LINES)


def test_completed_job_with_same_label_is_not_reattached(world: World) -> None:
    old = world.backend.add_job(lines=["old\n"], queue=0.0)
    world.clock.now += 10
    assert old.state(world.clock.now) == "COMPLETED"
    world.backend.template.lines = ["new\n"]
    assert world.run() == 0
    assert world.backend.calls.count("submit") == 1
    assert world.sink.text == "new\n"


def test_answered_submit_failure_is_looked_up_then_resubmitted(world: World) -> None:
    world.backend.template.lines = ["hi\n"]
    world.backend.submit_script = ["503", "503"]
    assert world.run() == 0
    assert world.backend.calls.count("submit") == 3
    assert len(world.backend.jobs) == 1
    assert world.sink.text == "hi\n"


def test_unanswered_submit_that_created_a_job_is_attached_not_resubmitted(world: World) -> None:
    world.backend.template.lines = ["hi\n"]
    world.backend.submit_script = ["drop-created"]
    assert world.run() == 0
    assert world.backend.calls.count("submit") == 1
    assert len(world.backend.jobs) == 1


def test_old_completed_job_with_our_label_does_not_resolve_an_unknown_submit(world: World) -> None:
    world.backend.add_job(lines=["old\n"], queue=0.0)
    world.clock.now += 10
    world.backend.template.lines = ["new\n"]
    world.backend.submit_script = ["drop-lost"]
    assert world.run(make_plan(submit_resolve_seconds=3.0)) == 0
    assert world.backend.calls.count("submit") == 2
    assert world.sink.text == "new\n"


def test_submit_keeps_failing_until_the_outage_budget(world: World) -> None:
    world.backend.submit_script = ["503"] * 100
    assert world.run(make_plan(outage_seconds=20.0, retry_cap_seconds=4.0)) == exitcodes.EXIT_REMOTE_UNAVAILABLE
    assert world.backend.jobs == {}


def test_sigterm_while_queued_terminates(world: World) -> None:
    world.backend.template.queue = 30.0
    world.signal_at(3.0)
    assert world.run() == exitcodes.EXIT_TERMINATED
    (job,) = world.backend.jobs.values()
    assert job.stopped is not None and job.stopped[1] == "terminate"
    assert "shutdown" not in world.backend.calls


def test_sigterm_while_running_shuts_down_and_prints_the_rest(world: World) -> None:
    world.backend.template.lines = LINES
    world.signal_at(3.5)
    assert world.run() == exitcodes.EXIT_TERMINATED
    (job,) = world.backend.jobs.values()
    assert job.stopped is not None and job.stopped[1] == "shutdown"
    assert "terminate" not in world.backend.calls
    # Everything the job printed before it stopped, once.
    assert world.sink.text == job.text(world.clock.now).removeprefix(PREAMBLE)
    assert world.sink.text


def test_shutdown_ignored_is_followed_by_terminate_after_grace(world: World) -> None:
    world.backend.template.lines = LINES * 10
    world.backend.template.honours_shutdown = False
    world.signal_at(3.5)
    start = world.clock.now
    assert world.run(make_plan(cancel_grace_seconds=6.0)) == exitcodes.EXIT_TERMINATED
    (job,) = world.backend.jobs.values()
    assert job.stopped is not None and job.stopped[1] == "terminate"
    calls = world.backend.calls
    assert calls.index("shutdown") < calls.index("terminate")
    assert world.clock.now - start <= 3.5 + 2 + 6.0 + 1  # grace respected


def test_signal_before_anything_submits_nothing(world: World) -> None:
    world.token.request(signal.SIGTERM)  # arrived during start-up (not interruptible yet)
    assert world.run() == exitcodes.EXIT_TERMINATED
    assert "submit" not in world.backend.calls


def test_signal_during_submit_is_deferred_then_cancels_the_new_job(world: World) -> None:
    world.backend.template.queue = 30.0
    world.backend.on_submit = lambda: world.token.request(signal.SIGTERM)
    assert world.run() == exitcodes.EXIT_TERMINATED
    (job,) = world.backend.jobs.values()
    assert job.stopped is not None and job.stopped[1] == "terminate"


def test_signal_while_resolving_an_unknown_submit_terminates_what_was_created(world: World) -> None:
    world.backend.template.queue = 30.0
    world.backend.submit_script = ["drop-created"]
    original = world.backend.fetch_jobs

    def slow_listing(*, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        if world.backend.calls.count("submit") == 1 and world.token.signum is None:
            world.token.request(signal.SIGTERM)  # raises: we are interruptible here
        return original(completed=completed)

    world.backend.fetch_jobs = slow_listing  # type: ignore[method-assign]
    assert world.run() == exitcodes.EXIT_TERMINATED
    (job,) = world.backend.jobs.values()
    assert job.stopped is not None


def test_outage_while_following_gives_up_and_terminates(world: World) -> None:
    world.backend.template.lines = LINES
    world.clock.alarms.append(
        (
            world.clock.now + 3.0,
            lambda: world.backend.fail.update(status=Unavailable("status: down", endpoint="status")),
        )
    )
    assert world.run() == exitcodes.EXIT_REMOTE_UNAVAILABLE
    assert "terminate" in world.backend.calls


def test_no_machine_fits(world: World) -> None:
    world.backend.machines = {"n0": Machine("n0", cores=4, gpus=0)}
    assert world.run() == exitcodes.EXIT_NO_MACHINE
    assert "submit" not in world.backend.calls


def test_credentials_rejected(world: World) -> None:
    world.backend.fail["jobs"] = CredentialsRejected("jobs: rejected", endpoint="jobs")
    assert world.run() == exitcodes.EXIT_CREDENTIALS
    assert "submit" not in world.backend.calls


def test_output_missing_after_completion_is_retried(world: World) -> None:
    world.backend.template.lines = ["a\n", "b\n"]
    original = world.backend.fetch_output
    failures = [JobNotFound("not yet", endpoint="output")] * 2

    def flaky(number: int) -> str:
        if failures:
            raise failures.pop()
        return original(number)

    world.backend.fetch_output = flaky  # type: ignore[method-assign]
    assert world.run() == 0
    assert world.sink.text == "a\nb\n"


def test_cancel_token_semantics() -> None:
    token = signals.CancelToken()
    token.request(signal.SIGINT)  # not interruptible: recorded only
    assert token.signum == signal.SIGINT
    with pytest.raises(signals.CancelRequested), token.interruptible():
        pass
    token = signals.CancelToken()
    with pytest.raises(signals.CancelRequested), token.interruptible(), token.deferred():
        token.request(signal.SIGTERM)  # deferred: no raise here
        reached = True
    assert reached
    token = signals.CancelToken()
    with pytest.raises(signals.CancelRequested), token.interruptible():
        token.request(signal.SIGTERM)
    token.request(signal.SIGTERM)  # after the first raise: recorded, no second raise


def test_signal_after_the_final_output_does_not_print_it_twice(world: World) -> None:
    world.backend.template.lines = ["a\n", "b\n"]
    original = world.backend.fetch_jobs

    def late_signal(*, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        if "output" in world.backend.calls and world.token.signum is None:
            world.token.request(signal.SIGTERM)  # arrives while the exit code is being looked up
        return original(completed=completed)

    world.backend.fetch_jobs = late_signal  # type: ignore[method-assign]
    assert world.run() == exitcodes.EXIT_TERMINATED
    assert world.sink.text == "a\nb\n"


def test_unexpected_error_terminates_the_job_and_exits_70(world: World) -> None:
    world.backend.template.lines = LINES
    world.clock.alarms.append((world.clock.now + 3.0, lambda: world.backend.fail.update({"tail:5": KeyError("bug")})))
    assert world.run() == exitcodes.EXIT_INTERNAL
    (job,) = world.backend.jobs.values()
    assert job.stopped is not None and job.stopped[1] == "terminate"


def test_signal_during_a_submit_with_unknown_outcome_still_cancels(world: World) -> None:
    world.backend.template.queue = 30.0
    world.backend.submit_script = ["drop-created"]
    world.backend.on_submit = lambda: world.token.request(signal.SIGTERM)
    assert world.run() == exitcodes.EXIT_TERMINATED
    (job,) = world.backend.jobs.values()
    assert job.stopped is not None and job.stopped[1] == "terminate"
    assert world.backend.calls.count("submit") == 1


# --- failures while following: retry, re-attach, or stop the job before giving up -------------------


def _fail_from(world: World, at: float, name: str, exc: Exception, times: int | None = None) -> None:
    """From `at` seconds on, make backend call `name` raise `exc` (`times` times, or for ever)."""
    original = getattr(world.backend, {"status": "fetch_status"}.get(name, name))
    remaining = [times]

    def failing(*args: object, **kwargs: object) -> object:
        if world.clock.now >= at and (remaining[0] is None or remaining[0] > 0):
            if remaining[0] is not None:
                remaining[0] -= 1
            world.backend.calls.append(name)
            raise exc
        return original(*args, **kwargs)

    setattr(world.backend, {"status": "fetch_status"}.get(name, name), failing)


@pytest.mark.parametrize(
    "exc",
    [
        ProtocolError("status: expected Content-Type application/json, got 'text/html'", endpoint="status"),
        CredentialsRejected("status: HTTP 401", endpoint="status"),
        RequestRejected("status: HTTP 400", endpoint="status", status=400),
        JobNotFound("status: HTTP 404", endpoint="status"),
    ],
    ids=["html-page", "401", "400", "404"],
)
def test_transient_failures_while_following_are_survived(world: World, exc: Exception) -> None:
    world.backend.template.lines = LINES
    _fail_from(world, world.clock.now + 3.0, "status", exc, times=3)
    assert world.run() == 0
    assert world.sink.text == "".join(LINES)
    assert "terminate" not in world.backend.calls
    assert world.backend.calls.count("submit") == 1


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ProtocolError("status: got 'text/html'", endpoint="status"), exitcodes.EXIT_PROTOCOL),
        (CredentialsRejected("status: HTTP 401", endpoint="status"), exitcodes.EXIT_CREDENTIALS),
        (JobNotFound("status: HTTP 404", endpoint="status"), exitcodes.EXIT_PROTOCOL),
    ],
    ids=["76-html", "77-credentials", "76-job-not-found"],
)
def test_giving_up_while_following_terminates_the_job(world: World, exc: Exception, code: int) -> None:
    world.backend.template.lines = LINES * 20
    _fail_from(world, world.clock.now + 3.0, "status", exc)
    assert world.run() == code
    (job,) = world.backend.jobs.values()
    assert job.stopped is not None and job.stopped[1] == "terminate"


# --- restart state ------------------------------------------------------------------------------------


class Journal:
    def __init__(self) -> None:
        self.saved: list[restart.RunnerState] = []

    def save(self, state: restart.RunnerState) -> None:
        self.saved.append(state)


def run_with_state(world: World, journal: Journal, start: restart.StartDecision, **tuning: float) -> int:
    return remote.run_remote(make_plan(**tuning), world.deps(journal=journal), start=start)


def test_state_is_saved_before_the_submit_and_reported_at_the_end(world: World) -> None:
    world.backend.template.lines = ["a\n", "b\n"]
    journal = Journal()
    world.backend.on_submit = lambda: None
    assert run_with_state(world, journal, restart.decide_start(None)) == 0
    first, *_, last = journal.saved
    assert (first.attempt, first.job_number, first.reported) == (1, None, False)  # before the submit
    assert (last.job_number, last.printed_lines, last.reported, last.exit_code) == (100, 2, True, 0)


def test_picked_up_finished_job_prints_the_rest_without_submitting(world: World) -> None:
    job = world.backend.add_job(lines=["a\n", "b\n", "c\n"], queue=0.0, exitcode=3)
    world.clock.now += 10
    previous = restart.RunnerState(1, LABEL, job_number=job.number, printed_lines=1)
    journal = Journal()
    assert run_with_state(world, journal, restart.decide_start(previous)) == 3
    assert world.sink.text == "b\nc\n"
    assert "submit" not in world.backend.calls
    assert journal.saved[-1].reported is True


def test_a_pick_up_that_cannot_reach_jarvice_stays_unreported(world: World) -> None:
    job = world.backend.add_job(lines=LINES, queue=0.0)
    for call in ("status", "terminate"):
        world.backend.fail[call] = Unavailable(f"{call}: down", endpoint=call)
    previous = restart.RunnerState(1, LABEL, job_number=job.number, printed_lines=1)
    journal = Journal()
    assert run_with_state(world, journal, restart.decide_start(previous)) == exitcodes.EXIT_REMOTE_UNAVAILABLE
    assert journal.saved[-1].reported is False  # the next restart picks the job up, not a new attempt


def test_a_pick_up_that_gives_up_stops_the_inherited_job_like_its_own(world: World) -> None:
    job = world.backend.add_job(lines=LINES, queue=0.0)
    world.backend.fail["status"] = Unavailable("status: down", endpoint="status")
    previous = restart.RunnerState(1, LABEL, job_number=job.number, printed_lines=1)
    journal = Journal()
    assert run_with_state(world, journal, restart.decide_start(previous)) == exitcodes.EXIT_REMOTE_UNAVAILABLE
    assert job.stopped is not None and job.stopped[1] == "terminate"
    assert journal.saved[-1].reported is True  # stopped: a restart is a deliberate retry


# --- a signal while an inherited job is being picked up ---------------------------------------------


def _signal_on_first(world: World, method: str) -> None:
    """The first call of backend `method` is interrupted by SIGTERM (as a signal handler would do)."""
    original = getattr(world.backend, method)

    def interrupted(*args: object, **kwargs: object) -> object:
        if world.token.signum is None:
            world.token.request(signal.SIGTERM)  # raises CancelRequested: the runner is interruptible
        return original(*args, **kwargs)

    setattr(world.backend, method, interrupted)


def test_signal_during_pick_up_by_number_stops_the_inherited_job(world: World) -> None:
    job = world.backend.add_job(lines=LINES * 10, queue=0.0)
    world.clock.now += 1.0
    _signal_on_first(world, "fetch_status")
    previous = restart.RunnerState(1, LABEL, job_number=job.number, printed_lines=0)
    journal = Journal()
    assert run_with_state(world, journal, restart.decide_start(previous)) == exitcodes.EXIT_TERMINATED
    assert job.stopped is not None
    assert journal.saved[-1].reported is True  # stopped: the next start may retry
    assert "submit" not in world.backend.calls


def test_signal_during_pick_up_by_label_looks_the_job_up_and_stops_it(world: World) -> None:
    job = world.backend.add_job(lines=LINES * 10, queue=0.0)
    world.clock.now += 1.0
    _signal_on_first(world, "fetch_jobs")
    previous = restart.RunnerState(1, LABEL, job_number=None)
    journal = Journal()
    assert run_with_state(world, journal, restart.decide_start(previous)) == exitcodes.EXIT_TERMINATED
    assert job.stopped is not None
    assert journal.saved[-1].reported is True


def test_signal_before_pick_up_starts_still_stops_the_inherited_job(world: World) -> None:
    job = world.backend.add_job(lines=LINES * 10, queue=0.0)
    world.token.request(signal.SIGTERM)  # arrived during start-up
    previous = restart.RunnerState(1, LABEL, job_number=job.number)
    journal = Journal()
    assert run_with_state(world, journal, restart.decide_start(previous)) == exitcodes.EXIT_TERMINATED
    assert job.stopped is not None


def test_inherited_job_that_cannot_be_stopped_is_not_reported(world: World) -> None:
    job = world.backend.add_job(lines=LINES * 10, queue=0.0)
    _signal_on_first(world, "fetch_status")
    world.backend.fail["terminate"] = Unavailable("terminate: down", endpoint="terminate")
    world.backend.fail["shutdown"] = Unavailable("shutdown: down", endpoint="shutdown")
    previous = restart.RunnerState(1, LABEL, job_number=job.number)
    journal = Journal()
    assert run_with_state(world, journal, restart.decide_start(previous)) == exitcodes.EXIT_TERMINATED
    assert journal.saved[-1].reported is False  # may still run: the next start picks it up, no retry
    assert journal.saved[-1].job_number == job.number


# --- ambiguous submits, and at most one live job per label ------------------------------------------


def test_a_5xx_submit_answer_is_looked_for_through_the_resolve_window(world: World) -> None:
    # A gateway's 502 while JARVICE still creates the job: it shows up in the listing 3 s later.
    world.backend.template.lines = ["hi\n"]
    original = world.backend.submit

    def gateway_502(body: SubmitBody) -> SubmitResult:
        if world.backend.calls.count("submit") == 0:
            world.backend.calls.append("submit")
            world.clock.alarms.append((world.clock.now + 3.0, lambda: world.backend.add_job(label=body["job_label"])))
            raise SubmitOutcomeUnknown("submit: HTTP 502: Bad Gateway", endpoint="submit", answered=True)
        return original(body)

    world.backend.submit = gateway_502  # type: ignore[method-assign]
    assert world.run(make_plan(submit_resolve_seconds=10.0)) == 0
    assert world.backend.calls.count("submit") == 1
    assert len(world.backend.jobs) == 1
    assert world.sink.text == "hi\n"


def test_a_429_submit_is_a_refusal_submitted_again_without_a_lookup(world: World) -> None:
    world.backend.template.lines = ["hi\n"]
    original = world.backend.submit

    def refused_once(body: SubmitBody) -> SubmitResult:
        if world.backend.calls.count("submit") == 0:
            world.backend.calls.append("submit")
            raise SubmitRefused("submit: HTTP 429: Only one active job allowed per VM", endpoint="submit")
        return original(body)

    world.backend.submit = refused_once  # type: ignore[method-assign]
    assert world.run(make_plan(submit_resolve_seconds=10.0)) == 0
    calls = world.backend.calls
    assert calls.count("submit") == 2
    first, second = (i for i, c in enumerate(calls) if c == "submit")
    assert not any(c.startswith("jobs") for c in calls[first:second])  # nothing to look for
    assert len(world.backend.jobs) == 1


def test_refusals_until_the_outage_budget_exit_69_with_nothing_running(world: World) -> None:
    def refused(body: SubmitBody) -> SubmitResult:
        world.backend.calls.append("submit")
        raise SubmitRefused("submit: HTTP 429: Only one active job allowed per VM", endpoint="submit")

    world.backend.submit = refused  # type: ignore[method-assign]
    journal = Journal()
    code = run_with_state(world, journal, restart.decide_start(None), outage_seconds=20.0, retry_cap_seconds=4.0)
    assert code == exitcodes.EXIT_REMOTE_UNAVAILABLE
    assert journal.saved[-1].reported is True


def _stopped_by_terminate(world: World) -> list[int]:
    return sorted(n for n, j in world.backend.jobs.items() if j.stopped is not None and j.stopped[1] == "terminate")


def test_reattach_follows_the_lowest_live_job_and_terminates_the_others(world: World) -> None:
    low = world.backend.add_job(lines=["low\n"], queue=0.0)
    high = world.backend.add_job(lines=["high\n"] * 50, queue=0.0)
    world.backend.add_job(lines=["queued\n"], queue=100.0)
    world.clock.now += 0.05
    assert world.run() == 0
    assert world.sink.text == "low\n"
    assert _stopped_by_terminate(world) == [high.number, high.number + 1]
    assert low.stopped is None
    assert "submit" not in world.backend.calls


def test_resolve_keeps_the_lowest_new_live_job_and_terminates_the_others(world: World) -> None:
    world.backend.template.lines = ["hi\n"]
    world.backend.template.queue = 5.0
    original = world.backend.submit

    def twice_created(body: SubmitBody) -> SubmitResult:
        if world.backend.calls.count("submit") == 0:
            world.backend.calls.append("submit")
            world.backend.add_job(label=body["job_label"])  # a gateway retried the POST upstream
            world.backend.add_job(label=body["job_label"])
            raise SubmitOutcomeUnknown("submit: HTTP 504: Gateway Timeout", endpoint="submit", answered=True)
        return original(body)

    world.backend.submit = twice_created  # type: ignore[method-assign]
    assert world.run() == 0
    assert sorted(world.backend.jobs) == [100, 101]
    assert _stopped_by_terminate(world) == [101]
    assert world.sink.text == "hi\n"


def test_reattach_while_following_applies_the_same_rule(world: World) -> None:
    world.backend.template.lines = LINES * 4
    world.backend.template.queue = 0.0
    _fail_from(world, world.clock.now + 3.0, "status", JobNotFound("status: HTTP 404", endpoint="status"), times=1)
    # Before the 404, a second job with the label appears (another runner's stray submit).
    world.clock.alarms.append((world.clock.now + 2.0, lambda: world.backend.add_job(lines=["stray\n"] * 500)))
    assert world.run() == 0
    assert _stopped_by_terminate(world) == [101]
    assert "stray\n" not in world.sink.lines


# --- the GPU budget, the walltime and the termination message -----------------------------------------


BIG = {"ng8": Machine("ng8", cores=64, gpus=8, scale_max=4), "ng1": Machine("ng1", cores=8, gpus=1, scale_max=4)}


@pytest.mark.parametrize(
    ("machine", "nodes", "counted", "expected"),
    [
        ("ng8", 2, 1, exitcodes.EXIT_OVER_BUDGET),  # the 1-GPU pod asking JARVICE for 16
        (None, 2, 1, exitcodes.EXIT_OVER_BUDGET),  # NUM_GPUS=1 picks ng1, but two nodes hold 2
        ("ng8", 2, 16, 0),
        ("ng8", 2, None, 0),  # not rewritten by our webhook: no check
    ],
    ids=["pinned-16-of-1", "nodes-2-of-1", "counted-16", "no-count"],
)
def test_a_machine_over_the_counted_gpus_is_refused_before_submitting(
    world: World, machine: str | None, nodes: int, counted: int | None, expected: int
) -> None:
    world.backend.machines = BIG
    world.backend.template.lines = ["hi\n"]
    assert world.run(make_plan(machine=machine, nodes=nodes, counted_gpus=counted)) == expected
    assert ("submit" in world.backend.calls) is (expected == 0)


def test_a_walltime_stop_has_its_own_exit_status(world: World) -> None:
    world.backend.template.lines = LINES
    world.backend.template.final = "TERMINATED"
    world.backend.template.exitcode = -9
    world.backend.template.substatus_text = "Job walltime exceeded"
    assert world.run() == exitcodes.EXIT_WALLTIME
    assert world.sink.text == "".join(LINES)


def test_a_terminate_nobody_explained_stays_143(world: World) -> None:
    world.backend.template.lines = LINES
    world.backend.template.final = "TERMINATED"
    assert world.run() == exitcodes.EXIT_TERMINATED


def _message(world: World) -> dict[str, object]:
    (message,) = world.messages
    body = json.loads(message)["nimbix_burst"]
    assert isinstance(body, dict)
    return body


def test_termination_message_says_a_finished_job_no_longer_runs(world: World) -> None:
    world.backend.template.lines = ["a\n"]
    world.backend.template.exitcode = 3
    assert world.run() == 3
    assert _message(world) == {"job": 100, "job_may_run": False, "exit_code": 3}


def test_termination_message_says_a_job_that_could_not_be_stopped_may_run(world: World) -> None:
    world.backend.template.lines = LINES * 10
    world.backend.fail["shutdown"] = Unavailable("shutdown: down", endpoint="shutdown")
    world.backend.fail["terminate"] = Unavailable("terminate: down", endpoint="terminate")
    world.signal_at(3.5)
    assert world.run() == exitcodes.EXIT_TERMINATED
    assert _message(world) == {"job": 100, "job_may_run": True, "exit_code": 143}


def test_termination_message_without_a_job(world: World) -> None:
    world.backend.machines = {"n0": Machine("n0", cores=4, gpus=0)}
    assert world.run() == exitcodes.EXIT_NO_MACHINE
    assert _message(world) == {"job": None, "job_may_run": False, "exit_code": exitcodes.EXIT_NO_MACHINE}
