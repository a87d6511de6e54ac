"""Command-line tools taken from the Debian packages that ship them (see fetch.sh).

promtool = debtools.ensure_tool("promtool")   # cached; a cold cache downloads the package (~20 s)
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Literal

FETCH_SCRIPT = Path(__file__).resolve().parent / "fetch.sh"

Tool = Literal["promtool"]


class DebianToolError(RuntimeError):
    """A tool could not be taken from its package; the script's own output (stderr) says why."""


def ensure_tool(tool: Tool) -> Path:
    """Fetches ``tool`` if the cache misses and returns the binary's path."""
    result = subprocess.run([str(FETCH_SCRIPT), tool], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if result.returncode != 0:
        raise DebianToolError(f"{FETCH_SCRIPT} {tool} exited with status {result.returncode} (its output is above)")
    lines = result.stdout.strip().splitlines()
    binary = Path(lines[-1]) if lines else None
    if binary is None or not binary.is_file():
        raise DebianToolError(f"{FETCH_SCRIPT} {tool} printed no binary path (stdout: {result.stdout.strip()!r})")
    return binary
