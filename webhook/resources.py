"""Resource quantities and Kubernetes' effective pod request rule (pure).

The rule mirrors `PodRequests` in k8s.io/component-helpers/resource/helpers.go:
  A = sum(app containers) + sum(restartable init containers, the native sidecars)
  I = max over regular init containers i of (request_i + sum of sidecars declared before i)
  pod request = max(A, I) + overhead
Requests default from limits for extended resources, and the API server applies that default
before admission, but we read both so a pod is handled the same whichever map we see.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from typing import Any

# Kubernetes' quantity grammar (k8s.io/apimachinery resource.Quantity): sign, digits with an optional
# fraction, then a binary-SI suffix, a decimal-SI suffix or a decimal exponent. Parsed by hand so an
# absurd value is recognised from its digit count and exponent, never by building the number.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?"
)
_DECIMAL_SUFFIX_EXPONENT: Mapping[str, int] = {
    "": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_BINARY_SUFFIX: Mapping[str, int] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
# Kubernetes caps a quantity's magnitude at 2^63-1 (resource.Quantity: "no quantity may represent a
# number greater than 2^63-1 in magnitude ... will be capped"). No node has that many of anything, so
# a capped GPU, CPU or memory request is simply one no node can host, and it costs nothing to compute.
QUANTITY_CEILING = Decimal(2**63 - 1)
_CEILING_DIGITS = 19  # 1e19 > 2^63-1: a value whose leading digit sits at 10^19 or above is capped
# ... nor be more precise than a nano-unit: finer digits round up, as the API server's "0.1m" -> "1m".
_FINEST_EXPONENT = -9
# The API server reads an exponent as an int64; a longer one is beyond any cap (or below any nano-unit)
# whatever the digits before it, since a body holds far fewer than 10^18 of them. int() on it would
# cost time (or raise past Python's 4300-digit limit) for nothing.
_MAX_EXPONENT_DIGITS = 18
_HUGE_EXPONENT = 10**_MAX_EXPONENT_DIGITS
# Enough precision for every value below the cap down to a nano-unit (19 + 9 digits), times 2^60.
_EXACT = Context(prec=64, Emax=MAX_EMAX, Emin=MIN_EMIN)
_QUANTITY_EXAMPLES = "e.g. 1, 500m, 1.5, 64Gi, 2e3"
_ZERO = Decimal(0)  # Decimals are immutable: one zero serves every sum


class QuantityError(ValueError):
    pass


# Pods and nodes repeat a few dozen quantity strings ("1", "500m", "64Gi") and every review and pod
# event parses several of them: parsing was ~25 % of admit() (issue 15). A module-level lru_cache is
# the one exception to "no singletons" here because it memoizes a pure function of an immutable str
# (the results are the parser's own, and Decimals are immutable), is thread-safe (the watch threads
# parse too), and is bounded twice: in entries, and in key length, so hostile input can neither grow
# it nor fill it with long keys. Errors are not cached: a bad quantity raises the same error each time.
QUANTITY_MEMO_ENTRIES = 4096
QUANTITY_MEMO_MAX_CHARS = 32  # real quantities ("3758096384", "15940432Ki", "1.5Gi") are far shorter


def parse_quantity(raw: object) -> Decimal:
    """A Kubernetes resource.Quantity ("500m", "4", "64Gi", 2) as a Decimal, capped at
    ±QUANTITY_CEILING and rounded up to a nano-unit like the API server does: bounded work whatever
    the input (a "1e299999" from a user's pod must not stall the event loop)."""
    if type(raw) is str and len(raw) <= QUANTITY_MEMO_MAX_CHARS:
        return _parse_short_text(raw)
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise QuantityError(f"quantity must be a string or number, got {type(raw).__name__}")
    if isinstance(raw, int):
        return max(-QUANTITY_CEILING, min(Decimal(raw), QUANTITY_CEILING))  # exact and cheap for any int
    if isinstance(raw, float) and not math.isfinite(raw):
        raise QuantityError(f"invalid quantity {raw!r} ({_QUANTITY_EXAMPLES})")
    return _parse_text(str(raw))


def _parse_text(raw: str) -> Decimal:
    text = raw.strip()
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise QuantityError(f"invalid quantity {shown!r} ({_QUANTITY_EXAMPLES})")
    suffix = match["suffix"] or ""
    exponent = _DECIMAL_SUFFIX_EXPONENT.get(suffix, 0) + _parse_exponent(match["exp"] or "0")
    magnitude = _bounded_magnitude(match["int"], match["frac"] or "", exponent)
    if suffix in _BINARY_SUFFIX:
        magnitude = min(_EXACT.multiply(magnitude, Decimal(_BINARY_SUFFIX[suffix])), QUANTITY_CEILING)
    return -magnitude if match["sign"] == "-" else magnitude


_parse_short_text = functools.lru_cache(maxsize=QUANTITY_MEMO_ENTRIES)(_parse_text)


def _first_nonzero(digits: str) -> int:
    """Index of the first digit 1-9, or -1. Nine str.find scans run at memchr speed: str.lstrip("0")
    and a regex search both take 120-150 ms on the 8 MB of zeros a body may hold."""
    found = [i for i in map(digits.find, "123456789") if i >= 0]
    return min(found) if found else -1


def _significant(digits: str) -> str:
    """The digits without leading zeros ("" for zero)."""
    first = _first_nonzero(digits)
    return digits[first:] if first >= 0 else ""


def _parse_exponent(text: str) -> int:
    digits = _significant(text.lstrip("+-")) or "0"
    value = int(digits) if len(digits) <= _MAX_EXPONENT_DIGITS else _HUGE_EXPONENT
    return -value if text.startswith("-") else value


def _bounded_magnitude(int_digits: str, frac_digits: str, exponent: int) -> Decimal:
    """|int_digits.frac_digits| x 10^exponent, capped and rounded up to a nano-unit, without ever
    building more than the ~28 digits that survive."""
    digits = _significant(int_digits + frac_digits)
    if not digits:
        return Decimal(0)
    last_exponent = exponent - len(frac_digits)  # the power of ten of the last digit
    if len(digits) - 1 + last_exponent >= _CEILING_DIGITS:
        return QUANTITY_CEILING
    dropped = min(len(digits), max(0, _FINEST_EXPONENT - last_exponent))
    kept, rest = digits[: len(digits) - dropped], digits[len(digits) - dropped :]
    coefficient = int(kept or "0") + (1 if _first_nonzero(rest) >= 0 else 0)
    value = Decimal(coefficient).scaleb(max(last_exponent, _FINEST_EXPONENT), _EXACT)
    return min(value, QUANTITY_CEILING)


def parse_device_count(raw: object) -> int:
    """An extended-resource count. Devices are whole: round up anything fractional."""
    return math.ceil(parse_quantity(raw))


def _container_request(container: Mapping[str, Any], resource: str) -> Decimal:
    resources = container.get("resources") or {}
    for source in ("requests", "limits"):  # requests default from limits
        values = resources.get(source) or {}
        if resource in values:
            return parse_quantity(values[resource])
    return _ZERO


def _is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


# Pod-level `spec.resources` replaces the containers' sum for these only (`supportedPodLevelResources`).
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})


