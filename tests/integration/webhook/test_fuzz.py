"""Fuzzed bodies posted to the real app: only 2xx/4xx, never a crash or a 5xx."""

from __future__ import annotations

import json
from typing import Any

from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.webhook.conftest import review_body
from tests.unit.webhook.builders import container, pod

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
POD_KEYS = [
    "metadata",
    "spec",
    "nodeName",
    "runtimeClassName",
    "name",
    "value",
    "key",
    "operator",
    "effect",
    "containers",
    "resources",
    "limits",
    "requests",
    "env",
    "nodeSelector",
    "tolerations",
    "affinity",
    "initContainers",
    "labels",
    "annotations",
    "overhead",
    "restartPolicy",
]


def _mutate(raw: Any, path: list[str], value: Any) -> Any:
    """Replace whatever sits at the first matching key along `path` with `value`."""
    if isinstance(raw, dict):
        for key in list(raw):
            if path and key == path[0]:
                raw[key] = value if len(path) == 1 else _mutate(raw[key], path[1:], value)
                return raw
        for key in raw:
            raw[key] = _mutate(raw[key], path, value)
    elif isinstance(raw, list):
        return [_mutate(item, path, value) for item in raw]
    return raw


async def _check(client: TestClient[Any, Any], body: bytes) -> None:
    response = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
    assert 200 <= response.status < 500, (response.status, await response.text())
    if response.status == 200:
        answer = await response.json()
        assert answer["response"]["allowed"] is True
        # Fail-open is for bugs: malformed input must be a 4xx, never the internal-error path.
        assert not any("internal webhook error" in w for w in answer["response"].get("warnings", [])), answer


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300) | JSON_VALUES.map(lambda v: json.dumps(v).encode()))
async def test_random_bodies(client: TestClient[Any, Any], body: bytes) -> None:
    await _check(client, body)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.lists(st.sampled_from(POD_KEYS), min_size=1, max_size=3), value=JSON_VALUES)
async def test_mutated_pods(client: TestClient[Any, Any], path: list[str], value: Any) -> None:
    raw = pod(container(gpus=2, env=[{"name": "A", "value": "1"}]), tolerations=[{"key": "k", "operator": "Exists"}])
    await _check(client, review_body(_mutate(raw, path, value)).encode())
