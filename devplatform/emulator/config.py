"""What the emulator is started with: users, applications, machines, timing, vaults; and the parsers
of the command line's `--users` and `--app` values."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devplatform.emulator import appdef, jobs, vault
from devplatform.emulator.catalogue import default_machines


@dataclass
class EmulatorConfig:
    users: dict[str, str]  # username -> API key
    apps: dict[str, frozenset[str]]  # application id -> AppDef command keys
    machines: dict[str, dict[str, Any]] = field(default_factory=default_machines)
    timing: jobs.Timing = field(default_factory=jobs.Timing)
    # Whether /jarvice/tail includes the INIT preamble, as /jarvice/output does (UNCONFIRMED).
    tail_preamble: bool = True
    workdir: Path | None = None
    first_job_number: int = 1000
    seed: int | None = None
    # Applications defined by AppDef files (see appdef.py): submissions are checked against the
    # AppDef's commands and parameters, and run through the command's `path`.
    appdefs: dict[str, appdef.LoadedAppDef] = field(default_factory=dict)
    # Vaults (vault.py): SFTP, /jarvice/vault, each job's /data. None: no vaults, jobs run on the host.
    vaults: vault.VaultConfig | None = None
    # Nodes each machine type can run at once (jobs.has_room); a machine not named is unlimited.
    machine_capacity: dict[str, int] = field(default_factory=dict)
    # Per application id, the environment its image sets (the stand-in for the image's ENV lines):
    # every job of the application gets it, and /jarvice/signal reads JARVICE_SIGNAL_OVERRIDE from it.
    image_environment: dict[str, dict[str, str]] = field(default_factory=dict)

    def app_commands(self) -> dict[str, frozenset[str]]:
        """Every application id (catalogue and AppDef) -> its command keys."""
        from_appdefs = {app: frozenset(loaded.appdef.commands) for app, loaded in self.appdefs.items()}
        return {**self.apps, **from_appdefs}


def parse_users(text: str) -> dict[str, str]:
    """ "alice:KEY,bob:KEY2" -> {"alice": "KEY", "bob": "KEY2"}."""
    users = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        username, sep, apikey = item.partition(":")
        if not sep or not username or not apikey:
            raise ValueError(f"expected USER:APIKEY, got {item!r}")
        users[username] = apikey
    return users


def parse_apps(items: list[str]) -> dict[str, frozenset[str]]:
    """["app:run,batch", "other:run"] -> {"app": {"run", "batch"}, "other": {"run"}}."""
    apps: dict[str, frozenset[str]] = {}
    for item in items:
        app, sep, commands = item.partition(":")
        keys = frozenset(filter(None, (c.strip() for c in commands.split(","))))
        if not sep or not app or not keys:
            raise ValueError(f"expected APPID:COMMAND[,COMMAND...], got {item!r}")
        apps[app] = apps.get(app, frozenset()) | keys
    return apps


def parse_image_environment(items: list[str]) -> dict[str, dict[str, str]]:
    """["app:NAME=VALUE", ...] -> {"app": {"NAME": "VALUE"}} (the command line's --image-env)."""
    found: dict[str, dict[str, str]] = {}
    for item in items:
        app, sep, assignment = item.partition(":")
        name, equals, value = assignment.partition("=")
        if not sep or not app.strip() or not equals or not name.strip():
            raise ValueError(f"expected APPID:NAME=VALUE, got {item!r}")
        found.setdefault(app.strip(), {})[name.strip()] = value
    return found
