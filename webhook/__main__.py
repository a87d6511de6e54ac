"""Composition root: settings -> logging -> TLS -> cache + watcher -> aiohttp server."""

from __future__ import annotations

import functools
import importlib.machinery
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from pythonjsonlogger.json import JsonEncoder, JsonFormatter

from webhook import admission
from webhook.app import APP_LOGGER, METRICS, ROUTER, cache_fitness, create_app, log_admission, serve
from webhook.background import BackgroundTask
from webhook.cache import ClusterCache
from webhook.forwarding import Forwarder, build_client_context
from webhook.leadership import HandedOver
from webhook.lease import KubernetesLeases, LeaseElector
from webhook.replicas import ReplicaRouter
from webhook.settings import LeaderElection, Settings, SettingsError, parse_settings
from webhook.sync import CacheSync
from webhook.tls import ReloadingTLS
from webhook.watching import Watcher, load_api_client

log = logging.getLogger("webhook")


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


PLAIN_FIELDS = ("asctime", "levelname", "name", "message")


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


def _msecs(created: float) -> float:
    """LogRecord.msecs of a record made at `created` (Python 3.11's formula; a test holds it to the stdlib's)."""
    return int((created - int(created)) * 1000) + 0.0


class AdmissionLine:
    """Writes the per-admission INFO line: byte for byte what `logger.info("admission", extra=fields)`
    writes through the JSON handler, without the logging machinery's per-record work (a LogRecord,
    the logger and handler chain, the generic formatter). Side by side, that took ~11 % off the
    webhook's CPU per review (issue 15). Built only where the configuration is the one
    configure_logging makes (one plain JSON stream handler on the root, no filters); anything else
    gets `logger.info`."""

    def __init__(
        self,
        logger: logging.Logger,
        handler: logging.StreamHandler[Any],
        formatter: JsonLineFormatter,
        *,
        clock: Callable[[], float] = time.time,  # LogRecord.created's clock
    ) -> None:
        self._logger = logger
        self._handler = handler
        self._formatter = formatter
        self._clock = clock

    @classmethod
    def for_logger(cls, logger: logging.Logger) -> Callable[[dict[str, Any]], None]:
        root = logging.getLogger()
        handler = root.handlers[0] if len(root.handlers) == 1 else None
        if not (
            isinstance(handler, logging.StreamHandler)
            and isinstance(formatter := handler.formatter, JsonLineFormatter)
            and formatter.writes_plain_lines
            and handler.level <= logging.INFO
            and not (handler.filters or root.filters or logger.filters or logger.handlers)
            and logger.propagate
        ):
            return functools.partial(log_admission, logger)
        return cls(logger, handler, formatter).write

    def write(self, fields: dict[str, Any]) -> None:
        created = self._clock()
        line = {
            "asctime": self._formatter.asctime(created, _msecs(created)),
            "levelname": "INFO",
            "name": self._logger.name,
            "message": "admission",
        }
        line.update(fields)
        text = self._formatter.jsonify_log_record(line) + self._handler.terminator
        self._handler.acquire()
        try:
            self._handler.stream.write(text)
            self._handler.flush()
        except (OSError, ValueError) as exc:  # as logging does: a lost log line must not fail the review
            print(f"admission log line not written: {exc}", file=sys.stderr)  # noqa: T201 - logging is what failed
        finally:
            self._handler.release()


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonLineFormatter("{asctime}{levelname}{name}{message}", style="{", timestamp=False))
    # Thread and process names are gathered for every record, and no line of ours shows them.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # Nor the caller's file, function and line (a frame walk per record): the logging HOWTO's
    # "Optimization" section documents this switch.
    logging._srcfile = None
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The kubernetes client logs request bodies at DEBUG; keep them out of our logs.
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)


