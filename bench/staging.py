"""Staging against the limit: nimbix-burst's stage-in and copy-back beside OpenSSH's own `sftp`
client, on one real OpenSSH `sshd` serving `internal-sftp` (as a vault is served) on loopback.

    python -m bench.staging [--quick] [--cases big,small,mix] [--rounds N] [--json PATH]
    python -m bench.staging --files 1000000 [--file-bytes 100] [--copy-back] [--json PATH]

Each case is uploaded into an empty vault directory and downloaded into an empty local one, by
`sftp -b` (put -r / get -r) and by the runner's own code (`VaultTransfer`, the walk that counts
first included), each in a fresh process whose peak RSS is read from the kernel. The sshd runs as
root from a temporary directory with its own host key and config on a free 127.0.0.1 port, and is
stopped by its PID. Logs in with a key (`sftp` needs no password prompt): the runner logs in with
the API key as password on JARVICE, which changes nothing once the session is up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SFTP = "/usr/bin/sftp"
SSH_KEYGEN = "/usr/bin/ssh-keygen"
START_TIMEOUT_SECONDS = 10.0
RUN_TIMEOUT_SECONDS = 1800.0
MIB = 1 << 20


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    files: tuple[tuple[int, int], ...]  # (count, size) groups


CASES = {
    "big": Case("big", "one 2 GiB file", ((1, 2048 * MIB),)),
    "small": Case("small", "50,000 files of 4 KiB", ((50_000, 4096),)),
    "mix": Case("mix", "2,000 x 64 KiB + 200 x 1 MiB + 2 x 256 MiB", ((2_000, 64 << 10), (200, MIB), (2, 256 * MIB))),
}
QUICK = {
    "big": Case("big", "one 64 MiB file", ((1, 64 * MIB),)),
    "small": Case("small", "500 files of 4 KiB", ((500, 4096),)),
    "mix": Case("mix", "50 x 64 KiB + 5 x 1 MiB + 1 x 16 MiB", ((50, 64 << 10), (5, MIB), (1, 16 * MIB))),
}


@dataclass
class Measure:
    tool: str
    case: str
    direction: str
    seconds: float
    bytes: int
    files: int
    peak_rss_mb: float
    round: int = 0

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MIB / self.seconds if self.seconds > 0 else 0.0


def make_case(case: Case, root: Path) -> tuple[int, int]:
    """The case's tree under root/<case>: files spread 1,000 per directory (as a dataset's classes)."""
    top = root / case.name
    count = total = 0
    block = os.urandom(MIB)
    for group, (how_many, size) in enumerate(case.files):
        for i in range(how_many):
            directory = top / f"g{group}" / f"d{i // 1000:04d}"
            if i % 1000 == 0:
                directory.mkdir(parents=True, exist_ok=True)
            with open(directory / f"f{i:06d}.bin", "wb") as out:
                left = size
                while left > 0:
                    piece = block[: min(left, MIB)]
                    out.write(piece)
                    left -= len(piece)
            count += 1
            total += size
    return count, total


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    port: int
    key: Path
    known_hosts: Path
    vault: Path


@contextmanager
def sshd(work: Path) -> Iterator[Server]:
    """A real OpenSSH sshd with internal-sftp on 127.0.0.1, stopped by PID."""
    if not Path(SSHD).exists():
        raise SystemExit(f"{SSHD} is missing: apt-get install openssh-server openssh-client")
    keys = work / "keys"
    keys.mkdir()
    for name in ("host", "client"):
        subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
    (keys / "authorized_keys").write_text((keys / "client.pub").read_text())
    vault = work / "vault"
    vault.mkdir()
    port = free_port()
    config = work / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\nPidFile {work / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPermitRootLogin prohibit-password\nStrictModes no\n"
        f"UsePAM no\nPasswordAuthentication no\nSubsystem sftp internal-sftp\n"
        f"ForceCommand internal-sftp -d {vault}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation directory
    with open(work / "sshd.log", "wb") as log:
        process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"sshd did not start: {(work / 'sshd.log').read_text()}")
            time.sleep(0.05)
        host_key = (keys / "host.pub").read_text().split()
        known_hosts = work / "known_hosts"
        known_hosts.write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
        yield Server(port, keys / "client", known_hosts, vault)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def timed(argv: list[str], *, stdin: str | None = None) -> tuple[float, float]:
    """Wall seconds and the peak RSS (MB) of a child process run to completion."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, text=True)
        assert process.stdin is not None
        process.stdin.write(stdin or "")
        process.stdin.close()
        # wait4: this child's own rusage (getrusage(RUSAGE_CHILDREN) keeps the largest child so far).
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        if process.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{argv[0]} failed ({process.returncode}): {err.read()[-2000:].decode(errors='replace')}")
    return seconds, usage.ru_maxrss / 1024


