"""The functional core imports no I/O. .importlinter checks the pure modules directly; this also follows
their imports transitively, through the runner's package and the JARVICE package it uses."""

import ast
from pathlib import Path

import pytest

from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("entrypoint", "jarvice")
PURE = [
    "entrypoint.budget",
    "entrypoint.fanout",
    "entrypoint.gang",
    "entrypoint.output",
    "entrypoint.plan",
    "entrypoint.recovery",
    "entrypoint.restart",
    "entrypoint.runstate",
    "entrypoint.runsteps",
    "entrypoint.env_reading",
    "entrypoint.remote_settings",
    "entrypoint.settings",
    "entrypoint.staging",
    "entrypoint.termination",
    "entrypoint.vault_files",
    "entrypoint.vault_settings",
    "entrypoint.walltime",
    "jarvice.contract",
    "jarvice.duplicates",
    "jarvice.exitcodes",
    "jarvice.gpubudget",
    "jarvice.labels",
    "jarvice.ledger",
    "jarvice.model",
    "jarvice.redaction",
    "jarvice.vault_layout",
    "jarvice.wire",
]
FORBIDDEN = {"aiohttp", "kubernetes", "requests", "subprocess", "logging", "socket", "os", "http", "urllib3"}
FORBIDDEN_SUBMODULES = {"urllib.request", "pathlib"}


def imports_of(module: str) -> set[str]:
    tree = ast.parse((ROOT / f"{module.replace('.', '/')}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module in PACKAGES:
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
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
            if name.split(".")[0] in PACKAGES and "." in name:
                assert name in PURE, f"{current} (pure) imports the I/O module {name}"
                todo.append(name)
