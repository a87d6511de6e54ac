"""The API server's timestamps (pure): what the webhook and the controller read from objects."""

from __future__ import annotations

import datetime


def parse_time(text: object) -> float | None:
    """An RFC 3339 timestamp as the API server writes it ("2026-01-02T03:04:05Z") -> epoch seconds
    (None: absent or unreadable)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed.timestamp()
