"""JARVICE HTTP adapter: the runner's only network code.

- Every call carries (connect, read) timeouts.
- Idempotent calls (everything but submit) are retried on timeouts, dropped connections, 429 and
  5xx, with bounded exponential backoff and jitter, until the outage budget is spent. The budget
  spans calls: it measures how long JARVICE has been unreachable, not how long one call took.
- Submit is never retried here. Any outcome that might have created a job raises
  SubmitOutcomeUnknown; the caller resolves it by looking the job up by its label.
- Responses are checked: status, Content-Type (application/json or text/plain, as Nimbix's own
  client insists) and shape. Untyped JSON is converted to `jarvice.model` values here.
- The API key never leaves this module unmasked: errors carry redacted text, requests' own
  exceptions (whose messages contain the URL and so the key) are never chained.
"""

import json
import logging
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import requests

from jarvice import __version__
from jarvice.model import JobEntry, JobStatus, Machine, SignalSent, SubmitBody, SubmitResult
from jarvice.redaction import Secret, redact
from jarvice.wire import (
    MAX_ERROR_TEXT,
    ApplicationNotFound,
    CredentialsRejected,
    JarviceError,
    JobNotFound,
    ProtocolError,
    RequestRejected,
    StreamBroken,
    SubmitOutcomeUnknown,
    SubmitRefused,
    Unavailable,
    expect_object,
    parse_jobs,
    parse_machines,
    parse_signal,
    parse_status,
    parse_submit,
)

__all__ = [
    "ApplicationNotFound",
    "CredentialsRejected",
    "JarviceClient",
    "JarviceError",
    "JobNotFound",
    "ProtocolError",
    "RequestRejected",
    "RetryPolicy",
    "StreamBroken",
    "SubmitOutcomeUnknown",
    "SubmitRefused",
    "Unavailable",
    "parse_jobs",
    "parse_machines",
    "parse_status",
    "parse_submit",
]

log = logging.getLogger(__name__)

