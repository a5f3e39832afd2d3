"""Parts only the placement service made: it signs every part it sends a node, and a node runs a
part only with that signature, whoever hands it over.

A node takes parts from three places: a `Deploy` call (any caller with the `service` role: every
node holds one), its desired state in the MDR (writable by whoever holds a Redis user with its key
pattern), and a dead node's desired state it adopts. A token or a Redis password taken from one
container must not let its holder run a plan of its own on another node (reading any stream,
writing any topic), so the right to say what runs is the placement service's key, not a role.

The signature is ECDSA P-256 / SHA-256 over `PartSpec.signed_bytes()` (the part as its node runs
it, node and id included) with the placement service's TLS key (services.certs: `placement.key`,
or the deployment's default `hifi.key` where services share one, as in `hifi up`). A node checks it
with the placement certificate, itself checked against the deployment's CA: a node needs no
secret to check, and none it holds can sign. ~0.1 ms to sign, ~0.2 ms to check (one part).

A node stops a part on the placement service's word too (`cancel_bytes`: the node, the part and
when it was said, refused once older than CANCEL_VALID_MS), so a compromised container cannot stop
what runs elsewhere either.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from base.part_spec import PartSpec, signature_in
from services import certs
from wire.errors import HiFiError
from wire.topics import part_id_problem

log = logging.getLogger("hifi.signing")

SIGNER = "placement"
SIGNERS = (SIGNER, certs.DEFAULT_SERVICE)   # the certificate names a signing key may have
SIGNATURE = ec.ECDSA(hashes.SHA256())
CANCEL_VALID_MS = 300_000   # a word to cancel outlives any retry of it, and a clock's skew


def cancel_bytes(node: str, query_id: str, issued_ms: int) -> bytes:
    """What the placement service signs to stop part `query_id` on `node`, said at `issued_ms`.

    >>> cancel_bytes("door1", "q1", 5)
    b'{"cancel":"q1","issued_ms":5,"node":"door1"}'
    """
    return json.dumps({"cancel": query_id, "issued_ms": issued_ms, "node": node},
                      sort_keys=True, separators=(",", ":")).encode()


class UnsignedPart(HiFiError):
    """A part its node may not run: the placement service did not sign it as given."""


class PartSigner:
    """The placement service's side: its TLS key signs each part it sends."""

    def __init__(self, tls_dir: str) -> None:
        key, _ = certs.server_files(tls_dir, SIGNER)
        loaded = serialization.load_pem_private_key(key, None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        self._key = loaded

    def sign(self, part: PartSpec) -> bytes:
        return self._key.sign(part.signed_bytes(), SIGNATURE)

    def sign_cancel(self, node: str, query_id: str, issued_ms: int) -> bytes:
        return self._key.sign(cancel_bytes(node, query_id, issued_ms), SIGNATURE)


class PartVerifier:
    """A node's side: the placement certificate's key, read again when the file changes (a
    deployment's certificates re-issued with the same CA)."""

    def __init__(self, tls_dir: str) -> None:
        self.tls_dir = tls_dir
        self._loaded: tuple[float, ec.EllipticCurvePublicKey] | None = None

    def check(self, part: PartSpec, signature: bytes) -> None:
        """Raise UnsignedPart unless the placement service signed `part` for its node as it is."""
        if not signature:
            raise UnsignedPart(f"part {part.query_id} is not signed: a node runs only what the placement "
                               "service signed")
        if not self._signed(part.signed_bytes(), signature):
            raise UnsignedPart(f"part {part.query_id}'s signature is not the placement service's over this part "
                               f"on {part.node}: it was changed, or signed for another node")

    def check_cancel(self, node: str, query_id: str, issued_ms: int, signature: bytes, now_ms: int) -> None:
        """Raise UnsignedPart unless the placement service said lately to stop `query_id` on `node`."""
        if not signature:
            raise UnsignedPart(f"the cancel of {query_id} is not signed: a node stops a part only on the "
                               "placement service's word")
        if abs(now_ms - issued_ms) > CANCEL_VALID_MS:
            raise UnsignedPart(f"the cancel of {query_id} was said {(now_ms - issued_ms) / 1000:.0f} s ago: "
                               f"it holds for {CANCEL_VALID_MS // 1000} s")
        if not self._signed(cancel_bytes(node, query_id, issued_ms), signature):
            raise UnsignedPart(f"the cancel of {query_id} is not the placement service's word for {node}")

    def _signed(self, data: bytes, signature: bytes) -> bool:
        try:
            self._public_key().verify(signature, data, SIGNATURE)
            return True
        except InvalidSignature:
            return False

    def _public_key(self) -> ec.EllipticCurvePublicKey:
        path = os.path.join(self.tls_dir, f"{certs.service_name(self.tls_dir, SIGNER)}.pem")
        changed = os.stat(path).st_mtime
        if self._loaded is None or self._loaded[0] != changed:
            self._loaded = (changed, _signer_key(path, os.path.join(self.tls_dir, "ca.pem")))
        return self._loaded[1]


def _signer_key(path: str, ca_path: str) -> ec.EllipticCurvePublicKey:
    """The public key of the certificate at `path`, once it is proven a signer's issued by the CA."""
    with open(path, "rb") as fh:
        cert = x509.load_pem_x509_certificate(fh.read())
    with open(ca_path, "rb") as fh:
        ca = x509.load_pem_x509_certificate(fh.read())
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise UnsignedPart(f"{path} is not issued by the deployment's CA: no part can be checked") from None
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    key = cert.public_key()
    if not set(names) & set(SIGNERS) or not isinstance(key, ec.EllipticCurvePublicKey):
        raise UnsignedPart(f"{path} is not the placement service's certificate ({', '.join(map(str, names))})")
    return key


def signed_parts(entries: Mapping[str, str], node: str,
                 verifier: PartVerifier) -> tuple[list[PartSpec], dict[str, str]]:
    """The desired-state entries of `node` (the MDR's query id -> JSON) the placement service signed,
    as parts in query id order, and why each other entry is refused (query id -> the reason)."""
    parts, refused = [], {}
    for query_id, text in sorted(entries.items()):
        try:
            if problem := part_id_problem(query_id):
                raise UnsignedPart(problem)
            part = PartSpec.from_json(query_id, text, node)
            verifier.check(part, signature_in(text))
            parts.append(part)
        except (HiFiError, ValueError, KeyError, TypeError) as exc:   # a malformed entry is refused alike
            refused[query_id] = str(exc) if isinstance(exc, HiFiError) else f"part {query_id} is malformed: {exc!r}"
    return parts, refused


class Refusals:
    """The desired parts a node refused, each logged once while it stays refused (a node reads the
    MDR's desired state every round: its own, and that of each dead node it adopts)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._reasons: dict[str, dict[str, str]] = {}   # whose desired state -> query id -> reason

    def report(self, owner: str, refused: Mapping[str, str]) -> None:
        seen = self._reasons.get(owner, {})
        for query_id, reason in refused.items():
            if seen.get(query_id) != reason:
                whose = "" if owner == self.node else f" of {owner}"
                log.error("node %s: a desired part%s is refused: %s", self.node, whose, reason)
        self._reasons[owner] = dict(refused)
