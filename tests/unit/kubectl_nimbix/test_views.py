"""kubectl nimbix: pods and namespaces as the API server returns them -> status rows, budget rows,
explanations, and kubectl-like tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubectl_nimbix import views
from kubeplumbing.spendrecord import parse_spend_record

P = "nimbix-burst.io/"
GPUS = ("nvidia.com/gpu",)


def pod(
    name: str = "train-0",
    namespace: str = "team",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": {"task-type": "Nimbix", **(labels or {})},
            "annotations": annotations or {},
        },
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": phase},
    }


def namespace(name: str, budget: str | None = None) -> dict[str, Any]:
    annotations = {P + "max-remote-gpus": budget} if budget is not None else {}
    return {"metadata": {"name": name, "uid": f"ns-{name}", "annotations": annotations}}


RUNNING = {
    P + "decision": "remote",
    P + "remote-gpus": "4",
    P + "jobs": "4711=running",
    P + "job-number": "4711",
    P + "job-state": "running",
    P + "job-machine": "ng4",
    P + "job-nodes": "1",
    P + "gpu-hours": "2.00",
    P + "cost": "4.20",
}


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param(RUNNING, ("remote", "4711", "running", "ng4 x1", "2.00", "4.20"), id="running"),
        pytest.param({P + "decision": "remote"}, ("remote", "", "", "", "", ""), id="no-job-yet"),
        pytest.param({P + "decision": "local"}, ("local", "", "", "", "", ""), id="local"),
        # The reaper's `ended` says no job is live; the ledger says how the last one ended.
        pytest.param(
            {**RUNNING, P + "jobs": "4711=failed", P + "job-state": "ended"},
            ("remote", "4711", "failed", "ng4 x1", "2.00", "4.20"),
            id="ended-with-ledger",
        ),
        pytest.param(
            {P + "decision": "remote", P + "job-state": "ended"},
            ("remote", "", "ended", "", "", ""),
            id="ended-without-ledger",
        ),
        pytest.param(
            {P + "decision": "remote", P + "stage": "staging-in"},
            ("remote", "", "staging-in", "", "", ""),
            id="staging-in",
        ),
        pytest.param(
            {**RUNNING, P + "jobs": "4711=failed", P + "stage": "copying-back"},
            ("remote", "4711", "copying-back", "ng4 x1", "2.00", "4.20"),
            id="copying-back",
        ),
        pytest.param(
            {**RUNNING, P + "stage": "running"},
            ("remote", "4711", "running", "ng4 x1", "2.00", "4.20"),
            id="running-stage",
        ),
    ],
)
def test_status_row(annotations: dict[str, str], expected: tuple[str, ...]) -> None:
    row = views.build_status_row(pod(annotations=annotations))
    assert row is not None
    assert (row.decision, row.job, row.state, row.machine, row.gpu_hours, row.cost) == expected


def test_undecided_pods_are_not_listed_and_remote_only_filters() -> None:
    pods = [pod("b", annotations=RUNNING), pod("a", annotations={P + "decision": "local"}), pod("c")]
    assert [r.name for r in views.build_status_rows(pods)] == ["a", "b"]
    assert [r.name for r in views.build_status_rows(pods, remote_only=True)] == ["b"]


def test_status_table_is_laid_out_like_kubectl() -> None:
    rows = views.build_status_rows([pod(annotations=RUNNING), pod("x", annotations={P + "decision": "local"})])
    assert views.format_status(rows, all_namespaces=True) == (
        "NAMESPACE   NAME      DECISION   JOB      STATE     MACHINE   GPU-HOURS   COST     PHASE\n"
        "team        train-0   remote     4711     running   ng4 x1    2.00        4.20     Running\n"
        "team        x         local      <none>   <none>    <none>    <none>      <none>   Running\n"
    )
    assert views.format_status(rows, all_namespaces=False).startswith("NAME      DECISION")


def test_status_json_has_the_same_rows() -> None:
    (row,) = json.loads(views.format_json(views.build_status_rows([pod(annotations=RUNNING)])))
    assert row["job"] == "4711" and row["cost"] == "4.20" and row["namespace"] == "team"


@pytest.mark.parametrize(
    ("namespaces", "pods", "expected"),
    [
        pytest.param([namespace("team", "8")], [pod(annotations=RUNNING)], [("team", "8", 4, "4", 1)], id="in-use"),
        pytest.param([namespace("team", "8")], [], [("team", "8", 0, "8", 0)], id="idle"),
        pytest.param([namespace("team")], [pod(annotations=RUNNING)], [("team", "none", 4, "", 1)], id="no-budget"),
        pytest.param([namespace("team", "2")], [pod(annotations=RUNNING)], [("team", "2", 4, "0", 1)], id="over"),
        pytest.param([namespace("team", "x")], [], [("team", "'x' (invalid: 0)", 0, "0", 0)], id="invalid"),
        pytest.param([namespace("other")], [], [], id="neither"),
        # Finished, and its runner did not say its job ended: counted until the controller records it.
        pytest.param(
            [namespace("team", "8")],
            [pod(annotations=RUNNING, phase="Failed")],
            [("team", "8", 4, "4", 1)],
            id="finished-job-may-run",
        ),
        pytest.param(
            [namespace("team", "8")],
            [pod(annotations={**RUNNING, P + "job-state": "ended"}, phase="Failed")],
            [("team", "8", 0, "8", 0)],
            id="finished-job-ended",
        ),
        pytest.param(
            [namespace("team", "8")],
            [pod(annotations={P + "decision": "local"})],
            [("team", "8", 0, "8", 0)],
            id="local-not-counted",
        ),
    ],
)
def test_budget_rows_count_as_the_webhook_counts(
    namespaces: list[dict[str, Any]], pods: list[dict[str, Any]], expected: list[tuple[Any, ...]]
) -> None:
    rows, problems = views.build_budget_rows(namespaces, pods, gpu_resources=GPUS)
    assert [(r.namespace, r.budget, r.in_use, r.free, r.burst_pods) for r in rows] == expected
    assert problems == []


def test_budget_table() -> None:
    rows, _ = views.build_budget_rows([namespace("team", "8")], [pod(annotations=RUNNING)], gpu_resources=GPUS)
    assert views.format_budget(rows, spend_problem="configmap nimbix-burst/nimbix-burst-spend not found") == (
        "NAMESPACE   BUDGET   IN-USE   FREE   BURST-PODS   JARVICE-GPUS   COST/H   CAP/H   MONTH    CAP/MONTH\n"
        "team        8        4        4      1            <none>         <none>   none    <none>   none\n"
        "Spend: no record (configmap nimbix-burst/nimbix-burst-spend not found).\n"
    )


SPEND = json.dumps(
    {
        "version": 1,
        "observed_at": 1_800_000_000,
        "month": "2027-01",
        "machines": {"n1": {"gpus": 1, "price": 2.1}},
        "namespaces": {
            "team": {
                "pods": {"uid-team-train-0": {"gpus": 4, "cost_per_hour": 8.4, "worst_case": 16.8}},
                "cost_per_hour": 8.4,
                "month_recorded": 3.0,
                "month_worst_case": 19.8,
            },
            "gone": {"pods": {}, "cost_per_hour": 0.0, "month_recorded": 1.25, "month_worst_case": 1.25},
        },
        "unattributed": {"jobs": 0, "cost_per_hour": 0.0},
    }
)


def capped(name: str, *, hour: str | None = None, month: str | None = None) -> dict[str, Any]:
    raw = namespace(name, "8")
    if hour is not None:
        raw["metadata"]["annotations"][P + "max-cost-per-hour"] = hour
    if month is not None:
        raw["metadata"]["annotations"][P + "max-cost-per-month"] = month
    return raw


def test_budget_shows_spend_against_both_caps_with_the_records_age() -> None:
    spend = parse_spend_record(SPEND)
    rows, problems = views.build_budget_rows(
        [capped("team", hour="10", month="x"), capped("idle", hour="5")],
        [pod(annotations=RUNNING)],
        gpu_resources=GPUS,
        spend=spend,
        now=1_800_000_042,
    )
    assert problems == []
    by_name = {row.namespace: row for row in rows}
    team = by_name["team"]
    assert (team.jarvice_gpus, team.cost_per_hour, team.cap_per_hour, team.month_cost, team.cap_per_month) == (
        "4",
        "8.40",
        "10.00",
        "19.80",
        "'x' (invalid: 0)",
    )
    assert (by_name["idle"].cost_per_hour, by_name["idle"].cap_per_hour) == ("0.00", "5.00")
    assert by_name["gone"].month_cost == "1.25"  # spend recorded this month, no pod left
    assert team.spend_age_seconds == 42
    assert views.format_budget(rows, spend=spend).endswith(
        "Spend as JARVICE listed it 42s ago (month 2027-01 UTC, MONTH = worst case).\n"
    )


def test_an_unreadable_pod_is_a_problem_not_a_crash() -> None:
    bad = pod(annotations=RUNNING)
    bad["spec"]["containers"] = "not a list"
    rows, problems = views.build_budget_rows([namespace("team", "8")], [bad], gpu_resources=GPUS)
    assert [r.in_use for r in rows] == [0] and len(problems) == 1 and "team/train-0" in problems[0]


def test_a_finished_burst_pod_whose_runner_says_its_job_ended_is_not_counted() -> None:
    done = pod(annotations=RUNNING, phase="Failed")
    done["spec"]["containers"] = [{"name": "c", "env": [{"name": "REMOTE", "value": "1"}]}]
    message = json.dumps({"nimbix_burst": {"job": 4711, "job_may_run": False, "exit_code": 1}})
    done["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": {"message": message}}}]
    rows, problems = views.build_budget_rows([namespace("team", "8")], [done], gpu_resources=GPUS)
    assert [(r.in_use, r.burst_pods) for r in rows] == [(0, 0)] and problems == []


def test_an_unreadable_namespace_is_a_problem_naming_the_field() -> None:
    bad = namespace("team", "8")
    bad["metadata"]["annotations"] = ["not", "an", "object"]
    rows, problems = views.build_budget_rows([bad], [], gpu_resources=GPUS)
    assert rows == [] and problems == ["namespace team: metadata.annotations must be an object"]


@pytest.mark.parametrize(
    ("raw", "present", "absent"),
    [
        pytest.param(
            pod(
                annotations={
                    **RUNNING,
                    P + "reason": "needs 4 nvidia.com/gpu; best node a has 2 free",
                    P + "original-resources": json.dumps({"gpus": {"nvidia.com/gpu": 4}}),
                },
                labels={P + "decision": "remote"},
            ),
            {
                "Decision": "remote",
                "Reason": "needs 4 nvidia.com/gpu; best node a has 2 free",
                "Asked for": "4 nvidia.com/gpu",
                "JARVICE job": "4711",
                "Job state": "running",
                "Cost": "4.20",
            },
            ["Label", "Why"],
            id="remote",
        ),
        pytest.param(
            pod(annotations={P + "decision": "local", P + "reason": "budget", P + "budget": "4 of 4 in use"}),
            {"Decision": "local", "Budget": "4 of 4 in use"},
            ["JARVICE job"],
            id="kept-local-by-budget-older-webhook",
        ),
        pytest.param(pod(), {"Decision": "none: the webhook did not decide this pod"}, ["Reason"], id="undecided"),
    ],
)
def test_explain(raw: dict[str, Any], present: dict[str, str], absent: list[str]) -> None:
    fields = dict(views.explain_pod(raw))
    assert {key: fields.get(key) for key in present} == present
    assert not [key for key in absent if key in fields]


def test_explain_says_why_an_unlabelled_pod_was_not_decided() -> None:
    raw = pod()
    raw["metadata"]["labels"] = {}
    assert "task-type=Nimbix" in dict(views.explain_pod(raw))["Why"]


def test_explain_text_aligns_the_values() -> None:
    text = views.format_explain([("Pod", "team/a"), ("Decision", "local")])
    assert text == "Pod:      team/a\nDecision: local\n"


WAITING = {P + "decision": "local", P + "burst-deadline": "2026-11-27T17:01:00Z"}


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        pytest.param(pod(annotations=WAITING, phase="Pending"), "waiting until 2026-11-27T17:01:00Z", id="waiting"),
        # a node took it in time: it runs here, nothing left to wait for
        pytest.param(pod(annotations=WAITING, phase="Running"), "", id="a-node-took-it"),
        pytest.param({**pod(annotations=WAITING, phase="Pending"), "spec": {"nodeName": "gpu-1"}}, "", id="bound"),
    ],
)
def test_a_pod_waiting_before_it_bursts_says_until_when(raw: dict[str, Any], state: str) -> None:
    row = views.build_status_row(raw)
    assert row is not None
    assert row.state == state


def test_explain_names_the_deadline_and_why_a_pod_did_not_wait() -> None:
    fields = dict(views.explain_pod(pod(annotations=WAITING, phase="Pending")))
    assert fields["Bursts at"] == "2026-11-27T17:01:00Z"
    burst = {P + "decision": "remote", P + "burst-after-ignored": "only a Job's pod can wait"}
    assert dict(views.explain_pod(pod(annotations=burst)))["Did not wait"] == "only a Job's pod can wait"


def test_an_ended_pod_shows_how_its_job_ended_not_its_last_data_stage() -> None:
    row = views.build_status_row(
        pod(annotations={**RUNNING, P + "jobs": "4711=failed", P + "stage": "copying-back"}, phase="Failed")
    )
    assert row is not None and row.state == "failed"


MOVING = {**RUNNING, P + "move-home": "4711"}


def ended(code: int) -> dict[str, Any]:
    raw = pod(annotations=MOVING, phase="Failed")
    raw["status"]["containerStatuses"] = [{"name": "app", "state": {"terminated": {"exitCode": code}}}]
    return raw


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        pytest.param(pod(annotations=MOVING, phase="Running"), "moving home", id="moving"),
        pytest.param(ended(81), "moved home", id="moved"),
        # it ended otherwise (a cut copy-back): the job's own end shows
        pytest.param(ended(75), "running", id="not-moved"),
    ],
)
def test_a_pod_moving_home_says_so(raw: dict[str, Any], state: str) -> None:
    row = views.build_status_row(raw)
    assert row is not None and row.state == state
    assert dict(views.explain_pod(raw))["Moving home from job"] == "4711"


def ended(message: object, *, phase: str = "Failed") -> dict[str, Any]:
    """A burst pod whose runner's container ended with `message` as its termination message."""
    raw = pod(annotations={P + "decision": "remote", P + "job-number": "7"}, phase=phase)
    terminated = {"exitCode": 75, "message": message} if message is not None else {"exitCode": 75}
    raw["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": terminated}}]
    return raw


