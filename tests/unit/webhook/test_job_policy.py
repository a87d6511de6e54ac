"""webhook.job_policy: the podFailurePolicy rule a Job whose pods may burst gets at its creation, as tables."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from jarvice.exitcodes import EXIT_MOVED_HOME
from kubeplumbing.disruptions import (
    IGNORE_DISRUPTIONS,
    MOVED_HOME_EXIT_CODE,
    ignore_moved_home,
    ignores_disruptions_first,
    ignores_moves_home,
)
from webhook import job_policy
from webhook.review import AdmissionRequest

EXIT_FAILS_JOB = {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}
# The user's own rule for one container of theirs: the runner's 81 comes from the burst container.
SIDECAR_81_IGNORED = {"action": "Ignore", "onExitCodes": {"containerName": "sidecar", "operator": "In", "values": [81]}}
GPUS = ("nvidia.com/gpu",)
IGNORE_MOVED_HOME = ignore_moved_home("train")  # the template's one GPU container's
# The rule of Jobs created before the rules named their containers: any container's 81.
ANY_81_IGNORED = {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [81]}}


def a_job(*, restart: str | None = "Never", labeled: bool = True, rules: list[Any] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {
        "metadata": {"labels": {"task-type": "Nimbix"} if labeled else {"app": "x"}},
        "spec": {"containers": [{"name": "train", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    if restart is not None:
        template["spec"]["restartPolicy"] = restart
    spec: dict[str, Any] = {"backoffLimit": 0, "template": template}
    if rules is not None:
        spec["podFailurePolicy"] = {"rules": rules}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": spec}


def applied(job: dict[str, Any], ops: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The Job after the patch, as the API server applies these two shapes of `add`."""
    for op in ops:
        assert op["op"] == "add"
        if op["path"] == "/spec/podReplacementPolicy":
            job["spec"]["podReplacementPolicy"] = op["value"]
        elif op["path"] == "/spec/podFailurePolicy":
            job["spec"]["podFailurePolicy"] = op["value"]
        else:
            prefix = "/spec/podFailurePolicy/rules/"
            assert op["path"] in (prefix + "0", prefix + "1")
            job["spec"]["podFailurePolicy"]["rules"].insert(int(op["path"][len(prefix) :]), op["value"])
    return job


@pytest.mark.parametrize(
    ("job", "rules_after"),
    [
        pytest.param(a_job(), [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME], id="no-policy-gets-one"),
        pytest.param(
            a_job(rules=[EXIT_FAILS_JOB]),
            [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME, EXIT_FAILS_JOB],
            id="users-rules-kept-after",
        ),
        pytest.param(
            a_job(rules=[IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME]),
            [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME],
            id="already-first-unchanged",
        ),
        pytest.param(
            a_job(rules=[IGNORE_DISRUPTIONS, EXIT_FAILS_JOB]),
            [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME, EXIT_FAILS_JOB],
            id="evictions-first-gets-the-move-second",
        ),
        pytest.param(
            a_job(rules=[IGNORE_DISRUPTIONS, SIDECAR_81_IGNORED, EXIT_FAILS_JOB]),
            [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME, SIDECAR_81_IGNORED, EXIT_FAILS_JOB],
            id="one-containers-81-is-not-the-moves",
        ),
        pytest.param(
            a_job(rules=[EXIT_FAILS_JOB, IGNORE_DISRUPTIONS]),
            [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME, EXIT_FAILS_JOB, IGNORE_DISRUPTIONS],
            id="not-first-put-first",
        ),
    ],
)
def test_a_job_whose_pods_may_burst_ignores_the_products_evictions_first(
    job: dict[str, Any], rules_after: list[Any]
) -> None:
    planned = job_policy.plan(job, GPUS)
    after = applied(job, planned.ops)
    assert after["spec"]["podFailurePolicy"]["rules"] == rules_after
    assert ignores_disruptions_first(after["spec"]["podFailurePolicy"])
    assert ignores_moves_home(after["spec"]["podFailurePolicy"], ["train"])
    assert planned.warning == ""


def test_the_move_homes_rule_ignores_the_runners_own_code() -> None:
    assert MOVED_HOME_EXIT_CODE == EXIT_MOVED_HOME


def test_with_room_for_one_rule_evictions_stay_free_and_running_jobs_never_move_home() -> None:
    job = a_job(rules=[EXIT_FAILS_JOB] * 19)
    after = applied(job, job_policy.plan(job, GPUS).ops)
    assert ignores_disruptions_first(after["spec"]["podFailurePolicy"])
    assert not ignores_moves_home(after["spec"]["podFailurePolicy"], ["train"])


@pytest.mark.parametrize(
    ("job", "says", "warns"),
    [
        pytest.param(a_job(labeled=False), "not labeled task-type=Nimbix", "", id="not-ours"),
        pytest.param(
            a_job(restart="OnFailure"), "restartPolicy is OnFailure", "restartPolicy OnFailure", id="onfailure"
        ),
        pytest.param(a_job(restart=None), "restartPolicy is unset", "restartPolicy unset", id="unset"),
        pytest.param(
            a_job(rules=[EXIT_FAILS_JOB] * 20),
            "20 rules",
            "20 podFailurePolicy rules, no room for ours",
            id="rules-full",
        ),
    ],
)
def test_a_job_left_as_written_says_why(job: dict[str, Any], says: str, warns: str) -> None:
    planned = job_policy.plan(job, GPUS)
    assert planned.ops == ()
    assert says in planned.reason
    assert (warns in planned.warning) if warns else planned.warning == ""


