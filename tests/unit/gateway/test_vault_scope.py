"""Which vault paths a pod's SFTP session reaches (pure): its own and its Job's directories, the
shared passages looked at only, nothing else; a path the vault resolved is held to the same."""

from __future__ import annotations

import pytest

from gateway.vault_scope import (
    PathRefused,
    VaultGrant,
    check_access,
    check_resolved,
    classify,
    controlling_job,
    relative_to_root,
    split_path,
)

POD = "11111111-1111-1111-1111-111111111111"
JOB = "33333333-3333-3333-3333-333333333333"
OTHER = "22222222-2222-2222-2222-222222222222"
ALONE, OF_JOB = VaultGrant(POD), VaultGrant(POD, JOB)


@pytest.mark.parametrize(
    ("path", "grant", "access"),
    [
        (".", ALONE, "passage"),
        ("nimbix-burst", ALONE, "passage"),
        ("nimbix-burst/", ALONE, "passage"),
        ("nimbix-burst/.leases", ALONE, "passage"),
        (f"nimbix-burst/pod-{POD}", ALONE, "owned"),
        (f"nimbix-burst/pod-{POD}.main/etc/train/x", ALONE, "owned"),
        (f"./nimbix-burst//pod-{POD}.main/./x", ALONE, "owned"),
        (f"nimbix-burst/job-{JOB}.main/x", OF_JOB, "owned"),
        (f"nimbix-burst/job-{JOB}-7.main/x", OF_JOB, "owned"),
        (f"nimbix-burst/job-{JOB}", OF_JOB, "owned"),
        (f"nimbix-burst/.leases/job-{JOB}-7.main", OF_JOB, "owned"),
        (f"nimbix-burst/.leases/pod-{POD}.main", ALONE, "owned"),
    ],
)
def test_the_pods_directories_are_its_own_and_the_shared_ones_are_passages(
    path: str, grant: VaultGrant, access: str
) -> None:
    assert classify(split_path(path), grant) == access


@pytest.mark.parametrize(
    ("path", "grant", "says"),
    [
        ("/nimbix-burst/pod-x", ALONE, "absolute paths are refused"),
        (f"nimbix-burst/pod-{POD}/../pod-{OTHER}", ALONE, "'..' is refused"),
        ("..", ALONE, "'..' is refused"),
        ("etc/passwd", ALONE, "outside this pod's vault directories"),
        (f"nimbix-burst/pod-{OTHER}.main/x", ALONE, "outside"),
        (f"nimbix-burst/pod-{POD}x", ALONE, "outside"),  # a longer UID is another pod's
        (f"nimbix-burst/job-{JOB}.main", ALONE, "outside"),  # a Job the pod does not belong to
        (f"nimbix-burst/job-{OTHER}.main", OF_JOB, f"or its Job's nimbix-burst/job-{JOB}"),
        (f"nimbix-burst/job-{JOB}-x.main", OF_JOB, "outside"),
        (f"nimbix-burst/.leases/job-{OTHER}.main", OF_JOB, "outside"),
        (f"nimbix-burst/.leases/job-{JOB}.main/deeper", OF_JOB, "outside"),
        ("nimbix-burst/other", ALONE, "outside"),
    ],
)
def test_any_other_path_is_refused_saying_what_is_allowed(path: str, grant: VaultGrant, says: str) -> None:
    with pytest.raises(PathRefused) as refused:
        classify(split_path(path), grant)
    assert says in str(refused.value)


@pytest.mark.parametrize("path", [".", "nimbix-burst", "nimbix-burst/.leases"])
def test_a_passage_is_looked_at_never_listed_or_changed(path: str) -> None:
    check_access(split_path(path), ALONE, passage_ok=True)
    with pytest.raises(PathRefused, match="not listed or changed"):
        check_access(split_path(path), ALONE, passage_ok=False)


@pytest.mark.parametrize(
    ("resolved", "root", "parts"),
    [
        ("/", "/", ()),
        ("/nimbix-burst/pod-x", "/", ("nimbix-burst", "pod-x")),
        ("/home/alice/nimbix-burst", "/home/alice", ("nimbix-burst",)),
        ("/home/alice", "/home/alice/", ()),
    ],
)
def test_a_resolved_path_is_read_below_the_sessions_root(resolved: str, root: str, parts: tuple[str, ...]) -> None:
    assert relative_to_root(resolved, root) == parts


@pytest.mark.parametrize("resolved", ["/home/bob/x", "/home/alice2", "/"])
def test_a_resolved_path_outside_the_root_is_refused(resolved: str) -> None:
    with pytest.raises(PathRefused, match="leads out of the vault"):
        relative_to_root(resolved, "/home/alice")


OWN = ("nimbix-burst", f"pod-{POD}.main")


@pytest.mark.parametrize(
    ("parts", "resolved", "how", "passage_ok", "allowed"),
    [
        ((*OWN, "f"), (*OWN, "f"), "full", False, True),
        ((*OWN, "link"), (*OWN, "target"), "full", False, True),  # a link within the pod's: followed
        ((*OWN, "link"), ("nimbix-burst", f"pod-{OTHER}", "x"), "full", False, False),
        ((*OWN, "up"), ("nimbix-burst",), "full", False, False),  # listing the shared root through a link
        ((*OWN, "up"), ("nimbix-burst",), "full", True, True),  # a stat of it is harmless
        ((*OWN, "d", "f"), (*OWN, "d"), "parent", False, True),
        ((*OWN, "out", "f"), ("nimbix-burst", f"pod-{OTHER}"), "parent", False, False),
        ((*OWN, "out", "f"), ("etc",), "parent", False, False),
    ],
)
def test_what_the_vault_resolves_stays_in_the_pods_directories(
    parts: tuple[str, ...], resolved: tuple[str, ...], how: str, passage_ok: bool, allowed: bool
) -> None:
    if allowed:
        check_resolved(parts, resolved, ALONE, passage_ok=passage_ok, how=how)  # type: ignore[arg-type]
    else:
        with pytest.raises(PathRefused, match="symbolic link"):
            check_resolved(parts, resolved, ALONE, passage_ok=passage_ok, how=how)  # type: ignore[arg-type]


def _ref(**changes: object) -> dict[str, object]:
    return {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB, "controller": True, **changes}


@pytest.mark.parametrize(
    ("refs", "job"),
    [
        ([_ref()], ("train", JOB)),
        ([{"kind": "ReplicaSet", "uid": OTHER, "controller": False}, _ref()], ("train", JOB)),
        ([_ref(controller=False)], None),
        ([_ref(kind="CronJob")], None),
        ([_ref(uid="not-a-uid")], None),
        ([], None),
    ],
)
def test_the_job_a_pod_names_as_its_controller(refs: list[dict[str, object]], job: tuple[str, str] | None) -> None:
    assert controlling_job({"metadata": {"ownerReferences": refs}}) == job
