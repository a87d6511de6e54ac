"""Per-policy figures from what one replay run recorded (pure).

Two clocks. Everything the replay measures is wall-clock (monotonic seconds); trace time is
`trace_start + (wall - wall_start) * compression`. Durations reported "in trace time" are wall
durations times the compression, so they include the machinery's own latency (API calls,
watch delivery, kube-scheduler's retry backoff) magnified by the same factor. GPU-time sent to
Nimbix does not depend on the clock: it is each burst pod's life in the trace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kubeplumbing.spendrecord import ANNOTATION_MAX_COST_PER_HOUR, ANNOTATION_MAX_COST_PER_MONTH
from replay import checker, reference
from replay.gang_check import GangQuestion, judge_gangs
from replay.gangs import Gang, GangOutcome, job_hours, membership, tally
from replay.history import CPU, GPU, MEMORY, AdmissionView, Decision, Observation, Placement, Requirement
from replay.trace import PodRow

Policy = Literal["no-bursting", "on-failure", "webhook"]
POLICIES: tuple[Policy, ...] = ("no-bursting", "on-failure", "webhook")
POLICY_TITLES: Mapping[Policy, str] = {
    "no-bursting": "no bursting",
    "on-failure": "burst when the scheduler fails",
    "webhook": "nimbix-burst webhook",
}
SECONDS_PER_HOUR = 3600.0


def format_trace_duration(seconds: float) -> str:
    """A burst-after setting as a person writes it: 0, 90 s, 5 min, 1.5 h."""
    if seconds <= 0:
        return "0"
    if seconds < 60:
        return f"{seconds:g} s"
    if seconds < SECONDS_PER_HOUR:
        return f"{seconds / 60:g} min"
    return f"{seconds / SECONDS_PER_HOUR:g} h"


def format_cap(cap: float) -> str:
    return f"{cap:g}"


def run_title(policy: Policy, burst_after: float | None, cost_cap: float | None = None) -> str:
    """A run's column title: the policy's, and for the webhook with a burst-after setting or a cost
    cap, those too."""
    title = POLICY_TITLES[policy]
    if burst_after is not None:
        title += f", burst-after {format_trace_duration(burst_after)}"
    if cost_cap is not None:
        title += f", max-cost-per-hour {format_cap(cost_cap)}"
    return title


def run_key(policy: Policy, burst_after: float | None, cost_cap: float | None = None) -> str:
    """A run's name in files and namespaces: the policy's, `webhook-ba300` with a burst-after setting,
    `webhook-ba300-cap12p8` with a cost cap too."""
    key = policy if burst_after is None else f"{policy}-ba{burst_after:g}"
    if cost_cap is not None:
        key += f"-cap{format_cap(cost_cap)}"
    return key.replace(".", "p")


# The timeline is sampled at this many points: enough for a smooth PNG, small in the JSON.
TIMELINE_POINTS = 400


def mentions_gpus(message: str) -> bool:
    """Did the scheduler fail the pod (at least partly) for GPUs? E.g. '0/1523 nodes are
    available: 1213 Insufficient nvidia.com/gpu, 310 ...'."""
    return GPU in message


@dataclass(slots=True)
class PodOutcome:
    """What the driver saw happen to one replayed pod (filled in as the run goes)."""

    name: str
    key: str  # namespace/name as created
    row: PodRow
    create_sent: float | None = None
    create_done: float | None = None
    create_error: str = ""
    decision: str = ""  # the webhook's annotation in the CREATE response ("" = none)
    reason: str = ""
    # on-failure: the watch showed it Unschedulable for GPUs; burst-after: the watch showed the
    # controller's delete of the pod that waited in vain
    burst_seen: float | None = None
    burst_done: float | None = None  # on-failure: the GPU-less copy was created; burst-after: the replacement, burst
    burst_key: str = ""
    burst_error: str = ""
    deleted: float | None = None  # delete call returned (the trace's deletion time)
    budget: str = ""  # the webhook's nimbix-burst.io/budget: why a budget or cost cap kept it local
    cost_per_hour: float = 0.0  # what a burst was counted for (only in a namespace with a cost cap)

    @property
    def burst(self) -> bool:
        return self.decision == "remote" or self.burst_done is not None


