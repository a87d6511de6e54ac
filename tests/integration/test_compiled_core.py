"""The compiled core (issue 15) behaves as the source: the decision core's own tests, and the webhook
app's, run again on the modules images/webhook/compile-core.sh compiles with mypyc, as the image runs
them. A compiled module checks its annotations at run time and cannot be subclassed or patched by
interpreted code, so a difference would show here first. The run starts in the background once the
session has collected this test (tests/support/compiled_run.py), beside the session's other tests."""

from __future__ import annotations

from devplatform import compiled_core
from tests.support.compiled_run import CompiledRun


def test_the_compile_script_compiles_the_pure_core_of_every_review() -> None:
    modules = compiled_core.compiled_modules()
    for name in (
        "webhook.review",
        "webhook.admission",
        "webhook.decision",
        "webhook.cache",
        "webhook.mutation",
        "webhook.burst_containers",
    ):
        assert name in modules
    # The I/O shell stays interpreted: aiohttp handlers, threads, the kubernetes client.
    assert not {"webhook.app", "webhook.watching", "webhook.__main__"} & set(modules)


def test_the_webhook_tests_pass_on_the_compiled_core(compiled_run: CompiledRun) -> None:
    """The run started in the background when the session collected this test (tests/integration/conftest.py)."""
    completed = compiled_run.result()
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
    assert " passed" in completed.stdout and " failed" not in completed.stdout
