"""Summaries of latency samples (pure)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TypedDict


class LatencySummary(TypedDict):
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 for no values)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarize_seconds(samples: Sequence[float]) -> LatencySummary:
    """Latency samples in seconds -> count and percentiles in milliseconds (3 decimals)."""
    values = sorted(samples)

    def ms(value: float) -> float:
        return round(value * 1000, 3)

    return LatencySummary(
        count=len(values),
        p50_ms=ms(percentile(values, 0.50)),
        p90_ms=ms(percentile(values, 0.90)),
        p99_ms=ms(percentile(values, 0.99)),
        max_ms=ms(values[-1]) if values else 0.0,
        mean_ms=ms(statistics.fmean(values)) if values else 0.0,
    )


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator rounded to 3 places; None when undefined."""
    if not denominator or math.isnan(numerator) or math.isnan(denominator):
        return None
    return round(numerator / denominator, 3)
