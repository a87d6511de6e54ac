"""With the add-on's gateway, a burst pod carries no key: the webhook gives it a projected token of the
gateway's audience as its key, the gateway's URL and CA, and blanks any key the container brings; a
namespace that pays with its own key (`nimbix-burst.io/jarvice-account: own`) mounts its Secret as
before (docs/money-safety.md#who-holds-the-key)."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import jsonpatch
import pytest

from jarvice import contract
from tests.support.reinvocation import env_of
from tests.unit.webhook.builders import GPU, container, pod
from tests.unit.webhook.patch_terms import REMOTE
from webhook.model import parse_namespace
from webhook.mutation import build_remote_patch
from webhook.rewrite_terms import BurstTerms, RewritePolicy
from webhook.settings import SettingsError, parse_settings
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


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGatewayHostKey"
SFTP_POLICY = dataclasses.replace(
    POLICY, gateway_sftp="nimbix-burst-gateway.nimbix-burst.svc:2222", gateway_ssh_host_key=HOST_KEY
)
STAGING = dataclasses.replace(TERMS, staging=(("train", "/w/data", "/w/out"),))


def staged(raw: dict[str, Any], *, terms: BurstTerms = STAGING, policy: RewritePolicy = SFTP_POLICY) -> dict[str, str]:
    ops = build_remote_patch(raw, gpus={GPU: 1}, decision=REMOTE, policy=policy, terms=terms)
    return env_of(jsonpatch.apply_patch(copy.deepcopy(raw), ops)["spec"]["containers"][0])


def test_a_staging_burst_pod_stages_through_the_gateway_with_nothing_but_its_annotations() -> None:
    env = staged(pod(container("train", gpus=1)))
    assert env[contract.ENV_VAULT_SFTP] == "nimbix-burst-gateway.nimbix-burst.svc:2222"
    assert env[contract.ENV_VAULT_HOST_KEY] == HOST_KEY
    assert env.get(contract.ENV_VAULT_KNOWN_HOSTS, "") == ""
    # The password is the pod's token, the API key it already reads from its file.
    assert env[contract.ENV_APIKEY_FILE] == "/var/run/secrets/nimbix-burst-gateway/token"


def test_a_vault_the_container_names_is_replaced_by_the_gateways() -> None:
    own = [
        {"name": contract.ENV_VAULT_SFTP, "value": "vault.example:22"},
        {"name": contract.ENV_VAULT_KNOWN_HOSTS, "value": "/etc/vault/known_hosts"},
        {"name": contract.ENV_VAULT_HOST_KEY, "value": "ssh-ed25519 AAAAother"},
    ]
    env = staged(pod(container("train", gpus=1, env=own)))
    assert env[contract.ENV_VAULT_SFTP] == SFTP_POLICY.gateway_sftp
    assert env[contract.ENV_VAULT_HOST_KEY] == HOST_KEY
    assert env.get(contract.ENV_VAULT_KNOWN_HOSTS, "") == ""


@pytest.mark.parametrize(
    ("terms", "policy"),
    [
        pytest.param(TERMS, SFTP_POLICY, id="a-container-that-stages-nothing"),
        pytest.param(dataclasses.replace(STAGING, own_account=True), SFTP_POLICY, id="a-namespace-with-its-own-key"),
        pytest.param(STAGING, POLICY, id="a-gateway-without-an-sftp-endpoint"),
    ],
)
def test_otherwise_the_vault_is_left_as_the_container_says(terms: BurstTerms, policy: RewritePolicy) -> None:
    own = [{"name": contract.ENV_VAULT_SFTP, "value": "vault.example:22"}]
    env = staged(pod(container("train", gpus=1, env=own)), terms=terms, policy=policy)
    assert env[contract.ENV_VAULT_SFTP] == "vault.example:22"
    assert contract.ENV_VAULT_HOST_KEY not in env


GATEWAY_ENV = {"WEBHOOK_GATEWAY_URL": "https://10.0.0.53"}


def test_the_gateways_sftp_endpoint_and_host_key_are_settings() -> None:
    env = {**GATEWAY_ENV, "WEBHOOK_GATEWAY_SFTP": "10.0.0.53:2222", "WEBHOOK_GATEWAY_SSH_HOST_KEY": HOST_KEY + " gw"}
    policy = parse_settings([], env, check_files=False).policy
    assert (policy.gateway_sftp, policy.gateway_ssh_host_key) == ("10.0.0.53:2222", HOST_KEY)
    assert parse_settings([], GATEWAY_ENV, check_files=False).policy.gateway_sftp == ""


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"WEBHOOK_GATEWAY_SFTP": "10.0.0.53:2222", "WEBHOOK_GATEWAY_SSH_HOST_KEY": HOST_KEY}, "needs --gateway-url"),
        ({**GATEWAY_ENV, "WEBHOOK_GATEWAY_SFTP": "10.0.0.53"}, "must be host:port"),
        ({**GATEWAY_ENV, "WEBHOOK_GATEWAY_SFTP": "10.0.0.53:2222"}, "--gateway-ssh-host-key: must be"),
        ({**GATEWAY_ENV, "WEBHOOK_GATEWAY_SSH_HOST_KEY": HOST_KEY}, "--gateway-sftp: '' must be host:port"),
        ({**GATEWAY_ENV, "WEBHOOK_GATEWAY_SFTP": "gw:2222", "WEBHOOK_GATEWAY_SSH_HOST_KEY": "AAAA"}, "public SSH"),
    ],
)
def test_a_half_given_sftp_endpoint_is_refused_saying_what_to_fix(env: dict[str, str], says: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(says)):
        parse_settings([], env, check_files=False)


POD_INFO_VOLUME = {
    "name": contract.POD_INFO_VOLUME_NAME,
    "projected": {
        "sources": [
            {"downwardAPI": {"items": [{"path": "pod-annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}
        ],
        "defaultMode": 0o444,
    },
}


@pytest.mark.parametrize(
    ("own_account", "env"),
    [
        (False, []),  # through the gateway
        (True, []),  # the namespace's Secret, mounted
        (
            True,
            [
                {
                    "name": "JARVICE_APIKEY",
                    "valueFrom": {"secretKeyRef": {"name": "jarvice-credentials", "key": "apikey"}},
                }
            ],
        ),
    ],
)
def test_every_burst_container_sees_the_pods_annotations_whichever_way_it_pays(
    own_account: bool, env: list[dict[str, Any]]
) -> None:
    """The runner sees the controller's move-home mark in the pod's annotations: a pod that stages its
    data with its namespace's own key moves home as one that pays through the gateway does."""
    terms = dataclasses.replace(TERMS, own_account=own_account)
    out = rewrite(pod(container("train", gpus=1, env=env)), terms=terms)
    (app,) = out["spec"]["containers"]
    path = f"{contract.POD_INFO_MOUNT_PATH}/{contract.POD_ANNOTATIONS_FILE}"
    assert env_of(app)[contract.ENV_POD_ANNOTATIONS_FILE] == path
    assert POD_INFO_VOLUME in out["spec"]["volumes"]
    mount = {"name": contract.POD_INFO_VOLUME_NAME, "mountPath": contract.POD_INFO_MOUNT_PATH, "readOnly": True}
    assert mount in app["volumeMounts"]
