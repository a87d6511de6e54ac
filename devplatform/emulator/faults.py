"""The fault plan of /jarvice/ requests: counters of faults still to inject, and which one a request
draws. Plain data and rules, no I/O: fault_injection.py applies the plan to requests."""

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

FAULT_KINDS: Final = ("drop", "status503", "status429", "status500", "html", "status401", "status404")
# Faults of /jarvice/submit that come after the job was created (the outcome the runner cannot see).
AFTER_SUBMIT_FAULTS: Final = ("drop_after_submit", "status502_after_submit")
# Endpoints that faults never hit unless named explicitly (they are probes, not API calls).
PROBES: Final = frozenset({"live", "ready"})


@dataclass
class Faults:
    """Counters of faults still to inject. Each /jarvice/ request (filtered by `endpoints`) draws
    one fault with probability `rate` from the non-empty counters; `latency_ms` delays requests
    (the next `latency_requests` of them, or all while set when that is None)."""

    drop: int = 0
    status503: int = 0
    status429: int = 0
    status500: int = 0
    # Answers that are not transient by their look (the runner must still not abandon its job):
    # a 200 HTML page (a proxy), 401 (an auth backend hiccup), 404 "Job not found".
    html: int = 0
    status401: int = 0
    status404: int = 0
    drop_after_submit: int = 0
    # Creates the job, then answers 502 Bad Gateway (a gateway that gave up waiting on JARVICE).
    status502_after_submit: int = 0
    latency_ms: float = 0.0
    latency_requests: int | None = None
    rate: float = 1.0
    endpoints: frozenset[str] | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "Faults":
        unknown = set(raw) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise ValueError(f"unknown fault keys: {sorted(unknown)}")
        endpoints = raw.get("endpoints")
        faults = cls(
            # A flag counts as one (`"drop_after_submit": true`): int(True) is 1.
            **{kind: _whole(raw, kind) for kind in (*FAULT_KINDS, *AFTER_SUBMIT_FAULTS)},
            latency_ms=_number(raw, "latency_ms", 0.0),
            latency_requests=None if raw.get("latency_requests") is None else _whole(raw, "latency_requests"),
            rate=_number(raw, "rate", 1.0),
            endpoints=None if endpoints is None else frozenset(str(e) for e in endpoints),
        )
        if not 0.0 <= faults.rate <= 1.0:
            raise ValueError("rate must be within [0, 1]")
        negative = sorted(kind for kind in (*FAULT_KINDS, *AFTER_SUBMIT_FAULTS) if getattr(faults, kind) < 0)
        if negative:
            raise ValueError(f"fault counts must be >= 0: {negative}")
        return faults

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["endpoints"] = None if self.endpoints is None else sorted(self.endpoints)
        return data

    def applies(self, endpoint: str) -> bool:
        if self.endpoints is not None:
            return endpoint in self.endpoints
        return endpoint not in PROBES

    def take_latency(self) -> float:
        if self.latency_ms <= 0:
            return 0.0
        if self.latency_requests is not None:
            if self.latency_requests <= 0:
                return 0.0
            self.latency_requests -= 1
        return self.latency_ms / 1000

    def take(self, rng: random.Random) -> str | None:
        available = [kind for kind in FAULT_KINDS if getattr(self, kind) > 0]
        if not available or rng.random() >= self.rate:
            return None
        kind = rng.choice(available)
        setattr(self, kind, getattr(self, kind) - 1)
        return kind


def _whole(raw: Mapping[str, Any], key: str) -> int:
    value = raw.get(key, 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a whole number, got {value!r}") from None


def _number(raw: Mapping[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, got {value!r}") from None
