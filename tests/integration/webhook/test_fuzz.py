"""Fuzzed bodies posted to the real app: only 2xx/4xx, never a crash or a 5xx, and always fast."""

from __future__ import annotations

import gc
import json
import time
from typing import Any

from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.webhook_app import review_body
from tests.unit.webhook.builders import GPU, container, pod

# Every answer, however hostile the body, well inside the API server's 5 s webhook timeout (the event
# loop serves every admission, so one slow answer delays them all). Measured as the loop thread's CPU
# time (client and server share it here): wall time on a loaded shared machine measures the machine.
MAX_ANSWER_SECONDS = 0.1

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


# Quantity-shaped strings: what the Kubernetes grammar allows (sign, digits, fraction, SI suffix or
# exponent), pushed to extremes (huge exponents and digit runs), plus near misses.
_DIGITS = st.one_of(
    st.text("0123456789", max_size=6),
    st.integers(1, 30_000).map(lambda n: "9" * n),
    st.integers(1, 30_000).map(lambda n: "1" + "0" * n),
    st.integers(1, 30_000).map(lambda n: "0" * n + "1"),
)
_EXPONENT = st.one_of(
    st.integers(-(10**7), 10**7).map(str),
    st.sampled_from(["299999", "9999999", "-299999", "+5", "0" * 50 + "7", "9" * 5000, "-" + "9" * 5000]),
)
_SUFFIX = st.one_of(
    st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "e"]),
    _EXPONENT.map(lambda e: "e" + e),
    _EXPONENT.map(lambda e: "E" + e),
)
QUANTITIES = st.one_of(
    st.builds(
        lambda sign, whole, dot, frac, suffix: sign + whole + (("." + frac) if dot else "") + suffix,
        st.sampled_from(["", "+", "-"]),
        _DIGITS,
        st.booleans(),
        _DIGITS,
        _SUFFIX,
    ),
    st.integers(-(10**40), 10**40),
    st.floats(allow_nan=False),
    st.text(alphabet="0123456789.eE+-KMGTPiunmk ", max_size=12),
)


async def _check(client: TestClient[Any, Any], body: bytes) -> None:
    # No collection during the request: a full pass over this test process's heap (mostly hypothesis's)
    # is not the webhook's cost, and the webhook's own process is small.
    gc.disable()
    try:
        started = time.thread_time()
        response = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
        elapsed = time.thread_time() - started
    finally:
        gc.enable()
    assert 200 <= response.status < 500, (response.status, await response.text())
    assert elapsed < MAX_ANSWER_SECONDS, (elapsed, body[:200])
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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    resource=st.sampled_from([GPU, "cpu", "memory"]),
    where=st.sampled_from(["limits", "requests", "both", "overhead", "init"]),
    quantity=QUANTITIES,
)
async def test_quantity_shaped_values(client: TestClient[Any, Any], resource: str, where: str, quantity: Any) -> None:
    values = {resource: quantity}
    if where == "overhead":
        raw = pod(container(gpus=1), overhead=values)
    elif where == "init":
        raw = pod(container(gpus=1), init=[container("i", limits=values, requests=values)])
    else:
        raw = pod(
            container(
                gpus=None if resource == GPU else 1,
                limits=values if where in ("limits", "both") else None,
                requests=values if where in ("requests", "both") else None,
            )
        )
    await _check(client, review_body(raw).encode())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    depth=st.integers(1, 20_000),
    opener=st.sampled_from([b"[", b'{"k":']),
    where=st.sampled_from(["body", "object", "affinity", "quantity", "env"]),
)
async def test_deep_nesting(client: TestClient[Any, Any], depth: int, opener: bytes, where: str) -> None:
    """Nesting from shallow to far past the decoder's recursion limit, spliced in as text."""
    closer = b"]" if opener == b"[" else b"}"
    deep = opener * depth + b"1" + closer * depth
    if where == "body":
        body = deep
    else:
        holders = {
            "object": pod(container(gpus=1), affinity="DEEP"),
            "affinity": pod(container(gpus=1), affinity={"nodeAffinity": "DEEP"}),
            "quantity": pod(container(limits={GPU: "DEEP"})),
            "env": pod(container(gpus=1, env=[{"name": "A", "value": "DEEP"}])),
        }
        body = review_body(holders[where]).encode().replace(b'"DEEP"', deep)
    await _check(client, body)
