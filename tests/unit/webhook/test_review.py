from __future__ import annotations

import base64
import json
import time

import pytest

from webhook.review import MAX_WARNING_CHARS, MalformedReview, build_response, parse_review


def review(**request: object) -> bytes:
    base: dict[str, object] = {
        "uid": "u1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "object": {"metadata": {"generateName": "job-"}},
    }
    base.update(request)
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": base}).encode()


def test_parse_valid() -> None:
    request = parse_review(review(dryRun=True, namespace="ns"))
    assert (request.uid, request.kind, request.operation, request.dry_run) == ("u1", "Pod", "CREATE", True)
    assert request.pod_label == "job-*"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"not json", "not JSON", id="not-json"),
        pytest.param(b"\xff\xfe", "not JSON", id="binary"),
        pytest.param(b"[]", "JSON object", id="array"),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
            "v1",
            id="v1beta1",
        ),
        pytest.param(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}).encode(), "kind", id="kind"),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "request",
            id="no-request",
        ),
        pytest.param(review(uid=""), "uid", id="empty-uid"),
        pytest.param(review(uid=7), "uid", id="uid-type"),
        pytest.param(review(object=None), "object", id="no-object"),
        pytest.param(review(dryRun="yes"), "dryRun", id="dryrun-type"),
        pytest.param(review(operation=None), "operation", id="no-operation"),
    ],
)
def test_parse_rejects_with_message(body: bytes, message: str) -> None:
    with pytest.raises(MalformedReview, match=message):
        parse_review(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "nested", id="deep-arrays"),
        pytest.param(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested", id="deep-objects"),
        pytest.param(b'{"request": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested", id="deep-inside-a-review"),
        pytest.param(b'{"n": 1' + b"0" * 5000 + b"}", "digits", id="5000-digit-integer"),
    ],
)
def test_hostile_json_is_malformed_not_slow(body: bytes, message: str) -> None:
    # A guard against super-linear parsing (such bodies once took seconds, or failed with a 500), not a
    # benchmark: CPU time, not wall time, so a busy machine does not fail it; ~1-10 ms here.
    started = time.process_time()
    with pytest.raises(MalformedReview, match=message):
        parse_review(body)
    assert time.process_time() - started < 0.5


def test_response_shape() -> None:
    ops = [{"op": "add", "path": "/x", "value": 1}]
    out = build_response("u1", patch=ops, warnings=["w" * 500])
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["response"]["uid"] == "u1"
    assert out["response"]["allowed"] is True
    assert out["response"]["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(out["response"]["patch"])) == ops
    assert len(out["response"]["warnings"][0]) == MAX_WARNING_CHARS


def test_response_without_patch_has_no_patch_type() -> None:
    assert build_response("u").get("response") == {"uid": "u", "allowed": True}
