"""What the spend record's reads tell the log: the first read either way, then only a change."""

from __future__ import annotations

import logging

import pytest

from webhook.spend_feed import record_news

USABLE = (logging.INFO, "spend record usable")
UNUSABLE = (logging.WARNING, "spend record unusable")


@pytest.mark.parametrize(
    ("previous", "problem", "expected"),
    [
        (None, "", USABLE),  # the first read was good: say so once (caps can work)
        (None, "ConfigMap x/nimbix-burst-spend does not exist", UNUSABLE),
        ("", "", None),  # still good: nothing every few seconds
        ("", "reading ConfigMap x/nimbix-burst-spend: HTTP 500", UNUSABLE),
        ("reading ConfigMap x/nimbix-burst-spend: HTTP 500", "", USABLE),  # back
        ("HTTP 500", "HTTP 500", None),  # the same problem again
        ("HTTP 500", "HTTP 403", UNUSABLE),  # another problem
    ],
)
def test_a_read_is_logged_when_it_is_the_first_or_the_state_changed(
    previous: str | None, problem: str, expected: tuple[int, str] | None
) -> None:
    assert record_news(previous, problem) == expected
