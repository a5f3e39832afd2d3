"""The supply-chain world: pallets holding cases holding items, tagged with SGTIN-96, moving
through the chain's locations, with staged events recorded as ground truth. Pure and
deterministic for a seed.

A pallet (with its cases and their items) arrives at the inbound dock and moves, together, to a
warehouse shelf, the outbound door and a truck; at the store's backroom its cases are unpacked
and every item goes to the store shelf on its own, stays there for a while, and is either bought
(checkout, then store exit) or taken out without a checkout read (staged shoplifting). A staged
missing pallet leaves on the truck and never reaches the store. Dwell times are drawn around the
configured mean (seconds to minutes). Outside its stays a tag is "away" (nowhere a reader sees).
A repeating world (`repeat`) keeps shipping a pallet every arrival gap for as long as it is asked
about, so a long run always has tags moving.
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from dataclasses import dataclass

from edge.epc import Sgtin

AWAY = "away"
CHAIN = ("inbound-dock", "warehouse-shelf", "outbound-door", "truck", "store-backroom", "store-shelf", "checkout",
         "store-exit")
UNPACKED_AT = "store-backroom"
FILTERS = {"pallet": 6, "case": 2, "item": 1, "person": 0}   # GS1 filters: unit load, case, POS item, other
INDICATORS = {"pallet": "2", "case": "1", "item": "0", "person": "8"}
WALKED = tuple(location for location in CHAIN if location != "truck")   # where people (staff badges) go


@dataclass(frozen=True)
class Stay:
    location: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class TagInfo:
    tag_id: str          # the pure-identity URI readers report
    epc_hex: str         # the 96-bit encoding on the tag
    kind: str            # pallet | case | item | person
    parent: str          # the case of an item, the pallet of a case ("" for a pallet)


@dataclass(frozen=True)
class StagedEvent:
    kind: str            # shoplifting | pallet-missing
    t_ms: int
    tag_id: str
    location: str


@dataclass(frozen=True)
class ChainConfig:
    seed: int = 1
    start_ms: int = 0
    pallets: int = 2
    cases_per_pallet: int = 2
    items_per_case: int = 4
    products: int = 3
    arrival_gap_ms: int = 20_000     # between pallet arrivals
    dwell_ms: int = 10_000           # mean stay at each location
    shelf_ms: int = 30_000           # mean time an item stays on the store shelf
    shoplifting_share: float = 0.0   # items taken out without a checkout read
    missing_pallets: int = 0         # pallets that leave on the truck and never arrive
    repeat: bool = False             # after the last pallet, start over (new serials): runs forever
    people: int = 0                  # staff badges, walking among the locations (all but the truck)
    people_dwell_ms: int = 20_000    # mean time a person stays in one place
    company_prefix: str = "0614141"

    def __post_init__(self) -> None:
        if not 0.0 <= self.shoplifting_share <= 1.0:
            raise ValueError(f"shoplifting_share {self.shoplifting_share} is outside [0, 1]")
        if not 0 <= self.missing_pallets <= self.pallets:
            raise ValueError(f"missing_pallets {self.missing_pallets} must be between 0 and pallets ({self.pallets})")
        if self.people < 0:
            raise ValueError(f"people must not be negative (got {self.people})")
        for name in ("pallets", "cases_per_pallet", "items_per_case", "products", "dwell_ms", "shelf_ms",
                     "people_dwell_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive (got {getattr(self, name)})")
        tags = self.pallets * (1 + self.cases_per_pallet * (1 + self.items_per_case)) + self.people
        if tags > MAX_TAGS:   # a round's tags are made at once: more would only exhaust memory
            raise ValueError(f"pallets × cases × items and people make {tags:,} tags a round, more than "
                             f"{MAX_TAGS:,}")


MAX_TAGS = 1_000_000   # tags of one round of pallets (and people) a world may hold


class SupplyChainWorld:
    BUCKET_MS = 1000   # the time index's granularity

    def __init__(self, config: ChainConfig) -> None:
        self.config = config
        self.tags: dict[str, TagInfo] = {}
        self.itineraries: dict[str, list[Stay]] = {}
        self.events: list[StagedEvent] = []
        self._serials: dict[str, int] = defaultdict(int)
        self._index: dict[tuple[str, int], list[tuple[str, Stay]]] = defaultdict(list)
        self._starts: dict[str, list[int]] = {}
        # One generator for the whole schedule, drawn from pallet by pallet in order, so the world
        # is the same however far (and in what steps) a repeating world has been extended.
        self._rng = random.Random(config.seed)
        self._missing = set(self._rng.sample(range(config.pallets), config.missing_pallets))
        self._shipped = 0
        for _ in range(config.pallets):
            self._ship_next()
        # Each person walks with a generator of their own: where they are never depends on how
        # far, or in what steps, the world has been asked about.
        self._walkers = {self._tag("person", 0, ""): random.Random(f"{config.seed}:person:{n}")
                         for n in range(config.people)}
        self.advance_to(config.start_ms)

    # ------------------------------------------------------------ building

    def _tag(self, kind: str, product: int, parent: str) -> str:
        reference = INDICATORS[kind] + f"{product:0{12 - len(self.config.company_prefix)}d}"
        self._serials[reference] += 1
        sgtin = Sgtin(self.config.company_prefix, reference, self._serials[reference], FILTERS[kind])
        self.tags[sgtin.uri] = TagInfo(sgtin.uri, sgtin.to_hex(), kind, parent)
        self.itineraries[sgtin.uri] = []
        return sgtin.uri

    def _dwell(self, rng: random.Random, mean_ms: int) -> int:
        return max(1000, int(rng.uniform(0.5, 1.5) * mean_ms))

    def _indexed(self, tag: str, stays: list[Stay]) -> None:
        self._starts.setdefault(tag, []).extend(s.start_ms for s in stays)
        for stay in stays:
            for bucket in range(stay.start_ms // self.BUCKET_MS, (stay.end_ms - 1) // self.BUCKET_MS + 1):
                self._index[(stay.location, bucket)].append((tag, stay))

    def _ship_next(self) -> None:
        number = self._shipped
        self._shipped += 1
        before = len(self.tags)
        self._ship(number, self._rng, number % self.config.pallets in self._missing)
        for tag in list(self.tags)[before:]:
            self._indexed(tag, self.itineraries[tag])

    def _walk(self, person: str, t_ms: int) -> None:
        stays = self.itineraries[person]
        rng = self._walkers[person]
        added = []
        while not stays or stays[-1].end_ms <= t_ms:
            start = stays[-1].end_ms if stays else self.config.start_ms
            stays.append(Stay(rng.choice(WALKED), start, start + self._dwell(rng, self.config.people_dwell_ms)))
            added.append(stays[-1])
        self._indexed(person, added)

    def advance_to(self, t_ms: int) -> None:
        """Plan the world up to `t_ms`: people's walks, and in a repeating world every pallet that
        arrives by then (a world that does not repeat ships all its pallets at once)."""
        c = self.config
        while c.repeat and c.start_ms + self._shipped * c.arrival_gap_ms <= t_ms:
            self._ship_next()
        for person in self._walkers:
            self._walk(person, t_ms)

    def people_at(self, location: str, t_ms: int) -> list[str]:
        return [tag for tag in self.tags_at(location, t_ms) if self.tags[tag].kind == "person"]

    def _ship(self, number: int, rng: random.Random, goes_missing: bool) -> None:
        c = self.config
        product = number % c.products
        pallet = self._tag("pallet", product, "")
        cases = [self._tag("case", product, pallet) for _ in range(c.cases_per_pallet)]
        items = {case: [self._tag("item", product, case) for _ in range(c.items_per_case)] for case in cases}
        together = [pallet, *cases, *(i for case in cases for i in items[case])]
        t = c.start_ms + number * c.arrival_gap_ms
        for location in CHAIN[:CHAIN.index(UNPACKED_AT)]:
            end = t + self._dwell(rng, c.dwell_ms)
            for tag in together:
                self.itineraries[tag].append(Stay(location, t, end))
            t = end
        if goes_missing:
            self.events.append(StagedEvent("pallet-missing", t, pallet, UNPACKED_AT))
            return
        end = t + self._dwell(rng, c.dwell_ms)
        for tag in together:
            self.itineraries[tag].append(Stay(UNPACKED_AT, t, end))
        for case in cases:
            for item in items[case]:
                self._sell(item, end, rng)

    def _sell(self, item: str, t: int, rng: random.Random) -> None:
        c = self.config
        shelf_end = t + self._dwell(rng, c.shelf_ms)
        self.itineraries[item].append(Stay("store-shelf", t, shelf_end))
        if rng.random() < c.shoplifting_share:
            self.events.append(StagedEvent("shoplifting", shelf_end, item, "store-exit"))
            path = ("store-exit",)
        else:
            path = ("checkout", "store-exit")
        t = shelf_end
        for location in path:
            end = t + self._dwell(rng, 2000)
            self.itineraries[item].append(Stay(location, t, end))
            t = end

    # ------------------------------------------------------------ asking

    def location_of(self, tag_id: str, t_ms: int) -> str:
        self.advance_to(t_ms)
        stays = self.itineraries[tag_id]
        at = bisect.bisect_right(self._starts[tag_id], t_ms) - 1
        return stays[at].location if at >= 0 and t_ms < stays[at].end_ms else AWAY

    def tags_at(self, location: str, t_ms: int) -> list[str]:
        self.advance_to(t_ms)
        return sorted({tag for tag, stay in self._index.get((location, t_ms // self.BUCKET_MS), ())
                       if stay.start_ms <= t_ms < stay.end_ms})

    @property
    def end_ms(self) -> int:
        """When the last stay planned so far ends (a repeating world plans more as it is asked)."""
        return max(stays[-1].end_ms for stays in self.itineraries.values())
