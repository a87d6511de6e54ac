import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devplatform.emulator.jobs import last_lines
from entrypoint import output
from entrypoint.output import SEPARATOR, StreamState
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

SEP = SEPARATOR + "\n"
PRE = "INIT[1]: booting\nINIT[1]: starting app\n" + SEP


def _lines(text: str) -> list[str]:
    """Split on \"\\n\" only, keeping it, like the JARVICE adapter does."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def tail(text: str, n: int) -> str:
    """The emulator's /jarvice/tail semantics (the last n lines; 0 = all)."""
    return last_lines(text.encode(), n).decode()


@pytest.mark.parametrize(
    ("text", "lines", "partial"),
    [
        ("", [], ""),
        ("a", [], "a"),
        ("a\n", ["a\n"], ""),
        ("a\nb", ["a\n"], "b"),
        ("\n\n", ["\n", "\n"], ""),
        ("a\r\nb\r\n", ["a\r\n", "b\r\n"], ""),
        ("a\rb\n", ["a\rb\n"], ""),  # a progress-bar carriage return is not a line break
    ],
)
def test_split_lines(text: str, lines: list[str], partial: str) -> None:
    assert output.split_lines(text) == (lines, partial)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([], None),
        (["INIT[1]: a\n"], None),
        (["INIT[1]: a\n", "INIT[1]: b\n", SEP, "app\n"], 3),
        (["INIT[1]: a\n", SEPARATOR + "\r\n"], 2),
        (["INIT[1]: a\n", "#" * 78 + "\n"], None),
        (["hello\n", SEP], 0),  # tail without preamble: the app's own separator is app output
        ([SEP, "x\n"], 0),
    ],
    ids=["empty", "init-only", "preamble", "crlf-separator", "78-hashes", "no-preamble", "separator-first"],
)
def test_find_app_start(lines: list[str], expected: int | None) -> None:
    assert output.find_app_start(lines) == expected


def test_advance_full_waits_for_the_preamble_to_end() -> None:
    step = output.advance_full(StreamState(), "INIT[1]: booting\n", memory=10)
    assert step.emit == () and step.state.preamble_lines is None
    step = output.advance_full(step.state, PRE + "one\ntw", memory=10)
    assert step.emit == ("one\n",)
    assert (step.state.preamble_lines, step.state.consumed, step.state.emitted) == (3, 4, 1)
    step = output.advance_full(step.state, PRE + "one\ntwo\nthree\n", memory=10)
    assert step.emit == ("two\n", "three\n")


def test_advance_full_reports_shrinking_output() -> None:
    state = StreamState(preamble_lines=0, consumed=5, recent=())
    step = output.advance_full(state, "a\nb\n", memory=10)
    assert step.emit == () and step.anomaly and step.state == state


@pytest.mark.parametrize(
    ("state", "window", "requested", "emit", "need_full"),
    [
        # Window shorter than requested: it is the whole output; placed by count.
        (StreamState(0, 2, ("a\n", "b\n")), "a\nb\nc\n", 5, ("c\n",), False),
        # Full window, unique overlap of 3 (>= half of 4): one new line.
        (StreamState(0, 5, ("b\n", "c\n", "d\n", "e\n")), "c\nd\ne\nf\n", 4, ("f\n",), False),
        # Full window, nothing new.
        (StreamState(0, 5, ("b\n", "c\n", "d\n", "e\n")), "b\nc\nd\ne\n", 4, (), False),
        # Full window that overlaps nothing: more output than the window holds (a gap).
        (StreamState(0, 5, ("b\n", "c\n", "d\n", "e\n")), "w\nx\ny\nz\n", 4, (), True),
        # Overlap too small to trust (1 < 4/2).
        (StreamState(0, 5, ("b\n", "c\n", "d\n", "e\n")), "e\nx\ny\nz\n", 4, (), True),
        # Repeated lines: several placements are possible.
        (StreamState(0, 4, ("a\n", "a\n", "a\n", "a\n")), "a\na\na\na\n", 4, (), True),
        # Preamble not located yet: a full window cannot be placed.
        (StreamState(None, 0, ()), "x\ny\n", 2, (), True),
        # A trailing partial line counts toward the window but is not emitted.
        (StreamState(0, 3, ("a\n", "b\n", "c\n")), "b\nc\nd\npart", 4, ("d\n",), False),
    ],
    ids=[
        "short-window",
        "unique-overlap",
        "no-change",
        "gap",
        "weak-overlap",
        "ambiguous",
        "preamble-unknown",
        "partial",
    ],
)
def test_advance(state: StreamState, window: str, requested: int, emit: tuple[str, ...], need_full: bool) -> None:
    step = output.advance(state, window, requested=requested)
    assert step.emit == emit
    assert step.need_full == need_full
    if need_full:
        assert step.state == state
    else:
        assert step.state.consumed == state.consumed + len(emit)


