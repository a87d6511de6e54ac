"""The cluster identity the reaper acts for, read once at start (I/O shell around `contract`).

`contract.cluster_identity` makes it from the `kube-system` namespace's UID (which lives as long
as the cluster) and the optional `--cluster-name`; the webhook makes the same value from the same
inputs and gives it to every runner, whose job labels carry it. The reaper cannot tell its jobs
from another cluster's without it, so it waits for it: one GET per attempt, retried with backoff
for as long as it takes, each failure logged with what to fix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from controller.kube import Forbidden
from jarvice import contract

log = logging.getLogger(__name__)

KUBE_SYSTEM = "kube-system"
# A missing RBAC rule or an API server outage is not fixed in a second: back off to one attempt a
# minute, so the log shows the problem without flooding.
BACKOFF_START, BACKOFF_CAP = 1.0, 60.0


async def resolve_cluster_identity(
    read_namespace_uid: Callable[[str], str],
    *,
    name: str,
    on_failure: Callable[[], None] = lambda: None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> str:
    """`read_namespace_uid` is synchronous (the kubernetes client): it runs in a worker thread."""
    delay = BACKOFF_START
    while True:
        try:
            uid = await asyncio.to_thread(read_namespace_uid, KUBE_SYSTEM)
            return contract.cluster_identity(uid, name)
        except Forbidden as exc:
            log.error(
                "cluster identity not read: the orphan reaper waits",
                extra={
                    "namespace": KUBE_SYSTEM,
                    "error": str(exc),
                    "fix": "grant the controller's ServiceAccount get on namespaces (deploy/controller.yaml)",
                    "retry_in": delay,
                },
            )
        except Exception as exc:  # noqa: BLE001 - an outage or a bad answer: retry, the reaper waits
            log.warning(
                "cluster identity not read: the orphan reaper waits",
                extra={"namespace": KUBE_SYSTEM, "error": str(exc)[:500], "retry_in": delay},
            )
        on_failure()
        await sleep(delay)
        delay = min(delay * 2, BACKOFF_CAP)
