"""`python -m devplatform.emulator`: the emulator as a separate process (demo, `make dev-up`).

Prints one JSON line ({"url", "pid", ...}) on stdout once listening; optionally writes the same
to --state-file and a shell-sourceable --env-file (JARVICE_API_URL, JARVICE_USERNAME,
JARVICE_APIKEY, APP_NAME, APP_COMMAND, and with vaults NIMBIX_BURST_VAULT_SFTP). Stops on
SIGTERM/SIGINT, killing every job's process group.
"""

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import secrets
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from devplatform.emulator import appdef, jobs, vault, vault_api
from devplatform.emulator.config import EmulatorConfig, parse_apps, parse_image_environment, parse_users
from devplatform.emulator.server import create_app

LOOPBACK = ("127.0.0.1", "localhost", "::1")
DEFAULT_APP = "nimbix-burst-example:run"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devplatform.emulator", description=__doc__)
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        type=_local_host,
        help="loopback, or a private address such as the real node's bridge gateway (pods reach it there)",
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    parser.add_argument(
        "--users",
        default=None,
        help="USER:APIKEY[,USER:APIKEY...] (default: alice with a random key, see the env file)",
    )
    parser.add_argument(
        "--apps",
        action="append",
        default=None,
        help=f"APPID:COMMAND[,COMMAND...], repeatable (default {DEFAULT_APP})",
    )
    parser.add_argument(
        "--appdef",
        action="append",
        default=[],
        metavar="APPID=PATH",
        help="an application defined by an AppDef.json (e.g. images/base/AppDef.json), repeatable; "
        "with --appdef and no --apps, only the AppDef applications exist",
    )
    parser.add_argument(
        "--image-env",
        action="append",
        default=[],
        metavar="APPID:NAME=VALUE",
        help="a variable the application's image sets (its jobs get it), repeatable; "
        "JARVICE_SIGNAL_OVERRIDE names the script /jarvice/signal runs",
    )
    parser.add_argument("--machines", type=Path, help="JSON file replacing the built-in machine catalogue")
    parser.add_argument("--queue-seconds", type=float, default=2.0, help="time a job stays SUBMITTED")
    parser.add_argument("--init-seconds", type=float, default=0.5, help="time the INIT preamble takes")
    parser.add_argument(
        "--shutdown-kill-seconds",
        type=float,
        default=10.0,
        help="SIGKILL this long after /jarvice/shutdown's SIGTERM (negative: never)",
    )
    parser.add_argument(
        "--cancel-fast-seconds", type=float, default=0.0, help="jobs ending faster than this show CANCELED"
    )
    parser.add_argument(
        "--queued-end-status",
        choices=("TERMINATED", "CANCELED"),
        default="TERMINATED",
        help="how a job terminated while still queued ends (JARVICE may answer either)",
    )
    parser.add_argument("--no-tail-preamble", action="store_true", help="/jarvice/tail omits the INIT preamble")
    parser.add_argument("--workdir", type=Path, help="job directories (default: a temporary directory)")
    parser.add_argument("--state-file", type=Path, help="write {url, pid, port, ...} JSON here once listening")
    parser.add_argument("--env-file", type=Path, help="write a shell-sourceable JARVICE_* env file here")
    parser.add_argument("--seed", type=int, default=None, help="seed for fault draws and job names")
    parser.add_argument(
        "--vaults-dir", type=Path, help="enable vaults (SFTP, /jarvice/vault, each job's /data) stored here"
    )
    parser.add_argument("--vault", action="append", default=[], metavar="NAME=KIND", help="a vault (filesystem|object)")
    parser.add_argument("--sftp-port", type=int, default=0, help="the vault SFTP port (0: a free one)")
    return parser


def _local_host(value: str) -> str:
    """Loopback or a private (RFC 1918/4193) address: the emulator runs submitted commands on this
    host, so it never listens where the outside world could reach it."""
    if value in LOOPBACK:
        return value
    try:
        address = ipaddress.ip_address(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an IP address") from exc
    if not (address.is_loopback or address.is_private) or address.is_unspecified:
        raise argparse.ArgumentTypeError(f"{value} is neither loopback nor a private address")
    return value


def build_config(args: argparse.Namespace) -> EmulatorConfig:
    users = parse_users(args.users) if args.users else {"alice": secrets.token_hex(16)}
    apps = parse_apps(args.apps) if args.apps else ({} if args.appdef else parse_apps([DEFAULT_APP]))
    appdefs = {}
    for option in args.appdef:
        app, path = appdef.parse_appdef_option(option)
        appdefs[app] = appdef.load_appdef(path)
    config = EmulatorConfig(
        users=users,
        apps=apps,
        appdefs=appdefs,
        image_environment=parse_image_environment(args.image_env),
        timing=jobs.Timing(
            queue_seconds=args.queue_seconds,
            init_seconds=args.init_seconds,
            shutdown_kill_seconds=None if args.shutdown_kill_seconds < 0 else args.shutdown_kill_seconds,
            cancel_fast_seconds=args.cancel_fast_seconds,
            queued_end_status=args.queued_end_status,
        ),
        tail_preamble=not args.no_tail_preamble,
        workdir=args.workdir,
        seed=args.seed,
    )
    if args.machines:
        config.machines = json.loads(args.machines.read_text())
    if args.vaults_dir is not None:
        config.vaults = vault.VaultConfig(
            root=args.vaults_dir,
            kinds=vault.parse_vault_kinds(args.vault),
            sftp_host=args.host,
            sftp_port=args.sftp_port,
        )
    return config


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    tmp.replace(path)


def render_env_file(url: str, config: EmulatorConfig, *, vault_sftp: str | None = None) -> str:
    """The JARVICE_* variables, and the vault's SFTP address (NIMBIX_BURST_VAULT_SFTP) with vaults."""
    username, apikey = next(iter(config.users.items()))
    app, commands = next(iter(config.app_commands().items()))
    values = {
        "JARVICE_API_URL": url,
        "JARVICE_USERNAME": username,
        "JARVICE_APIKEY": apikey,
        "APP_NAME": app,
        "APP_COMMAND": "run" if "run" in commands else sorted(commands)[0],
    }
    if vault_sftp is not None:
        values["NIMBIX_BURST_VAULT_SFTP"] = vault_sftp
    return "".join(f"{key}={shlex.quote(value)}\n" for key, value in values.items())


async def serve(args: argparse.Namespace, config: EmulatorConfig) -> None:
    app = create_app(config)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        info: dict[str, Any] = {
            "url": url,
            "pid": os.getpid(),
            "port": port,
            "users": sorted(config.users),
            "apps": {app: sorted(cmds) for app, cmds in config.app_commands().items()},
        }
        sftp = vault_api.sftp_address(app)
        if sftp is not None:
            info["vault_sftp"] = sftp
        # The env file first: the state file says the emulator is ready (addons.start_jarvice_emulator
        # returns when it appears), and whoever waits for it reads the env file next.
        if args.env_file:
            _write_private(args.env_file, render_env_file(url, config, vault_sftp=sftp))
        if args.state_file:
            _write_private(args.state_file, json.dumps(info) + "\n")
        sys.stdout.write(json.dumps(info) + "\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        await runner.cleanup()
        if args.state_file:
            with contextlib.suppress(FileNotFoundError):
                args.state_file.unlink()


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = build_config(args)
    except ValueError as exc:  # invalid --users/--apps/--appdef (AppDefError lists every problem)
        parser.error(str(exc))
    asyncio.run(serve(args, config))


if __name__ == "__main__":
    main()
