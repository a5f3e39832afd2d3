"""The supply-chain world (pure): packaging, SGTIN identities, itineraries and staged events."""

import pytest

from edge.epc import from_hex, from_uri
from edge.supply_chain import AWAY, CHAIN, ChainConfig, SupplyChainWorld


def _world(**overrides):
    return SupplyChainWorld(ChainConfig(**{"seed": 7, "pallets": 4, "shoplifting_share": 0.25,
                                           "missing_pallets": 1, **overrides}))


def test_tags_are_sgtin_96_and_nest_pallet_case_item():
    world = _world()
    kinds = [info.kind for info in world.tags.values()]
    assert kinds.count("pallet") == 4 and kinds.count("case") == 8 and kinds.count("item") == 32
    for info in world.tags.values():
        assert from_hex(info.epc_hex).uri == info.tag_id and from_uri(info.tag_id).company_prefix == "0614141"
        if info.kind != "pallet":
            parent = world.tags[info.parent]
            assert parent.kind == {"case": "pallet", "item": "case"}[info.kind]


def test_a_tag_is_in_one_place_at_a_time_and_moves_along_the_chain():
    world = _world()
    for tag, stays in world.itineraries.items():
        assert all(a.end_ms <= b.start_ms for a, b in zip(stays, stays[1:], strict=False)), tag
        order = [CHAIN.index(s.location) for s in stays]
        assert order == sorted(order), tag
    for t in range(0, world.end_ms, 997):
        for location in CHAIN:
            assert all(world.location_of(tag, t) == location for tag in world.tags_at(location, t))
    assert world.location_of(next(iter(world.tags)), world.end_ms + 1) == AWAY


def test_staged_events_are_recorded_once_and_happen():
    world = _world()
    missing = [e for e in world.events if e.kind == "pallet-missing"]
    assert len(missing) == 1
    lost = [t for t, info in world.tags.items() if t == missing[0].tag_id or info.parent == missing[0].tag_id
            or world.tags.get(info.parent) and world.tags[info.parent].parent == missing[0].tag_id]
    assert len(lost) == 1 + 2 + 8 and all(world.itineraries[t][-1].location == "truck" for t in lost)
    lifted = [e for e in world.events if e.kind == "shoplifting"]
    assert lifted and len({e.tag_id for e in lifted}) == len(lifted)
    for event in lifted:
        path = [s.location for s in world.itineraries[event.tag_id]]
        assert path[-2:] == ["store-shelf", "store-exit"] and "checkout" not in path
    bought = [t for t, info in world.tags.items() if info.kind == "item" and "checkout" in
              [s.location for s in world.itineraries[t]]]
    assert len(bought) + len(lifted) == 32 - 8


def test_the_world_is_deterministic_for_a_seed_and_checks_its_configuration():
    assert _world().itineraries == _world().itineraries
    assert _world(seed=8).itineraries != _world().itineraries
    with pytest.raises(ValueError, match="shoplifting_share 2 is outside"):
        ChainConfig(shoplifting_share=2)
    with pytest.raises(ValueError, match="missing_pallets 5 must be between 0 and pallets"):
        ChainConfig(pallets=4, missing_pallets=5)


def test_a_repeating_world_keeps_shipping_and_is_the_same_however_it_is_advanced():
    config = ChainConfig(seed=3, pallets=2, arrival_gap_ms=5_000, repeat=True)
    stepped, leaped = SupplyChainWorld(config), SupplyChainWorld(config)
    for t in range(0, 60_001, 250):
        stepped.advance_to(t)
    leaped.advance_to(60_000)
    assert stepped.itineraries == leaped.itineraries and stepped.events == leaped.events
    assert len({info.parent for info in leaped.tags.values() if info.kind == "case"}) == 13  # pallets 0..12
    assert leaped.tags_at("inbound-dock", 55_500) and len(set(leaped.tags)) == len(leaped.tags)
