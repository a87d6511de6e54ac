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

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

SEPARATOR: Final = "#" * 79
PREAMBLE_PREFIX: Final = "INIT["
# A whole output replayed line by line holds back at most this many preamble lines while looking
# for the separator (the real preamble is a handful of lines); past it, they are application lines.
MAX_PREAMBLE_LINES: Final = 1000


@dataclass(frozen=True, slots=True)
class StreamState:
    # Raw lines (preamble + separator) before the first application line; None until located.
    preamble_lines: int | None = None
    # Raw complete lines consumed so far (preamble + application lines already emitted).
    consumed: int = 0
    # The last consumed raw lines, to place the next tail window.
    recent: tuple[str, ...] = field(default=())
    # Application lines an earlier runner of this container already printed (from its state file);
    # applied once the preamble is located, since its length is not recorded.
    resumed: int = 0

    @property
    def emitted(self) -> int:
        """Application lines emitted so far."""
        if self.preamble_lines is None:
            return self.resumed
        return max(0, self.consumed - self.preamble_lines)


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
        state = StreamState(
            preamble_lines=start,
            consumed=start + state.resumed,
            recent=tuple(lines[:start][-memory:]) if memory else (),
        )
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


def finish(state: StreamState, text: str) -> Ending:
    """What is left to print of a finished job's whole output (`Replay` over text in hand).

    Works in application-line coordinates, so it stays right even if tail and output disagree
    about carrying the preamble (UNCONFIRMED).
    """
    replay = Replay(state, memory=0, final=True)
    lines, partial = split_lines(text)  # on "\n" only: a "\r" (progress bars) stays inside its line
    emit = [line for raw in (*lines, partial) if raw for line in replay.feed(raw)]
    emit += replay.close()
    return Ending(emit=tuple(emit), anomaly=replay.anomaly)


class Replay:
    """The whole output (`tail` or `output` with `lines=0`), fed one line at a time, in bounded memory.

    Pure: says which lines to print and keeps the stream state, never more than `memory` recent
    lines (plus at most MAX_PREAMBLE_LINES while the preamble is undecided). `final=False` replays a
    running job's output: only complete lines count, and nothing is decided before the separator
    arrives. `final=True` replays a finished job's output in application coordinates: a last line
    without a newline is printed, and a missing separator makes the whole
    output the application's. `state` is right after every `feed`, so a stream that breaks off
    can be resumed without printing a line twice.
    """

    def __init__(self, state: StreamState, *, memory: int, final: bool) -> None:
        self._start = state
        self._memory = memory
        self._final = final
        self._index = 0  # raw lines fed
        self._preamble: int | None = None
        self._held: list[str] = []  # possible preamble lines (final mode only)
        self._app = 0  # application lines seen
        self._done = state.emitted  # application lines printed before this replay
        seen = state.recent[-min(len(state.recent), self._done) :] if self._done else ()
        self._seen_first = self._done - len(seen)  # app index of seen[0]
        self._seen = seen
        self._recent: deque[str] = deque(maxlen=max(memory, 0))
        self.anomaly: str | None = None

    def feed(self, line: str) -> list[str]:
        """Lines to print now for the next line of the output."""
        index = self._index
        self._index += 1
        if self._preamble is None:
            if index == 0 and not line.startswith(PREAMBLE_PREFIX):
                self._preamble = 0
            elif _is_separator(line):
                self._preamble = index + 1
                self._held.clear()
                self._remember(line)
                return []
            else:
                self._remember(line)
                if not self._final:
                    return []
                self._held.append(line)
                if len(self._held) <= MAX_PREAMBLE_LINES:
                    return []
                return self._release_held()
        if not self._final and not line.endswith("\n"):
            return []  # the running job's unfinished last line: printed once complete
        self._remember(line)
        return self._application(line)

    def _release_held(self) -> list[str]:
        """No separator after all: the held lines are the application's."""
        self._preamble = 0
        held, self._held = self._held, []
        return [emitted for line in held for emitted in self._application(line)]

    def _remember(self, line: str) -> None:
        if self._memory > 0:
            self._recent.append(line)

    def _application(self, line: str) -> list[str]:
        index = self._app
        self._app += 1
        if index >= self._done:
            return [line]
        offset = index - self._seen_first
        if 0 <= offset < len(self._seen) and self._seen[offset] != line and self.anomaly is None:
            self.anomaly = "final output differs from the lines streamed while the job ran"
        return []

    def close(self) -> list[str]:
        """End of the output: what is left to print (held lines without a separator, final only)."""
        emit = self._release_held() if self._final and self._preamble is None else []
        if self._preamble is not None and self._app < self._done:
            self.anomaly = (
                f"final output has {self._app} lines but {self._done} were already printed"
                if self._final
                else f"output shrank from {self._done} to {self._app} lines; waiting for it to grow"
            )
        return emit

    @property
    def state(self) -> StreamState:
        """The stream state once every line returned so far has been printed."""
        if self._preamble is None or self._app < self._done:
            # Still replaying what was printed before: nothing new, keep the old placement.
            return self._start if self._preamble is None else _resumed_at(self._start, self._preamble, self._final)
        if self._final:
            # Application coordinates: no preamble counted, so `emitted` is the printed count.
            return StreamState(preamble_lines=0, consumed=max(self._done, self._app), recent=tuple(self._recent))
        return StreamState(
            preamble_lines=self._preamble,
            consumed=self._preamble + max(self._done, self._app),
            recent=tuple(self._recent),
        )


def _resumed_at(state: StreamState, preamble: int, final: bool) -> StreamState:
    """`state` with its preamble located (a resumed stream's count becomes a raw-line count)."""
    if state.preamble_lines is not None and not final:
        return state
    start = 0 if final else preamble
    return StreamState(preamble_lines=start, consumed=start + state.emitted, recent=state.recent)