def test_the_answer_is_the_patch_as_a_json_patch() -> None:
    request = AdmissionRequest(
        uid="r-1", operation="CREATE", kind="Job", group="batch", namespace="ns", dry_run=False, object=a_job()
    )
    answer = job_policy.admit(request, GPUS).response["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(answer["patch"])) == [
        {"op": "add", "path": "/spec/podFailurePolicy", "value": {"rules": [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME]}}
    ]


def test_an_onfailure_job_is_admitted_unchanged_with_a_warning() -> None:
    request = AdmissionRequest(
        uid="r-2",
        operation="CREATE",
        kind="Job",
        group="batch",
        namespace="ns",
        dry_run=False,
        object=a_job(restart="OnFailure"),
    )
    answer = job_policy.admit(request, GPUS).response["response"]
    assert answer["allowed"] is True and "patch" not in answer
    (warning,) = answer["warnings"]
    assert "burst at once, never come home" in warning and len(warning) <= 120


@pytest.mark.parametrize("defaulted", ["TerminatingOrFailed", "Failed", None])
def test_the_replacement_policy_the_api_server_defaulted_is_made_failed_as_a_failure_policy_requires(
    defaulted: str | None,
) -> None:
    """The API server defaults podReplacementPolicy (TerminatingOrFailed without a podFailurePolicy)
    before the webhook adds the policy, and then refuses the Job unless it is Failed (seen on 1.32)."""
    job = a_job()
    if defaulted is not None:
        job["spec"]["podReplacementPolicy"] = defaulted
    planned = job_policy.plan(job, GPUS)
    after = applied(job, planned.ops)
    assert after["spec"].get("podReplacementPolicy", "Failed") == "Failed"


def test_a_rule_for_another_container_does_not_let_the_controller_move_the_jobs_pods_home() -> None:
    """The runner exits 81 from its burst container: a rule for another container of the user's lets the
    moved pod count against backoffLimit (with 0, the Job fails). A rule naming no container (the Jobs made
    before the rules named theirs) covers every container."""
    assert not ignores_moves_home({"rules": [IGNORE_DISRUPTIONS, SIDECAR_81_IGNORED]}, ["train"])
    assert ignores_moves_home({"rules": [IGNORE_DISRUPTIONS, SIDECAR_81_IGNORED, IGNORE_MOVED_HOME]}, ["train"])
    assert ignores_moves_home({"rules": [IGNORE_DISRUPTIONS, ANY_81_IGNORED]}, ["train"])
    assert not ignores_moves_home({"rules": [IGNORE_DISRUPTIONS, EXIT_FAILS_JOB, IGNORE_MOVED_HOME]}, ["train"])
    assert not ignores_moves_home({"rules": [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME]}, ["train", "eval"])
    assert not ignores_moves_home({"rules": [IGNORE_DISRUPTIONS, IGNORE_MOVED_HOME]}, [])
    assert not ignores_moves_home({"rules": [IGNORE_MOVED_HOME, IGNORE_DISRUPTIONS]}, ["train"])


def test_each_gpu_container_gets_its_own_rule_in_the_templates_order() -> None:
    job = a_job(rules=[EXIT_FAILS_JOB])
    gpu = {"limits": {"nvidia.com/gpu": 1}}
    job["spec"]["template"]["spec"]["containers"] = [
        {"name": "train", "image": "x", "resources": gpu},
        {"name": "loader", "image": "y"},
        {"name": "eval", "image": "x", "resources": gpu},
    ]
    after = applied(job, job_policy.plan(job, GPUS).ops)
    assert after["spec"]["podFailurePolicy"]["rules"] == [
        IGNORE_DISRUPTIONS,
        ignore_moved_home("train"),
        ignore_moved_home("eval"),
        EXIT_FAILS_JOB,
    ]


def first_action_for_exit(policy: dict[str, Any], container: str, code: int) -> str:
    """The action of the first rule matching one container's exit (the Job controller's onExitCodes rule
    matching, for the In operator; 'Count' when none matches)."""
    for rule in policy.get("rules", []):
        exits = rule.get("onExitCodes") or {}
        named = exits.get("containerName")
        if exits.get("operator") == "In" and code in exits.get("values", []) and named in (None, "", container):
            return str(rule["action"])
    return "Count"


def test_only_the_burst_containers_81_is_a_move_home_a_sidecars_is_counted() -> None:
    job = a_job()
    job["spec"]["template"]["spec"]["containers"] = [
        {"name": "train", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}},
        {"name": "loader", "image": "y"},
    ]
    patched = applied(job, job_policy.plan(job, GPUS).ops)
    policy = patched["spec"]["podFailurePolicy"]
    assert first_action_for_exit(policy, "train", EXIT_MOVED_HOME) == "Ignore"
    assert first_action_for_exit(policy, "loader", EXIT_MOVED_HOME) == "Count"
