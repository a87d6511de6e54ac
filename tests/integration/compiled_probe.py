"""Run by tests/integration/test_compiled_core.py in the pytest it starts on the compiled core (not
collected otherwise: its name does not start with test_). It fails that run if the webhook modules
it imports are the .py files rather than the compiled extensions."""

from __future__ import annotations

import importlib
import os


def test_the_decision_core_is_the_compiled_one() -> None:
    for name in os.environ["NIMBIX_BURST_COMPILED_MODULES"].split(","):
        module = importlib.import_module(name)
        assert module.__file__ is not None
        assert module.__file__.endswith(".so"), f"{name} imported from {module.__file__}"
