"""Staging through the gateway's SFTP endpoint against staging straight to the vault: the runner's own
stage-in and copy-back of a tree of files and of one large file, on one real OpenSSH `sshd` serving
`internal-sftp` (as a vault is served), direct or through the gateway's relay (gateway.vault_server,
in a process of its own, logged in to the sshd with a key as an account's vault credentials).

    python -m bench.staging_gateway [--quick] [--rounds N] [--rtt-ms MS] [--before DIR] [--json PATH]

With `--rtt-ms`, the vault is across a delay line of that round trip (bench.delay_line) on both
routes: the runner reaches it through the line, or reaches the gateway on loopback (the cluster's
network) and the gateway reaches the vault through the line, as a cluster reaches JARVICE.

Every leg uses the same cipher (AES-128-GCM: the runner's and the gateway's first choice). The two
routes take turns going first, round by round; each round's ratio (direct time / gateway time: 1.0
is as fast as direct) is paired, and the table gives their median and spread. The gateway's logins
are granted from a table here (one token, one pod): the TokenReview is the e2e tier's.

With `--before DIR` (a checkout of another commit, e.g. a `git worktree`), DIR's runner through a
second gateway served from DIR's code is a third route in the same rounds, and the table adds its
ratio and the gateway's speed over it, paired by round: a change measured side by side with the code
before it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncssh
import uvloop

from bench import delay_line
from bench.staging import MIB, Case, check_copy, make_case
from bench.staging_tools import (
    DEFAULT_CIPHER,
    START_TIMEOUT_SECONDS,
    Server,
    free_port,
    sshd,
    timed,
    via_delay_line,
)

POD = "0b5e7c1a-0000-4000-8000-00000000be1c"
TOKEN = "bench-pod-token"
ROUTES = ("direct", "gateway")
BEFORE = "before"  # --before: the gateway as another source tree has it
CASES = {
    "tree": Case("tree", "5,000 files of 16 KiB", ((5_000, 16 << 10),)),
    "big": Case("big", "one 1 GiB file", ((1, 1024 * MIB),)),
}
QUICK = {
    "tree": Case("tree", "500 files of 16 KiB", ((500, 16 << 10),)),
    "big": Case("big", "one 64 MiB file", ((1, 64 * MIB),)),
}


@dataclass
class Measure:
    route: str
    case: str
    direction: str
    seconds: float
    bytes: int
    files: int
    round: int


def serve(spec: dict[str, Any]) -> None:
    """The gateway's SFTP endpoint, its one login granted `spec`'s pod on `spec`'s vault (--serve)."""
    from gateway.accounts import VaultAccess  # noqa: PLC0415 - the client's process loads only what it runs
    from gateway.identity import NotAuthenticated  # noqa: PLC0415
    from gateway.vault_scope import VaultGrant  # noqa: PLC0415
    from gateway.vault_server import VaultSession, start_vault_server  # noqa: PLC0415
    from jarvice.redaction import Secret  # noqa: PLC0415

    access = VaultAccess(
        "127.0.0.1", spec["vault_port"], spec["vault_host_key"], "root", None, Secret(Path(spec["key"]).read_text())
    )
    session = VaultSession(VaultGrant(POD), access, namespace="bench", pod="bench")

    async def authorize(token: str) -> VaultSession:
        if token != TOKEN:
            raise NotAuthenticated("not the bench's token")
        return session

    async def main() -> None:
        await start_vault_server(
            host="127.0.0.1", port=spec["port"], host_key_file=Path(spec["host_key"]), authorize=authorize
        )
        await asyncio.Event().wait()

    uvloop.run(main())  # the gateway's own loop (gateway.__main__)


