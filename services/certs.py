"""A deployment's TLS material: its own certificate authority and one certificate per service.

Layout of a certificates directory (`hifi certs DIR`, or `hifi up`'s own under HIFI_HOME/tls):
  ca.pem, ca.key            the CA (its key signs service certificates; keep it off the hosts)
  <service>.pem, .key       a service's certificate (placement, each node, ...), valid for the
                            names given and always for localhost and 127.0.0.1
  hifi.pem, hifi.key        the certificate of a service that has none of its own
Clients need ca.pem only. Keys are EC P-256 (made in ~1 ms; RSA-2048 takes ~50 ms) and written
0600. Certificates are valid for CERT_DAYS; making them again with the same CA rotates them
without touching a client (docs/security.md, "Certificates").
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import ssl
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
CERT_DAYS = 825          # the longest a browser accepts; services are re-issued far sooner in practice
DEFAULT_SERVICE = "hifi"
LOCAL_NAMES = ("localhost", "127.0.0.1")


def _write(path: str, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load_ca(directory: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    with open(os.path.join(directory, "ca.pem"), "rb") as fh:
        cert = x509.load_pem_x509_certificate(fh.read())
    with open(os.path.join(directory, "ca.key"), "rb") as fh:
        key = serialization.load_pem_private_key(fh.read(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def _make_ca(directory: str, name: str) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} HiFi CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write(os.path.join(directory, "ca.key"), _key_bytes(key), private=True)
    _write(os.path.join(directory, "ca.pem"), cert.public_bytes(serialization.Encoding.PEM), private=False)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def issue(directory: str, service: str, hosts: Sequence[str] = ()) -> str:
    """Issue (or re-issue) `service`'s certificate for `hosts` (plus the service name and the
    local names) with the directory's CA; returns the certificate's path."""
    ca_cert, ca_key = _load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    names = list(dict.fromkeys([service, *hosts, *LOCAL_NAMES]))
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=CERT_DAYS))
            .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(os.path.join(directory, f"{service}.key"), _key_bytes(key), private=True)
    path = os.path.join(directory, f"{service}.pem")
    _write(path, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return path


def make_certificates(directory: str, services: Sequence[str] = (DEFAULT_SERVICE,), hosts: Sequence[str] = (),
                      deployment: str = "hifi") -> list[str]:
    """The CA (made once: an existing one is kept, so clients keep trusting it) and a certificate
    per service; returns the paths written."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    written = []
    if not os.path.exists(os.path.join(directory, "ca.pem")):
        _make_ca(directory, deployment)
        written.append(os.path.join(directory, "ca.pem"))
    for given in services:
        service, own = service_hosts(given)
        written.append(issue(directory, service, [*own, *hosts]))
    return written


def service_hosts(given: str) -> tuple[str, list[str]]:
    """A service as `hifi certs --service` takes it: NAME, or NAME:HOST[,HOST] with the names its
    certificate is valid for besides its own (only those: a node's key must not pass as another's).

    >>> service_hosts("door1:node-door1"), service_hosts("placement")
    (('door1', ['node-door1']), ('placement', []))
    """
    service, _, hosts = given.partition(":")
    return service, [h for h in hosts.split(",") if h]


def write_keystore(directory: str, service: str) -> str:
    """`service`'s key and certificate chain as a PKCS#12 keystore, `<service>.p12` (for a JVM
    service: the broker), locked with a new random password written beside it (`.p12.password`,
    0600; the file's mode is what protects it, the password is the JVM's requirement); its path."""
    with open(os.path.join(directory, f"{service}.key"), "rb") as fh:
        key = serialization.load_pem_private_key(fh.read(), None)
    with open(os.path.join(directory, f"{service}.pem"), "rb") as fh:
        cert = x509.load_pem_x509_certificate(fh.read())
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    password = secrets.token_urlsafe(24)
    path = os.path.join(directory, f"{service}.p12")
    _write(path, pkcs12.serialize_key_and_certificates(
        service.encode(), key, cert, [_load_ca(directory)[0]],
        serialization.BestAvailableEncryption(password.encode())), private=True)
    _write(f"{path}.password", password.encode(), private=True)
    return path


def ensure_certificates(directory: str) -> str:
    """`hifi up`'s and the tests' material: the CA and the default certificate, made on first use."""
    if not os.path.exists(os.path.join(directory, f"{DEFAULT_SERVICE}.pem")):
        make_certificates(directory)
    return directory


def service_name(directory: str, service: str) -> str:
    """Whose files `service` presents: its own, or the default service's when it has none."""
    return service if os.path.exists(os.path.join(directory, f"{service}.pem")) else DEFAULT_SERVICE


def server_paths(directory: str, service: str) -> tuple[str, str]:
    """The paths of (key, certificate chain) of `service`, or of the default service when it has none."""
    name = service_name(directory, service)
    return os.path.join(directory, f"{name}.key"), os.path.join(directory, f"{name}.pem")


def server_files(directory: str, service: str) -> tuple[bytes, bytes]:
    """(key, certificate chain) of `service`, or of the default service when it has none."""
    key_path, chain_path = server_paths(directory, service)
    with open(key_path, "rb") as key, open(chain_path, "rb") as chain:
        return key.read(), chain.read()


def server_context(directory: str, service: str) -> ssl.SSLContext:
    """A TLS server context presenting `service`'s certificate (TLS 1.2 at least)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    key, chain = server_paths(directory, service)
    context.load_cert_chain(chain, key)
    return context


def client_context(directory: str) -> ssl.SSLContext:
    """A TLS client context trusting the deployment's CA only."""
    return ssl.create_default_context(cafile=os.path.join(directory, "ca.pem"))


def ca_bytes(directory: str) -> bytes:
    with open(os.path.join(directory, "ca.pem"), "rb") as fh:
        return fh.read()


def expiry(path: str) -> dt.datetime:
    with open(path, "rb") as fh:
        return x509.load_pem_x509_certificate(fh.read()).not_valid_after_utc
