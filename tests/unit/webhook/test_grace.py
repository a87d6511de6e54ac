"""A burst pod's termination grace period covers cancelling its job (docs/decision.md, "What a burst pod looks like").

The rewrite raises terminationGracePeriodSeconds below contract.MIN_TERMINATION_GRACE_SECONDS (75),
or unset (Kubernetes' 30), to 75 and records it in `nimbix-burst.io/termination-grace`; a longer one
is left alone. A later webhook that lowers it again is undone on reinvocation, idempotently.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from jarvice import contract
from tests.support.reinvocation import admit, first_pass, make_cache
from tests.unit.webhook.builders import container, pod

GRACE = "terminationGracePeriodSeconds"


@pytest.mark.parametrize(
    ("spec_extra", "expected", "note"),
    [
        pytest.param({}, 75, "raised from 30 (the default) to 75 so the runner can stop its job", id="unset"),
        pytest.param({GRACE: 30}, 75, "raised from 30 to 75 so the runner can stop its job", id="defaulted-30"),
        pytest.param({GRACE: 0}, 75, "raised from 0 to 75 so the runner can stop its job", id="zero"),
        pytest.param({GRACE: 74}, 75, "raised from 74 to 75 so the runner can stop its job", id="just-below"),
        pytest.param({GRACE: 75}, 75, None, id="exactly"),
        pytest.param({GRACE: 600}, 600, None, id="longer-kept"),
    ],
)
def test_the_rewrite_raises_a_short_grace_period(spec_extra: dict[str, Any], expected: int, note: str | None) -> None:
    patched, result = admit(pod(container(gpus=2), **spec_extra), make_cache(free_gpus=1), "u1")
    assert result.outcome == "remote"
    assert patched["spec"][GRACE] == expected
    assert patched["metadata"]["annotations"].get(contract.ANNOTATION_GRACE) == note


def test_a_pod_kept_local_keeps_its_grace_period() -> None:
    patched, result = admit(pod(container(gpus=1), terminationGracePeriodSeconds=10), make_cache(free_gpus=1), "u1")
    assert result.outcome == "local"
    assert patched["spec"][GRACE] == 10
    assert contract.ANNOTATION_GRACE not in patched["metadata"]["annotations"]


def test_reinvocation_raises_it_again_once() -> None:
    decided, cache = first_pass(free_gpus=1)
    assert decided["spec"][GRACE] == 75
    lowered = copy.deepcopy(decided)
    lowered["spec"][GRACE] = 5  # a later webhook
    again, result = admit(lowered, cache, "reinvoked")
    assert result.outcome == "remote"
    assert again["spec"][GRACE] == 75
    assert (
        again["metadata"]["annotations"][contract.ANNOTATION_GRACE]
        == "raised from 5 to 75 so the runner can stop its job"
    )
    assert any("terminationGracePeriodSeconds" in w for w in result.response["response"]["warnings"])
    third, result = admit(again, cache, "reinvoked-again")
    assert "patch" not in result.response["response"] and third == again
