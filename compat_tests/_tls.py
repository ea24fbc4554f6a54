"""A test certificate authority and the certificates of the secured-listener suites.

Theory of operation
-------------------
Everything here is made at test time in a temporary directory and never checked
in: ``TestPki.create(dir)`` makes a CA (ECDSA P-256, self-signed), a server
certificate for ``127.0.0.1`` and ``localhost`` (both in the subjectAltName, so
hostname verification holds whichever name a client dials) and one client
certificate per name asked for (``CN=<name>,OU=compat,O=kcompat-tests``). The
files are PEM, the one format every client under test reads:

- ``ca.pem``: the CA certificate (trust store of brokers and clients);
- ``<name>.key`` (PKCS#8, unencrypted) and ``<name>.crt`` (leaf then CA);
- ``<name>.keystore.pem``: key and chain in one file, what Kafka's
  ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` reads (broker and
  Java clients alike), without ``ssl.key.password`` since the key is clear.

A client certificate of a second, untrusted CA (``stranger``) is there to
prove that the broker checks the chain and not only that a certificate came.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 2
SERVER_NAME = "broker"
UNTRUSTED_NAME = "stranger"


@dataclass(frozen=True)
class Identity:
    """One key pair with its certificate chain, as files."""

    name: str
    key: Path
    chain: Path
    keystore: Path  # key + chain in one PEM file

    def key_pem(self) -> str:
        return self.key.read_text()

    def chain_pem(self) -> str:
        return self.chain.read_text()


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if ou is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kcompat-tests"))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
             ) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class _Ca:
    def __init__(self, cn: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.subject = _name(cn)
        ski = x509.SubjectKeyIdentifier.from_public_key(self.key.public_key())
        self.cert = (_builder(self.subject, self.subject, self.key)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(
                         digital_signature=True, content_commitment=False, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                     .add_extension(ski, critical=False)
                     .sign(self.key, hashes.SHA256()))

    def issue(self, subject: x509.Name, server: bool
              ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        # a broker's certificate serves its listeners and, on the inter-broker link,
        # is its client certificate too (mutual TLS between brokers)
        usage = ([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server
                 else [ExtendedKeyUsageOID.CLIENT_AUTH])
        b = (_builder(subject, self.subject, key)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 self.key.public_key()), critical=False))
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.DNSName("localhost")]), critical=False)
        return key, b.sign(self.key, hashes.SHA256())


@dataclass(frozen=True)
class TestPki:
    """The files of one test PKI (see the module docstring)."""

    __test__ = False  # not a pytest class

    ca: Path
    server: Identity
    clients: dict[str, Identity]
    untrusted: Identity  # a client certificate the broker's CA never signed

    @staticmethod
    def create(directory: Path, client_names: tuple[str, ...] = ("alice",)) -> TestPki:
        directory.mkdir(parents=True, exist_ok=True)
        ca = _Ca("kcompat test CA")
        ca_path = directory / "ca.pem"
        ca_path.write_bytes(_cert_pem(ca.cert))
        server = _write(directory, SERVER_NAME, ca, *ca.issue(_name("127.0.0.1", "broker"), True))
        clients = {n: _write(directory, n, ca, *ca.issue(_name(n, "compat"), False))
                   for n in client_names}
        other = _Ca("some other CA")
        untrusted = _write(directory, UNTRUSTED_NAME, other,
                           *other.issue(_name(UNTRUSTED_NAME, "compat"), False))
        return TestPki(ca_path, server, clients, untrusted)


def _write(directory: Path, name: str, ca: _Ca, key: ec.EllipticCurvePrivateKey,
           cert: x509.Certificate) -> Identity:
    key_pem, chain_pem = _key_pem(key), _cert_pem(cert) + _cert_pem(ca.cert)
    ident = Identity(name, directory / f"{name}.key", directory / f"{name}.crt",
                     directory / f"{name}.keystore.pem")
    ident.key.write_bytes(key_pem)
    ident.key.chmod(0o600)
    ident.chain.write_bytes(chain_pem)
    ident.keystore.write_bytes(key_pem + chain_pem)
    ident.keystore.chmod(0o600)
    return ident
