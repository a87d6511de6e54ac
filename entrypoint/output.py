"""Remote output reconciliation: tail snapshots in, each application line out exactly once. Pure.

JARVICE offers `/jarvice/tail?lines=N` (the last N lines, running jobs only) and
`/jarvice/output?lines=0` (everything, finished jobs only). Output starts with a platform preamble
(`INIT[1]: ...` lines) closed by a line of 79 `#`; only what follows is the application's.

The stream state counts the *raw* complete lines already consumed (preamble included) and keeps
the last few of them. A tail window that is shorter than requested is the whole output, so the new
lines are simply the ones past the count. A full window is placed by matching its start against
the remembered lines; when that placement is ambiguous (repeated lines) or may have skipped lines
(more output since the last poll than the window holds), the caller is told to fetch the whole
output (`lines=0`) instead: never guess. Only complete (newline-terminated) lines are emitted while
the job runs; the final `output` call supplies the rest, including a last line without a newline.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

SEPARATOR: Final = "#" * 79
PREAMBLE_PREFIX: Final = "INIT["


@dataclass(frozen=True, slots=True)
class StreamState:
    # Raw lines (preamble + separator) before the first application line; None until located.
    preamble_lines: int | None = None
    # Raw complete lines consumed so far (preamble + application lines already emitted).
    consumed: int = 0
    # The last consumed raw lines, to place the next tail window.
    recent: tuple[str, ...] = field(default=())

    @property
    def emitted(self) -> int:
        """Application lines emitted so far."""
        return max(0, self.consumed - (self.preamble_lines or 0))


@dataclass(frozen=True, slots=True)
class Step:
    state: StreamState
    emit: tuple[str, ...] = ()
    need_full: bool = False  # the window could not be placed: fetch lines=0 and call advance_full
    anomaly: str | None = None  # something inconsistent was seen (logged by the caller)


@dataclass(frozen=True, slots=True)
class Ending:
    emit: tuple[str, ...]
    anomaly: str | None = None


def split_lines(text: str) -> tuple[list[str], str]:
    """Complete lines (each keeping its "\\n") and the trailing partial line ("" if none)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]], parts[-1]


def _is_separator(line: str) -> bool:
    return line.rstrip("\r\n") == SEPARATOR


def find_app_start(lines: Sequence[str]) -> int | None:
    """Index of the first application line in a whole-output listing, None while undecided.

    Output whose first line starts with `INIT[` has a preamble, ending at the first separator line;
    until that separator arrives nothing is application output. Output starting otherwise has no
    preamble (tail may or may not carry it: UNCONFIRMED, so both are accepted).
    """
    if not lines:
        return None
    if not lines[0].startswith(PREAMBLE_PREFIX):
        return 0
    for index, line in enumerate(lines):
        if _is_separator(line):
            return index + 1
    return None


def _remember(recent: Sequence[str], new: Sequence[str], memory: int) -> tuple[str, ...]:
    if memory <= 0:
        return ()
    combined = (*recent, *new)
    return combined[-memory:]


def advance_full(state: StreamState, text: str, *, memory: int) -> Step:
    """Reconcile against the whole output so far (tail lines=0, or a window shorter than asked)."""
    lines, _partial = split_lines(text)
    if state.preamble_lines is None:
        start = find_app_start(lines)
        if start is None:
            return Step(state=state)
        state = StreamState(preamble_lines=start, consumed=start, recent=tuple(lines[:start][-memory:]))
    if len(lines) < state.consumed:
        return Step(
            state=state,
            anomaly=f"output shrank from {state.consumed} to {len(lines)} lines; waiting for it to grow",
        )
    emit = tuple(lines[state.consumed :])
    recent = tuple(lines[max(0, len(lines) - memory) :]) if memory > 0 else ()
    return Step(state=StreamState(state.preamble_lines, len(lines), recent), emit=emit)


def overlap_candidates(recent: Sequence[str], window: Sequence[str]) -> list[int]:
    """Every k >= 1 such that the last k remembered lines equal the window's first k lines."""
    limit = min(len(recent), len(window))
    found = []
    for k in range(1, limit + 1):
        if recent[-k] == window[0] and tuple(recent[-k:]) == tuple(window[:k]):
            found.append(k)
    return found


def advance(state: StreamState, text: str, *, requested: int) -> Step:
    """Reconcile a `tail?lines=requested` snapshot (requested=0 means the whole output)."""
    memory = requested if requested > 0 else 0
    lines, partial = split_lines(text)
    returned = len(lines) + (1 if partial else 0)
    if requested == 0 or returned < requested:
        return advance_full(state, text, memory=memory)
    if state.preamble_lines is None:
        return Step(state=state, need_full=True)
    candidates = overlap_candidates(state.recent, lines)
    # Trust a placement only when it is the single possible one and the window overlaps what was
    # already seen by at least half: then a gap (more new lines than the window holds) would need
    # a coincidental repeat of half a window, and repeated lines cannot shift the placement.
    if len(candidates) != 1 or candidates[0] * 2 < requested:
        return Step(state=state, need_full=True)
    k = candidates[0]
    emit = tuple(lines[k:])
    return Step(
        state=StreamState(state.preamble_lines, state.consumed + len(emit), _remember(state.recent, emit, memory)),
        emit=emit,
    )


def split_app_output(text: str) -> list[str]:
    """The application part of a finished job's whole output, split into lines (the last one may
    lack its newline). Without a separator after an `INIT[` start, everything is returned: better
    to show platform lines than to hide the application's."""
    lines, partial = split_lines(text)
    if partial:
        lines.append(partial)
    if lines and lines[0].startswith(PREAMBLE_PREFIX):
        for index, line in enumerate(lines):
            if _is_separator(line):
                return lines[index + 1 :]
    return lines


def finish(state: StreamState, text: str) -> Ending:
    """What is left to print once `/jarvice/output?lines=0` returned the whole output.

    Works in application-line coordinates, so it stays right even if tail and output disagree
    about carrying the preamble (UNCONFIRMED).
    """
    app = split_app_output(text)
    done = state.emitted
    anomaly = None
    if len(app) < done:
        return Ending(emit=(), anomaly=f"final output has {len(app)} lines but {done} were already printed")
    seen_app = list(state.recent)[-min(len(state.recent), done) :] if done else []
    if seen_app and tuple(app[done - len(seen_app) : done]) != tuple(seen_app):
        anomaly = "final output differs from the lines streamed while the job ran"
    return Ending(emit=tuple(app[done:]), anomaly=anomaly)
