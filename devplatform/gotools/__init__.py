"""Go command-line tools the project builds from their upstream Go modules (see build.sh): helm, which
Debian does not ship. Tools Debian ships come from its packages (devplatform.debtools).

helm = gotools.ensure_tool("helm")          # cached; a cold cache builds it (progress on stderr)
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Literal

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"

Tool = Literal["helm"]


class GoToolError(RuntimeError):
    """A tool could not be built; the build script's own output (stderr) says why."""


def ensure_tool(tool: Tool) -> Path:
    """Builds ``tool`` if the cache misses and returns the binary's path."""
    result = subprocess.run([str(BUILD_SCRIPT), tool], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if result.returncode != 0:
        raise GoToolError(f"{BUILD_SCRIPT} {tool} exited with status {result.returncode} (its output is above)")
    lines = result.stdout.strip().splitlines()
    binary = Path(lines[-1]) if lines else None
    if binary is None or not binary.is_file():
        raise GoToolError(f"{BUILD_SCRIPT} {tool} printed no binary path (stdout: {result.stdout.strip()!r})")
    return binary
