"""`python -m entrypoint` / `nimbix-burst-run`: the composition root and the only sys.exit.

stdout belongs to the application (local: the child inherits it; remote: the job's output is
streamed to it). The runner's own messages are JSON lines on stderr.
"""

import logging
import os
import random
import signal
import socket
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, NoReturn

import requests
from pythonjsonlogger.json import JsonFormatter

from entrypoint import (
    gang,
    homeward,
    leaving,
    local,
    plan,
    ports,
    remote,
    restart,
    signals,
    staging,
    statefile,
    termination,
)
from entrypoint.remote_settings import Tuning
from entrypoint.settings import Settings, SettingsError, parse_settings
from jarvice import contract, exitcodes
from jarvice.client import JarviceClient, RetryPolicy
from jarvice.redaction import Secret, redact

log = logging.getLogger("entrypoint")

# Signals that cancel a remote run (the local run forwards its own set to the child).
REMOTE_CANCEL_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})


class RedactingJsonFormatter(JsonFormatter):
    """JSON log lines with the API key masked, whatever field or traceback it hides in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secrets: list[str] = []

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record), self.secrets)


class FileKey:
    """The key as its file holds it now: a projected token is refreshed by the kubelet while a job
    runs (its file is replaced); each new value joins the masked secrets before it is used."""

    def __init__(self, path: str, first: Secret, secrets: list[str]) -> None:
        self._path = path
        self._current = first
        self._secrets = secrets
        self._stamp = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        try:
            info = os.stat(self._path)
        except OSError:
            return None
        return (info.st_mtime_ns, info.st_ino)

    def __call__(self) -> Secret:
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            try:
                text = _read_file(self._path).strip()
            except OSError:
                return self._current  # caught mid-replace: the old value, read again next call
            if text:
                self._secrets.append(text)
                self._current, self._stamp = Secret(text), stamp
        return self._current


def configure_logging(level: str) -> RedactingJsonFormatter:
    formatter = RedactingJsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # urllib3 logs full URLs (query string included) at DEBUG; keep it quiet whatever LOG_LEVEL says.
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    return formatter


class StdoutSink:
    """Remote output to our stdout, byte for byte (surrogateescape undoes the lossless decode)."""

    def __init__(self) -> None:
        self._stream = sys.stdout.buffer

    def write(self, lines: Sequence[str]) -> None:
        if not lines:
            return
        self._stream.write("".join(lines).encode("utf-8", errors="surrogateescape"))
        self._stream.flush()


class TerminationFile:
    """The termination message to the file Kubernetes reads (terminationMessagePath), best effort:
    a failure is logged and changes nothing else (the pod's GPUs then stay counted)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, message: str) -> None:
        try:
            Path(self.path).write_text(message, encoding="utf-8")
        except OSError as exc:
            log.warning(
                "cannot write the termination message; the pod's GPUs stay counted until the job is seen ended",
                extra={"path": self.path, "error": str(exc), "variable": contract.ENV_TERMINATION_LOG},
            )


def _read_file(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def open_journal(settings: Settings) -> tuple[ports.Journal, restart.StartDecision]:
    """The restart state of this container and what it means for this start.

    Raises StateDirError when NIMBIX_BURST_STATE_DIR is set but unusable."""
    if settings.state_dir is None:
        log.warning(
            "no restart state directory: a restarted runner re-attaches to a live job by its label, "
            "but cannot tell a crash from a deliberate retry",
            extra={"variable": contract.ENV_STATE_DIR},
        )
        return ports.NoJournal(), remote.FIRST_START
    journal = statefile.StateFile.open(settings.state_dir, container=settings.pod.container)
    try:
        previous = journal.load()
    except restart.StateError as exc:
        # Written atomically, so this is not a torn write: someone else's file. Start afresh.
        log.warning(
            "restart state unreadable; starting as attempt 1", extra={"path": str(journal.path), "error": str(exc)}
        )
        previous = None
    start = restart.decide_start(previous)
    log.info(
        "restart state read",
        extra={"path": str(journal.path), "start": start.kind, "attempt": start.attempt, "reason": start.reason},
    )
    return journal, start


def hold_after_success(start: restart.StartDecision, settings: Settings) -> int:
    """A container restarted after its job succeeded (restartPolicy Always): say so, submit nothing,
    and wait for the stop. Exiting instead would only be restarted again, into a crash loop."""
    assert start.previous is not None
    previous = start.previous
    watched = set(REMOTE_CANCEL_SIGNALS)
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)  # before the log line: no stop can slip past
    log.info(
        "the job already succeeded: not submitting again, waiting to be stopped",
        extra={
            "attempt": previous.attempt,
            "job_label": previous.job_label,
            "job": previous.job_number,
            "exit_code": previous.exit_code,
            "reason": start.reason,
        },
    )
    signum = signal.sigwait(watched)
    log.info("stopped while holding a finished job's result", extra={"signal": signals.signal_name(signum)})
    TerminationFile(settings.termination_log).write(
        termination.build_message(job=previous.job_number, job_may_run=False, exit_code=0)
    )
    return 0


@contextmanager
def open_remote_deps(
    settings: Settings, *, tuning: Tuning, journal: ports.Journal, secrets: list[str], checkpoints: bool
) -> Iterator[ports.RemoteDeps]:
    """The remote run's real dependencies: signals, an HTTP session, the JARVICE client, stdout.
    `checkpoints`: the pod names a checkpoint directory (its annotations as read at start)."""
    assert settings.remote is not None
    creds = settings.remote.credentials
    key_file = settings.remote.apikey_file
    apikey = creds.apikey if key_file is None else FileKey(key_file, creds.apikey, secrets)
    token = signals.CancelToken()
    for sig in REMOTE_CANCEL_SIGNALS:
        signal.signal(sig, lambda signum, _frame: token.request(signum))
    with requests.Session() as session, tempfile.TemporaryDirectory(prefix="nimbix-burst-") as scratch:
        if settings.remote.gateway_ca is not None:
            # The add-on's gateway: its CA, from the webhook, is the only one trusted for it.
            ca_file = Path(scratch) / "gateway-ca.crt"
            ca_file.write_text(settings.remote.gateway_ca + "\n")
            session.verify = str(ca_file)
            # requests lets REQUESTS_CA_BUNDLE (set in many images) override a session's CA; and the
            # gateway is inside the cluster, never behind the image's proxy settings.
            session.trust_env = False
        client = JarviceClient(
            base_url=settings.remote.api_url,
            username=creds.username,
            apikey=apikey,
            session=session,
            connect_timeout=tuning.connect_timeout,
            read_timeout=tuning.read_timeout,
            retry=RetryPolicy(
                base_seconds=tuning.retry_base_seconds,
                cap_seconds=tuning.retry_cap_seconds,
                outage_seconds=tuning.outage_seconds,
            ),
            sleep=time.sleep,
            clock=time.monotonic,
            rng=random.Random(),
        )
        log.info(
            "remote mode",
            extra={"api_url": settings.remote.api_url, "username": creds.username, "credentials_from": creds.source},
        )
        host = urllib.parse.urlsplit(settings.remote.api_url).hostname or ""
        if settings.remote.api_url.startswith("http://") and host not in LOOPBACK_HOSTS:
            log.warning("JARVICE_API_URL is not https: the API key travels unencrypted", extra={"host": host})
        yield ports.RemoteDeps(
            backend=client,
            out=StdoutSink(),
            sleep=time.sleep,
            clock=time.monotonic,
            rng=random.Random(),
            cancel=token,
            journal=journal,
            termination=TerminationFile(settings.termination_log),
            move_mark=move_mark_reader(settings.pod_annotations_file),
            checkpoints=checkpoints,
            apikey=apikey if callable(apikey) else None,
        )


# The API server keeps a pod's annotations within 256 KiB; the kubelet's file quotes them, a little longer.
MAX_POD_ANNOTATIONS_BYTES: Final = 1 << 20


def read_pod_annotations(path: str) -> tuple[dict[str, str], str]:
    """The pod's annotations the kubelet writes into the file the webhook names, and why they were not
    read ("" when they were; {} then). Read no further than the API server's bound allows."""
    try:
        with open(path, "rb") as found:
            data = found.read(MAX_POD_ANNOTATIONS_BYTES + 1)
    except OSError as exc:
        return {}, str(exc.strerror or type(exc).__name__)
    if len(data) > MAX_POD_ANNOTATIONS_BYTES:
        return {}, f"longer than {MAX_POD_ANNOTATIONS_BYTES} bytes: not the pod's annotations"
    return homeward.parse_annotations(data.decode("utf-8", errors="replace")), ""


def pod_annotations(path: str | None) -> dict[str, str]:
    """The pod's annotations ({} without that file, or when it cannot be read)."""
    return read_pod_annotations(path)[0] if path else {}


def start_pod_annotations(path: str | None) -> dict[str, str]:
    """The pod's annotations as its runner starts, read once; when the file is named but not read, said
    once: without it a stopped local pod is not asked for a checkpoint and a burst pod never moves home,
    which nothing else would show (a volume of the pod's own mounted in its place)."""
    if not path:
        return {}
    annotations, problem = read_pod_annotations(path)
    if problem:
        log.warning(
            "pod annotations file not read",
            extra={
                "path": path,
                "reason": f"{problem}; no checkpoint is asked for when the pod is stopped or moved home"
                f" (mount nothing of the pod's own at {contract.POD_INFO_MOUNT_PATH})",
            },
        )
    return annotations


def move_mark_reader(path: str | None) -> Callable[[], int | None]:
    """The controller's move-home mark, read each time from the pod's annotations file (entrypoint.homeward);
    without that file no move home is asked."""
    if not path:
        return ports.no_move_mark
    return lambda: homeward.marked_job(pod_annotations(path))


def run(env: Mapping[str, str], argv: Sequence[str]) -> int:
    formatter = configure_logging("INFO")
    # Mask the key even in a settings error, before the settings (and any *_FILE) are read.
    formatter.secrets.extend(value.strip() for name in ("JARVICE_APIKEY", "APIKEY") if (value := env.get(name)))
    try:
        settings = parse_settings(env, argv=argv, read_file=_read_file, hostname=socket.gethostname())
    except SettingsError as exc:
        log.error("invalid settings", extra={"problems": list(exc.problems)})
        return exitcodes.EXIT_CONFIG
    if settings.remote is not None:
        formatter.secrets.append(settings.remote.credentials.apikey.reveal())
    logging.getLogger().setLevel(settings.log_level)
    annotations = start_pod_annotations(settings.pod_annotations_file)
    if settings.remote is None:
        local_plan = plan.build_plan(settings)
        assert isinstance(local_plan, plan.LocalPlan)
        leave, warning = leaving.plan_leave(annotations, env)
        if warning:
            log.warning("invalid grace period", extra={"reason": warning})
        return local.run_local(local_plan, env=env, leave=leave)
    try:
        journal, start = open_journal(settings)
    except statefile.StateDirError as exc:
        log.error("invalid settings", extra={"problems": [f"{contract.ENV_STATE_DIR}: {exc}"]})
        return exitcodes.EXIT_CONFIG
    if start.kind == "settled":
        return hold_after_success(start, settings)
    if not settings.pod.cluster:
        log.warning(
            "no cluster identity: the orphan reaper will never stop this job",
            extra={"variable": contract.ENV_CLUSTER, "reason": "the pod was not rewritten by the nimbix-burst webhook"},
        )
    remote_plan = plan.build_plan(settings, attempt=start.attempt)
    assert isinstance(remote_plan, plan.RemotePlan)
    grace_warning = termination.build_grace_warning(remote_plan.tuning)
    if grace_warning is not None:
        log.warning("the runner's timeouts exceed the burst pod's grace period", extra={"reason": grace_warning})
    try:
        stage_paths = staging.parse_stage_paths(env)
    except staging.StagingError as exc:
        log.error("invalid settings", extra={"problems": [str(exc)]})
        return exitcodes.EXIT_CONFIG
    with open_remote_deps(
        settings,
        tuning=remote_plan.tuning,
        journal=journal,
        secrets=formatter.secrets,
        checkpoints=homeward.names_checkpoints(annotations),
    ) as base_deps:
        deps = base_deps
        if not stage_paths.empty and not gang.carries_data(remote_plan.gang):
            log.info("data staged by the gang's submitting rank", extra={"paths": len(stage_paths.stage_in)})
        elif not stage_paths.empty:
            # Imported here: SSH (asyncssh, cryptography) costs start-up time and memory that a
            # runner without data to stage should not pay.
            from entrypoint import vault_staging  # noqa: PLC0415

            try:
                remote_plan, deps = vault_staging.attach(env, settings, remote_plan, base_deps, paths=stage_paths)
            except staging.StagingError as exc:
                log.error("invalid settings", extra={"problems": [str(exc)]})
                return exitcodes.EXIT_CONFIG
        return remote.run_remote(remote_plan, deps, start=start)


def main() -> NoReturn:
    try:
        code = run(os.environ, sys.argv[1:])
    except Exception:
        log.exception("runner failed unexpectedly")
        code = exitcodes.EXIT_INTERNAL
    sys.exit(code)


if __name__ == "__main__":
    main()
