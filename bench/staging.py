"""Staging against the limit: nimbix-burst's stage-in and copy-back beside OpenSSH's own `sftp`
client and a parallel SFTP client (`lftp mirror --parallel`), on one real OpenSSH `sshd` serving
`internal-sftp` (as a vault is served), on loopback or across a delay line of a chosen round trip.

    python -m bench.staging [--quick] [--cases big,small,mix,wan-big,wan-small] [--rounds N]
                            [--rtt-ms MS] [--cipher NAME|default] [--json PATH]
    python -m bench.staging --files 1000000 [--file-bytes 100] [--copy-back] [--json PATH]

Each case is uploaded into an empty vault directory, downloaded into an empty local one, and
downloaded again into a tree that holds older versions of every file (as a retry's PVC does), by
`sftp -b` (put -r / get -r), `lftp mirror`, and the runner's own code (`VaultTransfer`, the walk
that counts first included), each in a fresh process whose peak RSS is read from the kernel, after
a `sync`. Every tool uses the same cipher (`--cipher`, AES-128-GCM unless told; `default` lets each
choose its own, and the table says so). The tools take turns going first, round by round; each
round's ratios are paired (the same round's measures), and the table gives their median and
spread. With `--rtt-ms`, the clients reach the sshd through `bench.delay_line`. The sshd runs as
root from a temporary directory with its own host key and config on a free 127.0.0.1 port, and is
stopped by its PID. Logs in with a key (`sftp` needs no password prompt): the runner logs in with
the API key as password on JARVICE, which changes nothing once the session is up.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench import delay_line
from bench.staging_tools import DEFAULT_CIPHER, OLDER, OURS, TOOLS, Server, sshd, timed, via_delay_line

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
# The round trip's cases: what a WAN makes slow (one large file's window; many files' round trips).
CASES["wan-big"] = Case("wan-big", "one 1 GiB file", ((1, 1024 * MIB),))
CASES["wan-small"] = Case("wan-small", "5,000 files of 64 KiB", ((5_000, 64 << 10),))
LOOPBACK_CASES = ("big", "small", "mix")  # what `make bench` runs
QUICK = {
    "big": Case("big", "one 64 MiB file", ((1, 64 * MIB),)),
    "small": Case("small", "500 files of 4 KiB", ((500, 4096),)),
    "mix": Case("mix", "50 x 64 KiB + 5 x 1 MiB + 1 x 16 MiB", ((50, 64 << 10), (5, MIB), (1, 16 * MIB))),
    "wan-big": Case("wan-big", "one 256 MiB file", ((1, 256 * MIB),)),
    "wan-small": Case("wan-small", "500 files of 64 KiB", ((500, 64 << 10),)),
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


# Up into an empty vault directory; down into an empty directory, and over older versions.
DIRECTIONS = ("up", "down", "down-over")


def check_copy(source: Path, copy: Path, tool: str) -> None:
    """The copy holds the source's first and last files' bytes (a tool that wrote elsewhere fails)."""
    names = sorted(str(path.relative_to(source)) for path in source.rglob("*") if path.is_file())
    for name in (names[0], names[-1]):
        # Compared block by block: read whole, a large file would grow this process, whose size a
        # forked client's peak RSS starts from.
        if not (copy / name).is_file() or not filecmp.cmp(source / name, copy / name, shallow=False):
            raise SystemExit(f"{tool} did not bring {name} back into {copy}")


def age_copy(source: Path, into: Path) -> None:
    """A copy of `source` at `into` whose every file is an older version (other bytes, an older time)."""
    shutil.copytree(source, into)
    for directory, _subdirs, names in os.walk(into):
        for name in names:
            path = Path(directory) / name
            with open(path, "r+b") as older:
                older.write(b"older version")
            os.utime(path, (OLDER, OLDER))


def measure_case(server: Server, case: Case, work: Path, *, rounds: int) -> list[Measure]:
    """Each tool up, down, and down over older versions, `rounds` times. The machine is shared and
    its load moves, so the tools take turns going first (rotated round by round), each measure
    starts after a `sync`, and nothing is deleted until the case is done (a deletion's disk work
    would land in the next measure)."""
    source = work / "source"
    source.mkdir(exist_ok=True)
    print(f"  making {case.description}", file=sys.stderr, flush=True)
    files, size = make_case(case, source)
    results: list[Measure] = []
    made: list[Path] = []
    tools = list(TOOLS)
    for round_ in range(rounds):
        order = tools[round_ % len(tools) :] + tools[: round_ % len(tools)]
        for direction in DIRECTIONS:
            for tool in order:
                remote = f"{tool.split()[0]}-{case.name}-{round_}"
                back = work / f"{direction}-{remote}"
                back.mkdir(exist_ok=True)
                made += [back, server.vault / remote]
                if direction == "down-over":
                    age_copy(source / case.name, back / case.name)
                local = source / case.name if direction == "up" else back / case.name
                os.sync()
                seconds, rss = TOOLS[tool](server, direction=direction.split("-")[0], local=local, remote=remote)
                if direction != "up":
                    check_copy(source / case.name, local, tool)
                measure = Measure(tool, case.name, direction, seconds, size, files, rss, round_)
                results.append(measure)
                print(
                    f"  {tool:13s} {direction:9s} {case.name:9s} {seconds:7.1f} s {measure.mib_per_s:7.1f} MiB/s"
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


def paired(results: list[Measure], case: str, direction: str, other: str) -> list[float]:
    """Per round: the other tool's time over the runner's (above 1: the runner is faster)."""
    ratios = []
    for round_ in sorted({m.round for m in results}):
        pair = {m.tool: m.seconds for m in results if (m.case, m.direction, m.round) == (case, direction, round_)}
        if other in pair and OURS in pair:
            ratios.append(pair[other] / pair[OURS])
    return ratios


def table(results: list[Measure]) -> str:
    tools = [tool for tool in TOOLS if any(m.tool == tool for m in results)]
    others = [tool for tool in tools if tool != OURS]
    lines = [
        "| case | direction | "
        + " | ".join(f"{t} (median)" for t in tools)
        + " | "
        + " | ".join(f"{OURS} / {t}: median [min-max]" for t in others)
        + f" | {OURS} peak RSS |",
        "|---|---|" + "---|" * (len(tools) + len(others) + 1),
    ]
    names = {"up": "stage-in", "down": "copy-back", "down-over": "copy-back over older"}
    for case in dict.fromkeys(m.case for m in results):
        for direction in DIRECTIONS:
            mine = [m for m in results if m.case == case and m.direction == direction]
            if not mine:
                continue
            cells = []
            for tool in tools:
                times = [m for m in mine if m.tool == tool]
                middle = statistics.median(m.seconds for m in times)
                cells.append(f"{middle:.1f} s ({times[0].bytes / MIB / middle:.0f} MiB/s)")
            for other in others:
                ratios = paired(results, case, direction, other)
                cells.append(f"**{statistics.median(ratios):.2f}x** [{min(ratios):.2f}-{max(ratios):.2f}]")
            rss = max(m.peak_rss_mb for m in mine if m.tool == OURS)
            lines.append(f"| {case} | {names[direction]} | " + " | ".join(cells) + f" | {rss:.0f} MB |")
    return "\n".join(lines)


def run(
    names: list[str], *, quick: bool, rounds: int = 1, rtt_ms: float = 0.0, cipher: str = DEFAULT_CIPHER
) -> tuple[str, list[Measure]]:
    """Every case in `names` by every tool on one sshd: (the date, the measures)."""
    cases = QUICK if quick else CASES
    unknown = [name for name in names if name not in cases]
    if unknown:
        raise SystemExit(f"unknown staging cases {unknown}: choose from {', '.join(cases)}")
    results: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="nimbix-burst-staging-bench-") as temp:
        work = Path(temp)
        with sshd(work) as direct, contextlib.ExitStack() as stack:
            direct.cipher = cipher
            server = direct
            if rtt_ms > 0:
                server = via_delay_line(direct, stack.enter_context(delay_line.delay_line(direct.port, rtt_ms=rtt_ms)))
            for name in names:
                print(f"== staging: {cases[name].description}", file=sys.stderr, flush=True)
                results += measure_case(server, cases[name], work, rounds=rounds)
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), results


def render(when: str, results: list[Measure], *, rtt_ms: float = 0.0, cipher: str = DEFAULT_CIPHER) -> str:
    path = f"a delay line of {rtt_ms:g} ms round trip" if rtt_ms > 0 else "loopback"
    ciphers = f"every tool with {cipher}" if cipher else "each tool with its own default cipher"
    rounds = len({m.round for m in results})
    heading = (
        f"Staging over {path} to OpenSSH sshd (internal-sftp), {when}, {os.cpu_count()} cores, {ciphers},"
        f" {rounds} rounds (ratios paired by round):"
    )
    return f"{heading}\n\n{table(results)}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.staging")
    parser.add_argument("--quick", action="store_true", help="small cases (a smoke run)")
    parser.add_argument("--cases", default="big,small,mix")
    parser.add_argument("--json", type=Path, default=None, help="write the measures there")
    parser.add_argument("--rounds", type=int, default=5, help="each tool this many times (paired, median)")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="clients reach the sshd through this round trip")
    parser.add_argument("--cipher", default=DEFAULT_CIPHER, help="every tool's cipher ('default': each its own)")
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
    cipher = "" if args.cipher == "default" else args.cipher
    when, results = run(args.cases.split(","), quick=args.quick, rounds=args.rounds, rtt_ms=args.rtt_ms, cipher=cipher)
    print(render(when, results, rtt_ms=args.rtt_ms, cipher=cipher))
    if args.json:
        args.json.write_text(json.dumps({"date": when, "measures": [asdict(m) for m in results]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
