"""The JSON log lines of the webhook and the burst controller: one line per record on stdout, set up
once by `configure_logging` at start (I/O).

The lines are python-json-logger's JsonFormatter lines, byte for byte (tools grep for
'"message": "admission"'); `JsonLineFormatter` only writes them for less CPU (issue 15), and the
webhook's per-admission line (webhook.admission_log) is written straight through it.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from pythonjsonlogger.json import JsonEncoder, JsonFormatter

# The fields of every line, in order, before the record's extras.
PLAIN_FIELDS = ("asctime", "levelname", "name", "message")
LINE_FORMAT = "{asctime}{levelname}{name}{message}"  # PLAIN_FIELDS, as a "{"-style format


class JsonLineFormatter(JsonFormatter):
    """JsonFormatter's lines byte for byte, for less CPU: one line per admission was 10-12 % of the
    request path's samples (issue 15). The stdlib encoder stays (orjson cannot write the ", " and
    ": " separators that `kubectl logs | grep '"message": "admission"'` and the tests match), built
    once rather than per line, and the time of day is formatted once a second, not per line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # What JsonFormatter's json.dumps(cls=JsonEncoder, ensure_ascii=True) builds for every line.
        self._encoder = JsonEncoder(ensure_ascii=self.json_ensure_ascii, indent=self.json_indent)
        self._encode = _line_encoder(self._encoder)
        self._second: tuple[int, str] = (-1, "")  # one tuple: read and replaced as a whole
        # Without the options that add, rename or post-process fields, a line is the format's fields
        # then the record's extras: built here directly (add_fields' general path was half the cost).
        self._plain = not (
            self.defaults
            or self.static_fields
            or self.rename_fields
            or self.rename_fields_keep_missing
            or self.timestamp
            or self.prefix
            or type(self).process_log_record is not JsonFormatter.process_log_record
        )

    def format(self, record: logging.LogRecord) -> str:
        if not self._plain or isinstance(record.msg, dict) or record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        record.message = record.getMessage()
        if "asctime" in self._required_fields:
            record.asctime = self.formatTime(record, self.datefmt)
        fields = record.__dict__
        line = {name: fields.get(name) for name in self._required_fields}
        skip = self._skip_fields
        for key, value in fields.items():
            if key not in skip and not key.startswith("_"):  # extras' keys are strings (LogRecord.__dict__)
                line[key] = value
        return self.jsonify_log_record(line)

    def jsonify_log_record(self, log_data: dict[str, Any]) -> str:
        customised = self.json_default, self.json_encoder, self.json_serializer
        if customised != (None, JsonEncoder, json.dumps):
            return super().jsonify_log_record(log_data)
        return self._encode(log_data)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - stdlib name
        if datefmt or not self.default_msec_format:
            return super().formatTime(record, datefmt)
        return self.asctime(record.created, record.msecs)

    def asctime(self, created: float, msecs: float) -> str:
        """formatTime's text for a record made at `created`, for a formatter without a datefmt and
        with a msec format (formatTime and writes_plain_lines check both first)."""
        msec_format = self.default_msec_format
        if not msec_format:
            raise ValueError("asctime() needs a formatter with default_msec_format")
        second, text = self._second
        if second != int(created):  # localtime() of a timestamp depends on its whole seconds only
            text = time.strftime(self.default_time_format, self.converter(created))
            self._second = (int(created), text)
        return msec_format % (text, msecs)

    @property
    def writes_plain_lines(self) -> bool:
        """The lines are the format's four fields, then the extras: what AdmissionLine builds itself."""
        return (
            self._plain
            and not self.datefmt
            and bool(self.default_msec_format)
            and self._required_fields == list(PLAIN_FIELDS)
        )


def _line_encoder(encoder: json.JSONEncoder) -> Callable[[dict[str, Any]], str]:
    """encoder.encode for a dict, with the C encoder that JSONEncoder.iterencode builds anew for
    every call made once (a third of its cost). Without circular-reference markers: the markers
    dict would be shared between calls, and a log line's fields are not circular."""
    make: Callable[..., Callable[[Any, int], list[str]]] | None = getattr(json.encoder, "c_make_encoder", None)
    indent: int | str | None = encoder.indent  # typeshed leaves out the None that JSONEncoder() keeps
    if make is None or indent is not None:  # iterencode's own condition for the C encoder
        return encoder.encode
    iterencode = make(
        None,
        encoder.default,
        json.encoder.encode_basestring_ascii if encoder.ensure_ascii else json.encoder.encode_basestring,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    return lambda fields: "".join(iterencode(fields, 0))


def configure_logging(level: str) -> None:
    """Every record as one JSON line on stdout, from `level` up; once, before anything logs."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonLineFormatter(LINE_FORMAT, style="{", timestamp=False))
    # Thread and process names are gathered for every record, and no line of ours shows them.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # Nor the caller's file, function and line (a frame walk per record): the logging HOWTO's
    # "Optimization" section documents this switch.
    logging._srcfile = None
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The kubernetes client logs request bodies at DEBUG, urllib3 logs URLs (JARVICE's carry the key).
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
