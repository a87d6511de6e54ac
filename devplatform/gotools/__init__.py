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
    return run_tool_script(BUILD_SCRIPT, tool, error=GoToolError)


def run_tool_script(script: Path, tool: str, *, error: type[RuntimeError]) -> Path:
    """Runs a script that makes ``tool`` ready (progress on stderr, shown as it comes) and prints its
    path last on stdout; raises ``error`` naming the script when it fails or prints no binary."""
    result = subprocess.run([str(script), tool], stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if result.returncode != 0:
        raise error(f"{script} {tool} exited with status {result.returncode} (its output is above)")
    lines = result.stdout.strip().splitlines()
    binary = Path(lines[-1]) if lines else None
    if binary is None or not binary.is_file():
        raise error(f"{script} {tool} printed no binary path (stdout: {result.stdout.strip()!r})")
    return binary
