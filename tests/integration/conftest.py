"""The compiled-core run (tests/support/compiled_run.py) starts once the session's tests are collected, so
it overlaps them; tests/integration/test_compiled_core.py waits for it."""

from __future__ import annotations

import pytest

from tests.support.compiled_run import CompiledRun, order_args

COMPILED_TEST = "test_the_webhook_tests_pass_on_the_compiled_core"
COMPILED_RUN = pytest.StashKey[CompiledRun]()


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or not any(item.name == COMPILED_TEST for item in session.items):
        return
    config.stash[COMPILED_RUN] = CompiledRun(order_args(getattr(config.option, "randomly_seed", None))).start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(COMPILED_RUN, None)
    if run is not None:
        run.stop()


@pytest.fixture
def compiled_run(pytestconfig: pytest.Config) -> CompiledRun:
    """The session's background run (started now if collection did not start one)."""
    run = pytestconfig.stash.get(COMPILED_RUN, None)
    if run is None:
        run = pytestconfig.stash[COMPILED_RUN] = CompiledRun(
            order_args(getattr(pytestconfig.option, "randomly_seed", None))
        ).start()
    return run
