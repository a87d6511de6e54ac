"""The HTTP adapter against a scripted session: status handling, content types, shapes, retries,
redaction. (tests/integration/entrypoint exercises it over real HTTP against the emulator.)"""

import json
import random
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

import jarvice
from jarvice import client
from jarvice.redaction import Secret
from tests.support.clocks import Clock
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

KEY = "the-api-key-123"
Step = Callable[[str, dict[str, Any]], requests.Response] | Exception


def make_response(
    status: int, body: bytes | str | object, content_type: str | None = "application/json"
) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    if isinstance(body, bytes):
        response._content = body
    elif isinstance(body, str):
        response._content = body.encode()
    else:
        response._content = json.dumps(body).encode()
    if content_type is not None:
        response.headers["Content-Type"] = content_type
    return response


class ScriptedSession:
    """Stands in for requests.Session: each call consumes the next scripted outcome."""

    def __init__(self, *outcomes: requests.Response | Exception) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.headers: dict[str, str] = {}

    def _next(self, method: str, url: str, kwargs: dict[str, Any]) -> requests.Response:
        self.calls.append((method, url, kwargs))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def get(self, url: str, **kwargs: Any) -> requests.Response:
        return self._next("GET", url, kwargs)

    def post(self, url: str, **kwargs: Any) -> requests.Response:
        return self._next("POST", url, kwargs)


def make_client(session: ScriptedSession, clock: Clock | None = None, outage: float = 10.0) -> client.JarviceClient:
    clock = clock or Clock(now=0.0)
    return client.JarviceClient(
        base_url="https://jarvice.example/api/",
        username="alice",
        apikey=Secret(KEY),
        session=session,  # type: ignore[arg-type]
        connect_timeout=1.5,
        read_timeout=7.0,
        retry=client.RetryPolicy(base_seconds=0.5, cap_seconds=4.0, outage_seconds=outage),
        sleep=clock.sleep,
        clock=clock,
        rng=random.Random(1),
    )


STATUS_OK = {"42": {"job_name": "j", "job_status": "PROCESSING STARTING", "job_substatus": 0, "job_start_time": 5}}


def test_get_sends_credentials_timeouts_and_parses_status() -> None:
    session = ScriptedSession(make_response(200, STATUS_OK))
    status = make_client(session).fetch_status(42)
    assert (status.number, status.state, status.start_time, status.terminal) == (42, "PROCESSING STARTING", 5, False)
    method, url, kwargs = session.calls[0]
    assert (method, url) == ("GET", "https://jarvice.example/api/jarvice/status")
    assert kwargs["params"] == {"username": "alice", "apikey": KEY, "number": 42}
    assert kwargs["timeout"] == (1.5, 7.0)


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_media_type_accepted(content_type: str) -> None:
    status = make_client(ScriptedSession(make_response(200, STATUS_OK, content_type))).fetch_status(42)
    assert (status.number, status.state) == (42, "PROCESSING STARTING")


@pytest.mark.parametrize("content_type", ["text/html", "text/plain", None, "application/jsonp"])
def test_wrong_content_type_is_a_protocol_error(content_type: str | None) -> None:
    with pytest.raises(client.ProtocolError, match="status: expected Content-Type application/json"):
        make_client(ScriptedSession(make_response(200, STATUS_OK, content_type))).fetch_status(42)


def test_tail_must_be_text_plain_and_is_decoded_losslessly() -> None:
    body = "ü\n".encode() + b"\xff\n"
    text = make_client(ScriptedSession(make_response(200, body, "text/plain"))).fetch_tail(42, lines=10)
    assert text.encode("utf-8", errors="surrogateescape") == body
    with pytest.raises(client.ProtocolError, match="tail: expected Content-Type text/plain"):
        make_client(ScriptedSession(make_response(200, b"x", "application/json"))).fetch_tail(42, lines=10)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ([], "expected a JSON object, got list"),
        ({}, "expected an object keyed by the job number 42"),
        ({"42": {"job_name": "j"}}, "job 42 has no job_status string"),
        ({"42": {"job_status": ""}}, "job 42 has no job_status string"),
        ({"error": "Job not found"}, "JARVICE reported an error: Job not found"),
    ],
)
def test_status_shape_errors_name_the_endpoint(raw: object, fragment: str) -> None:
    with pytest.raises(client.ProtocolError) as info:
        make_client(ScriptedSession(make_response(200, raw))).fetch_status(42)
    assert fragment in str(info.value) and str(info.value).startswith("status: ")


def test_invalid_json() -> None:
    with pytest.raises(client.ProtocolError, match="jobs: response is not valid JSON"):
        make_client(ScriptedSession(make_response(200, b"{nope"))).fetch_jobs(completed=False)


