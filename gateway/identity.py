"""Who is calling: a projected ServiceAccount token, as the API server's TokenReview answers for it (pure).

A burst pod's runner holds a token the kubelet projected for the gateway's audience; the token is
bound to the pod (its name and UID are claims the API server checks at review: a token of a deleted
pod is refused). The review's user is `system:serviceaccount:<namespace>:<name>` with the pod in its
`extra` claims. Anything else (a user's token, a token of another audience, a token not bound to a
pod) is refused: only a pod can ask, and only for itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
EXTRA_POD_NAME: Final = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID: Final = "authentication.kubernetes.io/pod-uid"


@dataclass(frozen=True, slots=True)
class Caller:
    """The pod a token was issued for."""

    namespace: str
    pod_name: str
    pod_uid: str
    service_account: str


class NotAuthenticated(Exception):
    """The token proves no pod; the message says why (never the token)."""


def build_token_review(token: str, *, audience: str) -> dict[str, Any]:
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [audience]},
    }


def _single(extra: Mapping[str, Any], key: str) -> str:
    values = extra.get(key)
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str) and values[0]:
        return values[0]
    raise NotAuthenticated(f"the token is not bound to a pod (no {key} claim): use the projected token the pod mounts")


def caller_from_review(review: Mapping[str, Any], *, audience: str) -> Caller:
    """The pod of a TokenReview's answer, or NotAuthenticated."""
    status = review.get("status")
    if not isinstance(status, Mapping) or status.get("authenticated") is not True:
        error = status.get("error") if isinstance(status, Mapping) else None
        raise NotAuthenticated(f"the token was not accepted: {error or 'invalid or expired'}")
    audiences = status.get("audiences")
    if isinstance(audiences, list) and audience not in audiences:
        raise NotAuthenticated(f"the token is not for audience {audience!r}")
    user = status.get("user")
    if not isinstance(user, Mapping):
        raise NotAuthenticated("the token names no user")
    username = user.get("username")
    if not isinstance(username, str) or not username.startswith(SERVICE_ACCOUNT_PREFIX):
        raise NotAuthenticated("the token is not a ServiceAccount's: only a burst pod's projected token is accepted")
    namespace, _, account = username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
    if not namespace or not account:
        raise NotAuthenticated(f"the token's user {username!r} is no ServiceAccount")
    extra = user.get("extra")
    if not isinstance(extra, Mapping):
        raise NotAuthenticated("the token is not bound to a pod: use the projected token the pod mounts")
    return Caller(
        namespace=namespace,
        pod_name=_single(extra, EXTRA_POD_NAME),
        pod_uid=_single(extra, EXTRA_POD_UID),
        service_account=account,
    )
