"""The paths every local process group (a control plane, a node) keeps under its run directory:
certificates and keys in ``pki/``, one log per component in ``logs/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class RunDirectory:
    run_dir: Path

    @property
    def pki_dir(self) -> Path:
        return self.run_dir / "pki"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    def cert(self, name: str) -> Path:
        return self.pki_dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.pki_dir / f"{name}.key"

    def log(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"