def run_openssh(server: Server, *, direction: str, local: Path, remote: str) -> tuple[float, float]:
    command = f"put -r {local} {remote}" if direction == "up" else f"get -r {remote} {local}"
    argv = [
        SFTP,
        "-q",
        "-b",
        "-",
        "-i",
        str(server.key),
        "-P",
        str(server.port),
        "-o",
        f"UserKnownHostsFile={server.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "root@127.0.0.1",
    ]
    return timed(argv, stdin=command + "\n")


def run_ours(server: Server, *, direction: str, local: Path, remote: str) -> tuple[float, float]:
    argv = [
        sys.executable,
        "-m",
        "bench.staging",
        "--client",
        json.dumps(
            {
                "direction": direction,
                "local": str(local),
                "remote": remote,
                "port": server.port,
                "key": str(server.key),
                "known_hosts": str(server.known_hosts),
            }
        ),
    ]
    return timed(argv)


TOOLS = {"openssh sftp": run_openssh, "nimbix-burst": run_ours}


def measure_case(server: Server, case: Case, work: Path, *, rounds: int) -> list[Measure]:
    """Each tool up then down, `rounds` times. The machine is shared and its load moves, so the
    tools take turns going first (round by round and direction by direction: up A B, down B A),
    and nothing is deleted until the case is done (a deletion's disk work would land in the next
    measure)."""
    source = work / "source"
    source.mkdir(exist_ok=True)
    print(f"  making {case.description}", file=sys.stderr, flush=True)
    files, size = make_case(case, source)
    results: list[Measure] = []
    made: list[Path] = []
    for round_ in range(rounds):
        order = list(TOOLS) if round_ % 2 == 0 else list(reversed(TOOLS))
        for direction in ("up", "down"):
            for tool in order if direction == "up" else reversed(order):
                remote = f"{tool.split()[0]}-{case.name}-{round_}"
                back = work / f"back-{remote}"
                back.mkdir(exist_ok=True)
                made += [back, server.vault / remote]
                local = source / case.name if direction == "up" else back / case.name
                seconds, rss = TOOLS[tool](server, direction=direction, local=local, remote=remote)
                measure = Measure(tool, case.name, direction, seconds, size, files, rss, round_)
                results.append(measure)
                print(
                    f"  {tool:13s} {direction:4s} {case.name:5s} {seconds:7.1f} s {measure.mib_per_s:7.1f} MiB/s"
                    f" {files / seconds:8.0f} files/s  peak RSS {rss:5.0f} MB",
                    file=sys.stderr,
                    flush=True,
                )
    for path in [*made, source / case.name]:
        shutil.rmtree(path, ignore_errors=True)
    return results


@dataclass
class ManyMeasure:
    """The runner's own staging (count walk, transfer, staging record) of one large tree of tiny files."""

    files: int
    file_bytes: int
    direction: str
    seconds: float
    peak_rss_mb: float
    record_bytes: int

    @property
    def files_per_s(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0


MANY_LABEL = "bench-many"


def run_staging(server: Server, *, mode: str, local: Path, state_dir: Path) -> tuple[float, float]:
    """The runner's VaultStaging (stage-in, or the copy-back after a job) in a fresh process."""
    spec = {
        "mode": mode,
        "local": str(local),
        "state_dir": str(state_dir),
        "label": MANY_LABEL,
        "port": server.port,
        "key": str(server.key),
        "known_hosts": str(server.known_hosts),
    }
    return timed([sys.executable, "-m", "bench.staging", "--client", json.dumps(spec)])


def measure_many(server: Server, work: Path, *, files: int, file_bytes: int, copy_back: bool) -> list[ManyMeasure]:
    """Stage `files` tiny files in, as the runner does (its staging record in a state directory),
    then, with copy_back, move the tree aside and copy it back into its place."""
    pod = work / "pod"
    pod.mkdir()
    state = work / "state"
    state.mkdir()
    print(f"  making {files:,} files of {file_bytes} bytes", file=sys.stderr, flush=True)
    make_case(Case("data", "", ((files, file_bytes),)), pod)
    results: list[ManyMeasure] = []
    directions = ["up", "down"] if copy_back else ["up"]
    for direction in directions:
        if direction == "down":
            (pod / "data").rename(work / "staged-in")
        seconds, rss = run_staging(
            server, mode="stage-in" if direction == "up" else "copy-back", local=pod / "data", state_dir=state
        )
        record = sum(path.stat().st_size for path in state.iterdir())
        measure = ManyMeasure(files, file_bytes, direction, seconds, rss, record)
        results.append(measure)
        print(
            f"  nimbix-burst  {direction:4s} {files:,} files {seconds:7.1f} s {measure.files_per_s:8.0f} files/s"
            f"  peak RSS {rss:5.0f} MB  staging record {record} bytes",
            file=sys.stderr,
            flush=True,
        )
    if copy_back:
        back = sum(len(names) for _dir, _subdirs, names in os.walk(pod / "data"))
        if back != files:
            raise SystemExit(f"the copy-back brought {back} of {files} files")
    return results


def run_many(*, files: int, file_bytes: int, copy_back: bool) -> tuple[str, list[ManyMeasure]]:
    with tempfile.TemporaryDirectory(prefix="nimbix-burst-staging-many-") as temp:
        work = Path(temp)
        with sshd(work) as server:
            print(f"== staging: {files:,} files of {file_bytes} bytes", file=sys.stderr, flush=True)
            results = measure_many(server, work, files=files, file_bytes=file_bytes, copy_back=copy_back)
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), results


