"""The runner's money rules as a table: state x event -> next state + actions.

Each row is read against the two promises: never two jobs for one label, never a job abandoned
(followed to its end, stopped, or reported as one that may run). The oracles are written from the
rules, not by calling the machine.
"""

from dataclasses import replace

import pytest

from entrypoint import restart, runstate, runsteps
from entrypoint.runstate import RunState, Step
from entrypoint.runsteps import (
    Adopt,
    AwaitJob,
    Exit,
    Failed,
    Finish,
    Follow,
    GiveUp,
    InheritedJobAnswered,
    InheritedJobUnknown,
    InspectInheritedJob,
    JobEnded,
    LabelListed,
    LeaveRunning,
    ListLabelJobs,
    NothingSubmitted,
    OutputPrinted,
    PrepareSubmit,
    ResolveWindowClosed,
    ResultKnown,
    Retry,
    Say,
    Signalled,
    StatusSeen,
    StopJob,
    Stopped,
    Submit,
    SubmitAccepted,
    SubmitDeclined,
    SubmitPosting,
    SubmitPrepared,
    SubmitUnanswered,
    Terminate,
    TerminateAnswered,
    TerminateExtras,
)
from jarvice import exitcodes
from jarvice.model import JobEntry, JobStatus
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

LABEL = "k8s-c.uid-train-1"
SIGTERM = 15
ALL = frozenset[int]()
LIVE = "PROCESSING STARTING"
DONE = "COMPLETED"


def job(number: int, state: str = LIVE) -> JobEntry:
    return JobEntry(number, f"job-{number}", state, LABEL, None)


def status(number: int, state: str = DONE) -> JobStatus:
    return JobStatus(number, f"job-{number}", state)


# The phases, with the job custody each one usually has.
PICKING_UP = RunState("picking_up", job=7, job_may_run=True)
PICKING_UP_BY_LABEL = RunState("picking_up", unseen=ALL, job_may_run=True)
ATTACHING = RunState("attaching")
PREPARING = RunState("submitting")
SUBMITTING = RunState("submitting", label_before=frozenset({3}))
POSTED = replace(SUBMITTING, unseen=frozenset({3}))
RESOLVING = RunState("resolving", unseen=frozenset({3}), label_before=frozenset({3}))
FOLLOWING = RunState("following", job=7, job_may_run=True)
FINISHING = RunState("finishing", job=7, job_may_run=False)
STOPPING = RunState("stopping", job=7, job_may_run=True, exit_code=143)
STOPPING_BY_LABEL = RunState("stopping", unseen=frozenset({3}), exit_code=143)
GIVING_UP = RunState("giving_up", job=7, job_may_run=True, exit_code=exitcodes.EXIT_REMOTE_UNAVAILABLE)
GIVING_UP_BY_LABEL = RunState("giving_up", unseen=frozenset({3}), exit_code=exitcodes.EXIT_REMOTE_UNAVAILABLE)


def following(number: int, **changes: object) -> RunState:
    return replace(RunState("following", job=number, job_may_run=True), **changes)  # type: ignore[arg-type]


def done(state: RunState, code: int, **changes: object) -> RunState:
    return replace(state, phase="done", exit_code=code, **changes)  # type: ignore[arg-type]


# --- the start --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        (None, Step(ATTACHING, (ListLabelJobs(ALL, finished_too=False),))),
        (
            restart.RunnerState(1, LABEL, job_number=7),
            Step(PICKING_UP, (InspectInheritedJob(7),)),
        ),
        (
            restart.RunnerState(1, LABEL, job_number=None),
            Step(PICKING_UP_BY_LABEL, (ListLabelJobs(ALL, finished_too=True),)),
        ),
        (
            restart.RunnerState(1, LABEL, job_number=7, reported=True, exit_code=1),
            Step(ATTACHING, (ListLabelJobs(ALL, finished_too=False),)),
        ),
    ],
    ids=["first: look for a live job", "pick up by number: ours at once", "pick up by label", "retry: a new attempt"],
)
def test_begin(previous: restart.RunnerState | None, expected: Step) -> None:
    assert runstate.begin(restart.decide_start(previous)) == expected


# --- finding or making the one job -------------------------------------------------------------------

