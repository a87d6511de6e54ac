"""The real node asks its own network namespace about devices: an e2e session runs in a namespace of its
own while a dev cluster's bridge may exist on the host, and /sys (mounted by the host) shows the host's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devplatform.cluster import node
from tests.support.deadlines import PROGRAM_EXIT_SECONDS

ROOT = Path(__file__).resolve().parents[2]


def _a_host_device() -> str:
    devices = sorted(d.name for d in Path("/sys/class/net").iterdir() if d.name != "lo")
    if not devices:
        pytest.fail("this machine has no network device but lo to hold against a new namespace")
    return devices[0]


def test_a_device_of_the_host_is_not_seen_from_a_new_network_namespace() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("needs root and unshare (as the e2e shards do)")
    device = _a_host_device()
    assert node.link_exists(device) and node.link_exists("lo")
    probe = (
        "from pathlib import Path; from devplatform.cluster import node;"
        f" print(node.link_exists({device!r}), node.link_exists('lo'), Path('/sys/class/net/{device}').exists())"
    )
    inside = subprocess.run(
        ["unshare", "--net", "--", sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PROGRAM_EXIT_SECONDS,
        check=True,
    )
    # The last: what reading /sys says there, wrongly (the host's device).
    assert inside.stdout.split() == ["False", "True", "True"], inside.stderr
