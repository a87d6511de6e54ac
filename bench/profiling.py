"""Where the webhook's CPU goes under load: py-spy on the running process (optional).

py-spy is not a project dependency; when it is installed (e.g. `.venv/bin/pip install py-spy`) the
bench records the webhook during an extra saturation run and splits the samples into the parts
of a request. Without it this step is skipped and the report says so.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SAMPLE_RATE_HZ = 250

# (category, substrings of a stack that put a sample in it); first match wins. Python frames read
# "function (file:line)"; the compiled core's are native frames named CPyDef_<module>___<function>.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("watch threads (list/watch; mostly blocked in recv)", ("webhook/watching.py",)),
    ("logging: the per-admission JSON line", ("AdmissionLine.write", "logging/__init__.py")),
    ("metrics (prometheus_client)", ("prometheus_client/", "ReviewCounts.")),
    ("admit(): shape checks, GPU request, decide, patch", ("webhook/admission.py", "CPyDef_admission___admit")),
    ("parse_review(): orjson.loads of the body", ("parse_review",)),
    ("mutate(): the rest (orjson.dumps of the response, ...)", ("mutate (webhook/app.py",)),
)
OTHER = "aiohttp HTTP + TLS + event loop"


def find_py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def start_recording(py_spy: str, pid: int, *, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy record in raw (collapsed stack) format; wait() on the result. With native frames, so
    that time in the compiled core is seen by function (py-spy then pauses the process for each
    sample: the profile's run is not one whose figures are reported)."""
    argv = [
        py_spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
        "--rate", str(SAMPLE_RATE_HZ), "--format", "raw", "--output", str(out), "--native",
    ]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def categorize(lines: Sequence[str]) -> dict[str, float]:
    """Collapsed stacks ("frame;frame;... count") -> percent of samples per category, in the order
    of CATEGORIES, then OTHER. The watch threads get their own line and are left out of the rest,
    so the other shares add up to the request path."""
    counts: dict[str, int] = {name: 0 for name, _ in CATEGORIES}
    counts[OTHER] = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        name = next((name for name, markers in CATEGORIES if any(m in stack for m in markers)), OTHER)
        counts[name] += int(count)
    watch = CATEGORIES[0][0]
    request_path = sum(v for k, v in counts.items() if k != watch)
    shares = {k: round(100 * v / request_path, 1) if request_path else 0.0 for k, v in counts.items() if k != watch}
    total = request_path + counts[watch]
    shares[watch + ", % of all samples"] = round(100 * counts[watch] / total, 1) if total else 0.0
    return shares
