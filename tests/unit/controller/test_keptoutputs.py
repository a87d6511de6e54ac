"""The Event of a finished burst pod whose outputs stayed in the vault (controller.keptoutputs): what a
termination message must be to count as the runner's, what the Event says, and the pods it is for."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest

from controller import keptoutputs
from controller.keptoutputs import Kept, event_message, kept_of, parse_kept, parse_kept_pod
from entrypoint.termination import KeptInVault, build_message
from tests.unit.controller.builders import JOB_UID, UID, job_owner

DIR = "nimbix-burst/job-11111111-2222-3333-4444-555555555555.train"
# The longest directory the runner makes: a data key with the longest index, the longest container name.
LONGEST_DIR = f"nimbix-burst/job-{'0' * 36}-{'9' * 9}.{'c' * 63}"


def runner(refused: int = 3, first: tuple[str, ...] = (f"{DIR}/out/a", f"{DIR}/out/b"), vault_dir: str = DIR) -> str:
    """The runner's own termination message, as entrypoint.termination writes it."""
    return build_message(job=4711, job_may_run=False, exit_code=75, kept=KeptInVault(vault_dir, refused, first))


def said(kept: object) -> str:
    return json.dumps({"nimbix_burst": {"job": 4711, "job_may_run": False, "exit_code": 75, "kept_in_vault": kept}})


GOOD = {"vault_dir": DIR, "refused": 1, "first": [f"{DIR}/out/a"]}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(runner(), Kept("c", DIR, 3, ("/out/a", "/out/b")), id="runner-refused-three"),
        pytest.param(
            runner(4, tuple(f"{DIR}/out/{n}" for n in "abcd")), Kept("c", DIR, 4, ("/out/a", "/out/b")), id="two-shown"
        ),
        pytest.param(runner(0, ("/out/x",)), Kept("c", DIR, 0, ("/out/x",)), id="copy-back-cut-short-pod-paths"),
        pytest.param(runner(2, ()), Kept("c", DIR, 2, ()), id="none-named"),
        pytest.param(runner(1, ("elsewhere/x",)), Kept("c", DIR, 1, ("elsewhere/x",)), id="path-outside-dir-as-is"),
        pytest.param(runner(1, (f"{DIR}/o\nut\x1b[2J",)), Kept("c", DIR, 1, ("/o?ut?[2J",)), id="control-chars"),
        pytest.param(runner(1, ("/" + "x" * 500,)), Kept("c", DIR, 1, ("/" + "x" * 98 + "…",)), id="long-path-cut"),
        pytest.param(runner(1, (), LONGEST_DIR), Kept("c", LONGEST_DIR, 1, ()), id="longest-runner-dir"),
        # Not the runner's message, or not one naming kept outputs: no Event.
        pytest.param(build_message(job=4711, job_may_run=False, exit_code=0), None, id="no-kept"),
        pytest.param(None, None, id="no-message"),
        pytest.param("", None, id="empty"),
        pytest.param("Error: out of memory\n", None, id="log-tail"),
        pytest.param("[" * 2040 + "]" * 2040, None, id="nested-deeper-than-the-parser"),
        pytest.param(said(GOOD) + " " * 4096, None, id="longer-than-kubernetes-keeps"),
        pytest.param(json.dumps([1]), None, id="not-an-object"),
        pytest.param(json.dumps({"nimbix_burst": "x"}), None, id="payload-not-an-object"),
        pytest.param(json.dumps({"other": {"kept_in_vault": GOOD}}), None, id="another-key"),
        pytest.param(said([GOOD]), None, id="kept-not-an-object"),
        pytest.param(said({**GOOD, "vault_dir": None}), None, id="dir-missing"),
        pytest.param(said({"vault_dir": DIR, "first": []}), None, id="refused-missing"),
        pytest.param(said({"vault_dir": DIR, "refused": 1}), None, id="first-missing"),
        pytest.param(said({**GOOD, "refused": "3"}), None, id="refused-a-string"),
        pytest.param(said({**GOOD, "refused": True}), None, id="refused-a-bool"),
        pytest.param(said({**GOOD, "refused": -1}), None, id="refused-negative"),
        pytest.param(said({**GOOD, "refused": 1.5}), None, id="refused-a-float"),
        pytest.param(said({**GOOD, "refused": 10**3000}), None, id="refused-thousands-of-digits"),
        pytest.param(said({**GOOD, "first": "out/a"}), None, id="first-a-string"),
        pytest.param(said({**GOOD, "first": ["a", 7]}), None, id="first-not-all-strings"),
        pytest.param(said({**GOOD, "vault_dir": "/etc"}), None, id="dir-not-the-runners"),
        pytest.param(said({**GOOD, "vault_dir": "nimbix-burst/.."}), None, id="dir-dot-dot"),
        pytest.param(said({**GOOD, "vault_dir": "nimbix-burst/a b"}), None, id="dir-with-a-space"),
        pytest.param(said({**GOOD, "vault_dir": "nimbix-burst/x'; rm -rf ~"}), None, id="dir-with-quote"),
        pytest.param(said({**GOOD, "vault_dir": "nimbix-burst/a/b"}), None, id="dir-two-levels"),
        pytest.param(said({**GOOD, "vault_dir": "nimbix-burst/" + "a" * 200}), None, id="dir-too-long"),
        pytest.param(said({**GOOD, "vault_dir": DIR + "\n"}), None, id="dir-newline"),
    ],
)
def test_a_message_counts_only_as_the_runner_wrote_it(message: object, expected: Kept | None) -> None:
    assert parse_kept("c", message) == expected


