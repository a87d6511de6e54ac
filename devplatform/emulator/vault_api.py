"""The emulator's vault surface: `/jarvice/vault`, the SFTP server's life, and its test controls
(`/_emulator/vault`: the SFTP address and host key; `/_emulator/vault-faults`: cut or stall SFTP sessions).
See vault.py for what a vault is here and how it differs from JARVICE's."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from devplatform.emulator import vault

log = logging.getLogger(__name__)


@dataclass
class VaultRuntime:
    config: vault.VaultConfig
    users: Mapping[str, str]
    faults: vault.SftpFaults = field(default_factory=vault.SftpFaults)
    sftp: vault.SftpServer | None = None


VAULTS: Final = web.AppKey("vaults", VaultRuntime)


def setup(app: web.Application, config: vault.VaultConfig, *, users: Mapping[str, str]) -> None:
    app[VAULTS] = VaultRuntime(config=config, users=users)
    app.router.add_get("/jarvice/vault", handle_vault)
    app.router.add_post("/jarvice/vault", handle_vault)
    app.router.add_get("/_emulator/vault", handle_info)
    app.router.add_post("/_emulator/vault-faults", handle_set_faults)
    app.cleanup_ctx.append(_sftp_server)
    if config.private_root and os.geteuid() != 0:
        log.warning("not root: jobs run on the host, without their vault at /data")
        config.private_root = False


async def _sftp_server(app: web.Application) -> AsyncIterator[None]:
    runtime = app[VAULTS]
    runtime.sftp = await vault.start_sftp(runtime.config, users=runtime.users, faults=runtime.faults)
    try:
        yield
    finally:
        await vault.stop_sftp(runtime.sftp)


def job_vault(
    app: web.Application, *, owner: str, submission: Mapping[str, Any], workdir: Path
) -> vault.JobVault | None:
    """The job's vault at /data, when the emulator has vaults and may make private roots."""
    runtime = app.get(VAULTS)
    if runtime is None or not runtime.config.private_root:
        return None
    return vault.prepare_job_vault(runtime.config, username=owner, submission=submission, workdir=workdir)


def sftp_address(app: web.Application) -> str | None:
    runtime = app.get(VAULTS)
    if runtime is None or runtime.sftp is None:
        return None
    return f"{runtime.config.sftp_host}:{runtime.sftp.port}"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status, content_type="application/json")


async def handle_vault(request: web.Request) -> web.Response:
    runtime = request.app[VAULTS]
    params = dict(request.query)
    if request.method == "POST":
        form = await request.post()
        params.update({k: v for k, v in form.items() if isinstance(v, str)})
    username, apikey = params.get("username"), params.get("apikey")
    if not username or not apikey:
        return _error(400, "User required")
    expected = runtime.users.get(username)
    if expected is None or not secrets.compare_digest(expected, apikey):
        return _error(401, "Not Authorized")
    name = params.get("vault") or vault.DEFAULT_VAULT
    if name not in runtime.config.kinds:
        return _error(404, "Vault not found")
    details = params.get("details", "false").lower() == "true"
    sort = params.get("sort", "n")
    if sort.lower() not in ("n", "s", "m") or (sort.lower() != "n" and not details):
        return _error(400, "Invalid parameter(s)")
    directory = vault.vault_dir(runtime.config, username=username, name=name)
    rows = vault.list_vault(directory, params.get("path", "/"), details=details, sort=sort)
    if rows is None:
        return _error(404, "Not Found")
    return web.json_response(rows, content_type="application/json")


async def handle_info(request: web.Request) -> web.Response:
    runtime = request.app[VAULTS]
    sftp = runtime.sftp
    return web.json_response(
        {
            "sftp": sftp_address(request.app),
            "host_key": sftp.host_key if sftp is not None else None,
            "known_hosts": vault.known_hosts_line(sftp, runtime.config.sftp_host) if sftp is not None else None,
            "root": str(runtime.config.root),
            "kinds": runtime.config.kinds,
            "private_root": runtime.config.private_root,
            "faults": asdict(runtime.faults),
        }
    )


async def handle_set_faults(request: web.Request) -> web.Response:
    runtime = request.app[VAULTS]
    raw = await request.json()
    if not isinstance(raw, dict) or set(raw) - {"after_bytes", "sessions", "stall"}:
        return _error(400, "expected {after_bytes, sessions, stall}")
    try:
        after, sessions = int(raw.get("after_bytes", 0)), int(raw.get("sessions", 1))
    except (TypeError, ValueError):
        return _error(400, "after_bytes and sessions must be integers")
    stall = raw.get("stall", False)
    if after < 0 or sessions < 0 or not isinstance(stall, bool):
        return _error(400, "after_bytes and sessions must be >= 0, stall true or false")
    runtime.faults.after_bytes, runtime.faults.sessions, runtime.faults.stall = after, sessions, stall
    return web.json_response(asdict(runtime.faults))
