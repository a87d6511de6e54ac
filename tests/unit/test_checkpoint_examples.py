"""The checkpoint examples users copy (deploy/examples/checkpoint-job.yaml and checkpointing/*.py).

The Job's annotations are a valid contract that agrees with its command. The PyTorch and Lightning
programs compile everywhere; they are run for real (SIGUSR1 mid-run, exit 0, resume without a gap)
only with an interpreter that has torch (and lightning): NIMBIX_BURST_TORCH_PYTHON names one, else this
interpreter is tried. Without torch those runs are skipped and say so.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devplatform import manifests
from jarvice import checkpoint

pytestmark = pytest.mark.timeout(300)

EXAMPLES = manifests.DEPLOY_DIR / "examples"
PROGRAMS = EXAMPLES / "checkpointing"
STEP = re.compile(r"step (\d+)/")


def test_the_example_job_keeps_the_contract_it_documents() -> None:
    (job,) = manifests.parse_manifests((EXAMPLES / "checkpoint-job.yaml").read_text())
    template = job["spec"]["template"]
    contract = checkpoint.parse_checkpoint_contract(template["metadata"]["annotations"], {})
    assert contract == checkpoint.CheckpointContract("/workspace/ckpt", 10, True, "pod", 0.5)
    (container,) = template["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--checkpoint-dir") + 1] == contract.directory
    assert int(args[args.index("--checkpoint-every") + 1]) == contract.interval_seconds  # steps of a second
    (mount,) = container["volumeMounts"]
    assert contract.directory.startswith(mount["mountPath"])
    (volume,) = template["spec"]["volumes"]
    assert volume["name"] == mount["name"] and "persistentVolumeClaim" in volume  # it outlives the pod
    assert job["spec"]["backoffLimit"] == 0 and template["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("name", ["train_pytorch.py", "train_lightning.py"])
def test_the_programs_compile_and_keep_the_three_parts(name: str) -> None:
    source = (PROGRAMS / name).read_text()
    compile(ast.parse(source), name, "exec")
    assert "signal.SIGUSR1" in source  # asked for a checkpoint by SIGUSR1
    assert "os.replace" in source or "save_checkpoint" in source  # written whole, or not at all
    assert "resumed from step" in source or 'ckpt_path="last"' in source  # resumes from the newest


def _torch_python(modules: str) -> str:
    python = os.environ.get("NIMBIX_BURST_TORCH_PYTHON", sys.executable)
    found = subprocess.run([python, "-c", f"import {modules}"], capture_output=True, timeout=120, check=False)
    if found.returncode != 0:
        pytest.skip(f"{modules} cannot be imported by {python}: set NIMBIX_BURST_TORCH_PYTHON to run the example")
    return python


def _run_until(argv: list[str], *, stop_after: int | None) -> tuple[int, list[str]]:
    """Run the program; with `stop_after`, send SIGUSR1 once it printed that step."""
    lines = []
    deadline = time.monotonic() + 240
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            match = STEP.match(line)
            if stop_after is not None and match and int(match.group(1)) == stop_after:
                process.send_signal(signal.SIGUSR1)
            assert time.monotonic() < deadline, lines
        return process.wait(timeout=60), lines


@pytest.mark.parametrize(
    ("name", "modules"), [("train_pytorch.py", "torch"), ("train_lightning.py", "torch, lightning")]
)
def test_the_program_stops_on_sigusr1_and_resumes_without_a_gap(name: str, modules: str, tmp_path: Path) -> None:
    argv = [_torch_python(modules), str(PROGRAMS / name), "--steps", "60", "--checkpoint-every", "25"]
    argv += ["--checkpoint-dir", str(tmp_path)]
    code, first = _run_until(argv, stop_after=30)
    assert code == 0, first
    code, second = _run_until(argv, stop_after=None)
    assert code == 0, second
    done = [int(m.group(1)) for m in map(STEP.match, first + second) if m]
    assert sorted(set(done)) == list(range(1, 61)), done  # no gap
    assert len(done) == len(set(done)), done  # the checkpoint SIGUSR1 asked for: nothing done twice
