"""The webhook's JSON log lines are python-json-logger's JsonFormatter lines, byte for byte (issue 15
made them cheaper, not different: tools grep for '"message": "admission"')."""

from __future__ import annotations

import datetime
import io
import logging
import sys
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from pythonjsonlogger.json import JsonFormatter

from kubeplumbing.logs import JsonLineFormatter, configure_logging
from webhook.admission_log import AdmissionLine, _msecs

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


def _json_handler(stream: io.StringIO) -> logging.StreamHandler[io.StringIO]:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLineFormatter(FORMAT, style="{", timestamp=False))
    return handler


@pytest.mark.parametrize("created", [1_795_000_000.123, 1_795_000_000.9995, 1_795_000_001.0, 1_795_086_399.999])
@pytest.mark.parametrize(
    "fields",
    [ADMISSION, {"pod": "caf\u00e9", "reason": 'quote " and \\ and \n'}, {}],
    ids=["admission", "escapes", "none"],
)
def test_the_direct_admission_line_is_the_logged_line(created: float, fields: dict[str, Any]) -> None:
    """AdmissionLine writes what logger.info("admission", extra=fields) writes, byte for byte."""
    logged, direct = io.StringIO(), io.StringIO()
    handler = _json_handler(logged)
    rec = record(created=created, extra=fields)
    rec.msecs = _msecs(created)
    handler.handle(rec)
    direct_handler = _json_handler(direct)
    assert isinstance(direct_handler.formatter, JsonLineFormatter)
    line = AdmissionLine(
        logging.getLogger("webhook.app"), direct_handler, direct_handler.formatter, clock=lambda: created
    )
    line.write(dict(fields))
    assert direct.getvalue() == logged.getvalue()
    assert direct.getvalue().count("\n") == 1


def test_msecs_is_the_stdlibs() -> None:
    for _ in range(200):
        rec = logging.LogRecord("webhook.app", logging.INFO, "app.py", 1, "admission", (), None)
        assert _msecs(rec.created) == rec.msecs


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level, root.filters[:], logging._srcfile
    try:
        yield
    finally:
        root.handlers[:], root.filters[:] = saved[0], saved[2]
        root.setLevel(saved[1])
        logging._srcfile = saved[3]


def _direct(writer: object) -> bool:
    return isinstance(getattr(writer, "__self__", None), AdmissionLine)


def test_the_direct_line_serves_only_our_logging_configuration(restored_logging: None) -> None:
    configure_logging("INFO")  # here, not in a fixture: pytest adds its capture handlers around the call
    logger = logging.getLogger("webhook.app")
    assert _direct(AdmissionLine.for_logger(logger))
    root = logging.getLogger()
    root.addFilter(lambda _record: True)  # a filter the direct line would skip: logging handles every line
    try:
        assert not _direct(AdmissionLine.for_logger(logger))
    finally:
        root.filters.clear()
    root.handlers.append(logging.NullHandler())  # a second handler would miss the direct lines
    assert not _direct(AdmissionLine.for_logger(logger))
    root.handlers.pop()
    root.handlers[0].setFormatter(JsonFormatter(FORMAT, style="{", timestamp=False))
    assert not _direct(AdmissionLine.for_logger(logger))
