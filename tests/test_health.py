"""The health summary's pure rules: node states, receptor rates, per-tier series."""

from __future__ import annotations

from mdr.repository import NodeRecord
from services.health import (
    INPUT_LAGGING_S,
    LAGGING_S,
    STALE_GAUGES_S,
    TRIAGING_S,
    CountsSample,
    RateWindow,
    node_health,
    query_health,
    receptor_rates,
    tier_series,
    tiers_top_down,
)

NOW = 1_000_000


def _node(node_id: str = "door1", alive: bool = True, tier: str = "edge") -> NodeRecord:
    return NodeRecord(node_id, tier, "hq" if tier != "core" else "", (), "127.0.0.1:1", alive, NOW if alive else None)


def test_a_node_without_heartbeat_is_dead_whatever_its_statistics():
    health = node_health(_node(alive=False), {"lag_ms": 0, "updated_ms": NOW}, ["v"], NOW)
    assert (health.state, health.reason) == ("dead", "no heartbeat")


def test_a_live_node_is_lagging_when_its_events_are_old_or_its_statistics_stopped():
    assert node_health(_node(), {"lag_ms": 1000 * LAGGING_S + 1, "updated_ms": NOW}, [], NOW).state == "lagging"
    behind = node_health(_node(), {"lag_ms": 0, "input_lag_ms": 1000 * INPUT_LAGGING_S + 1, "updated_ms": NOW}, [], NOW)
    assert behind.state == "lagging" and "input waits" in behind.reason
    stale = node_health(_node(), {"lag_ms": 0, "updated_ms": NOW - 1000 * STALE_GAUGES_S - 1}, [], NOW)
    assert stale.state == "lagging" and "no statistics" in stale.reason
    fine = node_health(_node(), {"lag_ms": 3000, "updated_ms": NOW - 500, "rows_in": 7, "dead": 2,
                                 "archive_bytes": 5000.0, "uplink_queued_bytes": 300.0}, ["a"], NOW)
    assert (fine.state, fine.reason, fine.rows_in, fine.dead_lettered, fine.lag_s, fine.views) == \
        ("alive", "", 7, 2, 3.0, ("a",))
    assert (fine.archive_bytes, fine.uplink_queued_bytes) == (5000, 300)


def test_a_node_that_left_records_out_recently_is_triaging_then_alive_again():
    stats = {"lag_ms": 0, "updated_ms": NOW, "triaged": 1234, "triaged_at_ms": NOW - 2000}
    triaging = node_health(_node(), stats, [], NOW)
    assert triaging.state == "triaging" and "1,234 records left out" in triaging.reason and triaging.triaged == 1234
    later = node_health(_node(), {**stats, "triaged_at_ms": NOW - 1000 * TRIAGING_S - 1}, [], NOW)
    assert later.state == "alive" and later.triaged == 1234


def test_a_live_node_with_a_failed_part_is_failed_not_alive():
    health = node_health(_node(), {"lag_ms": 0, "updated_ms": NOW, "failed_parts": 1}, [], NOW)
    assert health.state == "failed" and "1 query part" in health.reason
    assert node_health(_node(alive=False), {"failed_parts": 1}, [], NOW).state == "dead"


def test_a_query_is_failed_with_the_cause_of_each_failed_part_it_has():
    remote = {"door1": ["view.p1", "view.p2"], "hq": ["q1.final"]}
    parts = {"door1": {"view.p2": {"error": "RuntimeError: disk full", "restarts": 1}, "other": {"error": "x"}}}
    assert query_health(remote, parts, "running") == ("FAILED", "door1/view.p2: RuntimeError: disk full")
    assert query_health(remote, {"door1": {"other": {"error": "x"}}}, "running") == ("running", "")


def test_a_query_on_a_dead_node_waits_for_it_unless_a_part_failed():
    remote = {"door1": ["view.p1"], "hq": ["q1.final"]}
    assert query_health(remote, {}, "running", dead={"door1", "door9"}) == (
        "WAITING", "door1 is dead; its parts run again when it is back")
    failed = {"hq": {"q1.final": {"error": "boom"}}}
    assert query_health(remote, failed, "running", dead={"door1"})[0] == "FAILED", "a failure says more"


def test_receptor_rates_are_count_differences_over_the_span():
    earlier = CountsSample(0, {"r1": {"reads": 100, "cycles": 10, "weak": 5}, "r2": {"reads": 50, "cycles": 5}})
    later = CountsSample(5000, {"r1": {"reads": 600, "cycles": 35, "weak": 30}, "r2": {"reads": 50, "cycles": 5},
                                "r3": {"reads": 10, "cycles": 2, "weak": 0}})
    rates = receptor_rates(earlier, later)
    assert rates["r1"].reads_per_s == 100.0 and rates["r1"].cycle_ms == 200.0 and rates["r1"].weak_share == 0.05
    assert not rates["r1"].silent
    assert rates["r2"].silent and rates["r2"].cycle_ms is None and rates["r2"].weak_share is None
    assert rates["r3"].reads_per_s == 2.0   # new since the earlier sample: counted from zero


def test_a_rate_window_measures_over_at_least_its_span():
    window = RateWindow(span_ms=5000)
    assert window.add(CountsSample(0, {"r": {"reads": 0, "cycles": 0}})) == {}
    for second in range(1, 11):
        rates = window.add(CountsSample(1000 * second, {"r": {"reads": 10 * second, "cycles": 5 * second}}))
        assert rates["r"].reads_per_s == 10.0
    assert 5000 <= window.samples[-1].ms - window.samples[0].ms < 6000
    # the reader stops: silent once a whole span passed without a cycle
    for second in range(11, 17):
        rates = window.add(CountsSample(1000 * second, {"r": {"reads": 100, "cycles": 50}}))
    assert rates["r"].silent and rates["r"].reads_per_s == 0.0


def test_tier_series_sums_rates_and_takes_the_largest_lag_per_second():
    histories = {
        "door1": [{"ms": 1000, "input_rate": 10.0, "lag_ms": 500}, {"ms": 2100, "input_rate": 12.0, "lag_ms": 400}],
        "door2": [{"ms": 1200, "input_rate": 5.0, "lag_ms": 900}, {"ms": 100, "input_rate": 99.0, "lag_ms": 0}],
        "hq": [{"ms": 1500, "input_rate": 1.0, "lag_ms": 30_000}],
        "gone": [{"ms": 1500, "input_rate": 1.0, "lag_ms": 0}],
    }
    series = tier_series(histories, {"door1": "edge", "door2": "edge", "hq": "core"}, since_ms=500)
    assert series == {"edge": [{"t": 1000, "rate": 15.0, "lag_s": 0.9}, {"t": 2000, "rate": 12.0, "lag_s": 0.4}],
                      "core": [{"t": 1000, "rate": 1.0, "lag_s": 30.0}]}


def test_nodes_are_listed_core_first():
    nodes = [node_health(_node(n, tier=t), {}, [], NOW) for n, t in
             [("door2", "edge"), ("hq", "core"), ("door1", "edge"), ("wh", "aggregation")]]
    assert [n.id for n in tiers_top_down(nodes)] == ["hq", "wh", "door1", "door2"]
