import pytest

from jarvice import checkpoint
from jarvice.checkpoint import CheckpointContract, CheckpointContractError, parse_checkpoint_contract
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

STAGED = {
    "nimbix-burst.io/stage-in": "/workspace/data,/workspace/ckpt",
    "nimbix-burst.io/stage-out": "/workspace/out,/workspace/ckpt",
}
DIR = "nimbix-burst.io/checkpoint-dir"
INTERVAL = "nimbix-burst.io/checkpoint-interval"
COME_HOME = "nimbix-burst.io/come-home"
MIN_SAVING = "nimbix-burst.io/come-home-min-saving"


def pod(**extra: str) -> dict[str, str]:
    return {**STAGED, DIR: "/workspace/ckpt", INTERVAL: "10s", **extra}


@pytest.mark.parametrize(
    ("pod_annotations", "namespace_annotations", "expected"),
    [
        # no checkpoint directory: no contract, whatever the namespace says
        ({}, {}, None),
        (STAGED, {COME_HOME: "running"}, None),
        (None, None, None),
        # the three-line recipe
        (
            pod(**{COME_HOME: "running"}),
            {},
            CheckpointContract("/workspace/ckpt", 10, True, "pod", 0.0),
        ),
        # the namespace opts its pods in; the pod's own setting wins
        (pod(), {COME_HOME: "running"}, CheckpointContract("/workspace/ckpt", 10, True, "namespace", 0.0)),
        (
            pod(**{COME_HOME: "queued"}),
            {COME_HOME: "running"},
            CheckpointContract("/workspace/ckpt", 10, False, "pod", 0.0),
        ),
        (pod(), {}, CheckpointContract("/workspace/ckpt", 10, False, "default", 0.0)),
        (pod(**{COME_HOME: " Running "}), {}, CheckpointContract("/workspace/ckpt", 10, True, "pod", 0.0)),
        # min-saving: the pod's, else the namespace's, else 0
        (
            pod(**{MIN_SAVING: "12.50"}),
            {MIN_SAVING: "3"},
            CheckpointContract("/workspace/ckpt", 10, False, "default", 12.5),
        ),
        (pod(), {MIN_SAVING: "3"}, CheckpointContract("/workspace/ckpt", 10, False, "default", 3.0)),
        (pod(**{MIN_SAVING: "0"}), {}, CheckpointContract("/workspace/ckpt", 10, False, "default", 0.0)),
        # a directory inside a staged one, written untidily, is normalised
        (
            pod(**{DIR: "/workspace/ckpt//run1/"}),
            {},
            CheckpointContract("/workspace/ckpt/run1", 10, False, "default", 0.0),
        ),
        # stage out a parent, stage in the checkpoint itself (docs/data.md)
        (
            {
                "nimbix-burst.io/stage-in": "/workspace/out/ckpt",
                "nimbix-burst.io/stage-out": "/workspace/out",
                DIR: "/workspace/out/ckpt",
                INTERVAL: "1h30m",
            },
            {},
            CheckpointContract("/workspace/out/ckpt", 5400, False, "default", 0.0),
        ),
    ],
)
def test_contract(
    pod_annotations: dict[str, str] | None, namespace_annotations: dict[str, str] | None, expected: object
) -> None:
    assert parse_checkpoint_contract(pod_annotations, namespace_annotations) == expected


@pytest.mark.parametrize(
    ("pod_annotations", "namespace_annotations", "message"),
    [
        (
            {**STAGED, COME_HOME: "running"},
            {},
            "sets nimbix-burst.io/come-home: running but not nimbix-burst.io/checkpoint-dir",
        ),
        ({**STAGED, INTERVAL: "10s"}, {}, "sets nimbix-burst.io/checkpoint-interval but not"),
        ({**STAGED, MIN_SAVING: "5"}, {}, "sets nimbix-burst.io/come-home-min-saving but not"),
        ({**STAGED, DIR: "/workspace/ckpt"}, {}, "add how often the program writes a checkpoint"),
        (pod(**{DIR: "ckpt"}), {}, "is not absolute"),
        (pod(**{DIR: ""}), {}, "is empty"),
        (pod(**{DIR: "/workspace/ckpt/../data"}), {}, "contains '..'"),
        (pod(**{DIR: "/"}), {}, "'/' cannot hold checkpoints"),
        (pod(**{DIR: "/workspace/a,/workspace/b"}), {}, "name one directory"),
        (pod(**{DIR: "/workspace/ckpt\n"}) | {DIR: "/work\tspace"}, {}, "control character"),
        (pod(**{DIR: "/x" * 600}), {}, "at most 1024"),
        # not staged both ways: the message names what to add
        (pod(**{DIR: "/workspace/out"}), {}, "under no path of nimbix-burst.io/stage-in; add /workspace/out"),
        (pod(**{DIR: "/workspace/data"}), {}, "under no path of nimbix-burst.io/stage-out"),
        (pod(**{DIR: "/workspace/ckptx"}), {}, "stage-in or nimbix-burst.io/stage-out; add /workspace/ckptx"),
        ({DIR: "/workspace/ckpt", INTERVAL: "10s"}, {}, "to nimbix-burst.io/stage-in and nimbix-burst.io/stage-out"),
        # the interval
        (pod(**{INTERVAL: "10"}), {}, "is not a duration"),
        (pod(**{INTERVAL: "1.5m"}), {}, "is not a duration"),
        (pod(**{INTERVAL: "10 minutes"}), {}, "is not a duration"),
        (pod(**{INTERVAL: "0s"}), {}, "is zero"),
        # digits int() refuses or reads past its bound must be this error, which every reader catches
        (pod(**{INTERVAL: "9" * 5000 + "s"}), {}, "is not a duration"),
        (pod(**{INTERVAL: "\u0663s"}), {}, "is not a duration"),
        (pod(**{INTERVAL: "169h"}), {}, "longer than a week"),
        # come-home and min-saving, named with where they came from
        (pod(**{COME_HOME: "yes"}), {}, "come-home on the pod: 'yes' is not running or queued"),
        (pod(), {COME_HOME: "always"}, "come-home on the namespace: 'always'"),
        (pod(**{MIN_SAVING: "$5"}), {}, "min-saving on the pod: '$5' is not an amount"),
        (pod(**{MIN_SAVING: "-1"}), {}, "is not an amount"),
        (pod(**{MIN_SAVING: "1e400"}), {}, "is not an amount"),
        (pod(), {MIN_SAVING: "five"}, "min-saving on the namespace: 'five'"),
    ],
)
def test_bad_input_says_what_to_fix(
    pod_annotations: dict[str, str], namespace_annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(CheckpointContractError) as caught:
        parse_checkpoint_contract(pod_annotations, namespace_annotations)
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_namespace_typo_does_not_touch_pods_without_a_directory() -> None:
    assert parse_checkpoint_contract(STAGED, {COME_HOME: "sometimes", MIN_SAVING: "lots"}) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1), ("10s", 10), ("15m", 900), ("1h", 3600), ("1h30m", 5400), (" 2M ", 120), ("168h", 604800)],
)
def test_interval(text: str, seconds: int) -> None:
    assert checkpoint.parse_interval(text) == seconds