def render_many(when: str, results: list[ManyMeasure]) -> str:
    lines = [
        f"The runner's staging of many tiny files over loopback to OpenSSH sshd (internal-sftp), {when},"
        f" {os.cpu_count()} cores:",
        "",
        "| files | direction | wall time | files/s | peak RSS | staging record |",
        "|---|---|---|---|---|---|",
    ]
    for m in results:
        direction = "stage-in" if m.direction == "up" else "copy-back"
        lines.append(
            f"| {m.files:,} x {m.file_bytes} B | {direction} | {m.seconds:.0f} s | {m.files_per_s:,.0f}"
            f" | {m.peak_rss_mb:.0f} MB | {m.record_bytes} bytes |"
        )
    return "\n".join(lines) + "\n"


def table(results: list[Measure]) -> str:
    lines = [
        "| case | direction | OpenSSH `sftp` | nimbix-burst | ratio | nimbix-burst peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    for case in dict.fromkeys(m.case for m in results):
        for direction in ("up", "down"):
            pair = [m for m in results if m.case == case and m.direction == direction]
            # The best of the rounds: the least disturbed by the machine's other work.
            ours = min((m for m in pair if m.tool == "nimbix-burst"), key=lambda m: m.seconds)
            theirs = min((m for m in pair if m.tool != "nimbix-burst"), key=lambda m: m.seconds)
            lines.append(
                f"| {case} | {'stage-in' if direction == 'up' else 'copy-back'}"
                f" | {theirs.seconds:.1f} s ({theirs.mib_per_s:.0f} MiB/s)"
                f" | {ours.seconds:.1f} s ({ours.mib_per_s:.0f} MiB/s)"
                f" | {theirs.seconds / ours.seconds:.2f}x | {ours.peak_rss_mb:.0f} MB |"
            )
    return "\n".join(lines)


def run(names: list[str], *, quick: bool, rounds: int = 1) -> tuple[str, list[Measure]]:
    """Every case in `names` by both tools on one sshd: (the date, the measures)."""
    cases = QUICK if quick else CASES
    unknown = [name for name in names if name not in cases]
    if unknown:
        raise SystemExit(f"unknown staging cases {unknown}: choose from {', '.join(cases)}")
    results: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="nimbix-burst-staging-bench-") as temp:
        work = Path(temp)
        with sshd(work) as server:
            for name in names:
                print(f"== staging: {cases[name].description}", file=sys.stderr, flush=True)
                results += measure_case(server, cases[name], work, rounds=rounds)
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), results


def render(when: str, results: list[Measure]) -> str:
    heading = f"Staging over loopback to OpenSSH sshd (internal-sftp), {when}, {os.cpu_count()} cores:"
    return f"{heading}\n\n{table(results)}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.staging")
    parser.add_argument("--quick", action="store_true", help="small cases (a smoke run)")
    parser.add_argument("--cases", default="big,small,mix")
    parser.add_argument("--json", type=Path, default=None, help="write the measures there")
    parser.add_argument("--rounds", type=int, default=1, help="each tool this many times (the best counts)")
    parser.add_argument("--files", type=int, default=0, help="instead: the runner alone stages this many tiny files")
    parser.add_argument("--file-bytes", type=int, default=100, help="with --files: each file's size")
    parser.add_argument("--copy-back", action="store_true", help="with --files: copy them back too")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        from bench import staging_client  # noqa: PLC0415 - the client's process loads only what it runs

        staging_client.run(json.loads(args.client))
        return 0
    if args.files > 0:
        when, many = run_many(files=args.files, file_bytes=args.file_bytes, copy_back=args.copy_back)
        print(render_many(when, many))
        if args.json:
            args.json.write_text(json.dumps({"date": when, "many": [asdict(m) for m in many]}, indent=1))
        return 0
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    when, results = run(args.cases.split(","), quick=args.quick, rounds=args.rounds)
    print(render(when, results))
    if args.json:
        args.json.write_text(json.dumps({"date": when, "measures": [asdict(m) for m in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
