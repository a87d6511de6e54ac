"""Every account's live jobs, their termination, and a burst pod's newest checkpoint in its vault,
through the add-on's JARVICE gateway (I/O).

The gateway alone holds the accounts' keys; the controller asks with its projected ServiceAccount token
(an audience of its own, re-read at each call: the kubelet rotates it) over HTTPS, trusting the CA that
signed the gateway's certificate. Every call carries a timeout."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import requests

from controller.accounting import GatewayAnswerError, LiveJob, parse_gateway_jobs
from controller.moving import LastCheckpoint, parse_last_checkpoint

TIMEOUT: Final = (5.0, 30.0)
HTTP_OK, HTTP_NOT_FOUND = 200, 404


class GatewayError(Exception):
    """The gateway could not be asked, or refused; the message says what it answered."""


class JobGone(GatewayError):
    """JARVICE no longer knows the job (it ended meanwhile)."""


@dataclass(frozen=True, slots=True)
class GatewayAccess:
    url: str  # https://nimbix-burst-gateway.<namespace>.svc
    ca_file: str
    token_file: str


class GatewayJobs:
    def __init__(self, access: GatewayAccess, *, session: requests.Session, read_file: Callable[[str], str]) -> None:
        self._access = access
        self._session = session
        self._read_file = read_file

    def _headers(self) -> dict[str, str]:
        try:
            token = self._read_file(self._access.token_file).strip()
        except OSError as exc:
            raise GatewayError(
                f"the controller's gateway token {self._access.token_file} is unreadable: {exc}"
            ) from None
        return {"Authorization": f"Bearer {token}"}

    def _call(
        self, method: str, path: str, body: object = None, params: dict[str, str] | None = None
    ) -> requests.Response:
        try:
            return self._session.request(
                method,
                f"{self._access.url}{path}",
                json=body,
                params=params,
                headers=self._headers(),
                verify=self._access.ca_file,
                timeout=TIMEOUT,
            )
        except requests.RequestException as exc:
            raise GatewayError(f"{path}: {type(exc).__name__}: {exc}") from None

    def live_jobs(self) -> list[LiveJob]:
        response = self._call("GET", "/controller/jobs")
        if response.status_code != HTTP_OK:
            raise GatewayError(f"/controller/jobs: HTTP {response.status_code}: {response.text[:300]}")
        try:
            return parse_gateway_jobs(response.json())
        except (ValueError, GatewayAnswerError) as exc:
            raise GatewayError(f"/controller/jobs: {exc}") from None

    def terminate(self, account: str, number: int) -> None:
        response = self._call("POST", "/controller/terminate", {"account": account, "number": number})
        if response.status_code == HTTP_NOT_FOUND:
            raise JobGone(f"job {number} of account {account}: {response.text[:300]}")
        if response.status_code != HTTP_OK:
            raise GatewayError(f"terminate {number} of {account}: HTTP {response.status_code}: {response.text[:300]}")

    def newest_checkpoint(self, namespace: str, name: str, uid: str) -> LastCheckpoint:
        """The newest complete checkpoint the pod's remote job wrote (its name "" when there is none yet)."""
        path = "/controller/checkpoint"
        response = self._call("GET", path, params={"namespace": namespace, "pod": name, "uid": uid})
        if response.status_code != HTTP_OK:
            raise GatewayError(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
        try:
            return parse_last_checkpoint(response.json())
        except ValueError as exc:
            raise GatewayError(f"{path}: {exc}") from None
