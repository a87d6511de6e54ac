"""The JARVICE emulator with vaults, as the integration tests run it in a thread: a filesystem vault
(drop.jarvice.com) and an object vault (objects) under a directory of the test's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from devplatform.emulator import EmulatorConfig, EmulatorThread, Timing
from devplatform.emulator.vault import VaultConfig

VAULT_KINDS = {"drop.jarvice.com": "filesystem", "objects": "object"}


@contextmanager
def vault_emulator(root: Path, *, user: str, apikey: str, app: str, timing: Timing) -> Iterator[EmulatorThread]:
    """The emulator serving `user`'s vaults under `root` and the app `app` (command `run`). Its jobs run
    in private roots (unshare --mount, chroot): anyone but root fails the test, saying so."""
    if os.geteuid() != 0:
        pytest.fail("the emulator's private job roots need root (unshare --mount, chroot): run as root")
    config = EmulatorConfig(
        users={user: apikey},
        apps={app: frozenset({"run"})},
        timing=timing,
        vaults=VaultConfig(root=root, kinds=VAULT_KINDS),
    )
    with EmulatorThread(config) as emu:
        yield emu
