"""The cluster identity a runner puts in its job labels, read from the environment (the labels
themselves: tests/unit/jarvice/test_labels.py)."""

import pytest

from entrypoint.settings import SettingsError, parse_settings
from jarvice.labels import PodIdentity
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

UID = "4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70"
CLUSTER = "0123456789ab"  # an identity without a name: 12 hex digits of the kube-system UID
NAMED = "staging-0123456789ab"

BASE_ENV = {"APP_COMMAND_ARGS": "true", "POD_UID": UID}


def parse(env: dict[str, str]) -> PodIdentity:
    return parse_settings(env, argv=(), read_file=lambda path: "", hostname="h").pod


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, ""), ("", ""), ("  ", ""), (CLUSTER, CLUSTER), (f" {NAMED} ", NAMED)],
    ids=["unset", "empty", "blank", "hex", "named-padded"],
)
def test_cluster_from_the_environment(value: str | None, expected: str) -> None:
    env = dict(BASE_ENV) if value is None else {**BASE_ENV, "NIMBIX_BURST_CLUSTER": value}
    assert parse(env).cluster == expected


@pytest.mark.parametrize(
    "value", ["prod", "0123456789AB", "prod_0123456789ab", "-0123456789ab", f"{'n' * 31}-0123456789ab"]
)
def test_an_invalid_cluster_is_a_settings_error(value: str) -> None:
    with pytest.raises(SettingsError) as info:
        parse({**BASE_ENV, "NIMBIX_BURST_CLUSTER": value})
    (problem,) = info.value.problems
    assert problem.startswith("NIMBIX_BURST_CLUSTER") and repr(value) in problem and "12 hex digits" in problem