def effective_request(spec: Mapping[str, Any], resource: str) -> Decimal:
    """The pod's effective request for one resource, by the kube-scheduler's rule."""
    overhead_map = spec.get("overhead") or {}
    overhead = parse_quantity(overhead_map[resource]) if resource in overhead_map else _ZERO
    if resource in POD_LEVEL_RESOURCES and spec.get("resources"):
        pod_level = _container_request(spec, resource) if _has_request(spec, resource) else None
        if pod_level is not None:
            return pod_level + overhead
    # A plain loop, not sum() over a generator: the same additions in the same order, and 15 % off
    # parsing a watched pod (this runs five times per pod event and per review; issue 15).
    app = _ZERO
    for container in spec.get("containers") or ():
        app = app + _container_request(container, resource)
    sidecars_so_far = largest_init = _ZERO
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


def container_quantity(container: Mapping[str, Any], resource: str) -> Decimal:
    """The container's own request (requests default from limits); 0 when absent or unreadable."""
    resources = container.get("resources") or {}
    for source in ("requests", "limits"):
        values = resources.get(source) or {}
        if resource in values:
            try:
                return parse_quantity(values[resource])
            except QuantityError:
                return _ZERO  # admission already rejected unreadable quantities; never guess high
    return _ZERO


def container_gpus(container: Mapping[str, Any], gpu_resources: Sequence[str]) -> int:
    """The machine one runner asks for: the largest of its own GPU counts (devices are whole)."""
    counts = []
    for resource in gpu_resources:
        quantity = container_quantity(container, resource)
        # Rounding a Decimal up is slow, compiled too; most resources are absent (0) on most containers.
        counts.append(math.ceil(quantity) if quantity else 0)
    return max(counts, default=0)


def burst_container_names(spec: Mapping[str, Any], gpu_resources: Sequence[str]) -> tuple[str, ...]:
    """The app containers a remote decision bursts: those asking for GPUs (init containers stay here)."""
    names: list[str] = []
    for container in spec.get("containers") or ():
        # A plain loop: this runs on every review (container_gpus > 0 iff some GPU quantity is).
        for resource in gpu_resources:
            if container_quantity(container, resource) > 0:
                names.append(str(container.get("name", "")))
                break
    return tuple(names)


def format_quantity_cores(cores: Decimal) -> int:
    """Whole cores to ask a remote machine for: at least one."""
    return max(1, math.ceil(cores))
