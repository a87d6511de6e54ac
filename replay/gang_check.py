"""Could a gang the webhook burst have run here: all of its pods at once? (pure)

The checker (replay/checker.py) asks of each pod whether one node could host it. A gang's pods are not
decided alone: the webhook keeps a gang local only when every pod fits at once, so a gang's pod that
would fit alone may rightly burst with its gang. A gang is judged here as one instead, at the moment
its first pod's decision finished: do the nodes' free GPUs, CPU and memory hold all of its pods
together? Claims (pods not bound yet, local decisions not seen yet) are ignored, so this is an upper
bound on the gangs burst wrongly, as the checker's unguarded count is for pods. The trace's gangs are
pods with identical requests (replay.gangs), so the question is a count: how many copies of one pod the
eligible nodes hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from replay.history import Observation, Placement
from replay.reference import ALL_RESOURCES, ReferenceState, eligible, free_capacity


@dataclass(frozen=True, slots=True)
class GangQuestion:
    """One burst gang: when it was decided, and what each of its `size` pods asks for."""

    at: float  # when its first pod's decision finished (the replay's clock)
    size: int
    requests: Mapping[str, int]
    placement: Placement


def copies(room: Mapping[str, int], need: Mapping[str, int], resources: Sequence[str]) -> int:
    """How many pods asking `need` a node with `room` free holds."""
    counts = [room.get(r, 0) // need[r] for r in resources if need.get(r, 0) > 0]
    return max(min(counts), 0) if counts else 0


def fits_together(state: ReferenceState, question: GangQuestion, resources: Sequence[str] = ALL_RESOURCES) -> bool:
    """Do the schedulable nodes the pods may use hold all of the gang's pods at once (claims ignored)?"""
    free = free_capacity(state, resources)
    held = 0
    for name, room in free.items():
        if eligible(state.nodes[name], question.placement):
            held += copies(room, question.requests, resources)
            if held >= question.size:
                return True
    return False


def judge_gangs(history: Sequence[Observation], questions: Sequence[GangQuestion]) -> list[bool]:
    """Per question, in order: did the gang fit here at once when it burst? One pass over the history."""
    order = sorted(range(len(questions)), key=lambda i: questions[i].at)
    history = sorted(history, key=lambda o: o.at)  # stable: equal times keep the watch's order
    answers = [False] * len(questions)
    state = ReferenceState()
    seen = 0
    for i in order:
        while seen < len(history) and history[seen].at <= questions[i].at:
            state.apply(history[seen])
            seen += 1
        answers[i] = fits_together(state, questions[i])
    return answers
