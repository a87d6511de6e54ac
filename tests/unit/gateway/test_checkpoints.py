"""Where the gateway looks for a burst pod's checkpoints, and which file counts as the newest complete
one (pure): the same directories as the runner stages into (entrypoint.staging), never another pod's."""

from __future__ import annotations

from typing import Any

import pytest

from entrypoint import staging
from gateway.checkpoints import (
    CheckpointPlace,
    Entry,
    Newest,
    NoCheckpointPlace,
    answer,
    base_entries,
    checkpoint_place,
    is_complete,
    newest,
    work_dir,
)
from gateway.vault_scope import PathRefused, VaultGrant
from jarvice import vault_layout

POD = "11111111-1111-1111-1111-111111111111"
JOB = "33333333-3333-3333-3333-333333333333"
OTHER = "22222222-2222-2222-2222-222222222222"
CONTRACT = {
    "nimbix-burst.io/checkpoint-dir": "/workspace/ckpt/",
    "nimbix-burst.io/checkpoint-interval": "10s",
    "nimbix-burst.io/stage-in": "/workspace",
    "nimbix-burst.io/stage-out": "/workspace",
}


def pod(
    annotations: dict[str, str] | None = None, *, env: dict[str, str] | None = None, burst: int = 1
) -> dict[str, Any]:
    values = {"NIMBIX_BURST_CONTAINER": "main", **(env or {})}
    containers = [{"name": f"c{i}", "env": [{"name": k, "value": v} for k, v in values.items()]} for i in range(burst)]
    containers.append({"name": "sidecar", "env": [{"name": "X", "value": "1"}]})
    return {
        "metadata": {"uid": POD, "annotations": CONTRACT if annotations is None else annotations},
        "spec": {"containers": containers},
    }


@pytest.mark.parametrize(
    ("data_key", "container"),
    [
        (None, "main"),
        (f"job-{JOB}", "main"),
        (f"job-{JOB}-7", "trainer-2"),
        (f"job-{JOB}-07", "main"),  # a key the runner refuses: its own directory
        ("job-nonsense", "main"),
        (f"job-{JOB}", "Not_A_Name"),  # no container part, as the runner does
    ],
)
def test_the_directories_are_the_runners(data_key: str | None, container: str) -> None:
    """The pod's env read as its runner reads it (its data key checked, its container name kept or not)."""
    env = {"NIMBIX_BURST_CONTAINER": container, **({"NIMBIX_BURST_DATA_KEY": data_key} if data_key else {})}
    try:
        key = staging.parse_data_key(env)
    except staging.StagingError:
        key = None
    runner = staging.build_work_dirs(data_key=key, pod_uid=POD, container=container, job_label="k8s-x")
    place = checkpoint_place(pod(env=env), job_uid=JOB)
    assert (place.own, place.shared, place.lease) == (runner.own, runner.shared, runner.lease)


def test_a_pod_of_a_job_looks_in_the_jobs_directory_it_holds_the_lease_of() -> None:
    place = checkpoint_place(pod(env={"NIMBIX_BURST_DATA_KEY": f"job-{JOB}"}), job_uid=JOB)
    shared = f"nimbix-burst/job-{JOB}.main"
    assert (place.own, place.shared, place.lease) == (
        f"nimbix-burst/pod-{POD}.main",
        shared,
        f"nimbix-burst/.leases/job-{JOB}.main",
    )
    assert place.checkpoint_dir == "/workspace/ckpt"
    spaced = pod(env={"NIMBIX_BURST_CONTAINER": " main ", "NIMBIX_BURST_DATA_KEY": f" job-{JOB} "})
    assert checkpoint_place(spaced, job_uid=JOB) == place  # read as the runner reads its env: stripped
    mine, theirs = (vault_layout.render_lease(pod_uid=uid, job_label="k8s-x") for uid in (POD, OTHER))
    assert work_dir(place, mine) == shared
    assert work_dir(place, theirs) == place.own  # another pod holds it: the runner staged into its own
    assert work_dir(place, None) == place.own
    assert place.directories(shared) == (f"{shared}/workspace/ckpt",)


def test_the_jobs_directory_is_never_reached_unless_the_job_was_found_with_its_uid() -> None:
    place = checkpoint_place(pod(env={"NIMBIX_BURST_DATA_KEY": f"job-{OTHER}"}), job_uid=JOB)
    assert (place.shared, place.lease) == (None, None)
    place = checkpoint_place(pod(env={"NIMBIX_BURST_DATA_KEY": f"job-{JOB}"}), job_uid=None)
    assert place.shared is None
    with pytest.raises(PathRefused):  # and a directory outside the pod's is refused, whoever names it
        place.directories(f"nimbix-burst/job-{JOB}.main")


def test_an_indexed_pod_looks_in_its_indexs_subdirectory_too() -> None:
    annotations = {**CONTRACT, "batch.kubernetes.io/job-completion-index": "3"}
    place = checkpoint_place(pod(annotations, env={"NIMBIX_BURST_DATA_KEY": f"job-{JOB}-3"}), job_uid=JOB)
    base = f"nimbix-burst/job-{JOB}-3.main/workspace/ckpt"
    assert place.directories(f"nimbix-burst/job-{JOB}-3.main") == (base, f"{base}/3")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (pod({}), "names no nimbix-burst.io/checkpoint-dir"),
        (pod({**CONTRACT, "nimbix-burst.io/checkpoint-interval": "often"}), "cannot be used"),
        (pod(burst=2), "2 burst containers"),
        (pod(burst=0), "0 burst containers"),
        ({"metadata": {"uid": "x", "annotations": CONTRACT}, "spec": {}}, "no UID"),
    ],
)
def test_a_pod_without_one_checkpoint_place_says_why(body: dict[str, Any], says: str) -> None:
    with pytest.raises(NoCheckpointPlace, match=says):
        checkpoint_place(body, job_uid=None)