ROWS = [
    # picking up
    (
        "inherited job answers: follow it",
        PICKING_UP,
        InheritedJobAnswered(LIVE),
        Step(following(7), (Adopt(7, "inherited"), Follow(7))),
    ),
    (
        "inherited number unknown: look by label, the job may still be ours",
        PICKING_UP,
        InheritedJobUnknown(),
        Step(replace(PICKING_UP, job=None, unseen=ALL), (ListLabelJobs(ALL, finished_too=True),)),
    ),
    (
        "pick up by label: a finished job is the result",
        PICKING_UP_BY_LABEL,
        LabelListed((job(5, DONE),)),
        Step(following(5), (Adopt(5, "picked_up_by_label", job(5, DONE)), Follow(5))),
    ),
    (
        "pick up by label: nothing carries the label, look for a live job then submit",
        PICKING_UP_BY_LABEL,
        LabelListed(()),
        Step(ATTACHING, (Say("no_job_for_label"), ListLabelJobs(ALL, finished_too=False))),
    ),
    # attaching
    (
        "a live job carries the label: attach, submit nothing",
        ATTACHING,
        LabelListed((job(5),)),
        Step(following(5), (Adopt(5, "attached", job(5)), Follow(5))),
    ),
    (
        "several live jobs: keep the lowest, terminate the others",
        ATTACHING,
        LabelListed((job(9), job(5), job(6, DONE), job(8))),
        Step(
            following(5),
            (TerminateExtras(5, (8, 9), (9, 5, 8)), Adopt(5, "attached", job(5)), Follow(5)),
        ),
    ),
    (
        "no live job: prepare the submit",
        ATTACHING,
        LabelListed(()),
        Step(PREPARING, (PrepareSubmit(),)),
    ),
    # submitting
    (
        "no machine fits: exit, nothing submitted, nothing runs",
        PREPARING,
        NothingSubmitted(exitcodes.EXIT_NO_MACHINE),
        Step(done(PREPARING, exitcodes.EXIT_NO_MACHINE), (Exit(exitcodes.EXIT_NO_MACHINE),)),
    ),
    (
        "prepared: submit, remembering the label's jobs from before",
        PREPARING,
        SubmitPrepared(frozenset({3})),
        Step(SUBMITTING, (Submit(again=False),)),
    ),
    (
        "the POST goes out: from now on a job of ours may exist",
        SUBMITTING,
        SubmitPosting(),
        Step(POSTED),
    ),
    (
        "accepted: follow the job",
        POSTED,
        SubmitAccepted(11),
        Step(following(11, label_before=frozenset({3})), (Adopt(11, "submitted"), Follow(11))),
    ),
    (
        "refused (429): nothing created, submit again without a look",
        POSTED,
        SubmitDeclined(budget_spent=False, error="429"),
        Step(SUBMITTING, (Submit(again=True),)),
    ),
    (
        "refused past the outage budget: exit 69, no job to stop",
        POSTED,
        SubmitDeclined(budget_spent=True, error="429"),
        Step(
            done(replace(SUBMITTING, phase="giving_up"), exitcodes.EXIT_REMOTE_UNAVAILABLE),
            (
                GiveUp("unavailable", "unavailable before any job was started", "429"),
                Exit(exitcodes.EXIT_REMOTE_UNAVAILABLE),
            ),
        ),
    ),
    (
        "unanswered: look for the job by the label before anything else",
        POSTED,
        SubmitUnanswered(),
        Step(RESOLVING, (ListLabelJobs(frozenset({3}), finished_too=True),)),
    ),
    # resolving
    (
        "the unanswered submit's job is found: follow it, submit nothing",
        RESOLVING,
        LabelListed((job(11),)),
        Step(following(11, label_before=frozenset({3})), (Adopt(11, "resolved", job(11)), Follow(11))),
    ),
    (
        "a gateway retried the POST: keep the lowest new job, terminate the other",
        RESOLVING,
        LabelListed((job(11), job(12))),
        Step(
            following(11, label_before=frozenset({3})),
            (TerminateExtras(11, (12,), (11, 12)), Adopt(11, "resolved", job(11)), Follow(11)),
        ),
    ),
    (
        "nothing yet: wait through the resolve window, then look again",
        RESOLVING,
        LabelListed(()),
        Step(RESOLVING, (AwaitJob(), ListLabelJobs(frozenset({3}), finished_too=True))),
    ),
    (
        "window closed: submit again (a late job is still looked for)",
        RESOLVING,
        ResolveWindowClosed(budget_spent=False, error="502"),
        Step(replace(RESOLVING, phase="submitting"), (Submit(again=True),)),
    ),
    (
        "window closed past the budget: give up, stop whatever the label's new jobs are",
        RESOLVING,
        ResolveWindowClosed(budget_spent=True, error="502"),
        Step(
            replace(RESOLVING, phase="giving_up", exit_code=exitcodes.EXIT_REMOTE_UNAVAILABLE),
            (
                GiveUp("unavailable", "unavailable: stopping the job before exiting", "502"),
                ListLabelJobs(frozenset({3}), finished_too=True),
            ),
        ),
    ),
]