def test_advance_requested_zero_is_the_whole_output() -> None:
    step = output.advance(StreamState(), PRE + "a\nb\n", requested=0)
    assert step.emit == ("a\n", "b\n") and step.state.recent == ()


def test_finish_prints_the_rest_in_app_coordinates() -> None:
    # Streamed from a tail that carried the preamble (3 lines) ...
    state = StreamState(preamble_lines=3, consumed=5, recent=("INIT[1]: starting app\n", SEP, "a\n", "b\n"))
    ending = output.finish(state, PRE + "a\nb\nc\nd")
    assert ending == output.Ending(emit=("c\n", "d"))
    # ... or from a tail without it: the final output's preamble does not shift anything.
    state = StreamState(preamble_lines=0, consumed=2, recent=("a\n", "b\n"))
    assert output.finish(state, PRE + "a\nb\nc\n").emit == ("c\n",)


def test_finish_flags_divergence() -> None:
    state = StreamState(preamble_lines=0, consumed=2, recent=("a\n", "b\n"))
    assert output.finish(state, "a\nX\nc\n").anomaly
    short = output.finish(state, "a\n")
    assert short.emit == () and short.anomaly


LINES = st.sampled_from(["a\n", "b\n", "\n", "same\n", "x y z\n", "ü ✓\n", SEP, "a\r\n", "tab\there\n"])
PARTIALS = st.sampled_from(["", "tail without newline", "ü"])
WINDOWS = st.sampled_from([0, 1, 2, 3, 4, 5, 8, 13, 100])


def simulate(
    app_lines: list[str], partial: str, *, with_preamble: bool, tail_has_preamble: bool, requested: int, cuts: list[int]
) -> str:
    """Run the runner's streaming loop over growing snapshots of the output; return what it printed."""
    preamble = PRE if with_preamble else ""
    full = preamble + "".join(app_lines) + partial
    state = StreamState()
    printed: list[str] = []
    for cut in cuts:
        produced = full[:cut]
        if not tail_has_preamble and preamble:
            # The emulator's --no-tail-preamble: nothing until the separator, then app only.
            produced = full[len(preamble) : cut] if cut >= len(preamble) else ""
        step = output.advance(state, tail(produced, requested), requested=requested)
        if step.need_full:
            step = output.advance_full(state, tail(produced, 0), memory=requested)
        assert step.anomaly is None
        assert all(line.endswith("\n") for line in step.emit)  # never a partial line while running
        printed.extend(step.emit)
        state = step.state
    ending = output.finish(state, full)
    assert ending.anomaly is None
    printed.extend(ending.emit)
    return "".join(printed)


@st.composite
def paced_scenarios(draw: st.DrawFn) -> dict[str, object]:
    """Repetitive output, polled often enough that each window overlaps what was seen (fewer than
    requested-1 new lines per poll): the regime in which window placement must be exact."""
    app_lines = draw(st.lists(LINES, max_size=60))
    requested = draw(WINDOWS)
    with_preamble = draw(st.booleans())
    preamble_len = len(PRE) if with_preamble else 0
    cuts = sorted(draw(st.lists(st.integers(0, preamble_len), max_size=3)))
    produced = 0
    for _ in range(draw(st.integers(0, 30))):
        room = len(app_lines) - produced
        step_max = room if requested == 0 else min(room, max(0, requested - 2))
        produced += draw(st.integers(0, step_max))
        base = preamble_len + len("".join(app_lines[:produced]))
        into_next = 0
        if produced < len(app_lines):
            into_next = draw(st.integers(0, len(app_lines[produced]) - 1))
        cuts.append(base + into_next)
    return {
        "app_lines": app_lines,
        "partial": draw(PARTIALS),
        "with_preamble": with_preamble,
        "tail_has_preamble": draw(st.booleans()),
        "requested": requested,
        "cuts": cuts,
    }


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paced_scenarios())
def test_streaming_repetitive_output_exactly_once(scenario: dict[str, object]) -> None:
    """Repeated lines, any window size, preamble in tail or not: every line exactly once."""
    app = "".join(scenario["app_lines"]) + scenario["partial"]  # type: ignore[arg-type, operator]
    assert simulate(**scenario) == app  # type: ignore[arg-type]


