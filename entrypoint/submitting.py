"""Finding the job or making it: the inherited job's status, the label's jobs, the machine and the
GPU budget, the submit POST (sent once, held against signals until its outcome is known, backed
off within the outage budget) and the resolve window after an unanswered one. The remote run's
shell for the "picking_up", "attaching", "submitting" and "resolving" phases."""

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Final

from entrypoint import budget, candidates, homeward, runsteps
from entrypoint.plan import MachineChoice, NoMachineFits, build_submit_body
from entrypoint.progress import ShellPart
from entrypoint.signals import CancelRequested
from jarvice import exitcodes
from jarvice.client import JobNotFound, SubmitOutcomeUnknown, SubmitRefused
from jarvice.model import JobEntry, SubmitBody, SubmitResult

log = logging.getLogger(__name__)

# Between looks for a job created by an unanswered submit.
RESOLVE_PAUSE_SECONDS: Final = 1.0


class Submitter(ShellPart):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.body: SubmitBody | None = None
        self.attempt = 0  # submits that failed so far
        self.first_failure: float | None = None
        self.resolve_deadline = 0.0
        self.last_error = ""  # the unanswered submit's, for a give-up after the resolve window
        self.candidates: tuple[str, ...] = ()  # the machines to try, in order (entrypoint.candidates)
        self.current = 0  # the candidate the next submit goes to
        self.submitted_on: dict[int, int] = {}  # job this runner submitted -> its candidate

    def inspect_inherited(self, number: int) -> runsteps.InheritedJobAnswered | runsteps.InheritedJobUnknown:
        try:
            status = self.backend.fetch_status(number)
        except JobNotFound:
            log.warning("the job in the restart state is unknown to JARVICE", extra={"job": number})
            return runsteps.InheritedJobUnknown()
        log.info(
            "picking up the job of the previous runner",
            extra={"job": number, "state": status.state, "printed_lines": self.progress.record.printed_lines},
        )
        return runsteps.InheritedJobAnswered(status.state)

    def list_label_jobs(self, action: runsteps.ListLabelJobs, *, deadline: float | None) -> runsteps.LabelListed:
        """The label's jobs not in `exclude`, lowest number first: live ones, and finished ones if asked."""
        found = {j.number: j for j in self._mine(self.backend.fetch_jobs(completed=False, deadline=deadline))}
        if action.finished_too:
            found.update({j.number: j for j in self._mine(self.backend.fetch_jobs(completed=True, deadline=deadline))})
        return runsteps.LabelListed(tuple(found[n] for n in sorted(found) if n not in action.exclude))

    def _mine(self, jobs: Mapping[int, JobEntry]) -> list[JobEntry]:
        return sorted((j for j in jobs.values() if j.label == self.label), key=lambda j: j.number)

    def prepare(self) -> runsteps.NothingSubmitted | runsteps.SubmitPrepared:
        """Choose the machine, hold it to the GPU budget, build the body; save the state before the submit."""
        machines = self.backend.fetch_machines()
        if not self.candidates:
            order = candidates.order_candidates(self.plan, machines)
            if isinstance(order, NoMachineFits):
                log.error("no machine fits the request", extra={"reason": order.reason})
                return runsteps.NothingSubmitted(exitcodes.EXIT_NO_MACHINE)
            self.candidates = order.machines
            log.info("machine candidates", extra={"machines": list(order.machines), "reason": order.reason})
            if order.warning:
                log.warning(
                    "machine smaller than requested", extra={"machine": order.machines[0], "reason": order.warning}
                )
        name = self.candidates[self.current]
        if name not in machines:
            log.error("the next candidate machine left /jarvice/machines", extra={"machine": name})
            return runsteps.NothingSubmitted(exitcodes.EXIT_NO_MACHINE)
        choice = MachineChoice(name, f"candidate {self.current + 1} of {len(self.candidates)}")
        log.info("machine selected", extra={"machine": choice.machine, "reason": choice.reason})
        if self.plan.counted_gpus is None:
            log.info("no counted GPUs set: the machine is not checked against a GPU budget")
        over = budget.check_gpu_budget(
            machines[choice.machine], nodes=self.plan.nodes, counted_gpus=self.plan.counted_gpus
        )
        if over is not None:
            log.error(
                "the machine holds more GPUs than the budget counted; nothing submitted",
                extra={
                    "machine": choice.machine,
                    "gpus": machines[choice.machine].gpus,
                    "nodes": self.plan.nodes,
                    "counted_gpus": self.plan.counted_gpus,
                    "reason": over.reason,
                },
            )
            return runsteps.NothingSubmitted(exitcodes.EXIT_OVER_BUDGET)
        plan = self.plan
        if self.deps.data is not None:  # the staged paths linked to their vault copies first
            plan = dataclasses.replace(plan, shell_command=self.deps.data.command(plan.shell_command))
        if self.deps.checkpoints:  # its job may be asked for a checkpoint (a move home)
            plan = dataclasses.replace(plan, shell_command=homeward.with_signal_prelude(plan.shell_command))
        body = build_submit_body(plan, machine=choice.machine)
        body["job_label"] = self.label
        self.body = body
        # Saved before the submit: a runner killed between submit and the next save is resolved
        # through the label by its successor.
        self.progress.save_job(None)
        before = frozenset(j.number for j in self._mine(self.backend.fetch_jobs(completed=True)))
        return runsteps.SubmitPrepared(before)

    def queued_too_long(self, number: int, state: str, queued_seconds: float) -> runsteps.QueuedTooLong | None:
        """Whether the job moves to the next candidate (`candidates.decide_move`). Only a job this
        runner submitted moves: of an inherited or attached one, neither its machine nor its queue time is known."""
        index = self.submitted_on.get(number)
        if index is None:
            return None
        decision = candidates.decide_move(
            state=state,
            queued_seconds=queued_seconds,
            max_queue_seconds=self.plan.max_remote_queue_seconds,
            candidates=self.candidates,
            current=index,
            gang=self.plan.gang is not None,
        )
        if isinstance(decision, candidates.Stay):
            return None
        return runsteps.QueuedTooLong(number, decision.to, decision.reason)

    def moved(self, action: runsteps.MoveJob) -> None:
        """The queued job has ended: the next submit goes to the machine it moves to."""
        self.current = self.candidates.index(action.to)

    def submit(
        self, action: runsteps.Submit
    ) -> runsteps.SubmitAccepted | runsteps.SubmitDeclined | runsteps.SubmitUnanswered:
        assert self.body is not None
        if action.again:
            delay = min(
                self.tuning.retry_cap_seconds,
                self.tuning.retry_base_seconds * 2 ** min(self.attempt - 1, 30),
            ) * self.deps.rng.uniform(0.5, 1.0)
            log.warning("submitting again", extra={"retry_in": round(delay, 3)})
            self.deps.sleep(delay)
        self.note(runsteps.SubmitPosting())
        result: SubmitResult | None = None
        try:
            with self.deps.cancel.deferred():
                result = self.backend.submit(self.body)
        except CancelRequested:
            if result is not None:
                self.note(runsteps.SubmitAccepted(result.number))  # known before the signal is handled
            raise
        except SubmitRefused as exc:
            log.warning("JARVICE refused the submit; no job was created", extra={"error": str(exc)})
            return runsteps.SubmitDeclined(self._failed(), str(exc))
        except SubmitOutcomeUnknown as exc:
            log.warning(
                "submit outcome unknown; looking for the job by its label",
                extra={"error": str(exc), "job_label": self.label, "answered": exc.answered},
            )
            self.last_error = str(exc)
            # The whole resolve window: a gateway's 502/504 may come before JARVICE created the job.
            self.resolve_deadline = self.deps.clock() + self.tuning.submit_resolve_seconds
            return runsteps.SubmitUnanswered()
        log.info("job submitted", extra={"job": result.number, "job_name": result.name})
        return runsteps.SubmitAccepted(result.number)

    def await_job(self) -> runsteps.ResolveWindowClosed | None:
        """Pause before the next look for the unanswered submit's job; None while the window is open."""
        if self.deps.clock() >= self.resolve_deadline:
            log.warning("no job carries this label after the resolve window", extra={"job_label": self.label})
            return runsteps.ResolveWindowClosed(self._failed(), self.last_error)
        self.deps.sleep(min(RESOLVE_PAUSE_SECONDS, self.tuning.poll_seconds))
        return None

    def _failed(self) -> bool:
        """Count a failed submit; True once the failures span the outage budget."""
        now = self.deps.clock()
        self.first_failure = now if self.first_failure is None else self.first_failure
        self.attempt += 1
        return now - self.first_failure >= self.tuning.outage_seconds
