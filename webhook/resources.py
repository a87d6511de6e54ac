"""Resource quantities and Kubernetes' effective pod request rule (pure).

The rule mirrors `PodRequests` in k8s.io/component-helpers/resource/helpers.go:
  A = sum(app containers) + sum(restartable init containers, the native sidecars)
  I = max over regular init containers i of (request_i + sum of sidecars declared before i)
  pod request = max(A, I) + overhead
Requests default from limits for extended resources, and the API server applies that default
before admission, but we read both so a pod is handled the same whichever map we see.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX: Mapping[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


class QuantityError(ValueError):
    pass


def parse_quantity(raw: object) -> Decimal:
    """A Kubernetes resource.Quantity ("500m", "4", "64Gi", 2) as a Decimal."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise QuantityError(f"quantity must be a string or number, got {type(raw).__name__}")
    text = str(raw).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"invalid quantity {text!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation as exc:
        raise QuantityError(f"invalid quantity {text!r}") from exc


def parse_device_count(raw: object) -> int:
    """An extended-resource count. Devices are whole: round up anything fractional."""
    return math.ceil(parse_quantity(raw))


def _container_request(container: Mapping[str, Any], resource: str) -> Decimal:
    resources = container.get("resources") or {}
    for source in ("requests", "limits"):  # requests default from limits
        values = resources.get(source) or {}
        if resource in values:
            return parse_quantity(values[resource])
    return Decimal(0)


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


# Pod-level `spec.resources` replaces the containers' sum for these only (`supportedPodLevelResources`).
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})


def effective_request(spec: Mapping[str, Any], resource: str) -> Decimal:
    """The pod's effective request for one resource, by the kube-scheduler's rule."""
    overhead_map = spec.get("overhead") or {}
    overhead = parse_quantity(overhead_map[resource]) if resource in overhead_map else Decimal(0)
    if resource in POD_LEVEL_RESOURCES and spec.get("resources"):
        pod_level = _container_request(spec, resource) if _has_request(spec, resource) else None
        if pod_level is not None:
            return pod_level + overhead
    app = sum((_container_request(c, resource) for c in spec.get("containers") or ()), Decimal(0))
    sidecars_so_far = Decimal(0)
    largest_init = Decimal(0)
    for init in spec.get("initContainers") or ():
        request = _container_request(init, resource)
        if _is_sidecar(init):
            sidecars_so_far += request
        else:
            largest_init = max(largest_init, request + sidecars_so_far)
    return max(app + sidecars_so_far, largest_init) + overhead


def _has_request(holder: Mapping[str, Any], resource: str) -> bool:
    resources = holder.get("resources") or {}
    return any(resource in (resources.get(source) or {}) for source in ("requests", "limits"))


def requested_resources(spec: Mapping[str, Any]) -> set[str]:
    """Every resource name the pod requests anywhere (containers, pod level, overhead)."""
    names: set[str] = set(spec.get("overhead") or ())
    holders = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ()), spec]
    for holder in holders:
        resources = holder.get("resources") or {}
        for source in ("requests", "limits"):
            names.update(resources.get(source) or ())
    return names


def effective_gpus(spec: Mapping[str, Any], gpu_resources: Sequence[str]) -> dict[str, int]:
    """Effective whole-device request per configured GPU resource; zero counts are omitted."""
    counts: dict[str, int] = {}
    for resource in gpu_resources:
        count = math.ceil(effective_request(spec, resource))
        if count > 0:
            counts[resource] = count
    return counts


def all_containers(spec: Mapping[str, Any]) -> Iterable[tuple[str, int, Mapping[str, Any]]]:
    """(list name, index, container) for containers then initContainers."""
    for list_name in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(list_name) or ()):
            yield list_name, index, container


def format_quantity_cores(cores: Decimal) -> int:
    """Whole cores to ask a remote machine for: at least one."""
    return max(1, math.ceil(cores))