@pytest.mark.parametrize(
    ("entry", "complete"),
    [
        (Entry("step-00000010.json", "file", 5.0), True),
        (Entry("last.ckpt", "file", 5.0), True),
        (Entry(".step-00000020.json.tmp", "file", 9.0), False),
        (Entry(".hidden", "file", 9.0), False),
        (Entry("step-00000020.json.tmp", "file", 9.0), False),
        (Entry("checkpoint-500", "directory", 9.0), True),  # a directory renamed into place
        (Entry("tmp-checkpoint-600", "directory", 9.0), False),
        (Entry("link", "other", 9.0), False),
        (Entry("no-time", "file", None), False),
    ],
)
def test_only_a_file_or_directory_renamed_into_place_is_a_complete_checkpoint(entry: Entry, complete: bool) -> None:
    assert is_complete(entry) == complete


def test_the_newest_is_by_time_across_the_listings() -> None:
    listings = [
        ("", [Entry("step-00000010.json", "file", 10.0), Entry(".step-00000030.json.tmp", "file", 30.0)]),
        ("3/", [Entry("step-00000020.json", "file", 20.0)]),
    ]
    assert newest(listings) == Newest("3/step-00000020.json", 20.0)
    assert newest([("", [Entry("a", "file", 5.0), Entry("b", "file", 5.0)])]) == Newest("b", 5.0)
    assert newest([("", [Entry(".tmp", "file", 5.0)]), ("3/", [])]) is None


def test_the_answer_says_what_was_found_and_where() -> None:
    place = CheckpointPlace(VaultGrant(POD), f"nimbix-burst/pod-{POD}", None, None, "/workspace/ckpt", None)
    own = f"nimbix-burst/pod-{POD}"
    assert answer(place, own, Newest("step-1", 5.0), now=7.0) == {
        "checkpoint": {"name": "step-1", "mtime": 5.0},
        "directory": f"{own}/workspace/ckpt",
        "checked_at": 7.0,
    }
    assert answer(place, own, None, now=7.0)["checkpoint"] is None


def test_a_file_dated_after_the_gateways_clock_and_the_slack_is_not_the_newest() -> None:
    """A program (or a copy that keeps times) can date a file in the future: taken for the newest, it would
    keep the job fresh for ever after it stopped checkpointing. It says nothing of when it was written:
    the newest is the real one behind it, or none."""
    listings = [("", [Entry("step-00000010.json", "file", 100.0), Entry("forged.json", "file", 4_000_000_000.0)])]
    assert newest(listings, not_after=130.0) == Newest("step-00000010.json", 100.0)
    assert newest([("", [Entry("forged.json", "file", 131.0)])], not_after=130.0) is None
    assert newest([("", [Entry("just-now.json", "file", 130.0)])], not_after=130.0) == Newest("just-now.json", 130.0)


def test_a_checkpoint_directory_renamed_into_place_is_a_checkpoint() -> None:
    listings = [("", [Entry("checkpoint-500", "directory", 100.0), Entry("tmp-checkpoint-600", "directory", 110.0)])]
    assert newest(listings) == Newest("checkpoint-500", 100.0)


@pytest.mark.parametrize(
    ("entries", "found"),
    [
        ([Entry("tmp-checkpoint-600", "directory", 110.0)], None),  # Hugging Face, writing
        ([Entry("600.orbax-checkpoint-tmp-1733", "directory", 110.0)], None),  # Orbax, writing
        ([Entry(".step-7.json.tmp", "file", 110.0), Entry("step-7.json.tmp", "file", 110.0)], None),
        ([Entry("100", "directory", 90.0), Entry("200", "directory", 110.0)], Newest("200", 110.0)),  # Orbax's steps
        ([Entry("global_step500", "directory", 120.0)], Newest("global_step500", 120.0)),  # DeepSpeed
        ([Entry("latest", "other", 130.0)], None),  # neither a file nor a directory (a link, a device)
    ],
    ids=["hf-tmp", "orbax-tmp", "dot-and-tmp-files", "orbax-steps", "deepspeed", "other-kind"],
)
def test_writes_under_way_are_never_the_newest(entries: list[Entry], found: Newest | None) -> None:
    assert newest([("", entries)]) == found


def test_an_indexed_pods_index_subdirectories_are_not_checkpoints_of_its_own_directory() -> None:
    indexed = checkpoint_place(
        pod(
            {**CONTRACT, "batch.kubernetes.io/job-completion-index": "0"}, env={"NIMBIX_BURST_DATA_KEY": f"job-{JOB}-0"}
        ),
        job_uid=JOB,
    )
    entries = [Entry("0", "directory", 100.0), Entry("1", "directory", 200.0), Entry("last.ckpt", "file", 50.0)]
    assert [e.name for e in base_entries(indexed, entries)] == ["last.ckpt"]  # another index's newer one unseen
    alone = checkpoint_place(pod(), job_uid=None)
    assert base_entries(alone, entries) == entries  # not Indexed: step directories are checkpoints
