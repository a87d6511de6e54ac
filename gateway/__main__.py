"""Composition root: settings -> logging -> accounts -> TLS -> API client -> aiohttp server."""

from __future__ import annotations

import getpass
import logging
import os
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path

import aiohttp
import uvloop
from aiohttp import web

from gateway.accounts import Accounts, AccountsError, parse_accounts
from gateway.callers import CallerCacheTiming, Callers
from gateway.checkpoint_reader import CheckpointReader
from gateway.kube import KubeAdapter
from gateway.metrics import GatewayMetrics
from gateway.oversight import Oversight, controller_user
from gateway.server import GatewayParts, create_app
from gateway.settings import Settings, parse_settings
from gateway.submits import Submits, SubmitTiming
from gateway.upstream import Upstream
from gateway.vault_server import VaultLogins, connect_vault, start_vault_server
from kubeplumbing.logs import configure_logging
from kubeplumbing.options import SettingsError
from kubeplumbing.tls import ReloadingTLS
from kubeplumbing.watching import load_api_client

log = logging.getLogger("gateway")


def load_accounts(path: Path) -> Accounts:
    """The accounts file; none when it is absent (the Secret is optional: every burst is then
    refused, saying so). An unreadable or invalid file raises."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        log.warning("no accounts: every burst is refused until the accounts Secret exists", extra={"file": str(path)})
        return Accounts(())
    return parse_accounts(text)


async def _build(settings: Settings, tls: ReloadingTLS, accounts: Accounts) -> web.Application:
    kube = KubeAdapter(load_api_client(settings.kubeconfig), namespace=settings.namespace)
    session = aiohttp.ClientSession()
    metrics = GatewayMetrics()
    callers = Callers(kube, audience=settings.audience, clock=time.monotonic, timing=CallerCacheTiming())
    upstream = Upstream(session, metrics)
    submits = Submits(
        kube,
        upstream,
        clock=time.monotonic,
        wall_clock=time.time,
        timing=SubmitTiming(pending_seconds=settings.pending_seconds),
        metrics=metrics,
    )
    parts = GatewayParts(
        accounts=accounts,
        callers=callers,
        submits=submits,
        upstream=upstream,
        metrics=metrics,
    )
    oversight = Oversight(
        kube=kube,
        upstream=upstream,
        submits=submits,
        accounts=accounts,
        audience=settings.controller_audience,
        user=controller_user(settings.namespace, settings.controller_service_account),
        checkpoints=CheckpointReader(kube, accounts, connect=connect_vault, wall_clock=time.time),
    )
    app = create_app(parts, oversight)

    async def reload_tls(_: web.Application) -> None:
        app["tls_task"] = app.loop.create_task(tls.watch(settings.tls_reload_seconds, on_reload=lambda: None))

    async def serve_vault(_: web.Application) -> None:
        app["vault_server"] = None
        if settings.sftp_port and not settings.ssh_host_key_file.exists():
            # The key's Secret is optional (docs/install.md): without it staging is not served, said once.
            log.warning(
                "no SSH host key: the vault's SFTP endpoint is not served",
                extra={"file": str(settings.ssh_host_key_file), "sftp_port": settings.sftp_port},
            )
        elif settings.sftp_port:
            app["vault_server"] = await start_vault_server(
                host=settings.host,
                port=settings.sftp_port,
                host_key_file=settings.ssh_host_key_file,
                authorize=VaultLogins(callers, accounts, kube),
            )

    async def close(_: web.Application) -> None:
        app["tls_task"].cancel()
        if app["vault_server"] is not None:
            app["vault_server"].close()
        await session.close()

    app.on_startup.append(reload_tls)
    app.on_startup.append(serve_vault)
    app.on_cleanup.append(close)
    log.info(
        "gateway starting",
        extra={
            "port": settings.port,
            "sftp_port": settings.sftp_port,
            "accounts": [a.name for a in accounts.accounts],
            "audience": settings.audience,
        },
    )
    return app


def ensure_login_name(
    environ: MutableMapping[str, str], *, getuser: Callable[[], str] = getpass.getuser, uid: int | None = None
) -> None:
    """asyncssh asks for the local user name (getpass) before every connection to a vault, even with no SSH
    config to read; the add-on's image runs as a uid without a passwd entry (65532), where that raises and
    no vault is ever reached. Such a process is named after its uid (getpass reads LOGNAME first)."""
    try:
        getuser()
    except (KeyError, OSError):
        environ["LOGNAME"] = f"uid-{os.getuid() if uid is None else uid}"


def main(argv: Sequence[str] | None = None) -> int:
    ensure_login_name(os.environ)
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except SettingsError as exc:
        print(exc, file=sys.stderr)  # noqa: T201
        return 2
    configure_logging(settings.log_level)
    try:
        accounts = load_accounts(settings.accounts_file)
    except (OSError, AccountsError) as exc:
        log.error("accounts unusable", extra={"error": str(exc), "file": str(settings.accounts_file)})
        return 2
    tls = ReloadingTLS(settings.tls_dir)
    web.run_app(
        _build(settings, tls, accounts),
        host=settings.host,
        port=settings.port,
        ssl_context=tls.context,
        access_log=None,
        print=None,
        shutdown_timeout=10,
        loop=uvloop.new_event_loop(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
