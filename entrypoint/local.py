"""The local run: the command as a child process, signals forwarded, its exit status mirrored."""

import logging
import shutil
import signal
import subprocess
from collections.abc import Mapping
from types import FrameType
from typing import Final

from entrypoint import plan
from jarvice import exitcodes

log = logging.getLogger(__name__)

# What `kubectl delete pod`, Ctrl-C, a closed terminal and Ctrl-\ send; all go to the child.
FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
NVIDIA_SMI_TIMEOUT_SECONDS: Final = 10.0


def fetch_nvidia_smi_listing() -> str | None:
    """`nvidia-smi -L` output, or None when the tool is absent or fails."""
    path = shutil.which("nvidia-smi")
    if path is None:
        return None
    try:
        result = subprocess.run(
            [path, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def warn_if_gpus_missing(*, requested: int | None, env: Mapping[str, str]) -> None:
    if requested is None or requested <= 0:
        return
    visible = plan.count_visible_gpus(nvidia_smi_output=fetch_nvidia_smi_listing(), env=env)
    warning = plan.build_gpu_warning(requested=requested, visible=visible)
    if warning:
        log.warning(warning, extra={"requested_gpus": requested, "visible_gpus": visible})


def run_local(local_plan: plan.LocalPlan, *, env: Mapping[str, str]) -> int:
    warn_if_gpus_missing(requested=local_plan.num_gpus, env=env)
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)  # arrived before the child existed: deliver once it does
        elif child.returncode is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        try:
            child = subprocess.Popen(local_plan.argv)
        except FileNotFoundError:
            log.error("command not found", extra={"command": local_plan.argv[0]})
            return exitcodes.EXIT_COMMAND_NOT_FOUND
        except PermissionError:
            log.error("command not executable", extra={"command": local_plan.argv[0]})
            return exitcodes.EXIT_COMMAND_NOT_EXECUTABLE
        log.debug("command started", extra={"pid": child.pid})
        for signum in pending:
            child.send_signal(signum)
        returncode = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = exitcodes.from_returncode(returncode)
    log.debug("command exited", extra={"returncode": returncode, "exit_code": code})
    return code
