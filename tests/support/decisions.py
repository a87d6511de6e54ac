"""A pod's decision through the same path a review takes: its GPU and compute requests, its
placement rules, and the cache the watch fills (the tests drive the cache with CacheSync)."""

from __future__ import annotations

from typing import Any

from webhook.admission import decide_placement
from webhook.model import parse_placement, pod_compute, pod_gpus
from webhook.sync import CacheSync
from webhook.types import Decision


def decide_pod(sync: CacheSync, raw: dict[str, Any]) -> Decision:
    spec = raw["spec"]
    requests = {**pod_gpus(spec, sync.cache.gpu_resources), **pod_compute(spec)}
    return decide_placement(requests, parse_placement(spec), sync.cache)
