"""devplatform.testshards.plan: e2e modules split into shards by measured time, the cgroup hierarchies
a shard mounts again, and the durations read from pytest's report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devplatform.testshards import plan
from devplatform.testshards.__main__ import DURATIONS_FILE, E2E_DIR, REPO_ROOT, discover_modules


@pytest.mark.parametrize(
    ("modules", "seconds", "count", "expected"),
    [
        # longest first, each to the least loaded shard; each shard keeps the given order
        (["a", "b", "c", "d"], {"a": 10, "b": 40, "c": 30, "d": 20}, 2, [(("a", "b"), 50), (("c", "d"), 50)]),
        (["a", "b", "c"], {"a": 100, "b": 10, "c": 10}, 2, [(("a",), 100), (("b", "c"), 20)]),
        # never an empty shard
        (["a"], {"a": 5}, 3, [(("a",), 5)]),
        (["a", "b"], {"a": 1, "b": 2}, 1, [(("a", "b"), 3)]),
        ([], {}, 2, []),
    ],
)
def test_modules_are_split_into_shards_of_near_equal_time(
    modules: list[str], seconds: dict[str, float], count: int, expected: list[tuple[tuple[str, ...], float]]
) -> None:
    shards = plan.plan_shards(modules, seconds, count)
    assert [(shard.modules, shard.estimate_seconds) for shard in shards] == expected


def test_every_module_lands_in_exactly_one_shard() -> None:
    modules = [f"m{i}" for i in range(37)]
    shards = plan.plan_shards(modules, {f"m{i}": float(i % 7) for i in range(37)}, 3)
    placed = [module for shard in shards for module in shard.modules]
    assert sorted(placed) == sorted(modules)
    assert max(shard.estimate_seconds for shard in shards) - min(shard.estimate_seconds for shard in shards) <= 6


@pytest.mark.parametrize(
    ("modules", "seconds", "expected"),
    [
        # one module a session, the longest first (a name breaks equal times)
        (["a", "b", "c"], {"a": 10, "b": 40, "c": 10}, [(("b",), 40), (("a",), 10), (("c",), 10)]),
        ([], {}, []),
    ],
)
def test_each_module_alone_is_a_session_of_its_own_longest_first(
    modules: list[str], seconds: dict[str, float], expected: list[tuple[tuple[str, ...], float]]
) -> None:
    sessions = plan.plan_alone(modules, seconds)
    assert [(session.modules, session.estimate_seconds) for session in sessions] == expected


@pytest.mark.parametrize("planner", ["shards", "alone"])
def test_a_module_with_no_measured_seconds_is_refused_with_what_to_do(planner: str) -> None:
    """Planned blind, a long new module could make its shard end many minutes after the others."""
    modules = ["tests/e2e/test_new.py", "tests/e2e/test_old.py", "tests/e2e/test_z.py"]
    seconds = {"tests/e2e/test_old.py": 3.0}
    with pytest.raises(plan.UnmeasuredModulesError, match="--update-durations") as raised:
        plan.plan_shards(modules, seconds, 2) if planner == "shards" else plan.plan_alone(modules, seconds)
    assert raised.value.modules == ("tests/e2e/test_new.py", "tests/e2e/test_z.py")
    assert "tests/e2e/test_new.py, tests/e2e/test_z.py" in str(raised.value)


@pytest.mark.parametrize(
    ("name", "collected"),
    [
        ("test_x.py", True),
        ("x_test.py", True),  # pytest's default collects these too; a glob of test_*.py alone did not
        ("conftest.py", False),
        ("helpers.py", False),
        ("test_x.pyc", False),
    ],
)
def test_modules_are_found_as_pytest_collects_them(name: str, collected: bool) -> None:
    assert plan.is_test_module(name, plan.PYTEST_PYTHON_FILES) is collected


def test_zero_shards_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan.plan_shards(["a"], {}, 0)


def test_module_seconds_sum_setup_call_and_teardown_per_module() -> None:
    report = [
        "============ slowest durations ============",
        "84.36s call     tests/e2e/test_data_staging.py::test_retry",
        "20.71s setup    tests/e2e/test_burst_after.py::test_wait",
        "1.50s teardown tests/e2e/test_data_staging.py::test_retry[one]",
        "0.01s call     tests/e2e/test_x.py::test_y",
        "(199 durations < 0.005s hidden.  Use -vv to show these durations.)",
        "179 passed in 1723.78s (0:28:43)",
    ]
    assert plan.module_seconds(report) == {
        "tests/e2e/test_burst_after.py": 20.7,
        "tests/e2e/test_data_staging.py": 85.9,
        "tests/e2e/test_x.py": 0.0,
    }


MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/net_cls,net_prio cgroup rw,relatime,net_cls,net_prio 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,xattr,name=systemd 0 0
cgroup /sys/fs/cgroup/elogind cgroup rw,relatime,name=elogind,release_agent=/lib/elogind/agent 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,relatime,nsdelegate 0 0
proc /proc proc rw,relatime 0 0
"""


