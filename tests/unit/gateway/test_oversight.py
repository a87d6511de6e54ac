"""The controller's routes: only its own ServiceAccount's token passes, and what it is shown of each
account's live jobs (the machine's size and price, and what the ledger counted). By hand."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.identity import NotAuthenticated
from gateway.ledger import Entry
from gateway.oversight import NotTheController, check_controller, controller_user, live_jobs
from gateway.submission import Catalogue
from gateway.upstream import UpstreamFailed
from jarvice.model import Machine

AUDIENCE = "nimbix-burst-gateway-controller"
USER = controller_user("nimbix-burst", "nimbix-burst-controller")
LABEL = "k8s-0123456789ab.4f1c2a9e-7b1d-4c55-9d0e-2a6b8c1e3f70-main-1"


def _review(*, authenticated: bool = True, username: str = USER, audiences: list[str] | None = None) -> dict[str, Any]:
    return {
        "status": {
            "authenticated": authenticated,
            "audiences": [AUDIENCE] if audiences is None else audiences,
            "user": {"username": username},
        }
    }


def test_the_controllers_token_passes() -> None:
    assert USER == "system:serviceaccount:nimbix-burst:nimbix-burst-controller"
    check_controller(_review(), audience=AUDIENCE, user=USER)


@pytest.mark.parametrize(
    ("review", "refused", "says"),
    [
        pytest.param(_review(authenticated=False), NotAuthenticated, "not accepted", id="unauthenticated-401"),
        pytest.param(_review(audiences=["nimbix-burst-gateway"]), NotAuthenticated, "audience", id="pod-audience-401"),
        pytest.param(
            _review(username="system:serviceaccount:demo:default"), NotTheController, "only the controller", id="pod"
        ),
        pytest.param(
            _review(username="system:serviceaccount:nimbix-burst:nimbix-burst-gateway"),
            NotTheController,
            "only the controller",
            id="another-add-on-account",
        ),
        pytest.param(_review(username="kubernetes-admin"), NotTheController, "only the controller", id="a-user"),
    ],
)
def test_anyone_else_is_refused(review: dict[str, Any], refused: type[Exception], says: str) -> None:
    with pytest.raises(refused, match=says):
        check_controller(review, audience=AUDIENCE, user=USER)


CATALOGUE = Catalogue(
    machines={
        "ng1": Machine(name="ng1", cores=8, gpus=1, price=3.2, scale_max=8),
        "nfree": Machine(name="nfree", cores=8, gpus=2, price=None, scale_max=8),
    }
)


def _job(label: str, machine: str, nodes: int, status: str = "PROCESSING STARTING") -> dict[str, Any]:
    return {
        "job_name": f"j-{label}",
        "job_status": status,
        "job_label": label,
        "job_api_submission": {"machine": {"type": machine, "nodes": nodes}},
    }


def test_live_jobs_carry_their_size_and_what_was_counted() -> None:
    entry = Entry(
        namespace="demo",
        pod_uid="p",
        gpus=1,
        cost_per_hour=3.2,
        worst_case=6.4,
        at=10.0,
        number=7,
        machine="ng1",
        nodes=1,
    )
    listing = {
        "7": _job(LABEL, "ng1", 4),
        "8": _job("hand-made", "nfree", 2),
        "9": _job("old", "ng1", 1, status="COMPLETED"),
        "10": _job("gone-machine", "nx", 1),
    }
    jobs = live_jobs(listing, counted={LABEL: entry}, catalogue=CATALOGUE)
    assert [(j["number"], j["gpus"], j["cost_per_hour"]) for j in jobs] == [
        (7, 4, 12.8),
        (8, 4, None),
        (10, None, None),
    ]
    assert jobs[0]["counted"] == {
        "namespace": "demo",
        "pod_uid": "p",
        "gpus": 1,
        "machine": "ng1",
        "nodes": 1,
        "cost_per_hour": 3.2,
        "worst_case": 6.4,
        "at": 10.0,
    }
    assert jobs[1]["counted"] is None


def test_an_unreadable_listing_is_an_upstream_failure() -> None:
    with pytest.raises(UpstreamFailed, match="unreadable"):
        live_jobs(["not", "a", "map"], counted={}, catalogue=CATALOGUE)
