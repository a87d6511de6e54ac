"""The runner's memory stays bounded whatever the job prints (a burst pod gets 128Mi).

The runner runs as a real subprocess against the emulator; its peak RSS comes from wait4(). The job
prints OUTPUT_MB of numbered lines (20 MB by default; NIMBIX_BURST_MEMORY_TEST_MB=200 for the
1M-line run). The test hashes the runner's stdout as it streams, so it holds none of it either."""

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from devplatform.emulator import EmulatorControl, EmulatorThread
from tests.support.runner_processes import API_KEY, ROOT, base_env, label_of

OUTPUT_MB = int(os.environ.get("NIMBIX_BURST_MEMORY_TEST_MB", "20"))
LINE_BYTES = 200
LINES = OUTPUT_MB * 1_000_000 // LINE_BYTES
# A line: 8-digit number, a space, filler, a newline: LINE_BYTES in all. The last line has no newline.
JOB = (
    "python3 -c 'import sys\n"
    f"w = sys.stdout.write\nfor i in range({LINES}):\n"
    f'    w("%08d " % i + "x" * {LINE_BYTES - 10} + ("\\n" if i < {LINES - 1} else ""))\n\''
)
# The runner's own footprint (interpreter, requests) is ~40 MiB; what it may add for output is far
# below the output's size.
MAX_GROWTH_BYTES = 12 * 1024 * 1024

pytestmark = pytest.mark.timeout(60 + OUTPUT_MB * 3)


def expected_digest() -> tuple[str, int]:
    digest = hashlib.sha256()
    for i in range(LINES):
        digest.update(b"%08d " % i + b"x" * (LINE_BYTES - 10) + (b"\n" if i < LINES - 1 else b""))
    return digest.hexdigest(), LINES * LINE_BYTES - 1


def run_measured(env: dict[str, str]) -> tuple[int, int, str, int, bytes]:
    """Exit status, peak RSS (bytes), stdout sha256 and size, stderr."""
    process = subprocess.Popen(
        [sys.executable, "-m", "entrypoint"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    digest = hashlib.sha256()
    size = [0]
    stderr = bytearray()

    def pump_out() -> None:
        assert process.stdout is not None
        for chunk in iter(lambda: process.stdout.read1(1 << 20), b""):  # type: ignore[union-attr,attr-defined]
            digest.update(chunk)
            size[0] += len(chunk)

    def pump_err() -> None:
        assert process.stderr is not None
        for chunk in iter(lambda: process.stderr.read1(65536), b""):  # type: ignore[union-attr,attr-defined]
            stderr.extend(chunk)

    threads = [threading.Thread(target=pump_out, daemon=True), threading.Thread(target=pump_err, daemon=True)]
    for thread in threads:
        thread.start()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    for thread in threads:
        thread.join(10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    assert API_KEY.encode() not in stderr
    return process.returncode, usage.ru_maxrss * 1024, digest.hexdigest(), size[0], bytes(stderr)


def test_peak_memory_stays_far_below_the_output_size(
    emulator: EmulatorThread, control: EmulatorControl, tmp_path: Path
) -> None:
    small = base_env(emulator.url, APP_COMMAND_ARGS="echo small", NIMBIX_BURST_STATE_DIR=str(tmp_path))
    code, baseline, _, _, err = run_measured(small)
    assert code == 0, err

    big = base_env(
        emulator.url, APP_COMMAND_ARGS=JOB, NIMBIX_BURST_STATE_DIR=str(tmp_path), NIMBIX_BURST_CONTAINER="big"
    )
    code, peak, digest, size, err = run_measured(big)
    assert code == 0, err.decode(errors="replace")[-3000:]
    assert (digest, size) == expected_digest()  # every byte, once, in order
    assert control.submissions(label_of(big))["count"] == 1
    growth = peak - baseline
    print(
        f"\noutput {size / 1e6:.0f} MB in {LINES} lines: baseline peak RSS {baseline / 2**20:.1f} MiB, "
        f"with the big output {peak / 2**20:.1f} MiB (+{growth / 2**20:.1f} MiB)"
    )
    assert growth < MAX_GROWTH_BYTES, f"peak RSS grew by {growth / 2**20:.1f} MiB for {size / 1e6:.0f} MB of output"
