"""parse_jobs reads a job's machine and node count from job_api_submission (and nothing else of it:
it may echo the credentials), and its start and end times."""

from __future__ import annotations

from typing import Any

import pytest

from jarvice.client import parse_jobs


def entry(**extra: Any) -> dict[str, Any]:
    return {"4711": {"job_name": "j", "job_status": "COMPLETED", **extra}}


@pytest.mark.parametrize(
    ("submission", "machine", "nodes"),
    [
        pytest.param(
            {"machine": {"type": "ng4", "nodes": 2}, "user": {"apikey": "secret-key-xyz"}}, "ng4", 2, id="given"
        ),
        pytest.param(None, "", 1, id="absent"),
        pytest.param({"machine": "ng4"}, "", 1, id="not-an-object"),
        pytest.param({"machine": {"type": 7, "nodes": "x"}}, "", 1, id="wrong-types"),
        pytest.param({"machine": {"type": "ng4", "nodes": 0}}, "ng4", 1, id="zero-nodes"),
        pytest.param({"machine": {"type": "n" * 65}}, "", 1, id="name-too-long"),
    ],
)
def test_the_machine_comes_from_the_submission(submission: Any, machine: str, nodes: int) -> None:
    (job,) = parse_jobs(entry(job_api_submission=submission)).values()
    assert (job.machine, job.nodes) == (machine, nodes)
    assert "secret-key-xyz" not in repr(job)


def test_start_and_end_times() -> None:
    (job,) = parse_jobs(entry(job_start_time=100, job_end_time=160)).values()
    assert (job.start_time, job.end_time) == (100, 160)


@pytest.mark.parametrize(
    ("submission", "limit"),
    [
        pytest.param({"application": {"walltime": "02:30:00"}}, 9000, id="given"),
        pytest.param({"application": {"walltime": "soon"}}, None, id="not-hh-mm-ss"),
        pytest.param({"application": "x"}, None, id="not-an-object"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_the_walltime_limit_comes_from_the_submission(submission: Any, limit: int | None) -> None:
    (job,) = parse_jobs(entry(job_api_submission=submission)).values()
    assert job.walltime_limit == limit


@pytest.mark.parametrize(
    ("raw", "price"),
    [(1.25, 1.25), (3, 3.0), ("4.5", 4.5), (None, None), ("n/a", None), (-1, None), (True, None)],
)
def test_job_price_when_jarvice_reports_one(raw: Any, price: float | None) -> None:
    (job,) = parse_jobs(entry(job_price=raw)).values()
    assert job.job_price == price
