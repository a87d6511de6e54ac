"""The minimal webhooks the pod CREATE phase compares ours with (issue 15), and the benchmark's Go programs.

- `go`: `bench/gowebhook/` (standard library only), built with the local Go toolchain into
  ${NIMBIX_BURST_CACHE:-~/.cache/nimbix-burst}/gowebhook/<hash of go version and sources>/ (a cache
  hit costs nothing), as is the Go load generator `bench/goloadgen/`;
- `aiohttp`: `python -m bench.limit_server`'s `/admit` (same aiohttp + TLS stack as the webhook).
Both decode the review, echo its uid and add one fixed label. Each is started by PID with a serving
certificate from its own CA and stopped by PID.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from devplatform.cluster import addons
from devplatform.cluster.processes import free_port, start_process
from devplatform.images import default_cache_dir

BENCH_DIR = Path(__file__).resolve().parent
GO_BUILD_TIMEOUT_SECONDS = 300.0
# The label the minimal webhooks add: its presence in a created pod shows which one answered.
MINIMAL_LABEL = b"bench.nimbix-burst.io/minimal"


def ensure_go_binary(name: str) -> Path:
    """bench/<name>/ built, rebuilt only when the Go version or a source file changes."""
    source_dir = BENCH_DIR / name
    go_version = subprocess.run(
        ["go", "version"], capture_output=True, text=True, check=True, env={**os.environ, "GOTOOLCHAIN": "local"}
    ).stdout
    digest = hashlib.sha256(go_version.encode())
    for path in sorted(source_dir.iterdir()):
        if path.suffix in (".go", ".mod"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    binary = default_cache_dir() / name / digest.hexdigest()[:16] / name
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    subprocess.run(
        ["go", "build", "-trimpath", "-o", str(partial), "."],
        cwd=source_dir,
        env={**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
        check=True,
        timeout=GO_BUILD_TIMEOUT_SECONDS,
    )
    partial.replace(binary)
    return binary


def start(kind: str, run_dir: Path) -> tuple[addons.WebhookProcess, str]:
    """`kind`: "go" or "aiohttp". Returns the process and its mutate URL once /readyz answers."""
    tls_dir = run_dir / f"{kind}-tls"
    ca = addons.make_webhook_tls(tls_dir)
    port = free_port()
    if kind == "go":
        argv = [
            str(ensure_go_binary("gowebhook")), "-addr", f"127.0.0.1:{port}",
            "-cert", str(tls_dir / "tls.crt"), "-key", str(tls_dir / "tls.key"),
        ]  # fmt: skip
        path = "/mutate"
    else:
        argv = [sys.executable, "-m", "bench.limit_server", "--port", str(port), "--tls-dir", str(tls_dir)]
        path = "/admit"
    process = start_process(f"minimal-{kind}", argv, log_path=run_dir / "logs" / f"minimal-{kind}.log")
    webhook = addons.WebhookProcess(process=process, url=f"https://127.0.0.1:{port}", ca=ca, tls_dir=tls_dir)
    addons.wait_ready(webhook)
    return webhook, webhook.url + path
