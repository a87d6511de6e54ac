"""No job without a time limit (docs/decision.md, "What a burst pod looks like", walltime).

Each burst container gets JARVICE_WALLTIME (HH:MM:SS): from the pod's activeDeadlineSeconds rounded
up to a whole minute (at most 99999:59:59), else its namespace's `nimbix-burst.io/default-walltime`
(an invalid one is warned about and skipped), else --default-walltime (24:00:00). A walltime the
container already sets is kept only when shorter. The pod's `nimbix-burst.io/walltime` annotation
says which limit and where it came from. Expected values are worked out by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from jarvice import contract
from tests.support.clocks import Clock
from tests.support.reinvocation import patched_by, review
from tests.unit.webhook.builders import GPU, KUBE_SYSTEM, container, namespace, node, pod
from webhook import admission, walltime
from webhook.cache import ClusterCache
from webhook.rewrite_terms import RewritePolicy
from webhook.settings import SettingsError, parse_settings
from webhook.sync import CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
DAY = 24 * 3600


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("24:00:00", DAY),
        ("0:30:00", 1800),
        (" 01:02:03 ", 3723),
        ("99999:59:59", 99999 * 3600 + 59 * 60 + 59),
        ("100000:00:00", None),  # the runner's limit: at most 5 digits of hours
        ("00:00:00", None),  # no time at all is no limit anyone means
        ("1:60:00", None),
        ("1:00:60", None),
        ("1:0:00", None),
        ("24h", None),
        ("86400", None),
        ("", None),
        ("-1:00:00", None),
        ("\u0661:00:00", None),  # an Arabic-Indic digit
    ],
)
def test_parse_walltime(text: str, seconds: int | None) -> None:
    assert walltime.parse_walltime(text) == seconds


@pytest.mark.parametrize(
    ("deadline", "ns_default", "expected", "source", "warned"),
    [
        pytest.param(3600, None, "01:00:00", "activeDeadlineSeconds 3600", False, id="deadline"),
        pytest.param(3601, "2:00:00", "01:01:00", "activeDeadlineSeconds 3601", False, id="rounded-up-beats-namespace"),
        pytest.param(1, None, "00:01:00", "activeDeadlineSeconds 1", False, id="one-second"),
        pytest.param(10**12, None, "99999:59:59", "activeDeadlineSeconds", False, id="capped"),
        pytest.param(None, "2:00:00", "02:00:00", "nimbix-burst.io/default-walltime of namespace team", False, id="ns"),
        pytest.param(None, "two hours", "24:00:00", "--default-walltime", True, id="invalid-namespace-falls-back"),
        pytest.param(None, None, "24:00:00", "--default-walltime", False, id="webhook-default"),
        pytest.param(0, None, "24:00:00", "--default-walltime", False, id="zero-deadline-is-no-deadline"),
        pytest.param(True, None, "24:00:00", "--default-walltime", False, id="boolean-is-no-deadline"),
        pytest.param("3600", None, "24:00:00", "--default-walltime", False, id="string-is-no-deadline"),
    ],
)
def test_where_the_limit_comes_from(
    deadline: object, ns_default: str | None, expected: str, source: str, warned: bool
) -> None:
    limit, warning = walltime.decide_walltime(
        deadline, namespace="team", namespace_default=ns_default, webhook_default=DAY
    )
    assert limit.text == expected
    assert source in limit.source
    assert bool(warning) is warned
    if warned:
        assert "two hours" in warning and "HH:MM:SS" in warning


def make_sync(*namespaces: dict[str, Any]) -> CacheSync:
    clock = Clock()
    sync = CacheSync(ClusterCache(gpu_resources=(GPU,), clock=clock, reservation_ttl=60), clock=clock)
    sync.apply_list("nodes", [node("gpu", 1)])
    sync.apply_list("pods", [])
    sync.apply_list("namespaces", [KUBE_SYSTEM, *namespaces])
    return sync


def admit(sync: CacheSync, raw: dict[str, Any]) -> tuple[admission.Admission, dict[str, Any]]:
    result = admission.admit(review(raw, "u1", namespace="team"), cache=sync.cache, policy=POLICY)
    return result, patched_by(raw, result)


def walltimes(c: dict[str, Any]) -> list[Any]:
    return [e.get("value", e.get("valueFrom")) for e in c.get("env", []) if e["name"] == contract.ENV_WALLTIME]


def test_every_burst_container_gets_the_limit_and_a_shorter_own_one_is_kept() -> None:
    own = [{"name": contract.ENV_WALLTIME, "value": "00:30:00"}]
    longer = [{"name": contract.ENV_WALLTIME, "value": "48:00:00"}]
    unreadable = [{"name": contract.ENV_WALLTIME, "value": "soon"}]
    field = [{"name": contract.ENV_WALLTIME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    raw = pod(
        container("a", gpus=1),
        container("b", gpus=1, env=own),
        container("c", gpus=1, env=longer),
        container("d", gpus=1, env=unreadable),
        container("e", gpus=1, env=field),
        container("log"),
        activeDeadlineSeconds=7200,
    )
    result, patched = admit(make_sync(), raw)
    assert result.outcome == "remote"
    a, b, c, d, e, log = patched["spec"]["containers"]
    assert walltimes(a) == ["02:00:00"]
    assert walltimes(b) == ["00:30:00"]  # shorter than the deadline allows: kept
    assert walltimes(c) == walltimes(d) == walltimes(e) == ["02:00:00"]  # replaced, the whole entry
    assert walltimes(log) == []
    note = patched["metadata"]["annotations"][contract.ANNOTATION_WALLTIME]
    assert note.startswith("02:00:00 from activeDeadlineSeconds 7200")
    assert "b keeps its own 00:30:00" in note


def test_the_namespace_default_follows_the_watch_and_an_invalid_one_is_warned_about() -> None:
    sync = make_sync(namespace("team", annotations={walltime.ANNOTATION_DEFAULT_WALLTIME: "06:00:00"}))
    _, patched = admit(sync, pod(container(gpus=2)))
    assert walltimes(patched["spec"]["containers"][0]) == ["06:00:00"]
    bad = namespace("team", annotations={walltime.ANNOTATION_DEFAULT_WALLTIME: "6h"})
    assert sync.apply_event("namespaces", "MODIFIED", bad) is None
    result, patched = admit(sync, pod(container(gpus=2)))
    assert walltimes(patched["spec"]["containers"][0]) == ["24:00:00"]
    assert any(
        "'6h'" in w and walltime.ANNOTATION_DEFAULT_WALLTIME in w for w in result.response["response"]["warnings"]
    )
    assert sync.apply_event("namespaces", "DELETED", bad) is None
    result, patched = admit(sync, pod(container(gpus=2)))
    assert walltimes(patched["spec"]["containers"][0]) == ["24:00:00"]
    assert not any("6h" in w for w in result.response["response"]["warnings"])


@pytest.mark.parametrize(
    ("argv", "env", "seconds"),
    [
        pytest.param([], {}, DAY, id="default"),
        pytest.param([], {"WEBHOOK_DEFAULT_WALLTIME": "4:00:00"}, 4 * 3600, id="env"),
        pytest.param(["--default-walltime", "0:45:00"], {}, 45 * 60, id="flag"),
    ],
)
def test_the_default_walltime_setting(argv: list[str], env: dict[str, str], seconds: int) -> None:
    assert parse_settings(argv, env, check_files=False).policy.default_walltime_seconds == seconds


@pytest.mark.parametrize("bad", ["24h", "0:00:00", "100000:00:00", ""])
def test_an_invalid_default_walltime_says_what_to_write(bad: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings([f"--default-walltime={bad}"], {}, check_files=False)
    (problem,) = caught.value.problems
    assert problem.startswith("--default-walltime") and "HH:MM:SS" in problem
