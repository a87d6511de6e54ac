"""`make demo` must keep working: the demo's story on the session's control plane and real node
(``run_demo``, what ``make demo`` runs after starting them), checked as a user reads it."""

from __future__ import annotations

import time
from pathlib import Path

from devplatform import demo
from devplatform.cluster import controlplane, node


def test_demo_runs_local_and_burst_jobs_through_the_kubelet(
    control_plane: controlplane.ControlPlane, real_node: node.RealNode, e2e_run_root: Path
) -> None:
    lines: list[str] = []
    started = time.monotonic()
    ok = demo.run_demo(control_plane, real_node, run_dir=e2e_run_root / "demo", namespace="demo-e2e", out=lines.append)
    elapsed = time.monotonic() - started
    out = "\n".join(lines)
    print(out, f"\nrun_demo took {elapsed:.1f}s", sep="\n")

    assert ok, out
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in {j.name for j in demo.JOBS}}
    # The decision table: the first two fill the node's 4 GPUs, everything after bursts.
    assert f"local    {real_node.name}" in out
    assert "remote   " in out
    assert "needs 8 nvidia.com/gpu" in out
    # `kubectl logs` of the burst pod: the remote command's output, every line once.
    assert out.count("  epoch 3/3 loss=0.333") == 1
    assert 'training started with "quotes", a $ sign and unicode: ünïcödé' in out
    # Exit codes from the pod statuses: 0, the mirrored 3, and 143 for the Job deleted while running.
    assert "on Nimbix (emulator)" in rows["flaky-e"] and rows["flaky-e"].split()[-3:] == ["3", "3", "ok"]
    assert rows["resnet-a"].split()[-3:] == ["0", "0", "ok"]
    assert "emulator: job" in out and "TERMINATED" in out
    # The data step: the input went out through the vault, the output came back to the PVC.
    assert "    read ./shards/c.txt: gamma" in out
    assert "    shards/c.txt: GAMMA" in out and "- data came back as expected" in out
