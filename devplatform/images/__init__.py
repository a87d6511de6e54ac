"""The project's images, built without Docker or a registry (build.sh: mmdebstrap + buildah), as OCI
archives for `ctr -n k8s.io images import`.

`build_images()` runs build.sh and returns one `ImageArchive` per image. After the import, containerd
knows each image by its `name` (the `localhost/` names below); pods use that name with
`imagePullPolicy: Never` or `IfNotPresent`.
"""

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

BUILD_SCRIPT: Final = Path(__file__).resolve().with_name("build.sh")
VERSION: Final = "0.1.0"
# The names build.sh gives the images, in the order it prints their archives. buildah puts
# unqualified names under localhost/; the archives carry these names, so containerd keeps them.
BASE: Final = f"localhost/nimbix-burst/base:{VERSION}"
WEBHOOK: Final = f"localhost/nimbix-burst-webhook:{VERSION}"
EXAMPLE_APP: Final = f"localhost/nimbix-burst/example-app:{VERSION}"
NAMES: Final = (BASE, WEBHOOK, EXAMPLE_APP)
# A cold build (Debian bootstrap + three images, pip from PyPI) took about 2 minutes on 2 shared cores.
BUILD_TIMEOUT_SECONDS: Final = 1800.0
# How much of build.sh's stderr an error carries.
ERROR_TAIL_LINES: Final = 40


class ImageBuildError(RuntimeError):
    pass


def default_cache_dir() -> Path:
    """The cache build.sh uses: $NIMBIX_BURST_CACHE, else ~/.cache/nimbix-burst."""
    return Path(os.environ.get("NIMBIX_BURST_CACHE") or Path.home() / ".cache" / "nimbix-burst")


def buildah_command(cache_dir: Path | None = None) -> list[str]:
    """`buildah` on build.sh's own storage (e.g. to inspect or run a built image)."""
    store = (cache_dir or default_cache_dir()) / "buildah"
    return [
        "buildah",
        "--root",
        str(store / "root"),
        "--runroot",
        str(store / "runroot"),
        "--storage-driver",
        "overlay",
    ]


@dataclass(frozen=True, slots=True)
class ImageArchive:
    name: str  # the image name inside the archive, and in containerd after the import
    path: Path  # OCI archive, for `ctr -n k8s.io images import PATH`


def build_images(*, cache_dir: Path | None = None, timeout: float = BUILD_TIMEOUT_SECONDS) -> tuple[ImageArchive, ...]:
    """Build what changed (build.sh keys each archive by its inputs) and return every archive.

    `cache_dir` overrides NIMBIX_BURST_CACHE. build.sh's progress is captured; a failure raises
    ImageBuildError with its last lines.
    """
    env = dict(os.environ)
    if cache_dir is not None:
        env["NIMBIX_BURST_CACHE"] = str(cache_dir)
    try:
        result = subprocess.run(
            [str(BUILD_SCRIPT)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ImageBuildError(f"{BUILD_SCRIPT} did not finish within {timeout:.0f} s") from exc
    if result.returncode != 0:
        tail = "\n".join(result.stderr.splitlines()[-ERROR_TAIL_LINES:])
        raise ImageBuildError(f"{BUILD_SCRIPT} failed with exit status {result.returncode}:\n{tail}")
    paths = [Path(line) for line in result.stdout.splitlines() if line.strip()]
    if len(paths) != len(NAMES) or not all(p.is_file() for p in paths):
        raise ImageBuildError(f"{BUILD_SCRIPT} printed {paths}, expected {len(NAMES)} archive paths")
    return tuple(ImageArchive(name=name, path=path) for name, path in zip(NAMES, paths, strict=True))
