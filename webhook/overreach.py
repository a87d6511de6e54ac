"""Warnings for burst containers whose env asks for more GPUs than the budget counts for them (pure).

The runner refuses such a machine (nothing submitted); the webhook says so at admission, with what
to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jarvice import contract
from webhook.resources import container_gpus
from webhook.rewrite_terms import RewritePolicy

ENV_NODES = "JARVICE_NODES"  # the runner's (entrypoint.remote_settings): how many machines the job spans


def env_gpus(env: Sequence[Mapping[str, Any]], *, default_gpus: int) -> int | None:
    """GPUs a runner's env asks for, all nodes together: NUM_GPUS (`default_gpus`, the container's own
    count, when unset: the rewrite sets that) x JARVICE_NODES (default 1). None when it cannot be
    known here (a valueFrom) or the runner rejects the value itself (not a whole number)."""
    values: dict[str, object] = {}
    for item in env:  # the last duplicate is the one in effect
        name = item.get("name")
        if name in (contract.ENV_NUM_GPUS, ENV_NODES):
            values[str(name)] = item["value"] if "value" in item and "valueFrom" not in item else None
    gpus = _whole(values.get(contract.ENV_NUM_GPUS, str(default_gpus)), minimum=0)
    nodes = _whole(values.get(ENV_NODES, "1"), minimum=1)
    return None if gpus is None or nodes is None else gpus * nodes


def _whole(value: object, *, minimum: int) -> int | None:
    text = value.strip() if isinstance(value, str) else ""
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        return None
    number = int(text)
    return number if number >= minimum else None


def build_overreach_warnings(spec: Mapping[str, Any], *, policy: RewritePolicy) -> list[str]:
    """A warning per burst container whose env asks for more GPUs than the budget counts for it: its
    runner will refuse the machine (nothing submitted), so say so now, with what to change."""
    warnings = []
    for container in spec.get("containers") or ():
        counted = container_gpus(container, policy.gpu_resources)
        asked = env_gpus(container.get("env") or (), default_gpus=counted) if counted else None
        if asked is not None and asked > counted:
            warnings.append(
                f"nimbix-burst: container {container.get('name', '')}: NUM_GPUS x JARVICE_NODES = {asked} > its"
                f" {counted} GPU(s); the runner will refuse it: lower them or request {asked} GPUs"
            )
    return warnings
