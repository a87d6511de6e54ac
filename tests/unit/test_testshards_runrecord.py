"""devplatform.testshards.runrecord: what a launcher run records, where its shards' cgroups go, and
which hosts its shards cannot run on."""

from __future__ import annotations

import pytest

from devplatform.testshards.plan import CgroupMount
from devplatform.testshards.runrecord import (
    HostRecord,
    Process,
    RecordError,
    RunRecord,
    caller_cgroup_dirs,
    checkout_key,
    unsupported_cgroups,
)

V1_HOST = [
    CgroupMount("cgroup", "/sys/fs/cgroup/cpu,cpuacct", "cpu,cpuacct"),
    CgroupMount("cgroup", "/sys/fs/cgroup/memory", "memory"),
    CgroupMount("cgroup", "/sys/fs/cgroup/systemd", "xattr,name=systemd"),
    CgroupMount("cgroup2", "/sys/fs/cgroup/unified", ""),
]
CI_JOB_CGROUP = """\
12:memory:/ci/job-7
4:cpu,cpuacct:/ci/job-7
1:name=systemd:/user.slice/session-3.scope
0::/ci/job-7
"""


def test_the_shards_cgroups_go_under_the_callers_in_each_hierarchy() -> None:
    """So a CI's memory limit and its kill of the job's cgroup reach every process of the shards."""
    assert caller_cgroup_dirs(V1_HOST, CI_JOB_CGROUP) == [
        "/sys/fs/cgroup/cpu,cpuacct/ci/job-7",
        "/sys/fs/cgroup/memory/ci/job-7",
        "/sys/fs/cgroup/systemd/user.slice/session-3.scope",
        "/sys/fs/cgroup/unified/ci/job-7",
    ]


def test_a_caller_at_the_roots_puts_the_shards_at_the_roots() -> None:
    at_roots = "4:cpu,cpuacct:/\n12:memory:/\n1:name=systemd:/\n0::/\n"
    assert caller_cgroup_dirs(V1_HOST, at_roots) == [mount.mount_point for mount in V1_HOST]


def test_a_hierarchy_the_caller_is_not_listed_in_is_an_error_that_names_it() -> None:
    with pytest.raises(RecordError, match="/sys/fs/cgroup/memory"):
        caller_cgroup_dirs(V1_HOST, "4:cpu,cpuacct:/\n1:name=systemd:/\n0::/\n")


@pytest.mark.parametrize(
    ("mounts", "refused"),
    [
        (V1_HOST, None),
        ([CgroupMount("cgroup2", "/sys/fs/cgroup", "nsdelegate")], "cgroup v2 only"),
        ([], "no cgroup hierarchy"),
    ],
)
def test_a_host_the_shards_cannot_run_on_is_refused_with_what_to_do(
    mounts: list[CgroupMount], refused: str | None
) -> None:
    reason = unsupported_cgroups(mounts)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


def test_two_checkouts_have_different_keys_and_one_checkout_always_the_same() -> None:
    assert checkout_key("/work/a/nimbix-burst") != checkout_key("/work/b/nimbix-burst")
    assert checkout_key("/work/a/nimbix-burst") == checkout_key("/work/a/nimbix-burst")
    assert checkout_key("/work/a/nimbix-burst").startswith("nimbix-burst-")
    assert checkout_key("/srv/odd name!").startswith("odd_name_-")


def test_a_run_record_reads_back_as_written() -> None:
    record = RunRecord("/work/a", Process(10, 200)).with_guardian(Process(11, 201))
    record = record.with_cgroups(["/sys/fs/cgroup/pids/x-1"]).with_cgroups(["/sys/fs/cgroup/pids/x-2"])
    assert RunRecord.from_json(record.to_json()) == record
    assert record.cgroups == ("/sys/fs/cgroup/pids/x-1", "/sys/fs/cgroup/pids/x-2")


def test_a_slots_cgroups_made_again_for_its_next_session_are_recorded_once() -> None:
    record = RunRecord("/work/a", Process(10, 200)).with_cgroups(["/c/x-1", "/d/x-1"])
    assert record.with_cgroups(["/c/x-1", "/d/x-1"]).cgroups == ("/c/x-1", "/d/x-1")


def test_a_host_record_reads_back_as_written() -> None:
    host = HostRecord({"kernel/panic": "1"}, ("/var/lib/kubelet",), "/proc/sys")
    assert HostRecord.from_json(host.to_json()) == host


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"format": 99}',
        '{"format": 1, "checkout": "/a", "launcher": {"pid": "1", "started_at_ticks": 2}, "guardian": null, '
        '"cgroups": []}',
        '{"format": 1, "checkout": "/a", "launcher": {"pid": 1, "started_at_ticks": 2}, "guardian": null, '
        '"cgroups": "x"}',
    ],
)
def test_a_run_record_that_is_not_one_is_an_error(text: str) -> None:
    with pytest.raises(RecordError):
        RunRecord.from_json(text)