KEPT = {"vault_dir": "nimbix-burst/pod-u", "refused": 1, "first": ["nimbix-burst/pod-u/srv/out/sub"]}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            json.dumps({"nimbix_burst": {"job": 7, "job_may_run": False, "exit_code": 75, "kept_in_vault": KEPT}}),
            "1 outputs the pod refused, in nimbix-burst/pod-u (first: nimbix-burst/pod-u/srv/out/sub)",
        ),
        (
            json.dumps({"nimbix_burst": {"kept_in_vault": {"vault_dir": "d", "refused": 0, "first": []}}}),
            "outputs not copied, in d",
        ),
        (json.dumps({"nimbix_burst": {"job": 7, "job_may_run": False, "exit_code": 0}}), ""),
        ("OOMKilled", ""),  # not the runner's message
        (json.dumps({"nimbix_burst": "garbled"}), ""),
        (None, ""),
    ],
    ids=["refused", "copy-back-cut", "nothing-kept", "not-json", "garbled", "no-message"],
)
def test_what_the_copy_back_left_in_the_vault_is_shown(message: object, expected: str) -> None:
    raw = ended(message)
    assert views.kept_in_vault(raw) == expected
    row = views.build_status_row(raw)
    assert row is not None and (row.state == "outputs in vault") == bool(expected)
    fields = dict(views.explain_pod(raw))
    assert fields.get("Kept in the vault", "") == expected
