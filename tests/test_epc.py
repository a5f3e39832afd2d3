"""SGTIN-96 encoding and decoding (pure), against the GS1 Tag Data Standard's worked example."""

import pytest

from edge.epc import EpcError, Sgtin, check_digit, from_hex, from_uri

GS1_EXAMPLE_HEX = "3074257BF7194E4000001A85"   # TDS: urn:epc:tag:sgtin-96:3.0614141.812345.6789


def test_the_standards_example_encodes_and_decodes():
    tag = from_hex(GS1_EXAMPLE_HEX)
    assert tag == Sgtin("0614141", "812345", 6789, 3)
    assert tag.tag_uri == "urn:epc:tag:sgtin-96:3.0614141.812345.6789"
    assert tag.uri == "urn:epc:id:sgtin:0614141.812345.6789"
    assert tag.to_hex() == GS1_EXAMPLE_HEX
    assert from_uri(tag.tag_uri) == tag and from_uri(tag.uri, 3) == tag
    assert tag.gtin == "80614141123458"


@pytest.mark.parametrize("company", ["123456", "1234567", "12345678", "123456789", "1234567890", "12345678901",
                                     "123456789012"])
def test_every_partition_round_trips(company):
    item = "9" * (13 - len(company))
    tag = Sgtin(company, item, (1 << 38) - 1, 1)
    assert from_hex(tag.to_hex()) == tag
    assert from_uri(tag.uri, 1) == tag


def test_check_digit():
    assert check_digit("8061414112345") == 8
    assert check_digit("0001234560001") == 2


@pytest.mark.parametrize("bad, reason", [
    ("3074257BF7194E4000001A8", "24 hex digits"),
    ("3174257BF7194E4000001A85", "header 0x31"),
    ("307C257BF7194E4000001A85", "partition 7"),
    ("urn:epc:id:sgtin:614141.812345.8", "must be 7 digits"),
    ("urn:epc:id:sgtin:0614141.812345.08", "leading zero"),
    ("urn:epc:id:sgtin:0614141.812345", "is not urn:epc:id:sgtin"),
])
def test_bad_identities_say_why(bad, reason):
    with pytest.raises(EpcError, match=reason):
        from_hex(bad) if not bad.startswith("urn") else from_uri(bad)
    with pytest.raises(EpcError, match="does not fit in 38 bits"):
        Sgtin("0614141", "812345", 1 << 38)
