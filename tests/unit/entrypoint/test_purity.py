"""The functional core imports no I/O. .importlinter checks plan/exitcodes/contract; this also covers the
pure modules added with the runner (settings, output, redaction, model), transitively."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(2)

PACKAGE = Path(__file__).resolve().parents[3] / "entrypoint"
PURE = [
    "budget",
    "contract",
    "duplicates",
    "exitcodes",
    "fanout",
    "gang",
    "model",
    "output",
    "plan",
    "recovery",
    "redaction",
    "restart",
    "runstate",
    "runsteps",
    "settings",
    "staging",
    "termination",
    "walltime",
]
FORBIDDEN = {"aiohttp", "kubernetes", "requests", "subprocess", "logging", "socket", "os", "http", "urllib3"}
FORBIDDEN_SUBMODULES = {"urllib.request", "pathlib"}


def imports_of(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module == "entrypoint":
                found.update(f"entrypoint.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io(module: str) -> None:
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in imports_of(current):
            assert name.split(".")[0] not in FORBIDDEN, f"{current} imports {name}"
            assert name not in FORBIDDEN_SUBMODULES, f"{current} imports {name}"
            if name.startswith("entrypoint."):
                inner = name.removeprefix("entrypoint.")
                assert inner in PURE, f"{current} (pure) imports the I/O module {name}"
                todo.append(inner)
