"""Whether a running burst job moves home from its checkpoint, and how a move goes on (pure).

A queued burst job comes home by deleting its pod (controller.homecoming). A running one has work to
keep: it moves home from its checkpoint. The pod opted in (`nimbix-burst.io/come-home: running`, with a
`checkpoint-dir` under a staged path); a local node can run it (the same accounted decision as a queued
homecoming: the webhook's dry run, one pod a round, none while the last one settles); and it is worth
it (the rest of its walltime at its machine's price is above `come-home-min-saving`); and its last
checkpoint is fresh (`checkpoint_stale`: the work a failed move would cost is within its interval).
Then:

1. asked: the controller marks the pod (`nimbix-burst.io/move-home: <job number>`); the pod's runner
   sees the mark and asks the job for a checkpoint through JARVICE's signal path (SIGUSR1 to the
   program, through the image's JARVICE_SIGNAL_OVERRIDE script);
2. written, job stopped: the program writes its checkpoint and exits 0; the job ends COMPLETED (its
   billing ends);
3. copied back: the runner copies the checkpoint back into the volume (the normal stage-out) and exits
   with EXIT_MOVED_HOME, which the Job's podFailurePolicy ignores: the Job creates the replacement;
4. resumed: the webhook decides the replacement local (it fits now) and it binds to a node; it resumes
   from the checkpoint.

Any step that does not come by its deadline leaves the job where it is: before the job ended, it keeps
running on Nimbix (the mark is taken away); a replacement that cannot bind here bursts again and resumes
remotely from the same checkpoint. The old pod ends before the Job creates the replacement, so the work
never runs in two places; a job still live after its pod left with the checkpoint is terminated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from controller.model import format_time
from jarvice.checkpoint import FRESHNESS_SLACK_SECONDS, CheckpointContract
from jarvice.exitcodes import EXIT_MOVED_HOME
from jarvice.model import STATUS_COMPLETED, JobEntry, is_terminal

# The checkpoint asked for must be written (the job ends COMPLETED) within this long: a program that
# does not answer SIGUSR1 keeps running remotely.
CHECKPOINT_DEADLINE_SECONDS: Final = 300.0
# After the job ended, the runner copies the checkpoint back and its pod ends within this long.
COPY_BACK_DEADLINE_SECONDS: Final = 900.0
# The replacement binds to a node (or bursts again) within this long (as a queued homecoming settles).
RESUME_DEADLINE_SECONDS: Final = 300.0


@dataclass(frozen=True, slots=True)
class MoveChoice:
    go: bool
    reason: str
    saving: float = 0.0  # the money the rest of the walltime would cost remotely
    gpu_hours: float = 0.0  # the GPU-hours the rest of the walltime would run remotely
    again: bool = False  # refused for now only (a stale checkpoint): looked at again each round


@dataclass(frozen=True, slots=True)
class LastCheckpoint:
    """The newest complete checkpoint the remote job's directory holds, as the gateway read the vault."""

    name: str = ""  # relative to the checkpoint directory; "" with `written` None: there is none yet
    written: float | None = None  # its modification time (Unix seconds, the vault's clock)


def parse_last_checkpoint(body: object) -> LastCheckpoint:
    """The gateway's answer (`GET /controller/checkpoint`); ValueError for one of another shape."""
    found = body.get("checkpoint", ...) if isinstance(body, dict) else ...
    if found is None:
        return LastCheckpoint()
    name = found.get("name") if isinstance(found, dict) else None
    mtime = found.get("mtime") if isinstance(found, dict) else None
    if not isinstance(name, str) or not name or isinstance(mtime, bool) or not isinstance(mtime, int | float):
        raise ValueError(f"not a checkpoint answer: {str(body)[:200]}")
    return LastCheckpoint(name, float(mtime))


def checkpoint_stale(
    checkpoint: LastCheckpoint | None, terms: CheckpointContract, job: JobEntry, *, now: float
) -> str | None:
    """Why the work a failed move would cost is more than the pod's interval allows (None: it is not,
    or it is not known). That work is what was done since the newest checkpoint, or since the job
    started when it has written none since (it resumed from the newest one staged in): a program that
    has not checkpointed by itself for longer than its interval (and FRESHNESS_SLACK_SECONDS) does not
    keep its contract, and a move that fails half-way, or a program that exits without the checkpoint
    asked for, would lose all of it. The text stays the same from round to round."""
    if checkpoint is None:
        return None
    started = float(job.start_time) if job.start_time > 0 else None
    written = checkpoint.written
    since = max(t for t in (written, started, 0.0) if t is not None)
    allowed = terms.interval_seconds + FRESHNESS_SLACK_SECONDS
    if since <= 0 or now - since <= allowed:
        return None
    bound = f"longer ago than its interval ({terms.interval_seconds} s) and {FRESHNESS_SLACK_SECONDS} s of slack"
    if written is not None and (started is None or written >= started):
        return f"its newest checkpoint ({checkpoint.name}) was written at {format_time(written)}, {bound}"
    assert started is not None
    if written is None:
        return f"it has written no checkpoint since its job started at {format_time(started)}, {bound}"
    return (
        f"it has written no checkpoint since its job started at {format_time(started)}, {bound} (the newest,"
        f" {checkpoint.name}, is from before)"
    )


