"""devplatform/cluster/pki.py: certificates chain to the CA and carry the names and usages asked for."""

from __future__ import annotations

import contextlib
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from devplatform.cluster import pki


@pytest.fixture(scope="module")
def ca() -> pki.KeyPair:
    return pki.make_ca("unit-test-ca")


def _load(pair: pki.KeyPair) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pair.cert_pem)


def test_ca_is_a_self_signed_certificate_authority(ca: pki.KeyPair) -> None:
    cert = _load(ca)
    cert.verify_directly_issued_by(cert)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "unit-test-ca"


def test_issued_cert_is_signed_by_its_ca_only(ca: pki.KeyPair) -> None:
    leaf = _load(pki.issue_cert(ca, common_name="leaf", server=True))
    leaf.verify_directly_issued_by(_load(ca))
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    impostor = pki.make_ca("unit-test-ca")  # same name, different key
    with pytest.raises(InvalidSignature):
        leaf.verify_directly_issued_by(_load(impostor))


def test_subject_alternative_names_are_present(ca: pki.KeyPair) -> None:
    leaf = _load(
        pki.issue_cert(
            ca,
            common_name="kube-apiserver",
            dns_names=("localhost", "kubernetes.default.svc"),
            ip_addresses=("127.0.0.1", "10.0.0.1"),
            server=True,
        )
    )
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "kubernetes.default.svc"]
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("10.0.0.1"),
    ]


@pytest.mark.parametrize(
    ("server", "client", "expected"),
    [
        (True, False, {ExtendedKeyUsageOID.SERVER_AUTH}),
        (False, True, {ExtendedKeyUsageOID.CLIENT_AUTH}),
        (True, True, {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}),
    ],
    ids=["server", "client", "both"],
)
def test_extended_key_usage_follows_flags(
    ca: pki.KeyPair, server: bool, client: bool, expected: set[x509.ObjectIdentifier]
) -> None:
    leaf = _load(pki.issue_cert(ca, common_name="x", server=server, client=client))
    assert set(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == expected


def test_no_usage_flags_means_no_extended_key_usage(ca: pki.KeyPair) -> None:
    leaf = _load(pki.issue_cert(ca, common_name="x"))
    with pytest.raises(x509.ExtensionNotFound):
        leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage)


def test_organization_becomes_subject_o(ca: pki.KeyPair) -> None:
    leaf = _load(pki.issue_cert(ca, common_name="admin", organization="system:masters", client=True))
    assert leaf.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"


def test_private_key_matches_certificate(ca: pki.KeyPair) -> None:
    pair = pki.issue_cert(ca, common_name="x", client=True)
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    assert key.public_key() == _load(pair).public_key()


def test_python_ssl_accepts_the_pair_and_verifies_the_ip_san(ca: pki.KeyPair, tmp_path: Path) -> None:
    # A full TLS handshake over memory BIOs: no sockets, but the real verification path.
    server_pair = pki.issue_cert(ca, common_name="srv", ip_addresses=("127.0.0.1",), server=True)
    pki.write_pair(server_pair, cert_path=tmp_path / "srv.crt", key_path=tmp_path / "srv.key")
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    client_context = ssl.create_default_context(cadata=ca.cert_pem.decode())

    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(client_in, client_out, server_hostname="127.0.0.1")
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    assert client.version() is not None
    assert server.version() is not None


def test_write_pair_restricts_the_key_file(ca: pki.KeyPair, tmp_path: Path) -> None:
    pair = pki.issue_cert(ca, common_name="x", server=True)
    cert_path, key_path = tmp_path / "a" / "x.crt", tmp_path / "a" / "x.key"
    pki.write_pair(pair, cert_path=cert_path, key_path=key_path)
    assert cert_path.read_bytes() == pair.cert_pem
    assert key_path.read_bytes() == pair.key_pem
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cert_path.stat().st_mode) == 0o644


def test_service_account_keypair_is_matching_rsa(tmp_path: Path) -> None:
    pair = pki.make_service_account_keypair()
    private = serialization.load_pem_private_key(pair.private_key_pem, password=None)
    public = serialization.load_pem_public_key(pair.public_key_pem)
    assert isinstance(private, rsa.RSAPrivateKey)
    assert private.public_key() == public
    pki.write_signing_pair(pair, public_key_path=tmp_path / "sa.pub", private_key_path=tmp_path / "sa.key")
    assert stat.S_IMODE((tmp_path / "sa.key").stat().st_mode) == 0o600
