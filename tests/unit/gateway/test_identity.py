"""Only a pod can ask, and only for itself: what a TokenReview's answer proves."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.identity import Caller, NotAuthenticated, build_token_review, caller_from_review

AUDIENCE = "nimbix-burst-gateway"
UID = "0b5e1f52-5a4e-4c41-9a0e-2f6f3c1d9e01"


def _review(
    *, authenticated: bool = True, username: str = "system:serviceaccount:demo:default", extra: Any = None
) -> dict[str, Any]:
    extra = (
        {"authentication.kubernetes.io/pod-name": ["trainer-0"], "authentication.kubernetes.io/pod-uid": [UID]}
        if extra is None
        else extra
    )
    return {
        "status": {
            "authenticated": authenticated,
            "audiences": [AUDIENCE],
            "user": {"username": username, "extra": extra},
        }
    }


def test_a_pods_projected_token_names_the_pod() -> None:
    assert caller_from_review(_review(), audience=AUDIENCE) == Caller(
        namespace="demo", pod_name="trainer-0", pod_uid=UID, service_account="default"
    )


@pytest.mark.parametrize(
    ("review", "says"),
    [
        pytest.param(_review(authenticated=False), "not accepted", id="expired-or-forged"),
        pytest.param(
            {"status": {"authenticated": True, "audiences": ["kube"], "user": {}}}, "audience", id="other-aud"
        ),
        pytest.param(_review(username="alice"), "not a ServiceAccount's", id="a-person"),
        pytest.param(_review(username="system:serviceaccount:demo"), "no ServiceAccount", id="bad-sa"),
        pytest.param(_review(extra={}), "not bound to a pod", id="a-secret-token"),
        pytest.param(
            _review(extra={"authentication.kubernetes.io/pod-name": ["a"], "authentication.kubernetes.io/pod-uid": []}),
            "pod-uid",
            id="no-uid",
        ),
        pytest.param({}, "not accepted", id="empty"),
    ],
)
def test_anything_but_a_pod_bound_token_of_our_audience_is_refused(review: dict[str, Any], says: str) -> None:
    with pytest.raises(NotAuthenticated, match=says):
        caller_from_review(review, audience=AUDIENCE)


def test_the_review_asks_for_our_audience() -> None:
    body = build_token_review("t", audience=AUDIENCE)
    assert body["spec"] == {"token": "t", "audiences": [AUDIENCE]}
