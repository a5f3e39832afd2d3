"""`hifi nodes` and `hifi status` on a hierarchy of a hundred nodes and more: the nodes a pattern,
a tier or `--problems` pick, with their receptors and the queries rooted at them, the ones not
well first, each table at most `--limit` rows and a line saying how many more (services.narrowing)."""

from services.narrowing import Narrowing, narrowed_status

NODES = ["hq", *(f"wh-{w}" for w in range(10)), *(f"wh-{w}-door-{d}" for w in range(10) for d in range(12))]


def _status() -> tuple[dict, list[str]]:
    def tier(node: str) -> str:
        return "core" if node == "hq" else "edge" if "door" in node else "aggregation"

    lagging = {"wh-3-door-7", "wh-8"}
    nodes = (["node", "tier", "state", "rows in"],
             [[n, tier(n), "LAGGING" if n in lagging else "alive", 1] for n in NODES])
    receptors = (["receptor", "node", "reads"], [[f"{n}-r{i}", n, 5] for n in NODES if "door" in n for i in range(2)])
    queries = (["query", "root", "text"], [["q1", "hq", "SELECT 1"], ["q2", "wh-3", "SELECT 2"]])
    problems = [f"{n}: lagging (lag 130 s)" for n in sorted(lagging)]
    return {"nodes": nodes, "receptors": receptors, "queries": queries}, problems


def test_nothing_asked_shows_every_row_the_ones_not_well_first():
    tables, lines = narrowed_status(*_status(), Narrowing())
    assert len(tables["nodes"][1]) == 131 and len(tables["receptors"][1]) == 240 and len(tables["queries"][1]) == 2
    assert [row[0] for row in tables["nodes"][1][:2]] == ["wh-8", "wh-3-door-7"]   # in their order
    assert lines == ["wh-3-door-7: lagging (lag 130 s)", "wh-8: lagging (lag 130 s)"]


def test_a_pattern_picks_the_nodes_and_their_receptors_and_queries():
    tables, lines = narrowed_status(*_status(), Narrowing(node="wh-3*"))
    assert {row[0] for row in tables["nodes"][1]} == {"wh-3", *(f"wh-3-door-{d}" for d in range(12))}
    assert {row[1] for row in tables["receptors"][1]} == {f"wh-3-door-{d}" for d in range(12)}
    assert [row[0] for row in tables["queries"][1]] == ["q2"] and lines == ["wh-3-door-7: lagging (lag 130 s)"]


def test_problems_and_a_tier_pick_the_nodes_not_well_and_a_limit_says_how_many_more():
    tables, lines = narrowed_status(*_status(), Narrowing(problems=True))
    assert [row[0] for row in tables["nodes"][1]] == ["wh-8", "wh-3-door-7"] and len(tables["receptors"][1]) == 2
    tables, lines = narrowed_status(*_status(), Narrowing(tier="edge", limit=25))
    assert len(tables["nodes"][1]) == 25 and tables["nodes"][1][0][0] == "wh-3-door-7"
    assert len(tables["receptors"][1]) == 25 and not tables["queries"][1]
    assert lines[-2:] == ["… 95 more nodes (--limit, or narrow with --node, --tier, --problems)",
                          "… 215 more receptors (--limit, or narrow with --node, --tier, --problems)"]
