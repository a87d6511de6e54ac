"""A JARVICE API emulator that really runs submitted commands (see server.py, jobs.py).

In-process: `create_app(EmulatorConfig(...))` (aiohttp app factory) or `EmulatorThread`.
As a process: `python -m devplatform.emulator --help`.
"""

from devplatform.emulator.config import EmulatorConfig, parse_apps, parse_users
from devplatform.emulator.faults import Faults
from devplatform.emulator.harness import EmulatorControl, EmulatorThread
from devplatform.emulator.jobs import Timing
from devplatform.emulator.server import create_app

__all__ = [
    "EmulatorConfig",
    "EmulatorControl",
    "EmulatorThread",
    "Faults",
    "Timing",
    "create_app",
    "parse_apps",
    "parse_users",
]