@contextmanager
def gateway(server: Server, work: Path, *, name: str = "gateway", source: Path | None = None) -> Iterator[Server]:
    """The gateway's endpoint before `server`, stopped by its PID; the Server the runner reaches it by.
    `source`: the source tree whose gateway runs (this one's by default)."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(work / f"{name}_host_key"))
    port = free_port()
    vault_host_key = " ".join(server.known_hosts.read_text().splitlines()[-1].split()[1:3])
    spec = {
        "port": port,
        "host_key": str(work / f"{name}_host_key"),
        "vault_port": server.port,
        "vault_host_key": vault_host_key,
        "key": str(server.key),
    }
    known_hosts = work / f"{name}_known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {key.export_public_key('openssh').decode().strip()}\n")
    log_path = work / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.staging_gateway", "--serve", json.dumps(spec)], stderr=log, cwd=source
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the gateway did not start: {log_path.read_text()}")
            time.sleep(0.05)
        yield Server(port, server.key, known_hosts, server.vault, server.cipher)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_runner(
    server: Server, *, direction: str, local: Path, remote: str, password: str | None, source: Path | None = None
) -> float:
    spec = {
        "direction": direction,
        "local": str(local),
        "remote": remote,
        "port": server.port,
        "key": str(server.key),
        "known_hosts": str(server.known_hosts),
        "cipher": server.cipher,
        "password": password,
    }
    seconds, _rss = timed([sys.executable, "-m", "bench.staging", "--client", json.dumps(spec)], cwd=source)
    return seconds


def measure(
    routes: dict[str, Server], case: Case, work: Path, *, rounds: int, before: Path | None = None
) -> list[Measure]:
    """`before`: the source tree whose runner the route BEFORE runs (its gateway's)."""
    source = work / "source"
    source.mkdir(exist_ok=True)
    print(f"  making {case.description}", file=sys.stderr, flush=True)
    files, size = make_case(case, source)
    results: list[Measure] = []
    for round_ in range(rounds):
        names = list(routes)  # each round starts one further along: every route goes first in turn
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for direction in ("up", "down"):
            for route in order:
                remote = f"nimbix-burst/pod-{POD}.bench/{case.name}-{route}-{round_}"
                local = source / case.name if direction == "up" else work / f"back-{route}-{round_}" / case.name
                if direction == "down":
                    local.parent.mkdir(parents=True, exist_ok=True)
                os.sync()
                password = None if route == "direct" else TOKEN
                seconds = run_runner(
                    routes[route],
                    direction=direction,
                    local=local,
                    remote=remote,
                    password=password,
                    source=before if route == BEFORE else None,
                )
                if direction == "down":
                    check_copy(source / case.name, local, route)
                    shutil.rmtree(local.parent)
                    shutil.rmtree(routes[route].vault / remote)
                results.append(Measure(route, case.name, direction, seconds, size, files, round_))
                print(
                    f"  {route:8s} {direction:4s} {case.name:5s} {seconds:7.2f} s {size / MIB / seconds:7.1f} MiB/s",
                    file=sys.stderr,
                    flush=True,
                )
    shutil.rmtree(source / case.name)
    return results


def ratios(
    results: list[Measure], case: str, direction: str, *, base: str = "direct", route: str = "gateway"
) -> list[float]:
    """Per round: `base`'s time / `route`'s time (1.0: `route` is as fast as `base`)."""
    out = []
    for round_ in sorted({m.round for m in results}):
        pair = {m.route: m.seconds for m in results if (m.case, m.direction, m.round) == (case, direction, round_)}
        if base in pair and route in pair:
            out.append(pair[base] / pair[route])
    return out


def _paired(values: list[float]) -> str:
    return f"**{statistics.median(values):.2f}x** [{min(values):.2f}-{max(values):.2f}]"


def render(when: str, results: list[Measure], cases: dict[str, Case], *, rtt_ms: float) -> str:
    rounds = len({m.round for m in results})
    path = f"the vault across a delay line of {rtt_ms:g} ms round trip" if rtt_ms > 0 else "loopback"
    routes = [*ROUTES, BEFORE] if any(m.route == BEFORE for m in results) else list(ROUTES)
    extra = " (and before the change, another tree's gateway)" if BEFORE in routes else ""
    lines = [
        f"The runner's staging, direct to OpenSSH sshd (internal-sftp) and through the gateway's SFTP endpoint{extra},"
        f" {path}, {when}, {os.cpu_count()} cores, {DEFAULT_CIPHER} on every leg, {rounds} rounds (paired):",
        "",
        "| case | direction | direct (median) | gateway (median) | gateway speed / direct: median [min-max] |",
        "|---|---|---|---|---|",
    ]
    if BEFORE in routes:
        lines[2] = lines[2][:-1] + "| before (median) | before / direct | gateway / before |"
        lines[3] += "---|---|---|"
    for case in dict.fromkeys(m.case for m in results):
        for direction, name in (("up", "stage-in"), ("down", "copy-back")):
            cells = []
            for route in routes:
                middle = statistics.median(
                    m.seconds for m in results if (m.route, m.case, m.direction) == (route, case, direction)
                )
                size = next(m.bytes for m in results if m.case == case)
                cells.append(f"{middle:.2f} s ({size / MIB / middle:.0f} MiB/s)")
            paired = _paired(ratios(results, case, direction))
            row = f"| {cases[case].description} | {name} | {cells[0]} | {cells[1]} | {paired} |"
            if BEFORE in routes:
                before = ratios(results, case, direction, route=BEFORE)
                gain = ratios(results, case, direction, base=BEFORE)
                row += f" {cells[2]} | {_paired(before)} | {_paired(gain)} |"
            lines.append(row)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.staging_gateway")
    parser.add_argument("--quick", action="store_true", help="small cases (a smoke run)")
    parser.add_argument("--cases", default="tree,big")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="write the measures there")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="the vault is this round trip away")
    parser.add_argument("--before", type=Path, default=None, help="also a gateway from this source tree")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(json.loads(args.serve))
        return 0
    cases = QUICK if args.quick else CASES
    chosen = {name: cases[name] for name in args.cases.split(",")}
    results: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="nimbix-burst-staging-gateway-") as temp:
        work = Path(temp)
        with sshd(work) as vault, contextlib.ExitStack() as stack:
            direct = vault
            if args.rtt_ms > 0:
                direct = via_delay_line(
                    vault, stack.enter_context(delay_line.delay_line(vault.port, rtt_ms=args.rtt_ms))
                )
            routes = {"direct": direct, "gateway": stack.enter_context(gateway(direct, work))}
            if args.before is not None:
                routes[BEFORE] = stack.enter_context(gateway(direct, work, name=BEFORE, source=args.before.resolve()))
            for case in chosen.values():
                print(f"== staging through the gateway: {case.description}", file=sys.stderr, flush=True)
                before = args.before.resolve() if args.before is not None else None
                results += measure(routes, case, work, rounds=args.rounds, before=before)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(render(when, results, chosen, rtt_ms=args.rtt_ms))
    if args.json:
        args.json.write_text(json.dumps({"date": when, "measures": [asdict(m) for m in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
