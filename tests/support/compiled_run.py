"""The webhook's unit and integration tests again, on the compiled core, in a pytest of their own
(tests/integration/test_compiled_core.py checks its result).

It is started in the background as soon as the session has collected that test (tests/integration/
conftest.py), so it runs beside the session's other tests instead of after them; the test waits for it.
It runs in the session's order: the same pytest-randomly seed, or none."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from devplatform import compiled_core

REPO_ROOT = Path(__file__).resolve().parents[2]
SUITES = ("tests/unit/webhook", "tests/integration/webhook")
TIMEOUT_SECONDS = 900.0


class CompiledRun:
    """One background run: the compiled tree built (cached by its sources), then pytest on it."""

    def __init__(self, order_args: list[str]) -> None:
        self._order_args = order_args
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._outcome: subprocess.CompletedProcess[str] | BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="compiled-core-tests", daemon=True)

    def start(self) -> CompiledRun:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            compiled = compiled_core.build(REPO_ROOT)
            env = {
                **os.environ,
                # The compiled tree first; the checkout after it for the tests package.
                "PYTHONPATH": os.pathsep.join((str(compiled), str(REPO_ROOT))),
                "NIMBIX_BURST_COMPILED_MODULES": ",".join(compiled_core.compiled_modules()),
            }
            argv = [
                str(Path(sys.executable).parent / "pytest"),  # not `python -m pytest`: that puts the checkout first
                "-q", "-p", "no:cacheprovider", "--import-mode=importlib", *self._order_args,
                "tests/integration/compiled_probe.py", *SUITES,  # the probe fails unless each module is the extension
            ]  # fmt: skip
            with self._lock:
                if self._stopped:
                    return
                self._process = subprocess.Popen(
                    argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            stdout, stderr = self._process.communicate(timeout=TIMEOUT_SECONDS)
            self._outcome = subprocess.CompletedProcess(argv, self._process.returncode, stdout, stderr)
        except BaseException as error:  # handed to the test that waits for it
            self._outcome = error

    def result(self) -> subprocess.CompletedProcess[str]:
        """Waits for the run; raises what stopped it, if anything did."""
        self._thread.join(TIMEOUT_SECONDS + compiled_core.COMPILE_TIMEOUT_SECONDS)
        outcome = self._outcome
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None, "the compiled-core run did not finish"
        return outcome

    def stop(self) -> None:
        """At the session's end: a run nobody waited for (its test deselected by -x, say) is killed."""
        with self._lock:
            self._stopped = True
            if self._process is not None and self._process.poll() is None:
                self._process.kill()


def order_args(randomly_seed: object) -> list[str]:
    """The session's test order for the run: pytest-randomly's seed when it orders the session."""
    return ["-p", "no:randomly"] if randomly_seed is None else ["-p", "randomly", f"--randomly-seed={randomly_seed}"]
