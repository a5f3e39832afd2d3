"""A node runs only parts the placement service signed (services.part_signing): with the
deployment's real TLS material, a signed part passes in either of its forms; no signature, one
over another node's or another id's part, a part changed after signing, a signature by another
service's key and a certificate from another CA are each refused with the reason."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace

import pytest

from base.part_spec import PartSpec, signature_in
from base.plan import RAW_RFID_SOURCE_COLUMNS, Source
from services.certs import make_certificates
from services.part_signing import CANCEL_VALID_MS, PartSigner, PartVerifier, UnsignedPart, signed_parts

PART = PartSpec("q1-final", Source(("hifi.raw.door1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 1000),
                "hifi.results.door1.q1", "door1", "final", readers=("ann", "role:operator"))


@pytest.fixture
def tls(tmp_path) -> str:
    make_certificates(str(tmp_path), ("placement", "door1"))
    return str(tmp_path)


def _refusal(verifier: PartVerifier, part: PartSpec, signature: bytes) -> str:
    with pytest.raises(UnsignedPart) as refused:
        verifier.check(part, signature)
    return str(refused.value)


def test_a_signed_part_passes_in_both_forms_and_every_change_is_refused(tls):
    signature = PartSigner(tls).sign(PART)
    verifier = PartVerifier(tls)
    verifier.check(PartSpec.from_proto(PART.to_proto(signature=signature), "door1"), signature)
    text = PART.to_json(signature)
    verifier.check(PartSpec.from_json(PART.query_id, text, "door1"), signature_in(text))

    assert "is not signed" in _refusal(verifier, PART, b"")
    for changed in (replace(PART, node="door2"), replace(PART, query_id="q2-final"),
                    replace(PART, topic="hifi.results.door1.q2"), replace(PART, readers=("*",)),
                    replace(PART, priority=9)):
        assert "was changed, or signed for another node" in _refusal(verifier, changed, signature)


def test_a_cancel_holds_only_for_its_node_and_part_and_only_for_a_while(tls):
    signer, verifier, now = PartSigner(tls), PartVerifier(tls), 1_000_000_000
    word = signer.sign_cancel("door1", "q1", now)
    verifier.check_cancel("door1", "q1", now, word, now + CANCEL_VALID_MS)
    refused = [("door2", "q1", now, word, now), ("door1", "q2", now, word, now), ("door1", "q1", now + 1, word, now),
               ("door1", "q1", now, b"", now), ("door1", "q1", now, word, now + CANCEL_VALID_MS + 1)]
    reasons = []
    for args in refused:
        with pytest.raises(UnsignedPart) as raised:
            verifier.check_cancel(*args)
        reasons.append(str(raised.value))
    assert reasons[0].endswith("is not the placement service's word for door2")
    assert all(r.endswith("is not the placement service's word for door1") for r in reasons[1:3])
    assert "is not signed" in reasons[3] and "holds for 300 s" in reasons[4]


def test_only_the_placement_services_key_signs_and_only_the_deployments_ca_vouches_for_it(tls, tmp_path_factory):
    door = tmp_path_factory.mktemp("door")   # a node's key made to pose as the placement service's
    for name in ("ca.pem", "door1.key", "door1.pem"):
        shutil.copy(os.path.join(tls, name), door / name.replace("door1", "placement"))
    forged = PartSigner(str(door)).sign(PART)
    assert "was changed, or signed for another node" in _refusal(PartVerifier(tls), PART, forged)

    elsewhere = str(tmp_path_factory.mktemp("elsewhere"))   # another deployment's placement certificate
    make_certificates(elsewhere, ("placement",))
    shutil.copy(os.path.join(tls, "ca.pem"), os.path.join(elsewhere, "ca.pem"))
    assert "not issued by the deployment's CA" in _refusal(PartVerifier(elsewhere), PART, forged)


def test_desired_entries_are_parts_only_as_signed_and_the_others_are_refused_with_the_reason(tls):
    signer = PartSigner(tls)
    other = replace(PART, query_id="q2-final", topic="hifi.results.door1.q2")
    entries = {PART.query_id: PART.to_json(signer.sign(PART)), "q2-final": other.to_json(),
               "q3-final": "{not json", "..": PART.to_json(signer.sign(PART))}
    parts, refused = signed_parts(entries, "door1", PartVerifier(tls))
    assert parts == [PART]
    assert set(refused) == {"q2-final", "q3-final", ".."}
    assert "is not signed" in refused["q2-final"] and "malformed" in refused["q3-final"]
