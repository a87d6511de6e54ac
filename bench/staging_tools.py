"""The staging benchmark's sshd and the clients it measures (bench.staging): a real OpenSSH sshd
serving internal-sftp on 127.0.0.1 (reached directly or through a delay line), OpenSSH's `sftp`,
`lftp mirror --parallel`, and the runner's own code (bench.staging_client), each a fresh process
whose wall time and peak RSS are measured."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SFTP = "/usr/bin/sftp"
SSH = "/usr/bin/ssh"
LFTP = "/usr/bin/lftp"
# lftp's files in flight (`mirror --parallel`), as many as the runner's.
LFTP_PARALLEL = 16
DEFAULT_CIPHER = "aes128-gcm@openssh.com"
OLDER = 1_500_000_000  # the older versions' modification time
SSH_KEYGEN = "/usr/bin/ssh-keygen"
START_TIMEOUT_SECONDS = 10.0
RUN_TIMEOUT_SECONDS = 1800.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    port: int  # where the clients connect: the sshd, or the delay line before it
    key: Path
    known_hosts: Path
    vault: Path
    cipher: str = DEFAULT_CIPHER  # "" : each tool's own default


def via_delay_line(server: Server, port: int) -> Server:
    """The same sshd reached through a delay line at `port` (its host key known there too)."""
    line = server.known_hosts.read_text().split("\n", 1)[0].split(" ", 1)[1]
    server.known_hosts.write_text(server.known_hosts.read_text() + f"[127.0.0.1]:{port} {line}\n")
    return Server(port, server.key, server.known_hosts, server.vault, server.cipher)


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
        f"UsePAM no\nPasswordAuthentication no\nSubsystem sftp internal-sftp\nMaxStartups 200\nMaxSessions 200\n"
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


def timed(argv: list[str], *, stdin: str | None = None, cwd: Path | None = None) -> tuple[float, float]:
    """Wall seconds and the peak RSS (MB) of a child process run to completion (in `cwd`: its code's tree)."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=cwd
        )
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


def _ssh_options(server: Server) -> list[str]:
    options = [
        "-i",
        str(server.key),
        "-o",
        f"UserKnownHostsFile={server.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
    ]
    return options + (["-o", f"Ciphers={server.cipher}"] if server.cipher else [])


def run_openssh(server: Server, *, direction: str, local: Path, remote: str) -> tuple[float, float]:
    if direction == "down":  # into the directory whether it exists (older versions) or not yet
        local.mkdir(exist_ok=True)
    command = f"put -r {local} {remote}" if direction == "up" else f"get -r {remote}/* {local}/"
    argv = [SFTP, "-q", "-b", "-", "-P", str(server.port), *_ssh_options(server), "root@127.0.0.1"]
    return timed(argv, stdin=command + "\n")


def run_lftp(server: Server, *, direction: str, local: Path, remote: str) -> tuple[float, float]:
    """lftp's mirror, LFTP_PARALLEL files at once, over OpenSSH's ssh (the same cipher)."""
    connect = " ".join([SSH, "-a", "-x", *_ssh_options(server)])
    mirror = (
        f"mirror -R --parallel={LFTP_PARALLEL} {local} {remote}"
        if direction == "up"
        else (f"mirror --parallel={LFTP_PARALLEL} {remote} {local}")
    )
    script = (
        f"set sftp:connect-program '{connect}'; set net:max-retries 1; set cmd:fail-exit yes;"
        f" open -u root, -p {server.port} sftp://127.0.0.1; {mirror}; bye"
    )
    return timed([LFTP, "-c", script])


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
                "cipher": server.cipher,
            }
        ),
    ]
    return timed(argv)


TOOLS = {"openssh sftp": run_openssh, "lftp mirror": run_lftp, "nimbix-burst": run_ours}
OURS = "nimbix-burst"