def kept(refused: int = 3, first: tuple[str, ...] = ("/out/a", "/out/b"), container: str = "c") -> Kept:
    return Kept(container, DIR, refused, first)


COPY = f"lftp -u \"$USER\" -e 'mirror {DIR}; bye' sftp://<vault host>"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param([], None, id="nothing-kept"),
        pytest.param(
            [kept()],
            f"3 outputs the job wrote could not be put in place and are kept in the vault at {DIR}"
            f" (first: /out/a, /out/b); copy them with {COPY}",
            id="three-refused",
        ),
        pytest.param(
            [kept(1, ("/out/a",))],
            f"1 output the job wrote could not be put in place and is kept in the vault at {DIR}"
            f" (first: /out/a); copy them with {COPY}",
            id="one-refused",
        ),
        pytest.param(
            [kept(0, ())],
            f"the copy-back did not finish: what it did not copy is kept in the vault at {DIR}; copy them with {COPY}",
            id="copy-back-cut-short",
        ),
        pytest.param(
            [kept(container="a"), kept(0, ("/x",), container="b")],
            f"container a: 3 outputs the job wrote could not be put in place and are kept in the vault at {DIR}"
            f" (first: /out/a, /out/b); container b: the copy-back did not finish: what it did not copy is kept in"
            f" the vault at {DIR} (first: /x); copy each directory with"
            " lftp -u \"$USER\" -e 'mirror <dir>; bye' sftp://<vault host>",
            id="two-containers",
        ),
    ],
)
def test_the_event_says_how_many_where_the_first_and_how_to_copy_them(given: list[Kept], expected: str | None) -> None:
    assert event_message(given) == expected


def test_the_longest_message_leaves_room_for_the_jobs_copy_to_name_the_pod() -> None:
    widest_dir = "nimbix-burst/" + "d" * 160  # the longest directory taken (the runner's are shorter)
    assert parse_kept("c", said({**GOOD, "vault_dir": widest_dir})) is not None
    widest = Kept("c" * 63, widest_dir, keptoutputs.MAX_COUNT, ("/" + "p" * 99, "/" + "q" * 99))
    one = event_message([widest])
    many = event_message([widest] * 64)
    assert one is not None and many is not None
    assert len(one) <= keptoutputs.MAX_EVENT_CHARS and one.endswith("sftp://<vault host>")
    assert len(many) <= keptoutputs.MAX_EVENT_CHARS and many.endswith("sftp://<vault host>")
    assert "more containers (kubectl nimbix explain names them)" in many
    assert keptoutputs.MAX_EVENT_CHARS + len(f"pod {'n' * 253}: ") == 1024


