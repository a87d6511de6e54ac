"""`python -m replay` (`make replay`): the composition root; the only sys.exit()."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from replay import run as runner
from replay.plan import PlanError
from replay.settings import SettingsError, parse_settings
from replay.trace import TraceError


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv)
        return runner.run(settings)
    except (SettingsError, TraceError, PlanError, FileNotFoundError) as error:
        sys.stderr.write(f"replay: {error}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