@pytest.mark.parametrize(("state", "event", "expected"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_finding_or_making_the_job(state: RunState, event: runsteps.Event, expected: Step) -> None:
    assert runstate.advance(state, event) == expected


# --- following and finishing ---------------------------------------------------------------------------

FOLLOW_ROWS = [
    (
        "a status ends the failure streak",
        replace(FOLLOWING, failures=3),
        StatusSeen(),
        Step(FOLLOWING),
    ),
    (
        "the job ended: it no longer runs; print the output, then the exit status",
        FOLLOWING,
        JobEnded(status(7)),
        Step(FINISHING, (Finish(status(7), print_output=True),)),
    ),
    (
        "the output was printed already: not twice",
        replace(FOLLOWING, output_done=True),
        JobEnded(status(7)),
        Step(replace(FINISHING, output_done=True), (Finish(status(7), print_output=False),)),
    ),
    (
        "output printed",
        FINISHING,
        OutputPrinted(),
        Step(replace(FINISHING, output_done=True)),
    ),
    (
        "the result: exit with the job's status",
        FINISHING,
        ResultKnown(3),
        Step(done(FINISHING, 3), (Exit(3),)),
    ),
    (
        "an HTML page while following: retry",
        FOLLOWING,
        Failed("protocol", "html"),
        Step(replace(FOLLOWING, failures=1), (Retry(7, "retry", 1, "html"), Follow(7))),
    ),
    (
        "a failure while finishing: follow again (the output is not printed twice)",
        replace(FINISHING, output_done=True, failures=2),
        Failed("stream_broken", "cut"),
        Step(
            replace(FOLLOWING, job_may_run=False, output_done=True, failures=3),
            (Retry(7, "retry", 3, "cut"), Follow(7)),
        ),
    ),
    (
        "the job is not found: look it up again by the label",
        FOLLOWING,
        Failed("job_not_found", "404"),
        Step(replace(FOLLOWING, failures=1), (Retry(7, "reattach", 1, "404"), ListLabelJobs(ALL, finished_too=True))),
    ),
    (
        "re-attach finds the same job: follow it",
        FOLLOWING,
        LabelListed((job(7), job(6, DONE))),
        Step(FOLLOWING, (Follow(7),)),
    ),
    (
        "re-attach finds a stray second job: terminate it, keep following ours",
        FOLLOWING,
        LabelListed((job(7), job(8))),
        Step(FOLLOWING, (TerminateExtras(7, (8,), (7, 8)), Follow(7))),
    ),
    (
        "re-attach finds the label's job under another number: follow that one",
        FOLLOWING,
        LabelListed((job(9),)),
        Step(following(9), (Adopt(9, "reattached", job(9)), Follow(9))),
    ),
    (
        "re-attach finds nothing live: keep following the number",
        FOLLOWING,
        LabelListed((job(7, DONE),)),
        Step(FOLLOWING, (Follow(7),)),
    ),
    (
        "the retries are spent: give up and stop the job first",
        replace(FOLLOWING, failures=6),
        Failed("protocol", "html"),
        Step(
            replace(FOLLOWING, phase="giving_up", failures=6, exit_code=exitcodes.EXIT_PROTOCOL),
            (
                GiveUp("protocol", "protocol after 6 retries: stopping the job before exiting", "html"),
                Terminate((7,)),
            ),
        ),
    ),
    (
        "JARVICE unavailable past its outage budget: give up at once, stop the job",
        FOLLOWING,
        Failed("unavailable", "down"),
        Step(
            replace(FOLLOWING, phase="giving_up", exit_code=exitcodes.EXIT_REMOTE_UNAVAILABLE),
            (GiveUp("unavailable", "unavailable: stopping the job before exiting", "down"), Terminate((7,))),
        ),
    ),
    (
        "a bug in the runner: stop the job, exit 70",
        FOLLOWING,
        Failed("internal", "KeyError"),
        Step(
            replace(FOLLOWING, phase="giving_up", exit_code=exitcodes.EXIT_INTERNAL),
            (GiveUp("internal", "internal: stopping the job before exiting", "KeyError"), Terminate((7,))),
        ),
    ),
]


@pytest.mark.parametrize(
    ("state", "event", "expected"), [row[1:] for row in FOLLOW_ROWS], ids=[row[0] for row in FOLLOW_ROWS]
)
def test_following_and_finishing(state: RunState, event: runsteps.Event, expected: Step) -> None:
    assert runstate.advance(state, event) == expected


# --- failures before a job is followed -----------------------------------------------------------------

BEFORE_ROWS = [
    (
        "credentials rejected before any job: exit 77, nothing to stop",
        ATTACHING,
        Failed("credentials", "401"),
        Step(
            done(replace(ATTACHING, phase="giving_up"), exitcodes.EXIT_CREDENTIALS),
            (GiveUp("credentials", "credentials before any job was started", "401"), Exit(exitcodes.EXIT_CREDENTIALS)),
        ),
    ),
    (
        "JARVICE down while picking up: stop the inherited job like our own",
        PICKING_UP,
        Failed("unavailable", "down"),
        Step(
            replace(PICKING_UP, phase="giving_up", exit_code=exitcodes.EXIT_REMOTE_UNAVAILABLE),
            (GiveUp("unavailable", "unavailable: stopping the job before exiting", "down"), Terminate((7,))),
        ),
    ),
    (
        "an unknown application after the POST: look for what it may have made",
        POSTED,
        Failed("app_not_found", "404"),
        Step(
            replace(POSTED, phase="giving_up", exit_code=exitcodes.EXIT_CONFIG),
            (
                GiveUp("app_not_found", "app_not_found: stopping the job before exiting", "404"),
                ListLabelJobs(frozenset({3}), finished_too=True),
            ),
        ),
    ),
    (
        # Outside following the recovery table's "retry" still ends the run: the job is left as it
        # was (here: may run, so the exit is not reported and the next runner picks it up).
        "a transient failure while picking up: exit, the inherited job left to the next runner",
        PICKING_UP,
        Failed("protocol", "html"),
        Step(
            done(replace(PICKING_UP, phase="giving_up"), exitcodes.EXIT_PROTOCOL),
            (
                GiveUp("protocol", "protocol while following: retrying", "html"),
                Exit(exitcodes.EXIT_PROTOCOL),
            ),
        ),
    ),
    (
        # A submit whose answer was lost may have made a job: until it is found, it may run. The exit is
        # not reported (the next runner looks it up by the label) and the budget keeps counting it.
        "a transient failure while resolving an unanswered submit: the job it may have made may run",
        RESOLVING,
        Failed("protocol", "html"),
        Step(
            done(replace(RESOLVING, phase="giving_up"), exitcodes.EXIT_PROTOCOL, job_may_run=True),
            (
                GiveUp("protocol", "protocol while following: retrying", "html"),
                Exit(exitcodes.EXIT_PROTOCOL),
            ),
        ),
    ),
]


@pytest.mark.parametrize(
    ("state", "event", "expected"), [row[1:] for row in BEFORE_ROWS], ids=[row[0] for row in BEFORE_ROWS]
)
def test_failures_before_following(state: RunState, event: runsteps.Event, expected: Step) -> None:
    assert runstate.advance(state, event) == expected


# --- a signal: what it means in each phase -------------------------------------------------------------

SIGNAL_ROWS = [
    (
        "before anything: nothing to stop",
        ATTACHING,
        Step(replace(ATTACHING, phase="stopping", exit_code=143), (StopJob(None, drain_output=True),)),
    ),
    (
        "while preparing the submit: nothing was posted, nothing to stop",
        PREPARING,
        Step(replace(PREPARING, phase="stopping", exit_code=143), (StopJob(None, drain_output=True),)),
    ),
    (
        "after the POST went out: look for its job by the label",
        POSTED,
        Step(replace(POSTED, phase="stopping", exit_code=143), (ListLabelJobs(frozenset({3}), finished_too=True),)),
    ),
    (
        "while resolving: look for its job by the label",
        RESOLVING,
        Step(replace(RESOLVING, phase="stopping", exit_code=143), (ListLabelJobs(frozenset({3}), finished_too=True),)),
    ),
    (
        "while picking up by number: the inherited job is ours, stop it",
        PICKING_UP,
        Step(replace(PICKING_UP, phase="stopping", exit_code=143), (StopJob(7, drain_output=True),)),
    ),
    (
        "while picking up by label: look for it, stop it",
        PICKING_UP_BY_LABEL,
        Step(replace(PICKING_UP_BY_LABEL, phase="stopping", exit_code=143), (ListLabelJobs(ALL, finished_too=True),)),
    ),
    (
        "while following: stop the job (shutdown, grace, terminate), print its last words",
        FOLLOWING,
        Step(replace(FOLLOWING, phase="stopping", exit_code=143), (StopJob(7, drain_output=True),)),
    ),
    (
        "after the final output: stop, but do not print it again",
        replace(FINISHING, output_done=True),
        Step(replace(FINISHING, phase="stopping", output_done=True, exit_code=143), (StopJob(7, drain_output=False),)),
    ),
    ("while stopping: recorded only", STOPPING, Step(STOPPING)),
    ("while giving up: recorded only", GIVING_UP, Step(GIVING_UP)),
]


@pytest.mark.parametrize(("state", "expected"), [row[1:] for row in SIGNAL_ROWS], ids=[row[0] for row in SIGNAL_ROWS])
def test_a_signal(state: RunState, expected: Step) -> None:
    assert runstate.advance(state, Signalled(SIGTERM)) == expected


# --- stopping and giving up: the job stopped, or said to run -------------------------------------------

END_ROWS = [
    (
        "the label's live job found: stop it (extras terminated)",
        STOPPING_BY_LABEL,
        LabelListed((job(11), job(12), job(4, DONE))),
        Step(STOPPING_BY_LABEL, (TerminateExtras(11, (12,), (11, 12)), StopJob(11, drain_output=True))),
    ),
    (
        "no live job of the label: nothing to stop",
        STOPPING_BY_LABEL,
        LabelListed((job(4, DONE),)),
        Step(STOPPING_BY_LABEL, (StopJob(None, drain_output=True),)),
    ),
    (
        "stopped: exit 143, the job no longer runs",
        STOPPING,
        Stopped(),
        Step(done(STOPPING, 143, job_may_run=False), (Exit(143),)),
    ),
    (
        "the stop failed: exit 143, the job may run (not reported: the next runner picks it up)",
        STOPPING,
        Failed("unavailable", "down"),
        Step(done(STOPPING, 143, job_may_run=True), (LeaveRunning(7, "down"), Exit(143))),
    ),
    (
        "the drain printed the last output",
        STOPPING,
        OutputPrinted(),
        Step(replace(STOPPING, output_done=True)),
    ),
    (
        "giving up: every new job of the label is terminated",
        GIVING_UP_BY_LABEL,
        LabelListed((job(11), job(12, DONE))),
        Step(GIVING_UP_BY_LABEL, (Terminate((11, 12)),)),
    ),
    (
        "giving up, no new job seen: one may still appear, say it may run",
        GIVING_UP_BY_LABEL,
        LabelListed(()),
        Step(done(GIVING_UP_BY_LABEL, 69, job_may_run=True), (Exit(69),)),
    ),
    (
        "giving up, the label could not be listed: say it may run",
        GIVING_UP_BY_LABEL,
        Failed("unavailable", "down"),
        Step(done(GIVING_UP_BY_LABEL, 69, job_may_run=True), (Exit(69),)),
    ),
    (
        "giving up, terminated: the job no longer runs",
        GIVING_UP,
        TerminateAnswered((True,)),
        Step(done(GIVING_UP, 69, job_may_run=False), (Exit(69),)),
    ),
    (
        "giving up, a terminate failed: the job may run",
        GIVING_UP,
        TerminateAnswered((False, True)),
        Step(done(GIVING_UP, 69, job_may_run=True), (Exit(69),)),
    ),
]


@pytest.mark.parametrize(
    ("state", "event", "expected"), [row[1:] for row in END_ROWS], ids=[row[0] for row in END_ROWS]
)
def test_stopping_and_giving_up(state: RunState, event: runsteps.Event, expected: Step) -> None:
    assert runstate.advance(state, event) == expected


# --- the exit --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reported"),
    [(done(FINISHING, 0), True), (done(STOPPING, 143, job_may_run=True), False), (done(ATTACHING, 79), True)],
    ids=["finished", "may run: a restart picks it up", "nothing submitted"],
)
def test_the_exit_is_reported_only_when_no_job_may_run(state: RunState, reported: bool) -> None:
    assert runstate.is_reported(state) is reported


def test_an_event_the_phase_does_not_expect_is_a_bug() -> None:
    with pytest.raises(runstate.UnexpectedEvent):
        runstate.advance(ATTACHING, SubmitAccepted(1))
