"""The compiled core (issue 15) behaves as the source: the decision core's own tests, and the webhook
app's, run again on the modules images/webhook/compile-core.sh compiles with mypyc, as the image runs
them. A compiled module checks its annotations at run time and cannot be subclassed or patched by
interpreted code, so a difference would show here first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devplatform import compiled_core

REPO_ROOT = Path(__file__).resolve().parents[2]
SUITES = ("tests/unit/webhook", "tests/integration/webhook")


def test_the_compile_script_compiles_the_pure_core_of_every_review() -> None:
    modules = compiled_core.compiled_modules()
    for name in ("webhook.review", "webhook.admission", "webhook.decision", "webhook.cache", "webhook.mutation"):
        assert name in modules
    # The I/O shell stays interpreted: aiohttp handlers, threads, the kubernetes client.
    assert not {"webhook.app", "webhook.watching", "webhook.__main__"} & set(modules)


def test_the_webhook_tests_pass_on_the_compiled_core() -> None:
    compiled = compiled_core.build(REPO_ROOT)
    modules = compiled_core.compiled_modules()
    env = {
        **os.environ,
        # The compiled tree first; the checkout after it for the tests package.
        "PYTHONPATH": os.pathsep.join((str(compiled), str(REPO_ROOT))),
        "NIMBIX_BURST_COMPILED_MODULES": ",".join(modules),
    }
    argv = [
        str(Path(sys.executable).parent / "pytest"),  # not `python -m pytest`: that puts the checkout first
        "-q", "-p", "no:cacheprovider", "--import-mode=importlib",
        "tests/integration/compiled_probe.py", *SUITES,  # the probe fails unless each module is the extension
    ]  # fmt: skip
    completed = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
    assert " passed" in completed.stdout and " failed" not in completed.stdout
