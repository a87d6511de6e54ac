"""Fixtures: one in-process JARVICE emulator for the session, and its control per test. The runner
runs as a real subprocess (tests.support.runner_processes), its output checked for the API key."""

from collections.abc import Iterator

import pytest

from devplatform.emulator import EmulatorConfig, EmulatorControl, EmulatorThread, Timing
from tests.support.runner_processes import API_KEY, APP, FAST_TIMING, USER


@pytest.fixture(scope="session")
def emulator() -> Iterator[EmulatorThread]:
    config = EmulatorConfig(
        users={USER: API_KEY, "bob": "bob-other-key-0000"},
        apps={APP: frozenset({"run"}), "other-app": frozenset({"batch"})},
        timing=Timing(**FAST_TIMING),
        seed=4,
    )
    with EmulatorThread(config) as emu:
        yield emu


@pytest.fixture
def control(emulator: EmulatorThread) -> Iterator[EmulatorControl]:
    with EmulatorControl(emulator.url) as ctl:
        ctl.reset()
        ctl.set_config(**FAST_TIMING, tail_preamble=True)
        yield ctl
        ctl.reset()
