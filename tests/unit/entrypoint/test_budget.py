"""The machine a job would hold against the GPUs its namespace's budget counted."""

import pytest

from entrypoint import budget
from jarvice.model import Machine

ONE = Machine("ng1", cores=8, gpus=1)
EIGHT = Machine("ng8", cores=64, gpus=8)
CPU = Machine("n0", cores=4, gpus=0)


@pytest.mark.parametrize(
    ("machine", "nodes", "counted", "refused"),
    [
        (ONE, 1, None, False),  # not rewritten by our webhook: no check
        (EIGHT, 2, None, False),
        (ONE, 1, 1, False),
        (EIGHT, 2, 16, False),
        (CPU, 4, 0, False),
        (ONE, 2, 1, True),  # nodes multiply
        (EIGHT, 2, 1, True),  # the 1-GPU pod with NUM_GPUS=8, JARVICE_NODES=2
        (ONE, 1, 0, True),
    ],
    ids=["unset-1", "unset-16", "exact", "exact-16", "cpu", "nodes", "16-of-1", "1-of-0"],
)
def test_check_gpu_budget(machine: Machine, nodes: int, counted: int | None, refused: bool) -> None:
    result = budget.check_gpu_budget(machine, nodes=nodes, counted_gpus=counted)
    assert (result is not None) is refused


def test_refusal_gives_the_numbers_and_the_fix() -> None:
    result = budget.check_gpu_budget(EIGHT, nodes=2, counted_gpus=1)
    assert result is not None
    for fragment in ("8 GPU(s) x 2 node(s) = 16 GPU(s)", "counted 1", "NIMBIX_BURST_COUNTED_GPUS", "nvidia.com/gpu"):
        assert fragment in result.reason
