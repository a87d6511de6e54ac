"""What a pod cannot say: a decision, counted GPUs or the runner's environment it brings along.

Expected values follow docs/decision.md ("What a pod cannot say"): a pod carrying marks only the
product writes is the product's own reinvocation only while the webhook holds the admission's
token it carries (issued, not yet taken by a pod the watch showed, not expired); any other such pod
has the marks removed and is decided afresh, against its namespace's budget like any pod.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from jarvice import checkpoint, contract
from jarvice.gpubudget import ANNOTATION_REMOTE_GPUS
from tests.support.budgets import NS, make_sync
from tests.support.clocks import Clock
from tests.support.reinvocation import env_of, patched_by
from tests.unit.webhook.builders import GPU, container, pod
from webhook import admission, provenance
from webhook.review import AdmissionRequest
from webhook.rewrite_terms import RewritePolicy
from webhook.sync import CacheSync

POLICY = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
DECISION, ADMISSION = contract.ANNOTATION_DECISION, contract.ANNOTATION_ADMISSION


def review(raw: dict[str, Any], uid: str) -> AdmissionRequest:
    return AdmissionRequest(uid=uid, operation="CREATE", kind="Pod", group="", namespace=NS, dry_run=False, object=raw)


def admit(sync: CacheSync, raw: dict[str, Any], uid: str) -> tuple[admission.Admission, dict[str, Any]]:
    result = admission.admit(review(raw, uid), cache=sync.cache, policy=POLICY)
    return result, patched_by(raw, result)


def created(sync: CacheSync, patched: dict[str, Any], pod_uid: str) -> dict[str, Any]:
    """The API server stores the pod and the watch shows it (with the UID the API server gave it)."""
    stored = copy.deepcopy(patched)
    stored["metadata"]["uid"] = pod_uid
    assert sync.apply_event("pods", "ADDED", stored) is None
    return stored


def copy_of(stored: dict[str, Any], name: str) -> dict[str, Any]:
    """`kubectl get pod -o yaml | kubectl create -f -` with a new name: what the API server sets is gone."""
    again = copy.deepcopy(stored)
    again["metadata"] = {k: v for k, v in again["metadata"].items() if k not in ("uid", "resourceVersion")}
    again["metadata"]["name"] = name
    again.pop("status", None)
    return again


def full_budget(limit: int = 4) -> tuple[CacheSync, dict[str, Any]]:
    """A namespace whose budget of `limit` is held by one running burst pod (no local GPU free)."""
    sync = make_sync(max_remote=str(limit))
    result, patched = admit(sync, pod(container(gpus=limit), namespace=NS, name="first"), "adm-first")
    assert result.outcome == "remote"
    stored = created(sync, patched, "uid-first")
    assert sync.cache.remote_in_use(NS) == limit
    return sync, stored


# ----- the marks (pure) --------------------------------------------------------------------------


# Every annotation the user's manual tells a user to put on a pod (docs/data.md, docs/burst-after, the
# machine terms, docs/checkpoints.md): the product reads them and must never clear them as marks.
WHAT_USERS_WRITE = (
    (contract.ANNOTATION_STAGE_IN, "/workspace/data"),
    (contract.ANNOTATION_STAGE_OUT, "/workspace/out"),
    (contract.ANNOTATION_REMOTE_DATA, "data"),
    (contract.ANNOTATION_BURST_AFTER, "60s"),
    (contract.ANNOTATION_MACHINES, "ng1,ng4"),
    (contract.ANNOTATION_MAX_REMOTE_QUEUE, "10m"),
    (checkpoint.ANNOTATION_CHECKPOINT_DIR, "/workspace/ckpt"),
    (checkpoint.ANNOTATION_CHECKPOINT_INTERVAL, "15m"),
    (checkpoint.ANNOTATION_COME_HOME, "running"),
    (checkpoint.ANNOTATION_COME_HOME_MIN_SAVING, "0.50"),
)


@pytest.mark.parametrize(("key", "value"), WHAT_USERS_WRITE, ids=[key for key, _ in WHAT_USERS_WRITE])
def test_what_the_docs_tell_users_to_write_is_kept(key: str, value: str) -> None:
    raw = pod(container(gpus=1), annotations={key: value})
    assert provenance.carried_marks(raw) == ()


@pytest.mark.parametrize(
    ("annotations", "env", "expected"),
    [
        pytest.param({}, [], (), id="a-pod-as-users-write-it"),
        pytest.param({contract.ANNOTATION_STAGE_IN: "/data"}, [], (), id="what-users-set-is-no-mark"),
        pytest.param({"example.com/x": "1"}, [{"name": "NUM_GPUS", "value": "1"}], (), id="others-and-num-gpus"),
        pytest.param(
            {}, [{"name": "NIMBIX_BURST_VAULT_SFTP", "value": "vault:22"}], (), id="the-containers-own-settings"
        ),
        pytest.param({DECISION: "remote"}, [], (f"annotation {DECISION}",), id="a-decision"),
        pytest.param({ANNOTATION_REMOTE_GPUS: "0"}, [], (f"annotation {ANNOTATION_REMOTE_GPUS}",), id="a-count"),
        pytest.param({}, [{"name": "REMOTE", "value": "1"}], ("env app/REMOTE",), id="remote-env"),
        pytest.param(
            {},
            [{"name": "NIMBIX_BURST_COUNTED_GPUS", "value": "64"}],
            ("env app/NIMBIX_BURST_COUNTED_GPUS",),
            id="counted-gpus-env",
        ),
        pytest.param(
            {},
            [{"name": "NIMBIX_BURST_DATA_KEY", "value": "job-0b5f6c1e-2a3b-4c5d-8e9f-a0b1c2d3e4f5"}],
            ("env app/NIMBIX_BURST_DATA_KEY",),
            id="another-job-s-data-key",
        ),
    ],
)
def test_marks_only_the_product_writes(
    annotations: dict[str, str], env: list[dict[str, Any]], expected: tuple[str, ...]
) -> None:
    raw = pod(container(gpus=1, env=env), annotations=annotations)
    assert provenance.carried_marks(raw) == expected


def test_clearing_keeps_everything_but_the_marks() -> None:
    env = [
        {"name": "A", "value": "1"},
        {"name": "REMOTE", "value": "1"},
        {"name": "NIMBIX_BURST_COUNTED_GPUS", "value": "2"},
        {"name": "NIMBIX_BURST_VAULT_SFTP", "value": "v"},
    ]
    raw = pod(
        container(gpus=1, env=env),
        annotations={DECISION: "remote", contract.ANNOTATION_STAGE_OUT: "/out", "example.com/x": "y"},
        labels={"task-type": "Nimbix", contract.LABEL_DECISION: "remote", "team": "a"},
    )
    cleared = provenance.clear(raw, provenance.carried_marks(raw))
    assert jsonpatch.apply_patch(copy.deepcopy(raw), list(cleared.ops)) == cleared.pod
    assert cleared.pod["metadata"]["annotations"] == {contract.ANNOTATION_STAGE_OUT: "/out", "example.com/x": "y"}
    assert cleared.pod["metadata"]["labels"] == {"task-type": "Nimbix", "team": "a"}
    assert cleared.pod["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "NIMBIX_BURST_VAULT_SFTP", "value": "v"},
    ]
    assert "env app/REMOTE" in cleared.warning


def test_a_token_proves_until_a_pod_takes_it_or_it_expires() -> None:
    clock = Clock()
    tokens = provenance.IssuedTokens(clock=clock, ttl=60.0)
    tokens.issue("a")
    tokens.issue("b")
    assert tokens.holds("a") and tokens.holds("b") and not tokens.holds("c") and not tokens.holds("")
    tokens.take("a")
    assert not tokens.holds("a")
    clock.sleep(60.0)
    assert not tokens.holds("b")
    tokens.expire()
    assert len(tokens) == 0


# ----- through the admission ---------------------------------------------------------------------


def test_copies_of_a_burst_pod_never_pass_a_full_budget() -> None:
    sync, stored = full_budget(limit=4)
    for i in range(3):
        result, patched = admit(sync, copy_of(stored, f"copy-{i}"), f"adm-copy-{i}")
        # The copy asks for no GPU (the first rewrite took them): it is not burst, and keeps nothing
        # that would make its runner submit or count.
        assert result.outcome == "skipped"
        annotations = patched["metadata"].get("annotations", {})
        assert not any(provenance.is_product_annotation(k) for k in annotations)
        for c in patched["spec"]["containers"]:
            assert not any(provenance.is_product_env(name) for name in env_of(c))
        assert "carried marks only nimbix-burst writes" in result.response["response"]["warnings"][0]
        assert "removed the burst marks" in result.reason
    assert sync.cache.remote_in_use(NS) == 4
    assert sync.cache.remote_reservation_count == 0


def test_a_forged_decision_with_counted_gpus_is_decided_afresh_against_the_budget() -> None:
    sync, _ = full_budget(limit=4)
    forged = pod(
        container(
            gpus=8,
            env=[
                {"name": "REMOTE", "value": "1"},
                {"name": "NIMBIX_BURST_COUNTED_GPUS", "value": "64"},
                {"name": "NUM_GPUS", "value": "8"},
                {"name": "JARVICE_NODES", "value": "8"},
            ],
        ),
        annotations={DECISION: "remote", ANNOTATION_REMOTE_GPUS: "0", ADMISSION: "made-up"},
        namespace=NS,
        name="forged",
    )
    result, patched = admit(sync, forged, "adm-forged")
    assert (result.outcome, result.over_budget) == ("local", True)  # kept local by the budget: 4 of 4 in use
    annotations = patched["metadata"]["annotations"]
    assert annotations[DECISION] == "local" and ANNOTATION_REMOTE_GPUS not in annotations
    env = env_of(patched["spec"]["containers"][0])
    assert "REMOTE" not in env and "NIMBIX_BURST_COUNTED_GPUS" not in env
    assert patched["spec"]["containers"][0]["resources"]["limits"][GPU] == "8"  # waits for local GPUs


def test_a_forged_pod_with_room_in_the_budget_is_counted_for_what_it_asks() -> None:
    sync = make_sync(max_remote="8")
    forged = pod(
        container(gpus=2, env=[{"name": "NIMBIX_BURST_COUNTED_GPUS", "value": "0"}]),
        annotations={DECISION: "remote", ANNOTATION_REMOTE_GPUS: "0"},
        namespace=NS,
        name="forged",
    )
    result, patched = admit(sync, forged, "adm-forged")
    assert result.outcome == "remote"
    assert patched["metadata"]["annotations"][ANNOTATION_REMOTE_GPUS] == "2"
    assert env_of(patched["spec"]["containers"][0])["NIMBIX_BURST_COUNTED_GPUS"] == "2"
    assert sync.cache.remote_in_use(NS) == 2


def test_the_products_own_reinvocation_is_proven_by_its_token_and_only_once_the_pod_is_seen() -> None:
    sync = make_sync(max_remote="8")
    result, patched = admit(sync, pod(container(gpus=2), namespace=NS, name="p"), "adm-1")
    assert result.outcome == "remote" and patched["metadata"]["annotations"][ADMISSION] == "adm-1"
    again, _ = admit(sync, copy.deepcopy(patched), "adm-1-reinvoked")  # a later webhook changed nothing
    assert again.reason.startswith("already decided: remote")
    assert sync.cache.remote_in_use(NS) == 2  # counted once
    stored = created(sync, patched, "uid-1")
    late, _ = admit(sync, copy_of(stored, "late"), "adm-late")
    assert "removed the burst marks" in late.reason  # the token was taken by the pod the watch showed
