"""`make demo` must keep working: run it as a user would and check what it promises."""

import subprocess
import sys

from tests.e2e.conftest import REPO_ROOT


def test_demo_shows_local_and_remote_jobs_with_mirrored_exit_codes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "devplatform.demo"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "locally on gpu-node-" in out
    assert "on Nimbix (emulator)" in out
    assert "[bert-c] epoch 3/3 loss=0.333" in out  # remote output streamed, every line once
    assert out.count("[llm-d] epoch 2/3") == 1
    assert "[flaky-e] CUDA error: out of memory" in out
    assert "flaky-e    on Nimbix (emulator)      3         3  ok" in out
    assert "demo passed" in out
