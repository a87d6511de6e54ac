"""Test PKI: a CA, serving and client certificates, and a service-account signing key.

Key generation and certificate building are pure (bytes in, bytes out); only the ``write_*``
functions touch the filesystem. Everything is PEM: certificates as ``CERTIFICATE``, private keys as
unencrypted PKCS#8 ``PRIVATE KEY``, which Go (kube-apiserver, etcd, kubectl) and Python's ``ssl``
module all accept.

Certificates use EC P-256 keys (fast to generate, accepted everywhere). The service-account key is
RSA 2048 because RS256 is what every token consumer supports.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# A test CA outlives any test run or dev session by a wide margin.
CA_VALIDITY_DAYS = 3650
# Tolerates small clock differences between the test host and the components verifying the cert.
BACKDATE = datetime.timedelta(minutes=5)
# Private keys must not be readable by other users, even in a scratch directory.
PRIVATE_KEY_MODE = 0o600
PUBLIC_FILE_MODE = 0o644
# RS256 service-account tokens; 2048 bits is the smallest size kube-apiserver is happy with.
SERVICE_ACCOUNT_KEY_BITS = 2048


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True, slots=True)
class SigningKeyPair:
    """A bare key pair with no certificate (the service-account token signing key), both PEM.

    kube-apiserver takes the public half as ``--service-account-key-file`` and the private half as
    ``--service-account-signing-key-file``; kube-controller-manager takes the private half as
    ``--service-account-private-key-file``.
    """

    public_key_pem: bytes
    private_key_pem: bytes


def make_ca(common_name: str) -> KeyPair:
    """Builds a self-signed CA that can sign serving and client certificates."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=CA_VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_private_pem(key))


def issue_cert(
    ca: KeyPair,
    *,
    common_name: str,
    organization: str | None = None,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    days: int = 365,
) -> KeyPair:
    """Issues a leaf certificate signed by ``ca``.

    ``organization`` becomes the subject O, which Kubernetes reads as the user's group
    (``system:masters`` for an admin). ``server``/``client`` select the extended key usages; a
    certificate can be both. With neither, the certificate carries no extended key usage at all.
    """
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise TypeError("CA key must be an EC or RSA private key")

    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        subject.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    usages = _extended_key_usages(server=server, client=client)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    names = _subject_alternative_names(dns_names=dns_names, ip_addresses=ip_addresses)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_private_pem(key))


def make_service_account_keypair() -> SigningKeyPair:
    """Builds the RSA key pair that signs and verifies service-account tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=SERVICE_ACCOUNT_KEY_BITS)
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return SigningKeyPair(public_key_pem=public_pem, private_key_pem=_private_pem(key))


def write_pair(pair: KeyPair, *, cert_path: Path, key_path: Path) -> None:
    """Writes a certificate (mode 0644) and its key (mode 0600), creating parent directories."""
    _write_file(cert_path, pair.cert_pem, mode=PUBLIC_FILE_MODE)
    _write_file(key_path, pair.key_pem, mode=PRIVATE_KEY_MODE)


def write_signing_pair(pair: SigningKeyPair, *, public_key_path: Path, private_key_path: Path) -> None:
    """Writes a bare key pair: the public key (mode 0644) and the private key (mode 0600)."""
    _write_file(public_key_path, pair.public_key_pem, mode=PUBLIC_FILE_MODE)
    _write_file(private_key_path, pair.private_key_pem, mode=PRIVATE_KEY_MODE)


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Signatures for every certificate; certificate and CRL signing only for the CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _extended_key_usages(*, server: bool, client: bool) -> list[x509.ObjectIdentifier]:
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    return usages


def _subject_alternative_names(*, dns_names: Sequence[str], ip_addresses: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names.extend(x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses)
    return names


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_file(path: Path, data: bytes, *, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Open with the final mode so a private key is never briefly world-readable; chmod covers an
    # existing file that had a looser mode.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    path.chmod(mode)
