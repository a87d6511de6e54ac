"""Names shared by the webhook and the runner: the only module the webhook imports from here.

The webhook writes these onto a pod; the runner reads them from its environment. Keeping both
sides on one definition is what makes a rewritten pod runnable.
"""

from typing import Final

# The label that opts a pod in (the original design's label, kept for compatibility).
LABEL_TASK_TYPE: Final = "task-type"
LABEL_TASK_TYPE_VALUE: Final = "Nimbix"

# Environment the webhook sets on a rewritten pod.
ENV_REMOTE: Final = "REMOTE"
ENV_NUM_GPUS: Final = "NUM_GPUS"
ENV_NUM_CPUS: Final = "NUM_CPUS"

# Annotations recording the decision; the prefix marks them as ours.
ANNOTATION_PREFIX: Final = "nimbix-burst.io/"
ANNOTATION_DECISION: Final = ANNOTATION_PREFIX + "decision"
ANNOTATION_REASON: Final = ANNOTATION_PREFIX + "reason"
ANNOTATION_ORIGINAL_RESOURCES: Final = ANNOTATION_PREFIX + "original-resources"
ANNOTATION_CANDIDATES: Final = ANNOTATION_PREFIX + "candidate-nodes"
# Set on pods admitted as local: lets the cache release the GPUs it reserved for this admission
# the moment the pod appears (its name and UID do not exist yet at admission time).
ANNOTATION_RESERVATION: Final = ANNOTATION_PREFIX + "reservation"

DECISION_LOCAL: Final = "local"
DECISION_REMOTE: Final = "remote"

# Per-container bursting: the webhook names the container a runner runs in (part of its job label,
# so two burst containers of one pod never share a JARVICE job) and gives it the pod's identity
# from the downward API when the pod does not already.
ENV_CONTAINER_NAME: Final = "NIMBIX_BURST_CONTAINER"
ENV_POD_UID: Final = "POD_UID"
ENV_POD_NAMESPACE: Final = "POD_NAMESPACE"
ENV_POD_NAME: Final = "POD_NAME"

# A small volume that outlives container restarts within the pod (an emptyDir): the runner keeps
# its job's state there, so a runner restarted before it reported a result picks that job up again
# instead of submitting it twice, and one restarted after reporting a failure retries on purpose.
ENV_STATE_DIR: Final = "NIMBIX_BURST_STATE_DIR"
STATE_VOLUME_NAME: Final = "nimbix-burst-state"
STATE_MOUNT_PATH: Final = "/var/run/nimbix-burst"
STATE_VOLUME_SIZE_LIMIT: Final = "1Mi"
