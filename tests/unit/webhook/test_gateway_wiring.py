"""With the add-on's gateway, a burst pod carries no key: the webhook gives it a projected token of the
gateway's audience as its key, the gateway's URL and CA, and blanks any key the container brings; a
namespace that pays with its own key (`nimbix-burst.io/jarvice-account: own`) mounts its Secret as
before (docs/money-safety.md#who-holds-the-key)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jsonpatch
import pytest

from jarvice import contract
from tests.support.reinvocation import env_of
from tests.unit.webhook.builders import GPU, container, pod
from tests.unit.webhook.patch_terms import REMOTE
from webhook.model import parse_namespace
from webhook.mutation import BurstTerms, RewritePolicy, build_remote_patch
from webhook.walltime import Walltime

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
POLICY = RewritePolicy(
    gpu_resources=(GPU,),
    remote_cpu="100m",
    remote_memory="128Mi",
    gateway_url="https://nimbix-burst-gateway.nimbix-burst.svc",
    gateway_audience="nimbix-burst-gateway",
    gateway_ca=CA,
)
TERMS = BurstTerms(cluster="prod-0f1e2d3c4b5a", limit=Walltime(3600, "default"), app="team-app")
TOKEN_VOLUME = {
    "name": contract.GATEWAY_TOKEN_VOLUME_NAME,
    "projected": {
        "sources": [
            {"serviceAccountToken": {"audience": "nimbix-burst-gateway", "expirationSeconds": 600, "path": "token"}},
            # The pod's annotations beside the token: the runner sees a move-home mark there.
            {
                "downwardAPI": {
                    "items": [{"path": "pod-annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]
                }
            },
        ],
        "defaultMode": 0o444,
    },
}


def rewrite(raw: dict[str, Any], *, terms: BurstTerms = TERMS) -> dict[str, Any]:
    ops = build_remote_patch(raw, gpus={GPU: 1}, decision=REMOTE, policy=POLICY, terms=terms)
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(raw), ops)
    return result


def test_a_burst_pod_reaches_jarvice_only_through_the_gateway_with_its_own_token() -> None:
    out = rewrite(pod(container("train", gpus=1)))
    (app,) = out["spec"]["containers"]
    env = env_of(app)
    assert env["JARVICE_API_URL"] == "https://nimbix-burst-gateway.nimbix-burst.svc"
    assert env["JARVICE_USERNAME"] == "pod"
    assert env[contract.ENV_APIKEY_FILE] == "/var/run/secrets/nimbix-burst-gateway/token"
    assert env[contract.ENV_GATEWAY_CA] == CA
    assert TOKEN_VOLUME in out["spec"]["volumes"]
    assert {
        "name": contract.GATEWAY_TOKEN_VOLUME_NAME,
        "mountPath": contract.GATEWAY_TOKEN_MOUNT_PATH,
        "readOnly": True,
    } in (app["volumeMounts"])
    assert all("secret" not in v for v in out["spec"]["volumes"])


@pytest.mark.parametrize(
    "own",
    [
        [{"name": "JARVICE_APIKEY", "valueFrom": {"secretKeyRef": {"name": "jarvice-credentials", "key": "apikey"}}}],
        [{"name": "JARVICE_APIKEY", "value": "k"}, {"name": "JARVICE_USERNAME_FILE", "value": "/mine/user"}],
        [{"name": "JARVICE_API_URL", "value": "https://cloud.nimbix.net/api"}],
    ],
)
def test_a_key_or_endpoint_the_container_brings_is_replaced(own: list[dict[str, Any]]) -> None:
    env = env_of(rewrite(pod(container("train", gpus=1, env=own)))["spec"]["containers"][0])
    assert env.get("JARVICE_APIKEY", "") == "" and env.get(contract.ENV_USERNAME_FILE, "") == ""
    assert env["JARVICE_API_URL"] == "https://nimbix-burst-gateway.nimbix-burst.svc"
    assert env[contract.ENV_APIKEY_FILE] == "/var/run/secrets/nimbix-burst-gateway/token"


def test_a_namespace_that_pays_with_its_own_key_mounts_its_secret() -> None:
    out = rewrite(pod(container("train", gpus=1)), terms=dataclasses.replace(TERMS, own_account=True))
    env = env_of(out["spec"]["containers"][0])
    assert env[contract.ENV_APIKEY_FILE] == "/var/run/secrets/jarvice/apikey"
    assert "JARVICE_API_URL" not in env or env["JARVICE_API_URL"] != POLICY.gateway_url
    assert [v["name"] for v in out["spec"]["volumes"] if "secret" in v] == [contract.CREDENTIALS_VOLUME_NAME]
    assert all(v["name"] != contract.GATEWAY_TOKEN_VOLUME_NAME for v in out["spec"]["volumes"])


@pytest.mark.parametrize(
    ("annotations", "own"),
    [
        ({}, False),
        ({"nimbix-burst.io/jarvice-account": "own"}, True),
        ({"nimbix-burst.io/jarvice-account": "x"}, False),
    ],
)
def test_only_own_opts_a_namespace_out_of_the_gateway(annotations: dict[str, str], own: bool) -> None:
    raw = {"metadata": {"name": "team", "uid": "u", "annotations": annotations}}
    assert parse_namespace(raw).own_account is own
