"""The runner as its integration tests run it: a real subprocess (`python -m entrypoint`) against the
JARVICE emulator, so exit codes and signals are real. Its environment, the process with its output
collected (and checked for the API key), and waits for the emulator's jobs."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from devplatform.emulator import EmulatorControl
from tests.support.deadlines import PROGRAM_EXIT_SECONDS

ROOT = Path(__file__).resolve().parents[2]
USER = "alice"
API_KEY = "emu-KEY-7f3a9c1e5b2d4806"
APP = "nimbix-burst-example"
# Tuned for speed: the emulator queues and starts jobs in a fraction of a second; the runner polls
# every 0.1 s and backs off from 20 ms.
FAST_TIMING = {
    "queue_seconds": 0.15,
    "init_seconds": 0.05,
    "shutdown_kill_seconds": 5.0,
    "cancel_fast_seconds": 0.0,
    "queued_end_status": "TERMINATED",
}
RUNNER_TIMEOUT = PROGRAM_EXIT_SECONDS  # when a test gives up on a runner: never a bound on its speed

ALL_OUTPUT: list[bytes] = []


def unique_uid() -> str:
    return str(uuid.uuid4())


# What starts coverage in a Python child (pyproject.toml's [tool.coverage.run] patch): a runner started
# with an environment of its own keeps it, so the tiers measure the runner's code too.
COVERAGE_VARIABLES = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")


def base_env(url: str, **overrides: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT", *COVERAGE_VARIABLES)
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        {
            "REMOTE": "1",
            "LOG_LEVEL": "INFO",  # the tests read the runner's progress lines
            "JARVICE_API_URL": url,
            "JARVICE_USERNAME": USER,
            "JARVICE_APIKEY": API_KEY,
            "APP_NAME": APP,
            "APP_COMMAND": "run",
            "POD_UID": unique_uid(),
            "JARVICE_POLL_SECONDS": "0.1",
            "JARVICE_RETRY_BASE_SECONDS": "0.02",
            "JARVICE_RETRY_CAP_SECONDS": "0.2",
            "JARVICE_CANCEL_GRACE_SECONDS": "5",
            "JARVICE_OUTAGE_SECONDS": "15",
            "JARVICE_SUBMIT_RESOLVE_SECONDS": "1",
            "JARVICE_CONNECT_TIMEOUT": "2",
            "JARVICE_READ_TIMEOUT": "2",
            # Outside a pod there is no /dev/termination-log; tests that read the message set a file.
            "NIMBIX_BURST_TERMINATION_LOG": os.devnull,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    env.update(overrides)
    return {k: v for k, v in env.items() if v is not None}


def label_of(env: dict[str, str], attempt: int = 1) -> str:
    container = env.get("NIMBIX_BURST_CONTAINER")
    return f"k8s-{env['POD_UID']}-{container + '-' if container else ''}{attempt}"


@dataclass
class Runner:
    """A running `python -m entrypoint`, its output collected by reader threads."""

    process: subprocess.Popen[bytes]
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    threads: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, env: dict[str, str], args: tuple[str, ...] = (), cwd: Path = ROOT) -> "Runner":
        process = subprocess.Popen(
            [sys.executable, "-m", "entrypoint", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        runner = cls(process)
        for stream, buffer in ((process.stdout, runner.stdout), (process.stderr, runner.stderr)):
            thread = threading.Thread(target=cls._pump, args=(stream, buffer), daemon=True)
            thread.start()
            runner.threads.append(thread)
        return runner

    @staticmethod
    def _pump(stream: Any, buffer: bytearray) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            buffer.extend(chunk)
        stream.close()

    def wait(self, timeout: float = RUNNER_TIMEOUT) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            for thread in self.threads:
                thread.join(5)
            ALL_OUTPUT.extend([bytes(self.stdout), bytes(self.stderr)])
            assert API_KEY.encode() not in self.stdout and API_KEY.encode() not in self.stderr, "API key leaked"
        return code

    def wait_for_stdout(self, needle: bytes, timeout: float = PROGRAM_EXIT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.stdout:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"{needle!r} not printed; stdout={bytes(self.stdout)!r} stderr={self.err}")
            time.sleep(0.02)

    def send(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    @property
    def out(self) -> bytes:
        return bytes(self.stdout)

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")

    def logs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.err.splitlines() if line.startswith("{")]

    def messages(self) -> list[str]:
        return [entry["message"] for entry in self.logs()]


def run_runner(env: dict[str, str], args: tuple[str, ...] = (), timeout: float = RUNNER_TIMEOUT) -> tuple[int, Runner]:
    runner = Runner.start(env, args)
    return runner.wait(timeout), runner


def wait_for_job(
    control: EmulatorControl, label: str, status: str, timeout: float = PROGRAM_EXIT_SECONDS
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = control.jobs(label)
        if jobs and jobs[-1]["status"] == status:
            return jobs[-1]
        if time.monotonic() > deadline:
            raise AssertionError(f"job {label} never reached {status}: {jobs}")
        time.sleep(0.02)


def direct_session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # never send loopback traffic through a proxy from the environment
    return session