def test_cgroup_hierarchies_are_read_with_only_the_options_that_name_them() -> None:
    assert plan.cgroup_mounts(MOUNTS) == [
        plan.CgroupMount("cgroup", "/sys/fs/cgroup/cpu", "cpu"),
        plan.CgroupMount("cgroup", "/sys/fs/cgroup/cpuset", "cpuset"),
        plan.CgroupMount("cgroup", "/sys/fs/cgroup/net_cls,net_prio", "net_cls,net_prio"),
        plan.CgroupMount("cgroup", "/sys/fs/cgroup/systemd", "xattr,name=systemd"),
        plan.CgroupMount("cgroup", "/sys/fs/cgroup/elogind", "none,name=elogind"),
        plan.CgroupMount("cgroup2", "/sys/fs/cgroup/unified", "nsdelegate"),
    ]


def test_each_hierarchy_is_unmounted_then_mounted_again() -> None:
    mounts = [
        plan.CgroupMount("cgroup", "/sys/fs/cgroup/memory", "memory"),
        plan.CgroupMount("cgroup2", "/sys/fs/cgroup/unified", ""),
    ]
    assert plan.remount_commands(mounts) == [
        ["umount", "/sys/fs/cgroup/memory"],
        ["mount", "-t", "cgroup", "-o", "memory", "cgroup", "/sys/fs/cgroup/memory"],
        ["umount", "/sys/fs/cgroup/unified"],
        ["mount", "-t", "cgroup2", "cgroup2", "/sys/fs/cgroup/unified"],
    ]


def test_a_shard_sets_up_its_namespaces_before_its_pytest() -> None:
    commands = plan.setup_commands(
        [plan.CgroupMount("cgroup", "/sys/fs/cgroup/pids", "pids")],
        ["/run", "/var/lib/kubelet"],
        "/cache/node",
        "/cache/node-shard-2",
    )
    assert commands == [
        ["ip", "link", "set", "lo", "up"],
        ["umount", "/sys/fs/cgroup/pids"],
        ["mount", "-t", "cgroup", "-o", "pids", "cgroup", "/sys/fs/cgroup/pids"],
        ["mount", "-t", "tmpfs", "-o", "mode=0755", "nimbix-shard", "/run"],
        ["mount", "-t", "tmpfs", "-o", "mode=0755", "nimbix-shard", "/var/lib/kubelet"],
        # last: /run and the rest are in place; the node cache is where containerd keeps its locked root
        ["mount", "--bind", "/cache/node-shard-2", "/cache/node"],
    ]


def test_the_durations_file_names_exactly_the_modules_that_exist() -> None:
    """A renamed or removed module's figure would be planned for nothing; a new one has to be measured."""
    recorded = json.loads(DURATIONS_FILE.read_text())
    existing = set(discover_modules(E2E_DIR))
    assert set(recorded) == existing, (sorted(set(recorded) - existing), sorted(existing - set(recorded)))
    assert all(isinstance(seconds, int | float) and seconds >= 0 for seconds in recorded.values())


def test_durations_file_is_where_the_launcher_reads_it() -> None:
    assert Path(REPO_ROOT, "tests", "e2e", "durations.json") == DURATIONS_FILE
