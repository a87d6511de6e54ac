"""GPU nodes as clusters mark them: the extended resource, and the taint a GPU pool carries with the
toleration a GPU pod brings (so pods without one stay off those nodes)."""

from __future__ import annotations

from typing import Any

GPU = "nvidia.com/gpu"
GPU_TAINT: dict[str, Any] = {"key": GPU, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION: dict[str, Any] = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