@dataclass(frozen=True, slots=True)
class RunRecord:
    policy: Policy
    namespace: str
    compression: float
    trace_start: float
    trace_end: float
    wall_start: float  # monotonic time that maps to trace_start
    wall_end: float  # when recording stopped
    replay_wall_seconds: float  # first event .. last event dispatched
    pods: Sequence[PodOutcome]
    history: Sequence[Observation]
    create_latencies_ms: Sequence[float]
    admission_latencies_ms: Sequence[float]  # from the webhook's log (webhook policy only)
    max_lag_seconds: float  # how far the dispatcher fell behind schedule
    truncated: bool  # stopped early by --max-wall-seconds
    preload_pods: int = 0
    notes: tuple[str, ...] = ()
    # namespace/pod -> what the webhook's log says of its decision (view and order)
    views: Mapping[str, AdmissionView] = field(default_factory=dict)
    burst_after: float | None = None  # webhook: the burst-after setting its pods carried (trace seconds)
    cost_cap: float | None = None  # webhook: its namespace's nimbix-burst.io/max-cost-per-hour (None: no cap)
    gangs: tuple[Gang, ...] = ()  # the trace jobs replayed as gangs

    def trace_time(self, wall: float) -> float:
        return self.trace_start + (wall - self.wall_start) * self.compression


