"""Command-line tools taken from the Debian packages that ship them (see fetch.sh).

promtool = debtools.ensure_tool("promtool")   # cached; a cold cache downloads the package (~20 s)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from devplatform.gotools import run_tool_script

FETCH_SCRIPT = Path(__file__).resolve().parent / "fetch.sh"

Tool = Literal["promtool"]


class DebianToolError(RuntimeError):
    """A tool could not be taken from its package; the script's own output (stderr) says why."""


def ensure_tool(tool: Tool) -> Path:
    """Fetches ``tool`` if the cache misses and returns the binary's path."""
    return run_tool_script(FETCH_SCRIPT, tool, error=DebianToolError)
