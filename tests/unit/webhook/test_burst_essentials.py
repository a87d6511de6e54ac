"""What a burst pod needs besides its label and GPU request, written by the webhook (docs/install.md,
"What a burst pod needs"): the namespace's JARVICE credentials as files, the application (the
namespace's `nimbix-burst.io/jarvice-app`, else the add-on's default) and the API URL; a container
that sets its own keeps them. The machine's size is what was counted, never what the pod says."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from jarvice import contract
from tests.support.budgets import NS, make_sync, namespace
from tests.support.reinvocation import env_of, patched_by
from tests.unit.webhook.builders import GPU, container, pod
from tests.unit.webhook.patch_terms import REMOTE
from webhook import admission
from webhook.mutation import build_remote_patch
from webhook.review import AdmissionRequest
from webhook.rewrite_terms import BurstTerms, RewritePolicy
from webhook.walltime import Walltime

POLICY = RewritePolicy(
    gpu_resources=(GPU,),
    remote_cpu="100m",
    remote_memory="128Mi",
    jarvice_api_url="https://cloud.example/api",
    default_app="default-app",
)
TERMS = BurstTerms(cluster="prod-0f1e2d3c4b5a", limit=Walltime(3600, "default"), app="team-app")
SECRET_VOLUME = {
    "name": contract.CREDENTIALS_VOLUME_NAME,
    "secret": {"secretName": "jarvice-credentials", "defaultMode": 0o444, "optional": True},
}
CREDENTIALS_MOUNT = {
    "name": contract.CREDENTIALS_VOLUME_NAME,
    "mountPath": "/var/run/secrets/jarvice",
    "readOnly": True,
}


def rewrite(raw: dict[str, Any], *, policy: RewritePolicy = POLICY, terms: BurstTerms = TERMS) -> dict[str, Any]:
    ops = build_remote_patch(raw, gpus={GPU: 1}, decision=REMOTE, policy=policy, terms=terms)
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(raw), ops)
    return result


def test_a_pod_with_only_its_label_and_gpu_request_gets_what_it_needs() -> None:
    out = rewrite(pod(container("train", gpus=1)))
    app = out["spec"]["containers"][0]
    env = env_of(app)
    assert env[contract.ENV_USERNAME_FILE] == "/var/run/secrets/jarvice/username"
    assert env[contract.ENV_APIKEY_FILE] == "/var/run/secrets/jarvice/apikey"
    assert env["APP_NAME"] == "team-app"
    assert env["JARVICE_API_URL"] == "https://cloud.example/api"
    assert env["NUM_GPUS"] == "1"
    assert CREDENTIALS_MOUNT in app["volumeMounts"]
    assert SECRET_VOLUME in out["spec"]["volumes"]


@pytest.mark.parametrize(
    ("own", "kept"),
    [
        ({"name": "APP_NAME", "value": "mine"}, ("APP_NAME", "mine")),
        ({"name": "JARVICE_API_URL", "value": "https://other/api"}, ("JARVICE_API_URL", "https://other/api")),
    ],
)
def test_what_the_container_sets_itself_is_kept(own: dict[str, str], kept: tuple[str, str]) -> None:
    env = env_of(rewrite(pod(container("train", gpus=1, env=[own])))["spec"]["containers"][0])
    assert env[kept[0]] == kept[1]


def test_a_container_with_its_own_credentials_gets_no_secret() -> None:
    own = [{"name": "JARVICE_APIKEY_FILE", "value": "/etc/mine/key"}]
    out = rewrite(pod(container("train", gpus=1, env=own)))
    app = out["spec"]["containers"][0]
    assert env_of(app)[contract.ENV_APIKEY_FILE] == "/etc/mine/key"
    assert contract.ENV_USERNAME_FILE not in env_of(app)
    assert all(m["name"] != contract.CREDENTIALS_VOLUME_NAME for m in app["volumeMounts"])
    assert all(v["name"] != contract.CREDENTIALS_VOLUME_NAME for v in out["spec"]["volumes"])


def test_the_add_ons_default_app_when_the_namespace_names_none() -> None:
    terms = BurstTerms(cluster="prod-0f1e2d3c4b5a", limit=Walltime(3600, "default"))
    env = env_of(rewrite(pod(container("train", gpus=1)), terms=terms)["spec"]["containers"][0])
    assert "APP_NAME" not in env  # the terms carry the app (burst.settle picks namespace, then default)


def test_without_an_add_on_url_the_secret_may_name_the_endpoint() -> None:
    policy = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi")
    env = env_of(rewrite(pod(container("train", gpus=1)), policy=policy)["spec"]["containers"][0])
    ref = {"name": "jarvice-credentials", "key": "url", "optional": True}
    assert env["JARVICE_API_URL"] == {"secretKeyRef": ref}


def test_no_secret_configured_mounts_nothing() -> None:
    policy = RewritePolicy(gpu_resources=(GPU,), remote_cpu="100m", remote_memory="128Mi", credentials_secret="")
    out = rewrite(pod(container("train", gpus=1)), policy=policy)
    assert [v["name"] for v in out["spec"]["volumes"]] == [contract.STATE_VOLUME_NAME, contract.POD_INFO_VOLUME_NAME]


@pytest.mark.parametrize(("annotation", "expected"), [("team-app", "team-app"), (None, "default-app")])
def test_the_application_is_the_namespaces_else_the_add_ons(annotation: str | None, expected: str) -> None:
    sync = make_sync(max_remote=None)
    raw_ns = namespace(NS, None)
    if annotation is not None:
        raw_ns["metadata"]["annotations"][contract.ANNOTATION_JARVICE_APP] = annotation
    assert sync.apply_event("namespaces", "MODIFIED", raw_ns) is None
    raw = pod(container("train", gpus=1), namespace=NS, name="p")
    request = AdmissionRequest(
        uid="u", operation="CREATE", kind="Pod", group="", namespace=NS, dry_run=False, object=raw
    )
    result = admission.admit(request, cache=sync.cache, policy=POLICY)
    assert result.outcome == "remote"
    assert env_of(patched_by(raw, result)["spec"]["containers"][0])["APP_NAME"] == expected
