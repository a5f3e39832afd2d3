"""EPC SGTIN-96 tag identities (GS1 EPC Tag Data Standard): the 96-bit binary encoding as hex,
the pure-identity URI `urn:epc:id:sgtin:<company>.<item>.<serial>` and the tag URI
`urn:epc:tag:sgtin-96:<filter>.<company>.<item>.<serial>`. Pure.

Layout (most significant bit first): header 8 bits (0x30), filter 3, partition 3, company prefix
and item reference 44 bits together (the partition says how they are split), serial 38.
The company prefix has L digits (6-12) and the item reference (indicator digit first) 13 - L.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wire.errors import HiFiError

HEADER = 0x30
SERIAL_BITS = 38
# partition -> (company prefix bits, company prefix digits, item reference bits, item reference digits)
PARTITIONS = {
    0: (40, 12, 4, 1), 1: (37, 11, 7, 2), 2: (34, 10, 10, 3), 3: (30, 9, 14, 4),
    4: (27, 8, 17, 5), 5: (24, 7, 20, 6), 6: (20, 6, 24, 7),
}
_PARTITION_OF_DIGITS = {digits: p for p, (_, digits, _, _) in PARTITIONS.items()}
_PURE_URI = re.compile(r"urn:epc:id:sgtin:(\d+)\.(\d+)\.(\d+)")
_TAG_URI = re.compile(r"urn:epc:tag:sgtin-96:(\d)\.(\d+)\.(\d+)\.(\d+)")


class EpcError(HiFiError):
    """A tag identity that is not a valid SGTIN-96; the message says why."""


@dataclass(frozen=True)
class Sgtin:
    company_prefix: str     # 6-12 digits, leading zeros significant
    item_reference: str     # 13 - len(company_prefix) digits, the indicator digit first
    serial: int             # 0 <= serial < 2**38
    filter: int = 0         # 0 all others, 1 point of sale item, 2 case, 3 pallet, ...

    def __post_init__(self) -> None:
        if not self.company_prefix.isdigit() or len(self.company_prefix) not in _PARTITION_OF_DIGITS:
            raise EpcError(f"company prefix {self.company_prefix!r} must be 6 to 12 digits")
        if not self.item_reference.isdigit() or len(self.company_prefix) + len(self.item_reference) != 13:
            raise EpcError(f"item reference {self.item_reference!r} must be {13 - len(self.company_prefix)} digits "
                           f"with a {len(self.company_prefix)}-digit company prefix")
        if not 0 <= self.serial < 1 << SERIAL_BITS:
            raise EpcError(f"serial {self.serial} does not fit in {SERIAL_BITS} bits")
        if not 0 <= self.filter <= 7:
            raise EpcError(f"filter {self.filter} must be 0-7")

    @property
    def uri(self) -> str:
        return f"urn:epc:id:sgtin:{self.company_prefix}.{self.item_reference}.{self.serial}"

    @property
    def tag_uri(self) -> str:
        return f"urn:epc:tag:sgtin-96:{self.filter}.{self.company_prefix}.{self.item_reference}.{self.serial}"

    @property
    def gtin(self) -> str:
        """The product's GTIN-14 (indicator, company prefix, item reference, check digit)."""
        body = self.item_reference[0] + self.company_prefix + self.item_reference[1:]
        return body + str(check_digit(body))

    def to_hex(self) -> str:
        partition = _PARTITION_OF_DIGITS[len(self.company_prefix)]
        company_bits, _, item_bits, _ = PARTITIONS[partition]
        value = HEADER
        for part, bits in ((self.filter, 3), (partition, 3), (int(self.company_prefix), company_bits),
                           (int(self.item_reference), item_bits), (self.serial, SERIAL_BITS)):
            value = (value << bits) | part
        return f"{value:024X}"


def check_digit(digits: str) -> int:
    """GS1 mod-10 check digit: weights 3, 1, 3, ... from the rightmost digit."""
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(digits)))
    return (10 - total % 10) % 10


def from_hex(text: str) -> Sgtin:
    """Decode a 96-bit SGTIN as 24 hex digits."""
    if not re.fullmatch(r"[0-9A-Fa-f]{24}", text):
        raise EpcError(f"{text!r} is not 24 hex digits (96 bits)")
    value = int(text, 16)
    if value >> 88 != HEADER:
        raise EpcError(f"header 0x{value >> 88:02X} is not SGTIN-96 (0x30)")
    filter_value = (value >> 85) & 0b111
    partition = (value >> 82) & 0b111
    if partition not in PARTITIONS:
        raise EpcError(f"partition {partition} is not 0-6")
    company_bits, company_digits, item_bits, item_digits = PARTITIONS[partition]
    company = (value >> (SERIAL_BITS + item_bits)) & ((1 << company_bits) - 1)
    item = (value >> SERIAL_BITS) & ((1 << item_bits) - 1)
    if company >= 10 ** company_digits or item >= 10 ** item_digits:
        raise EpcError(f"company prefix {company} or item reference {item} has too many digits for partition "
                       f"{partition}")
    return Sgtin(f"{company:0{company_digits}d}", f"{item:0{item_digits}d}", value & ((1 << SERIAL_BITS) - 1),
                 filter_value)


def from_uri(text: str, filter_value: int = 0) -> Sgtin:
    """Parse a pure-identity URI (`filter_value` is not part of it) or a tag URI."""
    tag = _TAG_URI.fullmatch(text)
    if tag:
        return Sgtin(tag.group(2), tag.group(3), _serial(tag.group(4)), int(tag.group(1)))
    pure = _PURE_URI.fullmatch(text)
    if not pure:
        raise EpcError(f"{text!r} is not urn:epc:id:sgtin:<company>.<item>.<serial> "
                       f"or urn:epc:tag:sgtin-96:<filter>.<company>.<item>.<serial>")
    return Sgtin(pure.group(1), pure.group(2), _serial(pure.group(3)), filter_value)


def _serial(text: str) -> int:
    if len(text) > 1 and text.startswith("0"):
        raise EpcError(f"serial {text!r} has a leading zero (SGTIN-96 serials are plain integers)")
    return int(text)
