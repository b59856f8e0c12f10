"""The secured stack's own CA and its brokers' TLS certificate, made once in the secrets folder.

EC P-256 keys, unencrypted PKCS#8 (what Kafka's PEM key store reads; a PEM store takes no store password), files
0600. The brokers' certificate names 127.0.0.1 as an IP address: librdkafka and Java both check an IP literal
against the certificate's IP entries, and refuse a certificate that names only `localhost`.
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

from kappa.core.security import write_secret_file

VALID_DAYS = 825  # what browsers accept for a leaf; the CA lives ten years


@dataclass(frozen=True)
class StackCertificates:
    ca: Path  # the CA's certificate: every client's trust
    broker_store: Path  # the brokers' key and certificate chain, Kafka's PEM key store


def ensure_certificates(folder: Path) -> StackCertificates:
    """The CA and the brokers' certificate in `folder`, made if missing (kept across `kappa up`, so clients'
    trust holds; `kappa down --purge` deletes them with the stack)."""
    paths = StackCertificates(ca=folder / "ca.pem", broker_store=folder / "broker.pem")
    if paths.ca.is_file() and paths.broker_store.is_file():
        return paths
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kappa local stack CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kappa broker")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    ca_pem = ca_cert.public_bytes(pem).decode()
    # The CA's key is not kept: a new broker certificate comes with a new CA (a purged stack).
    write_secret_file(paths.broker_store, key_pem + leaf.public_bytes(pem).decode() + ca_pem)
    write_secret_file(paths.ca, ca_pem)
    return paths