@dataclass(frozen=True, slots=True)
class Distribution:
    count: int
    p50: float
    p90: float
    p99: float
    max: float
    mean: float
    p95: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "count": self.count,
            "p50": self.p50,
            "p90": self.p90,
            "p95": self.p95,
            "p99": self.p99,
            "max": self.max,
            "mean": self.mean,
        }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of already sorted values; 0 for none."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def distribution(values: Iterable[float]) -> Distribution:
    ordered = sorted(values)
    if not ordered:
        return Distribution(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return Distribution(
        count=len(ordered),
        p50=percentile(ordered, 50),
        p90=percentile(ordered, 90),
        p99=percentile(ordered, 99),
        max=float(ordered[-1]),
        mean=sum(ordered) / len(ordered),
        p95=percentile(ordered, 95),
    )


def pod_requests(row: PodRow) -> dict[str, int]:
    return {GPU: row.gpus, CPU: row.cpu_milli, MEMORY: row.memory_mib}


def pod_placement(row: PodRow, *, model_label: str) -> Placement:
    if not row.gpu_models:
        return Placement()
    return Placement(terms=((Requirement(model_label, "In", row.gpu_models),),))


def build_decisions(run: RunRecord, *, model_label: str) -> list[Decision]:
    """The decisions to judge. Without a webhook every GPU pod is implicitly kept local at its
    creation; the on-failure controller's bursts are remote decisions made when it acted."""
    decisions: list[Decision] = []
    for pod in run.pods:
        if pod.row.gpus == 0 or pod.create_sent is None or pod.create_done is None or pod.create_error:
            continue
        requests = pod_requests(pod.row)
        placement = pod_placement(pod.row, model_label=model_label)
        kind: Literal["local", "remote"] = "remote" if pod.decision == "remote" else "local"
        view = run.views.get(pod.key)
        decisions.append(Decision(pod.key, kind, pod.create_sent, pod.create_done, requests, placement, view))
        if pod.burst_seen is not None and pod.burst_done is not None:
            decisions.append(Decision(pod.key, "remote", pod.burst_seen, pod.burst_done, requests, placement))
    return decisions


@dataclass(frozen=True, slots=True)
class PodTimes:
    """When the watch first showed a pod bound, Unschedulable for GPUs, and deleted."""

    bound: float | None = None
    unschedulable_for_gpus: float | None = None
    deleted: float | None = None


def pod_times(history: Sequence[Observation], keys: Iterable[str]) -> dict[str, PodTimes]:
    wanted = set(keys)
    bound: dict[str, float] = {}
    failed: dict[str, float] = {}
    deleted: dict[str, float] = {}
    for o in history:
        if o.name not in wanted:
            continue
        if o.kind == "pod-deleted":
            deleted.setdefault(o.name, o.at)
        elif o.pod is not None:
            if o.pod.node:
                bound.setdefault(o.name, o.at)
            if o.pod.unschedulable_message and mentions_gpus(o.pod.unschedulable_message):
                failed.setdefault(o.name, o.at)
    return {k: PodTimes(bound.get(k), failed.get(k), deleted.get(k)) for k in wanted}


Series = list[tuple[float, float]]  # (trace seconds, value), a step function


def step_series(changes: Iterable[tuple[float, float]]) -> Series:
    """Cumulative sum of (time, delta) changes, one point per distinct time."""
    series: Series = []
    total = 0.0
    for at, delta in sorted(changes):
        total += delta
        if series and series[-1][0] == at:
            series[-1] = (at, total)
        else:
            series.append((at, total))
    return series


def sample(series: Series, *, start: float, end: float, points: int = TIMELINE_POINTS) -> Series:
    """The step function's value at `points` evenly spaced times."""
    if end <= start:
        return [(start, series[-1][1] if series else 0.0)]
    out: Series = []
    i = 0
    value = 0.0
    for k in range(points):
        t = start + (end - start) * k / (points - 1)
        while i < len(series) and series[i][0] <= t:
            value = series[i][1]
            i += 1
        out.append((t, value))
    return out


def local_gpu_changes(run: RunRecord) -> list[tuple[float, float]]:
    """(trace time, +/- GPUs) as pods of the run's namespace get bound and go away."""
    prefix = run.namespace + "/"
    holding: dict[str, int] = {}
    changes: list[tuple[float, float]] = []
    for o in run.history:
        if not o.name.startswith(prefix):
            continue
        held = holding.get(o.name, 0)
        now = 0
        if o.kind == "pod" and o.pod is not None and o.pod.node and not o.pod.terminal:
            now = o.pod.requests.get(GPU, 0)
        if now != held:
            changes.append((run.trace_time(o.at), now - held))
            holding[o.name] = now
    return changes


def waiting_changes(run: RunRecord) -> list[tuple[float, float]]:
    """(trace time, +/- 1) as GPU pods of the run's namespace start and stop waiting unbound."""
    prefix = run.namespace + "/"
    waiting: set[str] = set()
    changes: list[tuple[float, float]] = []
    for o in run.history:
        if not o.name.startswith(prefix):
            continue
        now = o.kind == "pod" and o.pod is not None and not o.pod.node and not o.pod.terminal
        now = now and o.pod is not None and o.pod.requests.get(GPU, 0) > 0
        if now != (o.name in waiting):
            changes.append((run.trace_time(o.at), 1 if now else -1))
            if now:
                waiting.add(o.name)
            else:
                waiting.discard(o.name)
    return changes


def remote_gpu_changes(run: RunRecord) -> list[tuple[float, float]]:
    """(trace time, +/- GPUs) of burst pods: from the burst until the trace deletes the pod."""
    changes: list[tuple[float, float]] = []
    for pod in run.pods:
        if not pod.burst or pod.row.gpus == 0:
            continue
        moment = pod.burst_done if pod.burst_done is not None else pod.create_done
        if moment is None:
            continue
        begin = run.trace_time(moment)
        stop = pod.row.deletion if pod.row.deletion is not None else math.inf
        stop = min(stop, run.trace_end)
        if stop > begin:
            changes += [(begin, pod.row.gpus), (stop, -pod.row.gpus)]
    return changes


def time_average(series: Series, *, start: float, end: float) -> float:
    if end <= start or not series:
        return 0.0
    area = 0.0
    for (t, v), (t_next, _) in zip(series, [*series[1:], (end, 0.0)], strict=True):
        lo, hi = max(t, start), min(t_next, end)
        if hi > lo:
            area += v * (hi - lo)
    return area / (end - start)


@dataclass(frozen=True, slots=True)
class Judgement:
    bursts: int
    wrong: int  # a node had the GPUs, CPU and memory the pod asked for, throughout the decision
    wrong_gpu_only: int  # a node had the GPUs (CPU and memory not checked): the webhook's own contract
    wrong_upper_bound: int  # GPUs free when the decision finished, claims and races ignored
    unprovidable_local: list[str]  # keys kept local although no node had the GPUs, throughout
    unprovidable_local_all: list[str]  # ... no node had the GPUs, CPU and memory together
    wrong_keys: list[str] = field(default_factory=list)  # the wrong bursts (GPU+CPU+memory)
    # Per decision made with a known view: how far it lagged the replay's watch beyond the race
    # window, and how far the replay's watch lagged it (checker.Verdict.view_lag, watch_lag).
    view_lags: list[float] = field(default_factory=list)
    watch_lags: list[float] = field(default_factory=list)
    inexact: int = 0  # decisions judged partly by greedy best-fit (the exact search ran too long)
    # Burst gangs whose pods all fit here at once when the first was decided, claims ignored (an upper
    # bound; replay.gang_check). A gang's pods are judged as the gang, never one by one.
    gangs_fitting: list[str] = field(default_factory=list)

    @property
    def wrong_rate(self) -> float:
        return self.wrong / self.bursts if self.bursts else 0.0


def judge_run(run: RunRecord, *, model_label: str, race_window: float) -> tuple[Judgement, list[checker.Verdict]]:
    """Judge every decision by GPUs (wrong bursts by the webhook's contract, unprovidable local
    decisions), and the bursts again counting CPU and memory too (the headline wrong bursts)."""
    decisions = build_decisions(run, model_label=model_label)
    gpu_verdicts = checker.judge(run.history, decisions, race_window=race_window, resources=reference.GPU_ONLY)
    remote = [d for d in decisions if d.kind == "remote"]
    full = checker.judge(run.history, decisions, race_window=race_window, resources=reference.ALL_RESOURCES)
    # Only the webhook decides a gang as one; the burst-on-failure controller bursts each pod alone.
    gangs = run.gangs if run.policy == "webhook" else ()
    in_gangs = {f"{run.namespace}/{m}" for g in gangs for m in g.members}
    alone = [v for v in full if v.decision.key not in in_gangs]
    gpu_alone = [v for v in gpu_verdicts if v.decision.key not in in_gangs]
    judgement = Judgement(
        bursts=len(remote),
        wrong=sum(v.wrong_burst for v in alone),
        wrong_gpu_only=sum(v.wrong_burst for v in gpu_alone),
        wrong_upper_bound=sum(v.wrong_burst_upper_bound for v in gpu_alone),
        unprovidable_local=[v.decision.key for v in gpu_verdicts if v.unprovidable_local],
        unprovidable_local_all=[v.decision.key for v in full if v.unprovidable_local],
        wrong_keys=[v.decision.key for v in alone if v.wrong_burst],
        view_lags=[v.view_lag for v in full if v.decision.view is not None],
        watch_lags=[v.watch_lag for v in full if v.decision.view is not None],
        inexact=sum(not v.exact for v in full) + sum(not v.exact for v in gpu_verdicts),
        gangs_fitting=burst_gangs_fitting(run, model_label=model_label) if gangs else [],
    )
    return judgement, gpu_verdicts


def gang_questions(run: RunRecord, *, model_label: str) -> list[tuple[str, GangQuestion]]:
    """(gang name, question) for each gang all of whose pods burst: asked when its first pod's decision
    finished (the earliest answered CREATE among its pods)."""
    by_name = {p.name: p for p in run.pods}
    questions: list[tuple[str, GangQuestion]] = []
    for gang in run.gangs:
        pods = [by_name[m] for m in gang.members if m in by_name]
        if len(pods) != gang.size or not all(p.burst for p in pods):
            continue
        answered = [p.create_done for p in pods if p.create_done is not None]
        if not answered:
            continue
        first = pods[0].row
        question = GangQuestion(
            at=min(answered),
            size=gang.size,
            requests=pod_requests(first),
            placement=pod_placement(first, model_label=model_label),
        )
        questions.append((gang.name, question))
    return questions


def burst_gangs_fitting(run: RunRecord, *, model_label: str) -> list[str]:
    """The burst gangs whose pods all fit here at once when decided (claims ignored: an upper bound)."""
    asked = gang_questions(run, model_label=model_label)
    answers = judge_gangs(run.history, [q for _, q in asked])
    return [name for (name, _), fitted in zip(asked, answers, strict=True) if fitted]


def held_by_cost_cap(budget: str) -> bool:
    """Did the webhook keep the pod local because a cost cap would be passed (its budget annotation names
    the cap and the figures)?"""
    return ANNOTATION_MAX_COST_PER_HOUR in budget or ANNOTATION_MAX_COST_PER_MONTH in budget


def held_for_want_of_record(budget: str) -> bool:
    """Kept local because no fresh spend record could vouch for the caps (the replay's setup failing)."""
    return "spend record" in budget and not held_by_cost_cap(budget)


@dataclass(frozen=True, slots=True)
class CapOutcome:
    """What a cost cap did in a run."""

    held: int = 0  # GPU pods kept local because a burst would pass the cap
    held_pending: int = 0  # ... of which went Pending for GPUs (the waits the cap causes)
    held_waits: Distribution = field(default_factory=lambda: distribution([]))  # their wait (trace s)
    held_stranded: int = 0  # ... kept local and not bound in time
    no_record: int = 0  # kept local because the spend record was missing or stale
    machine_cost: float = 0.0  # sum of what each burst was counted for x its life in hours (mc_price)


def machine_cost(pods: Sequence[PodOutcome], gangs: Sequence[Gang], *, end: float) -> float:
    """Cost of the bursts at the prices the webhook counted them for (the emulator's `mc_price` x nodes):
    a lone pod for its trace life, a gang (its submitting rank carries the whole job's price) for the
    job's life, until its last pod ends."""
    gang_of = membership(gangs)
    rows = {p.name: p.row for p in pods}
    total = 0.0
    for pod in pods:
        if not pod.burst or pod.cost_per_hour <= 0:
            continue
        gang = gang_of.get(pod.name)
        if gang is None:
            hours = pod.row.duration(end=end) / SECONDS_PER_HOUR
        else:
            members = [rows[m] for m in gang.members if m in rows]
            gpus = sum(r.gpus for r in members)
            hours = job_hours(members, end=end) / gpus if gpus else 0.0
        total += pod.cost_per_hour * hours
    return total


def remote_gpu_hours(pods: Sequence[PodOutcome], gangs: Sequence[Gang], *, end: float) -> float:
    """GPU-hours sent to Nimbix: each lone burst pod's GPUs x its trace life, and each burst gang as one
    job (replay.gangs.job_hours); a split gang's burst pods (the webhook must never split one) alone."""
    burst = {p.name: p.burst for p in pods}
    rows = {p.name: p.row for p in pods}
    whole = tally(gangs, burst, rows, end=end)
    in_whole_gangs = {m for g in gangs if all(burst.get(x, False) for x in g.members) for m in g.members}
    alone = sum(p.row.gpus * p.row.duration(end=end) for p in pods if p.burst and p.name not in in_whole_gangs)
    return alone / SECONDS_PER_HOUR + whole.gpu_hours


@dataclass(frozen=True, slots=True)
class PolicySummary:
    policy: Policy
    gpu_pods: int
    cpu_pods: int
    create_errors: int
    burst: int
    burst_percent: float
    remote_gpu_hours: float
    remote_cost: float
    pending_for_gpus: int
    pending_trace_seconds: Distribution
    still_pending_at_end: int
    pending_unprovidable: int  # pending for GPUs that no node could provide at creation
    pending_unprovidable_all: int  # ... counting CPU and memory too
    unprovidable_local: int
    unprovidable_local_all: int
    burst_delay_trace_seconds: Distribution  # on-failure: creation -> burst
    stranded: int
    deleted_before_bound: int
    wrong_bursts: int
    wrong_burst_rate: float
    wrong_bursts_gpu_only: int
    wrong_bursts_upper_bound: int
    webhook_fail_open: int
    local_gpus_peak: float
    local_gpus_mean: float
    remote_gpus_peak: float
    admission_latency_ms: Distribution
    create_latency_ms: Distribution
    replay_wall_seconds: float
    max_lag_seconds: float
    truncated: bool
    waiting_peak: float = 0.0
    views_known: int = 0  # decisions logged with the webhook's view (resourceVersions)
    views_lagging: int = 0  # ... whose view lagged the replay's watch by more than the race window
    view_lag_max_seconds: float = 0.0
    watch_lagging: int = 0  # ... whose view the replay's watch showed only after the decision finished
    watch_lag_max_seconds: float = 0.0
    judged_inexactly: int = 0  # judgements where greedy best-fit answered for the claims' search
    local_timeline: Series = field(default_factory=list)
    remote_timeline: Series = field(default_factory=list)
    waiting_timeline: Series = field(default_factory=list)
    examples: Mapping[str, Sequence[str]] = field(default_factory=dict)
    burst_after: float | None = None  # webhook: the burst-after setting its pods carried (trace seconds)
    # Every GPU pod's wait for GPUs (0 for one never Pending): what the trade-off picture weighs cost against
    waited_trace_seconds: Distribution = field(default_factory=lambda: distribution([]))
    gangs: GangOutcome = field(default_factory=GangOutcome)
    cost_cap: float | None = None  # webhook: the namespace's max-cost-per-hour (None: none)
    caps: CapOutcome = field(default_factory=CapOutcome)
    gangs_fitting: int = 0  # burst gangs whose pods all fit here at once (claims ignored: an upper bound)
    gang_cost: float = 0.0  # the burst gangs' GPU-hours x the assumed price per GPU-hour

    @property
    def title(self) -> str:
        return run_title(self.policy, self.burst_after, self.cost_cap)

    @property
    def key(self) -> str:
        return run_key(self.policy, self.burst_after, self.cost_cap)


def summarize(
    run: RunRecord,
    judgement: Judgement,
    *,
    price_per_gpu_hour: float,
    stranded_timeout: float,
) -> PolicySummary:
    created = [p for p in run.pods if p.create_done is not None and not p.create_error]
    gpu = [p for p in created if p.row.gpus > 0]
    burst = [p for p in gpu if p.burst]
    remote_hours = remote_gpu_hours(gpu, run.gangs, end=run.trace_end)
    gangs = tally(run.gangs, {p.name: p.burst for p in gpu}, {p.name: p.row for p in gpu}, end=run.trace_end)
    times = pod_times(run.history, [p.key for p in gpu])
    unprovidable = set(judgement.unprovidable_local)
    unprovidable_all = set(judgement.unprovidable_local_all)

    pending: list[float] = []
    waited: dict[str, float] = {}
    still_pending = 0
    pending_unprovidable = 0
    pending_unprovidable_all = 0
    stranded: list[str] = []
    deleted_before_bound = 0
    for pod in gpu:
        t = times[pod.key]
        sent = pod.create_sent if pod.create_sent is not None else run.wall_start
        if t.unschedulable_for_gpus is not None:
            ends = [x for x in (t.bound, t.deleted, pod.burst_seen) if x is not None]
            end = min(ends) if ends else run.wall_end
            still_pending += not ends
            pending.append((end - sent) * run.compression)
            waited[pod.key] = pending[-1]
            pending_unprovidable += pod.key in unprovidable
            pending_unprovidable_all += pod.key in unprovidable_all
        if pod.decision == "remote" or pod.burst_seen is not None:
            continue  # burst: never meant to bind locally
        if t.bound is not None and t.bound - sent <= stranded_timeout:
            continue
        lifetime = (pod.row.deletion - pod.row.creation) / run.compression if pod.row.deletion is not None else math.inf
        observed = run.wall_end - sent
        if min(lifetime, observed) < stranded_timeout:
            deleted_before_bound += t.bound is None and t.deleted is not None
            continue
        stranded.append(pod.key)

    delays = [
        (p.burst_seen - p.create_sent) * run.compression
        for p in burst
        if p.burst_seen is not None and p.create_sent is not None
    ]
    local = step_series(local_gpu_changes(run))
    remote = step_series(remote_gpu_changes(run))
    waiting = step_series(waiting_changes(run))
    span = (run.trace_start, run.trace_end)
    return PolicySummary(
        policy=run.policy,
        gpu_pods=len(gpu),
        cpu_pods=len(created) - len(gpu),
        create_errors=sum(1 for p in run.pods if p.create_error),
        burst=len(burst),
        burst_percent=100.0 * len(burst) / len(gpu) if gpu else 0.0,
        remote_gpu_hours=remote_hours,
        remote_cost=remote_hours * price_per_gpu_hour,
        pending_for_gpus=len(pending),
        pending_trace_seconds=distribution(pending),
        still_pending_at_end=still_pending,
        pending_unprovidable=pending_unprovidable,
        pending_unprovidable_all=pending_unprovidable_all,
        unprovidable_local=len(unprovidable),
        unprovidable_local_all=len(unprovidable_all),
        burst_delay_trace_seconds=distribution(delays),
        stranded=len(stranded),
        deleted_before_bound=deleted_before_bound,
        wrong_bursts=judgement.wrong,
        wrong_burst_rate=judgement.wrong_rate,
        wrong_bursts_gpu_only=judgement.wrong_gpu_only,
        wrong_bursts_upper_bound=judgement.wrong_upper_bound,
        webhook_fail_open=sum(1 for p in gpu if run.policy == "webhook" and not p.decision),
        local_gpus_peak=max((v for _, v in local), default=0.0),
        local_gpus_mean=time_average(local, start=span[0], end=span[1]),
        remote_gpus_peak=max((v for _, v in remote), default=0.0),
        admission_latency_ms=distribution(run.admission_latencies_ms),
        create_latency_ms=distribution(run.create_latencies_ms),
        replay_wall_seconds=run.replay_wall_seconds,
        max_lag_seconds=run.max_lag_seconds,
        truncated=run.truncated,
        waiting_peak=max((v for _, v in waiting), default=0.0),
        views_known=len(judgement.view_lags),
        views_lagging=sum(1 for lag in judgement.view_lags if lag > 0),
        view_lag_max_seconds=max(judgement.view_lags, default=0.0),
        watch_lagging=sum(1 for lag in judgement.watch_lags if lag > 0),
        watch_lag_max_seconds=max(judgement.watch_lags, default=0.0),
        judged_inexactly=judgement.inexact,
        local_timeline=sample(local, start=span[0], end=span[1]),
        remote_timeline=sample(remote, start=span[0], end=span[1]),
        waiting_timeline=sample(waiting, start=span[0], end=span[1]),
        examples={
            "stranded": stranded[:10],
            "wrong_bursts": sorted(judgement.wrong_keys)[:10],
            "unprovidable_local": sorted(unprovidable)[:10],
            "unprovidable_local_all_resources": sorted(unprovidable_all)[:10],
            "gangs_burst_though_they_fit": sorted(judgement.gangs_fitting)[:10],
        },
        burst_after=run.burst_after,
        waited_trace_seconds=distribution(waited.get(p.key, 0.0) for p in gpu),
        gangs=gangs,
        gang_cost=gangs.gpu_hours * price_per_gpu_hour,
        cost_cap=run.cost_cap,
        gangs_fitting=len(judgement.gangs_fitting),
        caps=_cap_outcome(run, gpu, waited, stranded=set(stranded)),
    )


def _cap_outcome(
    run: RunRecord, gpu: Sequence[PodOutcome], waited: Mapping[str, float], *, stranded: set[str]
) -> CapOutcome:
    held = [p for p in gpu if not p.burst and held_by_cost_cap(p.budget)]
    waits = [waited[p.key] for p in held if p.key in waited]
    return CapOutcome(
        held=len(held),
        held_pending=len(waits),
        held_waits=distribution(waits),
        held_stranded=sum(1 for p in held if p.key in stranded),
        no_record=sum(1 for p in gpu if held_for_want_of_record(p.budget)),
        machine_cost=machine_cost(gpu, run.gangs, end=run.trace_end),
    )