def test_parse_jobs() -> None:
    raw = {
        "7": {"job_name": "a", "job_status": "completed", "job_label": "k8s-x", "job_exitcode": 3},
        "8": {"job_name": "b", "job_status": "SUBMITTED", "job_label": None, "job_exitcode": None},
        "9": {"job_name": "c", "job_status": "COMPLETED WITH ERROR", "job_exitcode": "-15"},
    }
    jobs = client.parse_jobs(raw)
    assert jobs[7].state == "COMPLETED" and jobs[7].label == "k8s-x" and jobs[7].exitcode == 3
    assert jobs[8].label is None and jobs[8].exitcode is None
    assert jobs[9].exitcode == -15
    with pytest.raises(client.ProtocolError, match="jobs: expected job-number keys"):
        client.parse_jobs({"abc": {"job_status": "SUBMITTED"}})


def test_parse_machines() -> None:
    machines = client.parse_machines(
        {
            "ng1": {"mc_cores": 8, "mc_gpus": 1, "mc_ram": 64, "mc_price": 2.1, "mc_arch": "x86_64", "mc_scale_max": 4},
            "odd": {"mc_cores": 2, "mc_gpus": 0, "mc_ram": "lots", "mc_scale_min": None},
        }
    )
    assert machines["ng1"].gpus == 1 and machines["ng1"].scale_max == 4 and machines["ng1"].ram_gb == 64
    assert machines["odd"].ram_gb == 0 and machines["odd"].scale_min == 1
    assert machines["ng1"].price == 2.1
    assert machines["odd"].price is None  # no mc_price: unknown, never 0 (caps would never bind)
    for bad in ({"x": {"mc_cores": "8", "mc_gpus": None}}, {"x": []}, {"x": {"mc_cores": True, "mc_gpus": 0}}):
        with pytest.raises(client.ProtocolError, match="machines: entry 'x'"):
            client.parse_machines(bad)


def test_parse_submit() -> None:
    assert client.parse_submit({"name": "n", "number": 4711}) == client.SubmitResult(4711, "n")
    with pytest.raises(client.ProtocolError, match="submit: expected"):
        client.parse_submit({"name": "n", "number": "many"})