def remaining_seconds(job: JobEntry, *, now: float) -> float | None:
    """The rest of the job's walltime limit (None: JARVICE did not echo a limit, or it has not started)."""
    if job.walltime_limit is None or job.start_time <= 0:
        return None
    return max(0.0, job.walltime_limit - (now - job.start_time))


def decide(
    terms: CheckpointContract | None,
    job: JobEntry,
    *,
    price_per_hour: float | None,
    gpus: int,
    now: float,
    checkpoint: LastCheckpoint | None,
    policy_ignores_move: bool,
    parallel_unindexed: int = 0,
) -> MoveChoice:
    """Whether the running `job` of a pod a local node can run now moves home. `terms`: the pod's
    checkpoint contract (jarvice.checkpoint; None: it names no checkpoint directory).

    `price_per_hour`: the job's machine price times its nodes (None: unknown); `gpus`: the job's GPUs;
    `checkpoint`: the newest complete checkpoint in the remote job's directory (None: not known);
    `policy_ignores_move`: the pod's Job ignores the runner's moved-home exit (its podFailurePolicy);
    `parallel_unindexed`: the pods its Job runs at once without completion indexes (0: not such a Job).
    Those pods share the one checkpoint directory of their template, and nothing tells a replacement
    which checkpoint was its pod's: it could resume from a sibling's, whose work would run twice."""
    if terms is None:
        return MoveChoice(False, "no nimbix-burst.io/checkpoint-dir: there is nothing to resume from")
    if not terms.come_home_running:
        return MoveChoice(False, "not opted in (nimbix-burst.io/come-home: running on the pod or its namespace)")
    if not policy_ignores_move:
        return MoveChoice(
            False, f"its Job's podFailurePolicy does not ignore exit code {EXIT_MOVED_HOME} (the move's end)"
        )
    if parallel_unindexed > 1:
        return MoveChoice(
            False,
            f"its Job runs {parallel_unindexed} pods at once without completion indexes: they share one checkpoint"
            " directory, and the replacement could resume from another pod's checkpoint",
        )
    if job.state.strip().upper() != "PROCESSING STARTING":
        return MoveChoice(False, f"its JARVICE job {job.number} is not running ({job.state})")
    remaining = remaining_seconds(job, now=now)
    if remaining is None or price_per_hour is None:
        return MoveChoice(False, f"the rest of job {job.number}'s walltime or its price is not known")
    hours = remaining / 3600.0
    saving = hours * price_per_hour
    if saving <= terms.min_saving:
        return MoveChoice(
            False, f"not worth it: the rest of its walltime costs {saving:.2f}, not above {terms.min_saving:.2f}"
        )
    if (stale := checkpoint_stale(checkpoint, terms, job, now=now)) is not None:
        return MoveChoice(False, stale, again=True)
    return MoveChoice(True, f"saves {saving:.2f} ({hours * gpus:.1f} GPU-hours)", saving, hours * gpus)


# "withdrawn": given up before the job ended, the mark taken away; the runner may have asked already,
# and a program that writes its checkpoint late still ends the pod with a move's exit: watched until then.
Step = Literal["asked", "withdrawn", "job_stopped", "copied_back", "resumed", "given_up"]
Action = Literal["unmark", "terminate"]


@dataclass(frozen=True, slots=True)
class Move:
    pod_uid: str
    owner_uid: str  # the Job's UID: its replacement pod is the one to resume
    job_number: int
    step: Step
    since: float  # when the step began (monotonic seconds)
    gpu_hours: float  # what the decision counted as brought home
    # The Job's pods when the move began (its own, and a parallel Job's others): never its replacement,
    # which the Job creates only once the moving pod ended.
    before: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Seen:
    """What the controller sees of a move this round."""

    job: JobEntry | None  # the job, live or ended (None: not listed)
    pod_gone: bool  # the moving pod has ended (Failed, Succeeded) or is gone
    pod_exit_code: int | None  # its burst container's exit code, when it ended
    replacement_node: str  # the replacement's node ("" not bound, or none yet)
    replacement_remote: bool  # the replacement was decided remote (the GPUs were taken again)


@dataclass(frozen=True, slots=True)
class Progress:
    move: Move
    events: tuple[tuple[str, str], ...] = ()  # (reason, message) for the Job's Events
    actions: tuple[Action, ...] = ()


