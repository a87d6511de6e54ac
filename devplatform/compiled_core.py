"""The webhook's decision core compiled with mypyc, as images/webhook ships it, for what runs the
webhook from a checkout and should run the shipped code: the benchmark and the compiled-core test.

`build(tree)` copies the tree's `webhook/`, `jarvice/` and `kubeplumbing/` packages into
${NIMBIX_BURST_CACHE:-~/.cache/nimbix-burst}/compiled/<key>/ and runs images/webhook/compile-core.sh
there with this Python's mypyc; the key hashes the copied sources, the script and the Python and mypy
versions, so an unchanged tree costs nothing (a cold build ~40 s on 2 cores). Run `python -m webhook`
with that directory as its working directory (or first on PYTHONPATH) to import the compiled modules.

    python -m devplatform.compiled_core [TREE]      -> prints the directory
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path("images/webhook/compile-core.sh")
PACKAGES = ("webhook", "jarvice", "kubeplumbing")  # what the compiled modules import
# A hang guard: mypyc and the C compiler take minutes of CPU, and beside make test's other tiers on
# 2 cores a compile was seen to need more than 600 s.
COMPILE_TIMEOUT_SECONDS = 1500
KEPT_BUILDS = 6


class CompileError(RuntimeError):
    pass


def cache_root() -> Path:
    return Path(os.environ.get("NIMBIX_BURST_CACHE") or Path.home() / ".cache" / "nimbix-burst") / "compiled"


def _sources(tree: Path) -> list[Path]:
    return sorted(
        path for package in PACKAGES for path in (tree / package).rglob("*.py") if "__pycache__" not in path.parts
    )


def build_key(tree: Path) -> str:
    digest = hashlib.sha256()
    versions = f"{sys.version}\nmypy {importlib.metadata.version('mypy')}\n"
    digest.update(versions.encode())
    for path in [tree / SCRIPT, *_sources(tree)]:
        digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build(tree: Path = REPO_ROOT, *, root: Path | None = None) -> Path:
    """The directory holding `tree`'s packages with the core compiled; built unless cached."""
    tree = tree.resolve()
    if not (tree / SCRIPT).is_file():
        raise CompileError(f"{tree}: no {SCRIPT} (a checkout from before the compiled core?)")
    root = root or cache_root()
    target = root / build_key(tree)
    if (target / "webhook").is_dir():
        return target
    staging = root / f"{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    for source in _sources(tree):
        copy = staging / source.relative_to(tree)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, copy)
    mypyc = Path(sys.executable).parent / "mypyc"
    completed = subprocess.run(
        ["sh", str(tree / SCRIPT), str(mypyc)],
        cwd=staging,
        capture_output=True,
        text=True,
        timeout=COMPILE_TIMEOUT_SECONDS,
        check=False,
    )
    if completed.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = (completed.stdout + completed.stderr)[-3000:]
        raise CompileError(f"compile-core.sh failed (exit {completed.returncode}); needs gcc and Python.h:\n{tail}")
    try:
        staging.rename(target)
    except OSError:  # another build finished first: its result is the same
        shutil.rmtree(staging, ignore_errors=True)
    _prune(root, keep=target)
    return target


def compiled_modules(tree: Path = REPO_ROOT) -> tuple[str, ...]:
    """The modules compile-core.sh compiles, as import names (the script is the one list)."""
    words = (tree / SCRIPT).read_text().split()
    return tuple(
        w.removesuffix(".py").replace("/", ".") for w in words if w.startswith("webhook/") and w.endswith(".py")
    )


def _prune(root: Path, *, keep: Path, builds: int = KEPT_BUILDS) -> None:
    """Older builds (other keys) go, beyond the newest few: a tree per edit would pile up."""
    done = [p for p in root.iterdir() if p.is_dir() and not p.name.endswith(".tmp") and p != keep]
    for old in sorted(done, key=lambda p: p.stat().st_mtime, reverse=True)[builds - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        print(build(Path(args[0]) if args else REPO_ROOT))
    except CompileError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