@pytest.mark.parametrize(
    ("status", "body", "error", "fragment"),
    [
        (
            401,
            {"error": "Not Authorized"},
            client.CredentialsRejected,
            "rejected the credentials (HTTP 401: Not Authorized)",
        ),
        (404, {"error": "Job not found"}, client.JobNotFound, "HTTP 404: Job not found"),
        (400, "Required parameter(s) missing", client.RequestRejected, "HTTP 400: Required parameter(s) missing"),
    ],
)
def test_error_statuses(status: int, body: object, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        make_client(
            ScriptedSession(make_response(status, body, "text/plain" if isinstance(body, str) else "application/json"))
        ).fetch_status(42)
    assert fragment in str(info.value)


def test_retries_transient_failures_with_backoff_then_succeeds() -> None:
    clock = Clock(now=0.0)
    session = ScriptedSession(
        make_response(503, "Service Unavailable", "text/plain"),
        make_response(429, {"error": "Too Many Requests"}),
        requests.ConnectionError("Connection aborted. url=/jarvice/status?apikey=" + KEY),
        requests.ReadTimeout("read timed out"),
        make_response(502, b"<html>bad gateway</html>", "text/html"),
        make_response(200, STATUS_OK),
    )
    assert make_client(session, clock).fetch_status(42).state == "PROCESSING STARTING"
    assert len(session.calls) == 6
    assert len(clock.sleeps) == 5
    # Equal jitter: each delay within [ceiling/2, ceiling], ceilings 0.5, 1, 2, 4, 4 (capped).
    for delay, ceiling in zip(clock.sleeps, [0.5, 1, 2, 4, 4], strict=True):
        assert ceiling / 2 <= delay <= ceiling


def test_outage_budget_spans_calls_and_resets_on_success() -> None:
    clock = Clock(now=0.0)
    session = ScriptedSession(*[make_response(503, "down", "text/plain") for _ in range(50)])
    c = make_client(session, clock, outage=5.0)
    with pytest.raises(client.Unavailable) as info:
        c.fetch_status(42)
    message = str(info.value)
    assert message.startswith("status: JARVICE unreachable for 5.0s (budget 5s); last error: HTTP 503: down")
    assert clock.now == pytest.approx(5.0)
    # Still down: the next call gives up after a single attempt, the budget is already spent.
    calls = len(session.calls)
    with pytest.raises(client.Unavailable):
        c.fetch_jobs(completed=True)
    assert len(session.calls) == calls + 1
    # A success resets it.
    session.outcomes[:0] = [
        make_response(200, STATUS_OK),
        make_response(503, "x", "text/plain"),
        make_response(200, STATUS_OK),
    ]
    c.fetch_status(42)
    c.fetch_status(42)


def test_deadline_bounds_retries() -> None:
    clock = Clock(now=0.0)
    session = ScriptedSession(*[make_response(503, "down", "text/plain") for _ in range(50)])
    with pytest.raises(client.Unavailable):
        make_client(session, clock, outage=100.0).terminate(42, deadline=2.0)
    assert clock.now <= 2.0


def test_errors_never_carry_the_key() -> None:
    url = f"https://jarvice.example/api/jarvice/status?username=alice&apikey={KEY}&number=42"
    session = ScriptedSession(
        *[requests.ConnectionError(f"HTTPSConnectionPool: Max retries exceeded with url: {url}") for _ in range(30)]
    )
    with pytest.raises(client.Unavailable) as info:
        make_client(session, outage=1.0).fetch_status(42)
    assert KEY not in str(info.value)
    assert "apikey=***" in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None
    echoed = ScriptedSession(make_response(400, {"error": f"bad key {KEY}"}))
    with pytest.raises(client.RequestRejected) as rejected:
        make_client(echoed).fetch_status(42)
    assert KEY not in str(rejected.value)


BODY: Any = {"app": "my-app", "job_label": "k8s-1"}


def test_submit_posts_once_with_credentials_in_the_body() -> None:
    session = ScriptedSession(make_response(200, {"name": "job-1", "number": 7}))
    result = make_client(session).submit(BODY)
    assert (result.number, result.name) == (7, "job-1")
    method, url, kwargs = session.calls[0]
    assert (method, url) == ("POST", "https://jarvice.example/api/jarvice/submit")
    assert kwargs["json"]["user"] == {"username": "alice", "apikey": KEY}
    assert kwargs["timeout"] == (1.5, 7.0)
    assert "user" not in BODY


@pytest.mark.parametrize(
    ("outcome", "answered"),
    [
        (requests.ConnectionError("Remote end closed connection without response"), False),
        (requests.ReadTimeout("read timed out"), False),
        (make_response(503, "busy", "text/plain"), True),
        (make_response(500, {"error": "Unable to create Job Object/Submission"}), True),
        (make_response(200, b"<html>", "text/html"), True),
        (make_response(200, {"name": "x"}), True),
    ],
    ids=["dropped", "timeout", "503", "500", "html-200", "bad-shape-200"],
)
def test_submit_outcome_unknown_is_never_retried(outcome: requests.Response | Exception, answered: bool) -> None:
    session = ScriptedSession(outcome, make_response(200, {"name": "dup", "number": 8}))
    with pytest.raises(client.SubmitOutcomeUnknown) as info:
        make_client(session).submit(BODY)
    assert info.value.answered is answered
    assert len(session.calls) == 1


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (401, {"error": "Not Authorized"}, client.CredentialsRejected),
        (404, {"error": "Application Not Found"}, client.ApplicationNotFound),
        (400, {"error": "Missing or Malformed API Syntax"}, client.RequestRejected),
    ],
)
def test_submit_definite_rejections(status: int, body: object, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        make_client(ScriptedSession(make_response(status, body))).submit(BODY)
    assert KEY not in str(info.value)
    if error is client.ApplicationNotFound:
        assert "does not know application 'my-app'" in str(info.value)


def test_submit_429_is_a_refusal_never_retried() -> None:
    session = ScriptedSession(make_response(429, {"error": "Only one active job allowed per VM"}))
    with pytest.raises(client.SubmitRefused, match="Only one active job allowed per VM"):
        make_client(session).submit(BODY)
    assert len(session.calls) == 1


def test_parser_errors_quoting_the_server_are_redacted() -> None:
    echoed = ScriptedSession(make_response(200, {"error": f"key {KEY} is odd"}))
    with pytest.raises(client.ProtocolError) as info:
        make_client(echoed).terminate(42)
    assert KEY not in str(info.value) and "JARVICE reported an error" in str(info.value)


def test_user_agent_carries_the_one_version() -> None:
    version = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]["version"]
    assert version == jarvice.__version__
    assert f"nimbix-burst-runner/{version}" == client.USER_AGENT


def test_signal_sends_the_number_and_reads_the_answer() -> None:
    session = ScriptedSession(make_response(200, {"signal": 10, "pid": 4242}))
    sent = make_client(session).signal(42, 10)
    assert (sent.signal, sent.pid) == (10, 4242)
    method, url, kwargs = session.calls[0]
    assert (method, url) == ("GET", "https://jarvice.example/api/jarvice/signal")
    assert kwargs["params"]["number"] == 42 and kwargs["params"]["signal"] == 10


def test_signal_retries_a_503_within_the_outage_budget() -> None:
    session = ScriptedSession(
        make_response(503, "Service Unavailable", "text/plain"), make_response(200, {"signal": 10})
    )
    assert make_client(session).signal(42, 10).pid is None
    assert len(session.calls) == 2


@pytest.mark.parametrize(
    ("answer", "error", "fragment"),
    [
        (make_response(200, {"signal": 20, "pid": 1}), client.ProtocolError, "asked for 10, JARVICE answered 20"),
        (make_response(404, {"error": "Running job is not found"}), client.JobNotFound, "Running job is not found"),
    ],
)
def test_signal_refusals(answer: requests.Response, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        make_client(ScriptedSession(answer)).signal(42, 10)