def start(
    pod_uid: str, owner_uid: str, job_number: int, *, now: float, gpu_hours: float, before: frozenset[str] = frozenset()
) -> Progress:
    move = Move(pod_uid, owner_uid, job_number, "asked", now, gpu_hours, before)
    return Progress(
        move, (("NimbixMoveCheckpointAsked", f"asked JARVICE job {job_number} for a checkpoint to move it home"),)
    )


def adopt(pod_uid: str, owner_uid: str, job_number: int, *, now: float, before: frozenset[str] = frozenset()) -> Move:
    """A move under way that another leader started (the pod carries its mark), taken over: at the first
    step (what comes next is read from the job and the pod, as for any move), its deadline counted from
    now, and no Event for what the other leader said already. What it counted as brought home is not
    known here: it is not counted again."""
    return Move(pod_uid, owner_uid, job_number, "asked", now, 0.0, before)


def _ended(job: JobEntry | None) -> bool:
    return job is not None and is_terminal(job.state)


def _still_billing(seen: Seen) -> tuple[Action, ...]:
    """Never a job billing after its pod came home: the pod left with the checkpoint, a live job ends."""
    return ("terminate",) if seen.job is not None and not _ended(seen.job) else ()


def _give_up(move: Move, why: str, *, now: float, actions: Sequence[Action] = ()) -> Progress:
    return Progress(replace(move, step="given_up", since=now), (("NimbixMoveGivenUp", why),), tuple(actions))


def advance(move: Move, seen: Seen, *, now: float) -> Progress:
    """The move's next step from what is seen now (its events and the actions to take)."""
    waited = now - move.since
    number = move.job_number
    if move.step == "asked":
        if _ended(seen.job):
            assert seen.job is not None
            if seen.job.state.strip().upper() != STATUS_COMPLETED:
                return _give_up(move, f"job {number} ended {seen.job.state} during the move", now=now)
            return Progress(
                replace(move, step="job_stopped", since=now),
                (
                    ("NimbixMoveCheckpointWritten", f"job {number}'s program wrote its checkpoint and exited"),
                    ("NimbixMoveJobStopped", f"job {number} ended COMPLETED: its billing ended"),
                ),
            )
        if seen.pod_gone:
            return _give_up(move, f"the pod ended before job {number} wrote its checkpoint", now=now)
        if waited >= CHECKPOINT_DEADLINE_SECONDS:
            why = f"no checkpoint from job {number} within {CHECKPOINT_DEADLINE_SECONDS:.0f} s: it keeps running"
            given_up = _give_up(move, why, now=now, actions=("unmark",))
            return replace(given_up, move=replace(given_up.move, step="withdrawn"))
        return Progress(move)
    if move.step == "withdrawn":
        if not seen.pod_gone:
            return Progress(move)
        if seen.pod_exit_code != EXIT_MOVED_HOME:  # said when it was withdrawn
            return Progress(replace(move, step="given_up", since=now))
        message = f"job {number} wrote its checkpoint late; it was copied back into the volume, the replacement resumes"
        return Progress(
            replace(move, step="copied_back", since=now), (("NimbixMoveCopiedBack", message),), _still_billing(seen)
        )
    if move.step == "job_stopped":
        if seen.pod_gone:
            if seen.pod_exit_code == EXIT_MOVED_HOME:
                return Progress(
                    replace(move, step="copied_back", since=now),
                    (("NimbixMoveCopiedBack", f"the checkpoint of job {number} was copied back into the volume"),),
                    _still_billing(seen),
                )
            return _give_up(move, f"the pod ended with exit code {seen.pod_exit_code}, not a move's", now=now)
        if waited >= COPY_BACK_DEADLINE_SECONDS:
            why = f"the checkpoint was not copied back within {COPY_BACK_DEADLINE_SECONDS:.0f} s"
            return _give_up(move, why, now=now)
        return Progress(move)
    if move.step == "copied_back":
        actions = _still_billing(seen)
        if seen.replacement_node:
            message = f"the replacement runs on node {seen.replacement_node}, from job {number}'s checkpoint"
            return Progress(replace(move, step="resumed", since=now), (("NimbixMoveResumed", message),), actions)
        if seen.replacement_remote:
            why = "the local GPUs were taken again: the replacement bursts and resumes remotely from the checkpoint"
            return _give_up(move, why, now=now, actions=actions)
        if waited >= RESUME_DEADLINE_SECONDS:
            return _give_up(move, f"no replacement bound within {RESUME_DEADLINE_SECONDS:.0f} s", now=now)
        return Progress(move, (), actions)
    return Progress(move)  # resumed, given_up: done


def finished(move: Move) -> bool:
    return move.step in ("resumed", "given_up")


def under_way(move: Move) -> bool:
    """Whether the move may still take local GPUs soon (a withdrawn one waits on a job that runs on)."""
    return not finished(move) and move.step != "withdrawn"
