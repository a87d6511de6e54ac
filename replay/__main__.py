"""`python -m replay` (`make replay`): the composition root; the only sys.exit()."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from devplatform.cluster import processes
from replay import run as runner
from replay.plan import PlanError
from replay.settings import SettingsError, parse_settings
from replay.trace import TraceError


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv)
        processes.exit_through_cleanup_on_hangup("replay")  # the control plane it starts goes with it
        return runner.run(settings)
    except (SettingsError, TraceError, PlanError, FileNotFoundError) as error:
        sys.stderr.write(f"replay: {error}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
