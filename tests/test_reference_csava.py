"""The central CSAVA chain the end-to-end test judges the standing views by (pure)."""

from glue.reference import csava_location_counts

LOCATIONS = {"a1": "dock", "a2": "dock", "b1": "shelf"}


def _reads(receptor: str, tag: str, ts: int, n: int, strength: float = 0.6) -> list[dict]:
    return [{"receptor_id": receptor, "tag_id": tag, "read_strength": strength, "ts": ts + i} for i in range(n)]


def test_each_tag_counts_once_per_window_where_it_was_read_most():
    readings = (_reads("a1", "t1", 0, 3) + _reads("b1", "t1", 10, 2)      # t1: dock wins 3 to 2
                + _reads("a2", "t2", 0, 2) + _reads("b1", "t2", 0, 2)     # t2: tie, smallest receptor id (a2)
                + _reads("b1", "t3", 0, 1)                                # t3: below count_T
                + _reads("b1", "t4", 0, 5, strength=0.1)                  # t4: cleaned away
                + _reads("b1", "t3", 2000, 2))                            # t3 in the next window
    counts = csava_location_counts(readings, strength_t=0.2, count_t=2, window_ms=2000, locations=LOCATIONS)
    assert counts == {(0, "dock"): 2, (2000, "shelf"): 1}


def test_validation_alerts_on_counts_outside_the_expected_range_and_analysis_summarizes_long_windows():
    from glue.reference import location_trends, stock_alerts

    counts = {(0, "dock"): 3, (2000, "dock"): 12, (4000, "dock"): 9, (2000, "door"): 1, (22_000, "door"): 0}
    expected = {"dock": (1, 10), "door": (1, 10)}
    assert stock_alerts(counts, expected) == {(2000, "dock", 12), (22_000, "door", 0)}
    assert stock_alerts(counts, {}) == set()            # a location with no rule raises nothing
    trends = location_trends(counts, 20_000)
    assert trends[(0, "dock")] == (8.0, 3, 12, 3) and trends[(20_000, "door")] == (0.0, 0, 0, 1)
