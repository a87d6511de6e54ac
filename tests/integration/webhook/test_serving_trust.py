"""The webhook refuses to start with a serving certificate its own CA does not vouch for.

The peer CA (leader election's WEBHOOK_PEER_CA_FILE) is the CA the API server is given as well:
cert-manager's ca.crt, or, without cert-manager, the Helm chart's tls.caBundle. A serving certificate
that CA does not sign for the Service's name would fail every review; with failurePolicy Ignore every
pod would then be admitted unchanged and nothing would burst. So the process exits at start, with a
log line that says why, and `helm install --wait` fails instead.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devplatform.cluster.pki import KeyPair, issue_cert, make_ca, write_pair
from devplatform.cluster.processes import free_port
from kubeplumbing.tls import find_serving_problem
from tests.support.deadlines import HANG_SECONDS, PROGRAM_EXIT_SECONDS
from webhook.settings import SettingsError, parse_settings

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ROOT = Path(__file__).resolve().parents[3]
SERVICE = "nimbix-burst-webhook.nimbix-burst.svc"


def write_tls(tls_dir: Path, *, signer: KeyPair, trusted: KeyPair, names: list[str]) -> Path:
    """tls.crt/tls.key signed by `signer` for `names`; ca.crt is `trusted` (returned)."""
    serving = issue_cert(signer, common_name="nimbix-burst-webhook", dns_names=names, server=True)
    tls_dir.mkdir(parents=True, exist_ok=True)
    write_pair(serving, cert_path=tls_dir / "tls.crt", key_path=tls_dir / "tls.key")
    (tls_dir / "ca.crt").write_bytes(trusted.cert_pem)
    return tls_dir / "ca.crt"


def test_a_certificate_its_ca_signed_for_the_name_is_trusted(tmp_path: Path) -> None:
    ca = make_ca("right-ca")
    ca_file = write_tls(tmp_path, signer=ca, trusted=ca, names=[SERVICE])
    assert find_serving_problem(tmp_path, ca_file=ca_file, server_name=SERVICE) is None


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("another-ca", "unable to get local issuer certificate"),
        ("another-name", "Hostname mismatch"),
        ("key-of-another-certificate", "cannot load"),
        ("no-ca-file", "cannot load the CA"),
    ],
)
def test_a_certificate_a_client_would_refuse_is_named_with_the_reason(tmp_path: Path, case: str, expected: str) -> None:
    ca = make_ca("right-ca")
    signer = make_ca("another-ca") if case == "another-ca" else ca
    names = ["localhost"] if case == "another-name" else [SERVICE]
    ca_file = write_tls(tmp_path, signer=signer, trusted=ca, names=names)
    if case == "key-of-another-certificate":
        (tmp_path / "tls.key").write_bytes(issue_cert(ca, common_name="other", dns_names=[SERVICE]).key_pem)
    if case == "no-ca-file":
        ca_file.unlink()
    problem = find_serving_problem(tmp_path, ca_file=ca_file, server_name=SERVICE)
    assert problem is not None and expected in problem


LEADER_ELECTION_ENV = {
    "WEBHOOK_LEADER_ELECTION": "true",
    "POD_NAMESPACE": "nimbix-burst",
    "POD_NAME": "webhook-0",
    "POD_IP": "127.0.0.1",
    "WEBHOOK_PEER_SERVER_NAME": SERVICE,
}


def test_a_missing_peer_ca_file_says_where_the_ca_comes_from(tmp_path: Path) -> None:
    ca = make_ca("right-ca")
    write_tls(tmp_path, signer=ca, trusted=ca, names=[SERVICE]).unlink()  # a `kubectl create secret tls`
    with pytest.raises(SettingsError) as caught:
        parse_settings([], {**LEADER_ELECTION_ENV, "WEBHOOK_TLS_DIR": str(tmp_path)})
    assert list(caught.value.problems) == [
        f"--peer-ca-file: {tmp_path / 'ca.crt'} does not exist (the CA that signed the serving certificate, "
        "which replicas trust when they forward to the leader: ca.crt in the serving certificate's Secret, as "
        "cert-manager writes it, or the file the Helm chart mounts from tls.caBundle)"
    ]


def test_the_webhook_exits_at_start_saying_its_certificate_is_not_trusted(tmp_path: Path) -> None:
    write_tls(tmp_path, signer=make_ca("another-ca"), trusted=make_ca("right-ca"), names=[SERVICE])
    env = {
        **os.environ,
        **LEADER_ELECTION_ENV,
        "WEBHOOK_TLS_DIR": str(tmp_path),
        "WEBHOOK_PORT": str(free_port()),
        "WEBHOOK_GPU_MODELS_FILE": "",
    }
    started = subprocess.run(
        [sys.executable, "-m", "webhook"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROGRAM_EXIT_SECONDS,
        check=False,
    )
    assert started.returncode == 3, started.stderr
    output = started.stdout + started.stderr
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    refusal = next(line for line in lines if line.get("message") == "serving certificate not trusted by its CA")
    assert refusal["levelname"] == "ERROR" and refusal["server_name"] == SERVICE
    assert "unable to get local issuer certificate" in refusal["problem"]