async def _build(settings: Settings, tls: ReloadingTLS) -> web.Application:
    clock = time.monotonic
    cache = ClusterCache(
        gpu_resources=settings.gpu_resources,
        clock=clock,
        reservation_ttl=settings.reservation_ttl_seconds,
        scheduler_names=settings.scheduler_names,
        max_reservations=settings.max_reservations,
        max_reservations_per_namespace=settings.max_reservations_per_namespace,
    )
    sync = CacheSync(cache, clock=clock)
    watcher = Watcher(load_api_client(settings.kubeconfig), sync)
    app: web.Application

    async def reload_tls() -> None:
        await tls.watch(settings.tls_reload_seconds, on_reload=app[METRICS].tls_reloads.inc)

    background: list[BackgroundTask] = [watcher.run, reload_tls]
    router: ReplicaRouter | None = None
    elector: LeaseElector | None = None
    if settings.leader_election is not None:
        elector, router = _build_election(settings, settings.leader_election, sync, clock)
        background.append(elector.run)
    app = create_app(
        settings,
        cache=cache,
        sync=sync,
        clock=clock,
        background=tuple(background),
        admission_log=AdmissionLine.for_logger(logging.getLogger(APP_LOGGER)),
    )
    if router is not None and elector is not None:
        app[ROUTER] = router
        app[METRICS].watch_election(router=router, elector=elector)
        on_stop = elector.release  # hand the Lease and our reservations over before we go

        async def release(_app: web.Application) -> None:
            await on_stop()
            await router.close()

        app.on_shutdown.append(release)
    return app


def _build_election(
    settings: Settings, election: LeaderElection, sync: CacheSync, clock: Callable[[], float]
) -> tuple[LeaseElector, ReplicaRouter]:
    def adopt(handed: Sequence[HandedOver]) -> None:
        with sync.lock:
            sync.cache.adopt_reservations(handed)

    def export() -> list[HandedOver]:
        with sync.lock:
            return sync.cache.export_reservations()

    # Only a replica that sees the whole cluster, and sees it now, leads and decides.
    fit = functools.partial(cache_fitness, sync, stale_after=settings.watch_stale_seconds)
    elector = LeaseElector(
        KubernetesLeases(load_api_client(settings.kubeconfig)),
        namespace=election.lease_namespace,
        name=election.lease_name,
        identity=election.identity,
        url=election.advertise_url,
        timing=election.timing,
        clock=clock,
        on_started_leading=adopt,
        export_handover=export,
        fit_to_lead=fit,
    )
    context = build_client_context(
        election.peer_ca_file, client_cert=settings.tls_dir / "tls.crt", client_key=settings.tls_dir / "tls.key"
    )
    forwarder = Forwarder(context=context, server_hostname=election.peer_server_name, identity=election.identity)
    router = ReplicaRouter(
        elector,
        forwarder,
        budget=election.wait_seconds,
        forward_timeout=min(2.0, election.wait_seconds),
        cache_ready=fit,
        clock=clock,
    )
    log.info(
        "leader election on",
        extra={"lease": election.lease_name, "namespace": election.lease_namespace, "identity": election.identity},
    )
    return elector, router


def _client_ca_files(settings: Settings) -> tuple[Path, ...]:
    """Who may call /mutate: the API server's client CA and, with leader election, the replicas'
    own CA (a follower forwards reviews to the leader showing the shared serving certificate)."""
    if settings.client_ca_file is None:
        return ()
    peers = (settings.leader_election.peer_ca_file,) if settings.leader_election is not None else ()
    return (settings.client_ca_file, *peers)


def core_is_compiled() -> bool:
    """Whether the decision core runs compiled (images/webhook/compile-core.sh), as the image ships it,
    or from its .py files (a checkout)."""
    return (admission.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    except SettingsError as exc:
        print(exc, file=sys.stderr)  # noqa: T201 - before logging exists, the message is the output
        return 2
    configure_logging(settings.log_level)
    tls = ReloadingTLS(settings.tls_dir, client_ca_files=_client_ca_files(settings))
    log.info(
        "webhook starting",
        extra={
            "host": settings.host,
            "port": settings.port,
            "gpu_resources": list(settings.gpu_resources),
            "compiled_core": core_is_compiled(),
        },
    )
    serve(_build(settings, tls), host=settings.host, port=settings.port, ssl_context=tls.context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
