"""What the product decided for a pod is read from the pod the webhook rewrote, never from what the pod
asked: the pods here are made by the real admission (tests.support.reinvocation), so the gateway's
reader is held to the webhook's writer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.identity import Caller
from gateway.terms import NotDecided, decided_terms
from jarvice import contract
from tests.support.reinvocation import admit, make_cache
from tests.unit.webhook.builders import container, pod

UID = "0b5e1f52-5a4e-4c41-9a0e-2f6f3c1d9e01"
CALLER = Caller(namespace="ns", pod_name="p", pod_uid=UID, service_account="default")


def _env(**values: str) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def burst_pod(*, env: list[dict[str, str]] | None = None, gpus: int = 1) -> dict[str, Any]:
    """A pod the webhook decided remote, as the API server stores it (with its UID)."""
    raw = pod(container("trainer", gpus=gpus, env=env or []))
    patched, result = admit(raw, make_cache(free_gpus=0), "review-1")
    assert result.outcome == "remote"
    patched["metadata"]["uid"] = UID
    return patched


def test_the_terms_are_what_the_webhook_counted() -> None:
    terms = decided_terms(burst_pod(gpus=2), CALLER, "trainer")
    assert (terms.counted_gpus, terms.gpus_per_node, terms.nodes, terms.walltime_seconds) == (2, 2, 1, 24 * 3600)
    assert contract.is_cluster_identity(terms.cluster)
    assert terms.max_price is None and terms.allowed_machines == () and terms.gang is None


def test_what_the_pods_env_asks_for_does_not_change_the_terms() -> None:
    asked = _env(JARVICE_MACHINE="n0", JARVICE_NODES="32", NIMBIX_BURST_COUNTED_GPUS="64", NUM_GPUS="8")
    terms = decided_terms(burst_pod(env=asked), CALLER, "trainer")
    assert (terms.counted_gpus, terms.gpus_per_node, terms.nodes) == (1, 1, 1)


def test_a_copy_without_the_label_has_no_terms_whatever_it_carries() -> None:
    copied = copy.deepcopy(burst_pod())
    del copied["metadata"]["labels"][contract.LABEL_TASK_TYPE]
    with pytest.raises(NotDecided, match="only pods created with the label may burst"):
        decided_terms(copied, CALLER, "trainer")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        pytest.param(lambda p: p["metadata"].update(uid="another-uid"), "token's pod is gone", id="another-pod"),
        pytest.param(lambda p: p["metadata"].update(namespace="other"), "token's pod is gone", id="another-namespace"),
        pytest.param(
            lambda p: p["metadata"]["annotations"].update({contract.ANNOTATION_DECISION: "local"}),
            "did not decide this pod remote",
            id="decided-local",
        ),
    ],
)
def test_a_pod_not_the_tokens_or_not_decided_remote_has_no_terms(change: Any, says: str) -> None:
    decided = burst_pod()
    change(decided)
    with pytest.raises(NotDecided, match=says):
        decided_terms(decided, CALLER, "trainer")


def test_a_container_the_webhook_did_not_burst_has_no_terms() -> None:
    raw = pod(container("trainer", gpus=1), container("sidecar"))
    patched, _ = admit(raw, make_cache(free_gpus=0), "review-2")
    patched["metadata"]["uid"] = UID
    with pytest.raises(NotDecided, match="not a burst container"):
        decided_terms(patched, CALLER, "sidecar")
    with pytest.raises(NotDecided, match="no container 'nope'"):
        decided_terms(patched, CALLER, "nope")


def test_a_shorter_walltime_of_the_containers_own_is_kept() -> None:
    terms = decided_terms(burst_pod(env=_env(JARVICE_WALLTIME="01:00:00")), CALLER, "trainer")
    assert terms.walltime_seconds == 3600


def test_the_last_duplicate_is_the_value_in_effect_and_a_value_from_hides_a_literal() -> None:
    decided = burst_pod()
    trainer = decided["spec"]["containers"][0]
    trainer["env"] += [
        *_env(NIMBIX_BURST_MAX_PRICE="9"),
        {"name": "NIMBIX_BURST_MAX_PRICE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    assert decided_terms(decided, CALLER, "trainer").max_price is None


def test_the_pods_jobs_are_its_own_labels_in_this_cluster() -> None:
    terms = decided_terms(burst_pod(), CALLER, "trainer")
    mine = f"k8s-{terms.cluster}.{UID}-trainer-1"
    assert terms.owns_label(mine)
    assert not terms.owns_label(f"k8s-{terms.cluster}.{UID}-sidecar-1")
    assert not terms.owns_label(f"k8s-other-cluster.{UID}-trainer-1")
    assert not terms.owns_label(f"k8s-{terms.cluster}.1b5e1f52-5a4e-4c41-9a0e-2f6f3c1d9e01-trainer-1")
