"""The runner's part of a move home (pure): the controller's mark read from the pod's annotations, and
the exit that tells the Job to create the replacement.

The controller marks the pod (`nimbix-burst.io/move-home: <job number>`, controller.moving); the kubelet
writes the pod's annotations into the file the webhook mounts on every burst container (the downward API,
named by NIMBIX_BURST_POD_ANNOTATIONS_FILE); while the job runs, the runner
sees the mark naming its job and asks the job for a checkpoint (SIGUSR1, through `/jarvice/signal` and
the image's JARVICE_SIGNAL_OVERRIDE). The program writes its checkpoint and exits 0, the job ends
COMPLETED, the runner copies the data back (the normal stage-out) and exits EXIT_MOVED_HOME, which the
Job's podFailurePolicy ignores: the Job creates the replacement, which resumes from the checkpoint.
"""

from __future__ import annotations

import json
import signal
from typing import Final

from jarvice import contract
from jarvice.checkpoint import ANNOTATION_CHECKPOINT_DIR
from jarvice.exitcodes import EXIT_MOVED_HOME, EXIT_OK
from jarvice.model import parse_job_number

# What the job's program gets (through the image's JARVICE_SIGNAL_OVERRIDE script): write a checkpoint
# and exit 0 (the checkpoint contract).
CHECKPOINT_SIGNAL: Final = int(signal.SIGUSR1)


def parse_annotations(text: str) -> dict[str, str]:
    """The downward API's annotations file: one `key="value"` a line, the value quoted as Go quotes
    strings (JSON's escapes for what annotations hold). Lines that are not that shape are skipped."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, quoted = line.partition("=")
        if not sep or not quoted.startswith('"'):
            continue
        try:
            value = json.loads(quoted)
        except ValueError:
            continue
        if isinstance(value, str):
            found[key] = value
    return found


def marked_job(annotations: dict[str, str]) -> int | None:
    """The JARVICE job the controller's move-home mark names (None: no mark, or not a job number)."""
    return parse_job_number(annotations.get(contract.ANNOTATION_MOVE_HOME))


def final_exit(code: int, *, asked: bool, staged_out: bool) -> int:
    """The runner's exit once the job ended and the data was staged out: a move home's when it asked
    the job for a checkpoint, the job ended well (0) and the data came back; else `code` as it is."""
    return EXIT_MOVED_HOME if asked and staged_out and code == EXIT_OK else code


# Put before a checkpointing pod's job command: the job's shell records the job's process group when it
# leads one (as a catalogue application's command does; the base image's run command records it itself)
# for the image's JARVICE_SIGNAL_OVERRIDE (nimbix-burst-signal), and traps SIGUSR1 with a no-op so that
# only the program acts on it (a trap, unlike an ignored signal, is not inherited).
SIGNAL_PRELUDE: Final = (
    'if [ "$(cut -d " " -f 5 /proc/$$/stat 2>/dev/null)" = "$$" ]; then'
    ' mkdir -p "${HOME:-/tmp}/.nimbix-burst" && echo "$$" > "${HOME:-/tmp}/.nimbix-burst/job-pgid"; fi\n'
    "trap : USR1\n"
)


def names_checkpoints(annotations: dict[str, str]) -> bool:
    """Whether the pod names a checkpoint directory (the checkpoint contract): its job may move home."""
    return bool(annotations.get(ANNOTATION_CHECKPOINT_DIR, "").strip())


def with_signal_prelude(command: str) -> str:
    return SIGNAL_PRELUDE + command
