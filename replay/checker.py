"""The independent wrong-burst detector: the slow, plain reference of replay/reference.py ("could a
node host this pod at that moment?"), evaluated over the history the replay recorded (pure).

Timing. The webhook decides from its own watch, the reference from the replay's; the two can be
a few events apart, and a GPU freed a millisecond before an admission is a race, not a wrong
decision. So a decision is judged over its whole window, from `race_window` seconds before it
started until it finished: a burst is *wrong* only if the pod fits at every moment of the
window (claims counted); a keep-local decision is *unprovidable* only if it fits at no moment.
The unguarded count (fits when the decision finished, claims ignored) is kept as an upper bound.

A webhook that logs the resourceVersions its view held when it decided (pods, nodes) is judged from
the state it saw, whichever watch was behind:
- the webhook's: when the replay's watch had already shown a newer object of a kind before the
  window would open, the window opens just before that object instead (a burst on a view that
  lagged the cluster, a GPU freed a second ago and not yet seen, is then a race);
- the replay's: when the replay's watch showed the newest object the webhook's view held only
  after the decision finished, the window closes then instead (a busy replay process reads its
  watch late; what the webhook saw is still judged).
A local decision the webhook made after the one judged (its log gives the order) is no claim on
it, however early the replay saw it. A decision the view itself got wrong is still wrong.
`Verdict.view_lag` and `watch_lag` say by how much the window was widened each way.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from replay.history import Decision, Observation, Placement
from replay.reference import GPU_ONLY, Answer, ReferenceState, Usage, answer, nodes_with_free_gpus, used_per_node


@dataclass(frozen=True, slots=True)
class Window:
    """Does a pod fit at every moment from `start` to `end`? (or, with expect_fit False: never?)"""

    ident: int
    start: float
    end: float
    requests: Mapping[str, int]
    placement: Placement
    exclude: str  # the pod itself
    expect_fit: bool
    sequence: int | None = None  # the decision's place in the webhook's order, when known


@dataclass(frozen=True, slots=True)
class WindowAnswer:
    throughout: bool  # the reference answered `expect_fit` at every moment of the window
    fits_at_start: bool
    fits_at_end_ignoring_claims: bool
    exact: bool = True  # every answer inside the window was exact (see Answer.exact)


def evaluate(
    history: Sequence[Observation],
    local_decisions: Sequence[Decision],
    windows: Sequence[Window],
    *,
    resources: Sequence[str],
) -> dict[int, WindowAnswer]:
    """Replays the history in time order and answers each window from the states inside it.

    Everything stamped at or before a moment is applied first; a local decision claims its GPUs
    from the moment its CREATE was sent. A window is re-checked after every change inside it
    until its answer first differs from `expect_fit` (then it is settled: not throughout).
    """
    timeline: list[tuple[float, int, int, Observation | Decision | Window]] = []
    timeline += [(o.at, 0, i, o) for i, o in enumerate(history)]
    timeline += [(d.started, 1, i, d) for i, d in enumerate(local_decisions)]
    timeline += [(w.start, 2, i, w) for i, w in enumerate(windows)]
    timeline += [(w.end, 3, i, w) for i, w in enumerate(windows)]
    timeline.sort(key=lambda item: item[:3])
    state = ReferenceState()
    open_windows: dict[int, Window] = {}
    at_start: dict[int, bool] = {}
    answers: dict[int, WindowAnswer] = {}
    cache: dict[int, tuple[Usage, list[str]]] = {}  # state version -> usage (one entry)
    inexact: set[int] = set()  # windows where a greedy answer stood in for the search

    def check(window: Window) -> Answer:
        if state.version not in cache:
            cache.clear()
            used = used_per_node(state, resources)
            cache[state.version] = (used, nodes_with_free_gpus(state, used))
        used, gpu_free = cache[state.version]
        result = answer(
            state,
            window.requests,
            window.placement,
            resources=resources,
            exclude=window.exclude,
            used=used,
            gpu_free_nodes=gpu_free,
            sequence=window.sequence,
        )
        if not result.exact:
            inexact.add(window.ident)
        return result

    for _, rank, _, item in timeline:
        if isinstance(item, Observation | Decision):
            before = state.version
            if isinstance(item, Observation):
                state.apply(item)
            else:
                state.decided_local(item)
            if state.version == before:
                continue
            for ident, window in list(open_windows.items()):
                if check(window).fits != window.expect_fit:
                    del open_windows[ident]
        elif rank == 2:
            at_start[item.ident] = check(item).fits
            if at_start[item.ident] == item.expect_fit:
                open_windows[item.ident] = item
        else:
            last = check(item)
            held = open_windows.pop(item.ident, None) is not None and last.fits == item.expect_fit
            answers[item.ident] = WindowAnswer(
                held, at_start[item.ident], last.fits_ignoring_claims, exact=item.ident not in inexact
            )
    return answers


class ViewClock:
    """When the replay's watch showed objects relative to a view's resourceVersion, per kind: the
    observations' times in resourceVersion order (the API server's order), with suffix minima and
    prefix maxima."""

    def __init__(self, history: Sequence[Observation]) -> None:
        self._kinds: dict[str, tuple[list[int], list[float], list[float]]] = {}
        for kind in ("pod", "node"):
            seen = sorted((o.version, o.at) for o in history if o.version > 0 and o.kind.startswith(kind))
            earliest = [at for _, at in seen]
            for i in range(len(earliest) - 2, -1, -1):
                earliest[i] = min(earliest[i], earliest[i + 1])
            latest = [at for _, at in seen]
            for i in range(1, len(latest)):
                latest[i] = max(latest[i], latest[i - 1])
            self._kinds[kind] = ([v for v, _ in seen], earliest, latest)

    def first_newer(self, kind: str, version: int) -> float | None:
        """The first moment the replay saw an object of `kind` newer than `version` (None: never)."""
        versions, earliest, _ = self._kinds[kind]
        i = bisect.bisect_right(versions, version)
        return earliest[i] if i < len(versions) else None

    def caught_up(self, kind: str, version: int) -> float | None:
        """The moment the replay had seen every object of `kind` up to `version` (None: none of them)."""
        versions, _, latest = self._kinds[kind]
        i = bisect.bisect_right(versions, version)
        return latest[i - 1] if i > 0 else None


# A window widened to a lagging view opens this long before the first object the view had not seen.
VIEW_EPSILON = 1e-6


def _views(decision: Decision) -> list[tuple[str, int]]:
    if decision.view is None:
        return []
    return [(kind, v) for kind, v in (("pod", decision.view.pods), ("node", decision.view.nodes)) if v > 0]


def window_start(decision: Decision, clock: ViewClock, *, race_window: float) -> float:
    """`race_window` before the decision started, or earlier: just before the replay's watch showed
    the first object newer than what the webhook's view held (see the module docstring)."""
    start = decision.started - race_window
    for kind, version in _views(decision):
        newer = clock.first_newer(kind, version)
        if newer is not None and newer - VIEW_EPSILON < start:
            start = newer - VIEW_EPSILON
    return start


