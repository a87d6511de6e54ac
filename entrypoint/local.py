"""The local run: the command as a child process, signals forwarded, its exit status mirrored."""

import logging
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Final

from entrypoint import leaving, plan
from jarvice import exitcodes

log = logging.getLogger(__name__)

# What `kubectl delete pod`, Ctrl-C, a closed terminal and Ctrl-\ send; all go to the child.
FORWARDED_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
NVIDIA_SMI_TIMEOUT_SECONDS: Final = 10.0
# How often a runner waiting for a checkpoint looks whether the program is past its time.
LEAVE_POLL_SECONDS: Final = 0.5


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


def run_local(
    local_plan: plan.LocalPlan,
    *,
    env: Mapping[str, str],
    leave: leaving.LeavePlan | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run the command, passing signals on; with `leave` (the pod keeps the checkpoint contract), the first
    SIGTERM asks the program for a checkpoint instead (entrypoint.leaving)."""
    warn_if_gpus_missing(requested=local_plan.num_gpus, env=env)
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []
    asked_at: list[float] = []  # when the checkpoint was asked for (at most one entry)

    def forward(signum: int, _frame: FrameType | None) -> None:
        action = leaving.forward(signum, plan=leave, asked=bool(asked_at))
        if action.asked and not asked_at:
            asked_at.append(clock())
            log.info("asked the program for a checkpoint before it stops", extra={"signal": signum})
        if child is None:
            pending.append(action.signum)  # arrived before the child existed: deliver once it does
        elif child.returncode is None:
            child.send_signal(action.signum)

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
        returncode = child.wait() if leave is None else _wait_leaving(child, leave, asked_at, clock)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = exitcodes.from_returncode(returncode)
    log.debug("command exited", extra={"returncode": returncode, "exit_code": code})
    final = leaving.final_exit(code, asked=bool(asked_at))
    if final != code:
        log.info("left with a checkpoint: the Job's next pod resumes from it", extra={"exit_code": final})
    return final


def _wait_leaving(
    child: subprocess.Popen[bytes], leave: leaving.LeavePlan, asked_at: list[float], clock: Callable[[], float]
) -> int:
    """Wait for the program; once a checkpoint was asked for and it has not exited by the leave plan's
    `stop_after`, send it SIGTERM, so it may stop before the kubelet's SIGKILL."""
    stopped = False
    while True:
        try:
            return child.wait(timeout=LEAVE_POLL_SECONDS)
        except subprocess.TimeoutExpired:
            if asked_at and not stopped and clock() - asked_at[0] >= leave.stop_after:
                log.warning("no checkpoint in time: telling the program to stop", extra={"seconds": leave.stop_after})
                child.send_signal(leaving.STOP_SIGNAL)
                stopped = True
