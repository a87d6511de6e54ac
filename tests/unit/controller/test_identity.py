"""resolve_cluster_identity: the kube-system UID read with backoff until it works (fakes injected)."""

from __future__ import annotations

import pytest

from controller.identity import BACKOFF_CAP, resolve_cluster_identity
from controller.kube import Forbidden

KUBE_SYSTEM_UID = "0b9f3c2e-1d4a-4e8b-9c7d-6a5f4e3d2c1b"


class Reader:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.asked: list[str] = []

    def __call__(self, namespace: str) -> str:
        self.asked.append(namespace)
        if self.failures:
            raise self.failures.pop(0)
        return KUBE_SYSTEM_UID


async def test_the_identity_comes_from_kube_systems_uid_and_the_name() -> None:
    reader = Reader([])
    assert await resolve_cluster_identity(reader, name="staging") == "staging-0b9f3c2e1d4a"
    assert await resolve_cluster_identity(reader, name="") == "0b9f3c2e1d4a"
    assert reader.asked == ["kube-system", "kube-system"]


async def test_failures_are_retried_with_a_growing_capped_delay(caplog: pytest.LogCaptureFixture) -> None:
    failures: list[Exception] = [Forbidden("get namespace kube-system is forbidden")] + [OSError("refused")] * 8
    reader = Reader(failures)
    slept: list[float] = []
    counted: list[int] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    cluster = await resolve_cluster_identity(reader, name="", sleep=sleep, on_failure=lambda: counted.append(1))
    assert cluster == "0b9f3c2e1d4a"
    assert slept == [1, 2, 4, 8, 16, 32, BACKOFF_CAP, BACKOFF_CAP, BACKOFF_CAP] and len(counted) == 9
    forbidden = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(forbidden) == 1 and "get on namespaces" in forbidden[0].fix  # type: ignore[attr-defined]


async def test_an_answer_without_a_uuid_is_retried() -> None:
    class Blank:
        calls = 0

        def __call__(self, namespace: str) -> str:
            self.calls += 1
            return "" if self.calls == 1 else KUBE_SYSTEM_UID

    async def sleep(seconds: float) -> None:
        return None

    assert await resolve_cluster_identity(Blank(), name="", sleep=sleep) == "0b9f3c2e1d4a"