def window_end(decision: Decision, clock: ViewClock) -> float:
    """When the decision finished, or later: when the replay's watch had shown all the webhook saw."""
    end = decision.finished
    for kind, version in _views(decision):
        caught_up = clock.caught_up(kind, version)
        if caught_up is not None and caught_up > end:
            end = caught_up
    return end


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: Decision
    contradicted_throughout: bool  # the reference disagreed with the decision at every moment
    fits_at_start: bool  # when the window opened, claims counted
    fits_at_end_ignoring_claims: bool
    view_lag: float = 0.0  # how much earlier than race_window the window opened: the webhook's lag
    watch_lag: float = 0.0  # how much later than the decision's end it closed: the replay watch's lag
    exact: bool = True  # False: somewhere in the window greedy best-fit answered for the search

    @property
    def wrong_burst(self) -> bool:
        """Burst although some node could host it throughout the decision (claims counted)."""
        return self.decision.kind == "remote" and self.contradicted_throughout

    @property
    def wrong_burst_upper_bound(self) -> bool:
        return self.decision.kind == "remote" and self.fits_at_end_ignoring_claims

    @property
    def unprovidable_local(self) -> bool:
        """Kept local although no node could host it at any moment of the decision."""
        return self.decision.kind == "local" and self.contradicted_throughout


def judge(
    history: Sequence[Observation],
    decisions: Sequence[Decision],
    *,
    race_window: float,
    resources: Sequence[str] = GPU_ONLY,
) -> list[Verdict]:
    """One verdict per decision, judged over [window_start, finished]."""
    clock = ViewClock(history)
    starts = [window_start(d, clock, race_window=race_window) for d in decisions]
    ends = [window_end(d, clock) for d in decisions]
    windows = [
        Window(
            i,
            starts[i],
            ends[i],
            d.requests,
            d.placement,
            d.key,
            expect_fit=d.kind == "remote",
            sequence=d.view.sequence if d.view is not None else None,
        )
        for i, d in enumerate(decisions)
    ]
    local = [d for d in decisions if d.kind == "local"]
    answers = evaluate(history, local, windows, resources=resources)
    return [
        Verdict(
            decision=d,
            contradicted_throughout=answers[i].throughout,
            fits_at_start=answers[i].fits_at_start,
            fits_at_end_ignoring_claims=answers[i].fits_at_end_ignoring_claims,
            view_lag=d.started - race_window - starts[i],
            watch_lag=ends[i] - d.finished,
            exact=answers[i].exact,
        )
        for i, d in enumerate(decisions)
    ]