@st.composite
def gappy_scenarios(draw: st.DrawFn) -> dict[str, object]:
    """Distinct lines, polled at arbitrary moments: windows may miss any amount of output."""
    count = draw(st.integers(0, 120))
    app_lines = [f"line {i}\n" for i in range(count)]
    with_preamble = draw(st.booleans())
    total = (len(PRE) if with_preamble else 0) + len("".join(app_lines))
    return {
        "app_lines": app_lines,
        "partial": draw(PARTIALS),
        "with_preamble": with_preamble,
        "tail_has_preamble": draw(st.booleans()),
        "requested": draw(WINDOWS),
        "cuts": sorted(draw(st.lists(st.integers(0, total), max_size=25))),
    }


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gappy_scenarios())
def test_streaming_detects_gaps(scenario: dict[str, object]) -> None:
    """More output between polls than the window holds: detected, filled, never duplicated."""
    app = "".join(scenario["app_lines"]) + scenario["partial"]  # type: ignore[arg-type, operator]
    assert simulate(**scenario) == app  # type: ignore[arg-type]


def test_undetectable_gap_is_the_documented_limit() -> None:
    """The one case content cannot settle (why JARVICE_TAIL_LINES=0 exists): at least a window's
    worth of new output whose first lines repeat the last ones seen, at least half a window long.

    Seen so far: "a b". The job then printed "a b c d" (6 lines in all); a 4-line window shows
    "a b c d", whose unique overlap "a b" is trusted, so the repeated "a b" is not printed.
    """
    state = StreamState(preamble_lines=0, consumed=2, recent=("a\n", "b\n"))
    step = output.advance(state, "a\nb\nc\nd\n", requested=4)
    assert step.emit == ("c\n", "d\n") and not step.need_full


# --- Replay: the whole output, line by line, in bounded memory ------------------------------------


def replay(state: StreamState, text: str, *, memory: int = 10, final: bool) -> tuple[str, output.Replay]:
    r = output.Replay(state, memory=memory, final=final)
    printed = [e for line in _lines(text) for e in r.feed(line)]
    printed += r.close()
    return "".join(printed), r


FINAL_CASES = [
    # (already printed app lines, whole output, what is left to print)
    (0, PRE + "a\nb\n", "a\nb\n"),
    (1, PRE + "a\nb\n", "b\n"),
    (2, PRE + "a\nb\nc", "c"),  # the last line without a newline
    (0, "no preamble\n", "no preamble\n"),
    (0, "INIT[1]: x\nno separator\n", "INIT[1]: x\nno separator\n"),
    (0, PRE + "quotes \"' ünï ✓\n\ttab", "quotes \"' ünï ✓\n\ttab"),
    (
        0,
        PRE + "progress 10%\rprogress 20%\r\nnext\x0cpage\u2028x\n",
        "progress 10%\rprogress 20%\r\nnext\x0cpage\u2028x\n",
    ),
    (0, PRE, ""),
    (0, "", ""),
]


@pytest.mark.parametrize(("done", "text", "left"), FINAL_CASES, ids=[str(i) for i in range(len(FINAL_CASES))])
def test_replay_final_prints_the_rest_exactly_once(done: int, text: str, left: str) -> None:
    printed, r = replay(StreamState(resumed=done), text, final=True)
    assert printed == left
    assert r.state.emitted == done + len(_lines(left))
    again, _ = replay(r.state, text, final=True)
    assert again == ""  # replayed twice: nothing printed twice


def test_replay_running_counts_only_complete_lines_and_waits_for_the_separator() -> None:
    printed, r = replay(StreamState(), "INIT[1]: booting\n", final=False)
    assert (printed, r.state) == ("", StreamState())
    printed, r = replay(r.state, PRE + "one\ntw", final=False)
    assert printed == "one\n"
    printed, r = replay(r.state, PRE + "one\ntwo\nthree\n", final=False)
    assert printed == "two\nthree\n"
    assert r.state.emitted == 3
    assert output.finish(r.state, PRE + "one\ntwo\nthree\nend").emit == ("end",)


def test_replay_resumes_where_an_earlier_runner_stopped() -> None:
    printed, r = replay(StreamState(resumed=2), PRE + "a\nb\nc\n", final=False)
    assert printed == "c\n"
    printed, _ = replay(r.state, PRE + "a\nb\nc\nd", final=True)
    assert printed == "d"


def test_replay_flags_divergence_and_shrinking() -> None:
    _, r = replay(StreamState(resumed=0), "a\nb\nc\n", final=False)
    printed, r2 = replay(r.state, "a\nX\nc\nd\n", final=True)
    assert printed == "d\n" and r2.anomaly
    _, r3 = replay(r.state, "a\n", final=True)
    assert r3.anomaly and "already printed" in r3.anomaly


def test_replay_memory_is_bounded() -> None:
    r = output.Replay(StreamState(), memory=5, final=True)
    for i in range(10_000):
        r.feed(f"line {i}\n")
    assert len(r.state.recent) == 5
    held = output.Replay(StreamState(), memory=5, final=True)
    out = [e for i in range(output.MAX_PREAMBLE_LINES + 5) for e in held.feed(f"INIT[1]: {i}\n")]
    assert len(out) == output.MAX_PREAMBLE_LINES + 5  # no separator: released, not held for ever
