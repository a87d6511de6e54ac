"""Deadlines that only say when a test gives up on a program it started, never how fast it must be.

Below the e2e tier no test bounds wall-clock time: on a loaded 2-core machine (the e2e shards beside
the unit and integration tiers) a Python program's start alone has taken more than 20 s.
"""

from typing import Final

PROGRAM_EXIT_SECONDS: Final = 300.0  # a program the test expects to end by itself
# pytest-timeout's guard against a test that hangs (it fails that test instead of holding the run); a
# unit test that took 2 s of a loaded machine's wall clock is not a hung one.
HANG_SECONDS: Final = 300