def status(name: str, message: object, *, state: str = "terminated") -> dict[str, Any]:
    return {"name": name, "state": {state: {"exitCode": 75, "message": message}}}


def test_every_containers_message_is_read_and_only_from_its_terminated_state() -> None:
    statuses = [
        status("z", runner(1, ())),
        status("a", runner(2, ())),
        status("waiting", runner(), state="waiting"),
        status("log", "not JSON"),
        "not a status",
        {"name": "no-state"},
    ]
    assert [(k.container, k.refused) for k in kept_of(statuses)] == [("a", 2), ("z", 1)]
    assert kept_of(None) == [] and kept_of({"a": 1}) == []


def pod(
    *,
    phase: str = "Failed",
    decision: str = "remote",
    reported: bool = False,
    owners: list[dict[str, Any]] | None = None,
    message: object = None,
) -> dict[str, Any]:
    annotations = {"nimbix-burst.io/decision": decision}
    if reported:
        annotations[keptoutputs.ANNOTATION_REPORTED] = "true"
    return {
        "metadata": {
            "uid": UID,
            "name": "train-abcde",
            "namespace": "team",
            "resourceVersion": "42",
            "annotations": annotations,
            "ownerReferences": [job_owner()] if owners is None else owners,
        },
        "status": {"phase": phase, "containerStatuses": [status("c", runner() if message is None else message)]},
    }


@pytest.mark.parametrize(
    ("obj", "wanted"),
    [
        pytest.param(pod(), True, id="failed-burst-pod"),
        pytest.param(pod(phase="Succeeded"), True, id="succeeded-burst-pod"),
        pytest.param(pod(phase="Running"), False, id="still-running-a-restarted-runner-may-finish"),
        pytest.param(pod(decision="local"), False, id="not-a-burst-pod"),
        pytest.param(pod(reported=True), False, id="already-reported"),
        pytest.param(pod(message="oom"), False, id="no-kept-outputs"),
    ],
)
def test_the_pods_reported_are_finished_burst_pods_not_yet_marked(obj: dict[str, Any], wanted: bool) -> None:
    assert (parse_kept_pod(obj) is not None) == wanted


@pytest.mark.parametrize(
    ("owners", "job"),
    [
        pytest.param(None, True, id="a-job"),
        pytest.param([], False, id="bare-pod"),
        pytest.param([{**job_owner(), "kind": "ReplicaSet", "apiVersion": "apps/v1"}], False, id="a-replicaset"),
        pytest.param([{**job_owner(), "apiVersion": "example.com/v1"}], False, id="another-api-group-job"),
        pytest.param([{**job_owner(), "controller": False}], False, id="not-the-controller"),
    ],
)
def test_the_event_goes_to_the_pod_and_to_its_job_naming_the_pod(
    owners: list[dict[str, Any]] | None, job: bool
) -> None:
    found = parse_kept_pod(pod(owners=owners))
    assert found is not None
    targets = keptoutputs.event_targets(found)
    assert targets[0] == ({"apiVersion": "v1", "kind": "Pod", "name": "train-abcde", "uid": UID}, found.message)
    if job:
        assert targets[1:] == [
            (
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB_UID},
                f"pod train-abcde: {found.message}",
            )
        ]
    else:
        assert targets[1:] == []


def test_the_mark_applies_only_to_the_pod_as_read() -> None:
    found = parse_kept_pod(pod())
    assert found is not None
    marked = jsonpatch.apply_patch(pod(), keptoutputs.mark_patch(found))
    assert marked["metadata"]["annotations"][keptoutputs.ANNOTATION_REPORTED] == "true"
    assert parse_kept_pod(marked) is None
    newer = pod()
    newer["metadata"]["resourceVersion"] = "43"  # the view lagged behind a change (an earlier mark, say)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(newer, keptoutputs.mark_patch(found))
    other = pod()
    other["metadata"]["uid"] = "00000000-1111-2222-3333-444444444444"  # another pod of the same name
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(other, keptoutputs.mark_patch(found))
