"""The webhook's JSON log lines are python-json-logger's JsonFormatter lines, byte for byte (issue 15
made them cheaper, not different: tools grep for '"message": "admission"')."""

from __future__ import annotations

import datetime
import logging
import sys
from decimal import Decimal
from typing import Any

import pytest
from pythonjsonlogger.json import JsonFormatter

from webhook.__main__ import JsonLineFormatter

FORMAT = "{asctime}{levelname}{name}{message}"
ADMISSION = {
    "uid": "84d60ba8-411c-40c1-b721-e87975a78644",
    "namespace": "ml-team",
    "pod": "trainer-7f9c4b8d6-*",
    "decision": "local",
    "reason": "10+ candidate node(s) can host 1 nvidia.com/gpu; best fit node-00120",
    "node": "node-00120",
    "dry_run": False,
    "latency_ms": 0.213,
}


def _exc_info() -> Any:
    try:
        raise ValueError("boom")
    except ValueError:
        return sys.exc_info()


def record(msg: object = "admission", *, created: float = 1_795_000_000.123, **kwargs: Any) -> logging.LogRecord:
    extra = kwargs.pop("extra", {})
    rec = logging.getLogger("webhook.app").makeRecord(
        "webhook.app", kwargs.pop("level", logging.INFO), "app.py", 1, msg, kwargs.pop("args", ()), None, extra=extra
    )
    rec.created = created
    rec.msecs = (created - int(created)) * 1000
    for key, value in kwargs.items():
        setattr(rec, key, value)
    return rec


CASES = [
    pytest.param(record(extra=ADMISSION), id="admission"),
    pytest.param(record(extra={"pod": "caf\u00e9-\u2603", "reason": 'quote " and \\ and \n'}), id="escapes"),
    pytest.param(record(extra={"n": float("nan"), "i": float("inf"), "big": 2**70}), id="numbers"),
    pytest.param(record(extra={"when": datetime.datetime(2026, 1, 2, 3, 4, 5), "d": Decimal("1.5")}), id="non-json"),
    pytest.param(record(extra={"nested": {"a": [1, {"b": None}]}, "gpus": ("x", "y")}), id="nested"),
    pytest.param(record("pods %s of %d", args=("a", 3)), id="args"),
    pytest.param(record({"a": 1, "message": "dict"}), id="dict-message"),
    pytest.param(record(exc_info=_exc_info(), level=logging.ERROR), id="exc-info"),
    pytest.param(record(stack_info="Stack (most recent call last):\n  here"), id="stack-info"),
    pytest.param(record(created=1_795_000_000.999), id="end-of-second"),
    pytest.param(record(created=1_795_000_001.0), id="next-second"),
    pytest.param(record(extra={"_hidden": 1, "shown": 2}), id="underscore-extra"),
    pytest.param(record(taskName="main"), id="task-name"),
]


@pytest.mark.parametrize("rec", CASES)
def test_lines_are_json_formatters_lines(rec: logging.LogRecord) -> None:
    expected = JsonFormatter(FORMAT, style="{", timestamp=False).format(rec)
    ours = JsonLineFormatter(FORMAT, style="{", timestamp=False)
    assert ours.format(rec) == expected
    assert ours.format(rec) == expected  # the time of day remembered from the first line


def test_time_of_day_follows_the_clock_across_seconds() -> None:
    ours = JsonLineFormatter(FORMAT, style="{", timestamp=False)
    plain = JsonFormatter(FORMAT, style="{", timestamp=False)
    for created in (1_795_000_000.5, 1_795_000_000.9, 1_795_000_001.1, 1_795_000_000.2, 1_795_086_400.0):
        rec = record(created=created)
        assert ours.format(rec) == plain.format(rec)


@pytest.mark.parametrize(
    "options",
    [
        {"rename_fields": {"levelname": "level"}},
        {"static_fields": {"app": "webhook"}},
        {"defaults": {"team": "ml"}},
        {"timestamp": True},
        {"prefix": "json: "},
        {"rename_fields": {"missing": "m"}, "rename_fields_keep_missing": True},
    ],
    ids=",".join,
)
def test_every_option_gives_json_formatters_line(options: dict[str, Any]) -> None:
    """The direct path serves only the plain format; with any option the general one runs."""
    kwargs: dict[str, Any] = {"style": "{", "timestamp": False, **options}
    rec = record(extra=ADMISSION)
    assert JsonLineFormatter(FORMAT, **kwargs).format(rec) == JsonFormatter(FORMAT, **kwargs).format(rec)


def test_a_custom_encoder_is_still_honoured() -> None:
    rec = record(extra={"d": Decimal("1.5")})
    kwargs: dict[str, Any] = {"style": "{", "timestamp": False, "json_default": lambda o: "custom"}
    assert JsonLineFormatter(FORMAT, **kwargs).format(rec) == JsonFormatter(FORMAT, **kwargs).format(rec)
    assert '"d": "custom"' in JsonLineFormatter(FORMAT, **kwargs).format(rec)