USER_AGENT: Final = f"nimbix-burst-runner/{__version__}"
JSON_TYPE: Final = "application/json"
TEXT_TYPE: Final = "text/plain"
# 429 is "Only one active job allowed per VM" on submit (when it applies is UNCONFIRMED) and a
# rate limit elsewhere; 503 is the self-hosted API's concurrency limiter (JAR-5754).
RETRYABLE_STATUSES: Final = frozenset({408, 429})
# On submit, 429 is a refusal ("Only one active job allowed per VM"; a rate limiter's 429 refuses
# too): nothing was created. Every other answer but a definite 4xx may hide a created job.
SUBMIT_REFUSED_STATUS: Final = 429
# Whole outputs are read in chunks of this size: the runner's pod has 128Mi, a training log may
# be gigabytes, so the body is never held whole.
STREAM_CHUNK_BYTES: Final = 64 * 1024
OutputEndpoint = Literal["tail", "output"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_seconds: float
    cap_seconds: float
    outage_seconds: float

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Exponential backoff with "equal jitter": half fixed, half random."""
        ceiling = min(self.cap_seconds, self.base_seconds * 2.0 ** min(attempt, 30))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


Expect = Literal["json", "text"]
T = TypeVar("T")


class JarviceClient:
    def __init__(
        self,
        *,
        base_url: str,
        username: str,
        apikey: Secret | Callable[[], Secret],
        session: requests.Session,
        connect_timeout: float,
        read_timeout: float,
        retry: RetryPolicy,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._username = username
        # A callable key is read at each call: a projected token is refreshed while a job runs.
        self._apikey_source: Callable[[], Secret] = apikey if callable(apikey) else (lambda: apikey)
        self._session = session
        self._timeout = (connect_timeout, read_timeout)
        self._retry = retry
        self._sleep = sleep
        self._clock = clock
        self._rng = rng
        self._outage_started: float | None = None
        session.headers["User-Agent"] = USER_AGENT

    # --- plumbing ------------------------------------------------------------------------------

    @property
    def _apikey(self) -> Secret:
        return self._apikey_source()

    def _redact(self, text: str) -> str:
        return redact(text, (self._apikey.reveal(),))

    def _url(self, endpoint: str) -> str:
        return f"{self._base}/jarvice/{endpoint}"

    def _error_text(self, response: requests.Response) -> str:
        body = response.content[: MAX_ERROR_TEXT * 4].decode("utf-8", errors="replace")
        text = body.strip()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            text = parsed["error"]
        return self._redact(text[:MAX_ERROR_TEXT]) or "(empty body)"

    def _describe_exception(self, exc: requests.RequestException) -> str:
        return self._redact(f"{type(exc).__name__}: {exc}")[:MAX_ERROR_TEXT]

    def _get(
        self,
        endpoint: str,
        params: Mapping[str, str | int],
        *,
        deadline: float | None = None,
        stream: bool = False,
    ) -> requests.Response:
        """GET with retries; returns any non-retryable response (the caller checks it).

        With `stream`, the body of the returned response is not read yet."""
        query: dict[str, str | int] = {"username": self._username, "apikey": self._apikey.reveal(), **params}
        attempt = 0
        if log.isEnabledFor(logging.DEBUG):
            url = requests.Request("GET", self._url(endpoint), params=query).prepare().url or ""
            log.debug("JARVICE call", extra={"endpoint": endpoint, "url": self._redact(url)})
        while True:
            try:
                response = self._session.get(self._url(endpoint), params=query, timeout=self._timeout, stream=stream)
            except (requests.Timeout, requests.ConnectionError) as exc:
                failure = self._describe_exception(exc)
            except requests.RequestException as exc:
                raise ProtocolError(
                    f"{endpoint}: request failed: {self._describe_exception(exc)}", endpoint=endpoint
                ) from None
            else:
                if response.status_code not in RETRYABLE_STATUSES and response.status_code < 500:
                    self._outage_started = None
                    return response
                failure = f"HTTP {response.status_code}: {self._error_text(response)}"
                response.close()
            now = self._clock()
            if self._outage_started is None:
                self._outage_started = now
            outage = now - self._outage_started
            remaining = self._retry.outage_seconds - outage
            if deadline is not None:
                remaining = min(remaining, deadline - now)
            if remaining <= 0:
                raise Unavailable(
                    f"{endpoint}: JARVICE unreachable for {outage:.1f}s "
                    f"(budget {self._retry.outage_seconds:g}s); last error: {failure}",
                    endpoint=endpoint,
                )
            delay = min(self._retry.delay(attempt, self._rng), remaining)
            log.warning(
                "JARVICE call failed, retrying",
                extra={"endpoint": endpoint, "attempt": attempt + 1, "retry_in": round(delay, 3), "error": failure},
            )
            self._sleep(delay)
            attempt += 1

    def _check(self, endpoint: str, response: requests.Response, *, expect: Expect) -> bytes:
        """The body of a 2xx response of the expected type; typed errors for everything else."""
        self._check_status(endpoint, response, expect=expect)
        return response.content

    def _check_status(self, endpoint: str, response: requests.Response, *, expect: Expect) -> None:
        """Typed errors for anything but a 2xx of the expected type; the body of a good one is left unread."""
        status = response.status_code
        if status == 401:
            raise CredentialsRejected(
                f"{endpoint}: JARVICE rejected the credentials (HTTP 401: {self._error_text(response)})",
                endpoint=endpoint,
            )
        if status == 404:
            raise JobNotFound(f"{endpoint}: HTTP 404: {self._error_text(response)}", endpoint=endpoint)
        if not 200 <= status < 300:
            raise RequestRejected(
                f"{endpoint}: HTTP {status}: {self._error_text(response)}", endpoint=endpoint, status=status
            )
        content_type = response.headers.get("Content-Type", "")
        media = content_type.split(";", 1)[0].strip().lower()
        wanted = JSON_TYPE if expect == "json" else TEXT_TYPE
        if media != wanted:
            raise ProtocolError(f"{endpoint}: expected Content-Type {wanted}, got {content_type!r}", endpoint=endpoint)

    def _get_json(self, endpoint: str, params: Mapping[str, str | int], *, deadline: float | None = None) -> Any:
        body = self._check(endpoint, self._get(endpoint, params, deadline=deadline), expect="json")
        try:
            return json.loads(body)
        except ValueError:
            raise ProtocolError(f"{endpoint}: response is not valid JSON", endpoint=endpoint) from None

    def _get_text(self, endpoint: str, params: Mapping[str, str | int], *, deadline: float | None = None) -> str:
        body = self._check(endpoint, self._get(endpoint, params, deadline=deadline), expect="text")
        # text/plain carries no charset; the job's output is bytes, so decode UTF-8 losslessly
        # (surrogateescape round-trips any invalid byte when written back out).
        return body.decode("utf-8", errors="surrogateescape")

    def _parsed(self, parse: Callable[[Any], T], raw: Any) -> T:
        """Run a response parser; its error quotes the server, so mask the key there too."""
        try:
            return parse(raw)
        except ProtocolError as exc:
            raise ProtocolError(self._redact(str(exc)), endpoint=exc.endpoint) from None

    # --- endpoints -----------------------------------------------------------------------------

    def fetch_machines(self) -> dict[str, Machine]:
        return self._parsed(parse_machines, self._get_json("machines", {}))

    def fetch_jobs(self, *, completed: bool, deadline: float | None = None) -> dict[int, JobEntry]:
        params: dict[str, str | int] = {"completed": "true"} if completed else {}
        return self._parsed(parse_jobs, self._get_json("jobs", params, deadline=deadline))

    def fetch_status(self, number: int, *, deadline: float | None = None) -> JobStatus:
        raw = self._get_json("status", {"number": number}, deadline=deadline)
        return self._parsed(lambda r: parse_status(r, number=number), raw)

    def fetch_tail(self, number: int, *, lines: int) -> str:
        return self._get_text("tail", {"number": number, "lines": lines})

    @contextmanager
    def open_output(
        self, number: int, *, endpoint: OutputEndpoint, deadline: float | None = None
    ) -> Iterator[Iterator[str]]:
        """The whole output (`lines=0`) of `tail` or `output`, as lines, read as a stream.

        Each line keeps its "\\n" (the last may lack it) and is decoded losslessly, like `fetch_tail`.
        A connection lost mid-body raises StreamBroken from the iterator.
        """
        response = self._get(endpoint, {"number": number, "lines": 0}, deadline=deadline, stream=True)
        try:
            self._check_status(endpoint, response, expect="text")
            yield self._iter_lines(endpoint, response)
        finally:
            response.close()

    def _iter_lines(self, endpoint: str, response: requests.Response) -> Iterator[str]:
        pending = b""
        try:
            for received in response.iter_content(chunk_size=STREAM_CHUNK_BYTES):
                chunk = pending + received if pending else received
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    yield chunk[start : end + 1].decode("utf-8", errors="surrogateescape")
                    start = end + 1
                pending = chunk[start:]
        except requests.RequestException as exc:
            raise StreamBroken(
                f"{endpoint}: connection lost while reading the output ({self._describe_exception(exc)})",
                endpoint=endpoint,
            ) from None
        if pending:
            yield pending.decode("utf-8", errors="surrogateescape")

    def shutdown(self, number: int, *, deadline: float | None = None) -> None:
        raw = self._get_json("shutdown", {"number": number}, deadline=deadline)
        self._parsed(lambda r: expect_object(r, endpoint="shutdown"), raw)

    def terminate(self, number: int, *, deadline: float | None = None) -> None:
        raw = self._get_json("terminate", {"number": number}, deadline=deadline)
        self._parsed(lambda r: expect_object(r, endpoint="terminate"), raw)

    def signal(self, number: int, signal: int, *, deadline: float | None = None) -> SignalSent:
        """/jarvice/signal: JARVICE gives `signal` to the job (or to the image's JARVICE_SIGNAL_OVERRIDE
        script). Retried like the other calls: the requests it carries (checkpoint now, suspend,
        resume) mean the same when they arrive twice."""
        raw = self._get_json("signal", {"number": number, "signal": signal}, deadline=deadline)
        return self._parsed(lambda r: parse_signal(r, asked=signal), raw)

    def submit(self, body: SubmitBody) -> SubmitResult:
        """POST /jarvice/submit exactly once."""
        endpoint = "submit"
        payload = {**body, "user": {"username": self._username, "apikey": self._apikey.reveal()}}
        try:
            response = self._session.post(self._url(endpoint), json=payload, timeout=self._timeout)
        except (requests.Timeout, requests.ConnectionError) as exc:
            raise SubmitOutcomeUnknown(
                f"submit: no answer ({self._describe_exception(exc)})", endpoint=endpoint, answered=False
            ) from None
        except requests.RequestException as exc:
            raise ProtocolError(f"submit: request failed: {self._describe_exception(exc)}", endpoint=endpoint) from None
        status = response.status_code
        if status == SUBMIT_REFUSED_STATUS:
            raise SubmitRefused(f"submit: HTTP {status}: {self._error_text(response)}", endpoint=endpoint)
        if status in RETRYABLE_STATUSES or status >= 500:
            raise SubmitOutcomeUnknown(
                f"submit: HTTP {status}: {self._error_text(response)}", endpoint=endpoint, answered=True
            )
        self._outage_started = None
        if status == 404:
            raise ApplicationNotFound(
                f"submit: JARVICE does not know application {body['app']!r} (HTTP 404: {self._error_text(response)})",
                endpoint=endpoint,
            )
        try:
            raw = json.loads(self._check(endpoint, response, expect="json"))
            return parse_submit(raw)
        except (ProtocolError, ValueError) as exc:
            # A 2xx that we cannot read may still have created the job.
            raise SubmitOutcomeUnknown(
                f"submit: unreadable success response ({self._redact(str(exc))})", endpoint=endpoint, answered=True
            ) from None
