"""HiFi SQL front end (pure): parsing, binding to the catalog, precise errors."""

import pytest

from base.plan import BinOp, Col, Func, Lit, Window
from glue.analyzer import analyze
from glue.logical_query import Arbitration, Smoothing
from glue.sql import ast
from glue.sql.lexer import SqlError
from glue.sql.parser import parse
from tests.catalogs import supply_chain_catalog

PAPER_CLEANED = """CREATE VIEW cleaned_rfid_stream AS
(SELECT receptor_id, tag_id
 FROM rfid_stream rs
 WHERE read_strength >= strength_T)"""

PAPER_SMOOTHED = """CREATE VIEW smoothed_rfid_stream AS
(SELECT receptor_id, tag_id
 FROM cleaned_rfid_stream
 [range by 't1', slide by 't2']
 GROUP BY receptor_id, tag_id
 HAVING count(*) >= count_T)"""

PAPER_PRODUCT_COUNTS = """CREATE VIEW product_counts AS
(SELECT receptor_id,
 count (distinct tag_id)
 FROM smoothed_rfid_stream rs
 [range by 't3', slide by 't4']
 GROUP BY receptor_id, tag_id
 HAVING count(*) >= ALL
 (SELECT count(*)
  FROM smoothed_rfid_stream
  [range by 't3', slide by 't4']
  WHERE tag_id = rs.tag_id
  GROUP BY receptor_id))"""


@pytest.fixture()
def catalog():
    c = supply_chain_catalog()
    c.parameters.update({"t3": "4 seconds", "t4": "2 seconds"})
    return c


def test_the_papers_three_views_parse_as_printed():
    for text in (PAPER_CLEANED, PAPER_SMOOTHED, PAPER_PRODUCT_COUNTS):
        statement = parse(text)
        assert isinstance(statement, ast.CreateView)
    having = parse(PAPER_PRODUCT_COUNTS).select.having
    assert isinstance(having, ast.CompareAll) and having.subquery.where.right == ast.Name(
        "tag_id", "rs", having.subquery.where.right.pos)


def test_the_papers_views_bind_with_deployment_parameters(catalog):
    cleaned = analyze(PAPER_CLEANED, catalog)
    strength_t = float(catalog.parameters["strength_T"])   # the topology's, 0.45
    assert cleaned.predicate == BinOp(">=", Col("read_strength"), Lit(strength_t)) and not cleaned.is_aggregate
    smoothed = analyze(PAPER_SMOOTHED, catalog)  # over the definition-only cleaned view: expanded
    assert smoothed.source == "rfid_stream" and smoothed.window == Window(2000, 2000)
    assert smoothed.predicate == cleaned.predicate
    assert smoothed.having == BinOp(">=", Col("count"), Lit(1))
    counts = analyze(PAPER_PRODUCT_COUNTS, catalog)
    assert counts.source_kind == "view" and counts.window == Window(4000, 2000)
    assert counts.arbitration == Arbitration(by="tag_id", winner="receptor_id")
    assert counts.keys == ("receptor_id",)
    assert [name for name, _ in counts.outputs] == ["receptor_id", "count_distinct_tag_id"]


WEIGHED = ("SELECT receptor_id, count(DISTINCT tag_id) AS tags FROM smoothed_rfid_stream rs [range by '2 seconds'] "
           "GROUP BY receptor_id, tag_id HAVING sum(reads) >= ALL (SELECT sum(reads) FROM smoothed_rfid_stream "
           "[range by '2 seconds'] WHERE tag_id = rs.tag_id GROUP BY receptor_id)")


def test_arbitration_can_weigh_rows_by_a_column(catalog):
    assert analyze(WEIGHED, catalog).arbitration == Arbitration(by="tag_id", winner="receptor_id", weight="reads")


@pytest.mark.parametrize("text, message", [
    ("SELECT tag_id FROM rfid_streem", "line 1, column 20: unknown stream or view 'rfid_streem'"),
    ("SELECT colour FROM rfid_stream", "line 1, column 8: unknown column 'colour'"),
    ("SELECT tag_id FROM rfid_stream WHERE", "line 1, column 37: expected a value, column or aggregate, found end"),
    ("SELECT tag_id, count(*) FROM rfid_stream GROUP BY tag_id", "needs a window"),
    ("SELECT receptor_id, tag_id, count(*) FROM rfid_stream [range by '2 seconds'] GROUP BY receptor_id",
     "column 'tag_id' must appear in GROUP BY"),
    ("SELECT median(read_strength) FROM rfid_stream [range by '2 seconds']", "unknown function 'median'"),
    ("SELECT sum(tag_id) AS s FROM rfid_stream [range by '2 seconds']", "sum(tag_id) needs a numeric column"),
    ("SELECT tag_id FROM rfid_stream [range by 'soon']", "line 1, column 42: cannot read duration 'soon'"),
    ("SELECT tag_id FROM rfid_stream [range by '1 second', slide by '2 seconds']", "0 < slide <= range"),
    ("SELECT receptor_id, count(*) AS n FROM smoothed_rfid_stream [range by '3 seconds'] GROUP BY receptor_id",
     "cannot be derived from view 'smoothed_rfid_stream'"),
    ("SELECT tag_id FROM receptor_locations", "is a static relation"),
    ("SELECT location FROM rfid_stream JOIN shelves USING (receptor_id)", "unknown static relation 'shelves'"),
    ("SELECT 'unterminated FROM rfid_stream", "line 1, column 8: unterminated quoted text"),
    ("SELECT tag_id FROM rfid_stream\n WHERE tag_id = ?", "line 2, column 17: unexpected character '?'"),
    ("SELECT tag_id, tag_id FROM rfid_stream", "two output columns are named 'tag_id'"),
    ("SELECT receptor_id, count(*) FROM rfid_stream r [range by '2 seconds'] GROUP BY receptor_id, tag_id "
     "HAVING count(*) >= ALL (SELECT max(read_strength) FROM rfid_stream)", "only ALL form supported"),
    (WEIGHED.replace("SELECT sum(reads) FROM", "SELECT count(*) FROM"), "must select the same measure as HAVING"),
    (WEIGHED.replace("sum(reads)", "sum(tag_id)"), "weighs rows by a numeric column ('tag_id' is string)"),
    ("SELECT tag_id FROM rfid_stream [adaptive '1 second']", "line 1, column 42: expected EPOCH"),
    ("SELECT tag_id FROM rfid_stream [adaptive epoch '1 second', delta 2]",
     "line 1, column 66: delta is the chance of missing a present tag: 0 < delta < 1"),
    ("SELECT tag_id FROM smoothed_rfid_stream [adaptive epoch '1 second']",
     "line 1, column 41: adaptive smoothing reads RFID readings"),
    ("SELECT tag_id, read_strength FROM rfid_stream [adaptive epoch '1 second']", "unknown column 'read_strength'"),
    ("SELECT tag_id FROM rfid_stream [adaptive epoch '1 second'] JOIN receptor_locations USING (location)",
     "join column 'location' must be in both"),
    ("SELECT tag_id FROM rfid_stream WHERE read_strength > 0.5 EMIT CHANGES",
     "line 1, column 58: EMIT CHANGES is for windowed rows"),
    ("SELECT tag_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] GROUP BY tag_id EMIT CHANGES BY antenna",
     "line 1, column 102: EMIT CHANGES BY antenna: not a column of the select list"),
    ("SELECT count(*) AS n FROM rfid_stream [range by '2 seconds'] GROUP BY tag_id EMIT CHANGES",
     "line 1, column 78: EMIT CHANGES: GROUP BY tag_id is not selected"),
    ("SELECT receptor_id FROM smoothed_rfid_stream EMIT", "line 1, column 50: expected CHANGES"),
    ("SELECT tag_id FROM rfid_stream WHERE read_strength - 0.5",
     "line 1, column 52: WHERE needs a condition (true or false); this is of type double"),
    ("SELECT product(antenna) AS p, count(*) AS n FROM rfid_stream [range by '2 seconds'] GROUP BY p",
     "line 1, column 8: product() reads a tag's text (an EPC URI); this is of type int"),
    ("SELECT tag_id FROM rfid_stream WHERE NOT read_strength + 0.2",
     "line 1, column 38: NOT needs a condition (true or false); this is of type double"),
    ("SELECT tag_id FROM rfid_stream WHERE read_strength IN (0.5, 'a')",
     "line 1, column 61: IN: cannot compare double = string"),
    ("SELECT count(*) AS window_start FROM rfid_stream [range by '2 seconds']",
     "line 1, column 8: window_start is a column every window's row has already"),
    ("SELECT max(read_strength) AND min(read_strength) AS x FROM rfid_stream [range by '2 seconds']",
     "line 1, column 27: AND needs true/false on both sides, not double AND double"),
    ("SELECT count(*) AS n FROM rfid_stream [range by '2 seconds'] HAVING count(*) + 1",
     "line 1, column 78: HAVING needs a condition (true or false); this is of type long"),
    ("SELECT tag_estimate(tag_id) AS n FROM smoothed_rfid_stream [range by '4 seconds']",
     "line 1, column 8: tag_estimate() estimates from each reader's read cycles"),
    ("SELECT tag_estimate_low(read_strength) AS n FROM rfid_stream [range by '4 seconds']",
     "line 1, column 8: tag_estimate_low() counts tags: give it the tag column"),
    ("SELECT tag_estimate(*) AS n FROM rfid_stream [range by '4 seconds']",
     "line 1, column 8: tag_estimate(*) is not defined"),
])
def test_errors_name_the_position_and_the_problem(catalog, text, message):
    with pytest.raises(SqlError) as error:
        analyze(text, catalog)
    assert message in str(error.value)


def test_a_tag_estimate_and_its_interval_share_one_set_of_reads_computed_from_each_row(catalog):
    from glue.rewrite.partials import split_all

    query = analyze("SELECT location, tag_estimate(tag_id) AS n, tag_estimate_low(tag_id) AS low, "
                    "tag_estimate_high(tag_id) AS high FROM rfid_stream [range by '4 seconds'] "
                    "JOIN receptor_locations USING (receptor_id) GROUP BY location", catalog)
    assert [name for name, _ in query.derived] == ["__reads_tag_id"]
    partials, merges, finals = split_all(query.aggregates)
    assert [(s.fn, s.column) for s in partials] == [("collect_set", "__reads_tag_id")]
    assert [(s.fn, s.column) for s in merges] == [("union_sets", "__reads_tag_id__set")]
    assert [f.name for _, f in finals] == ["tag_estimate", "tag_estimate_low", "tag_estimate_high"]


def test_emit_changes_keys_by_the_named_columns_the_group_by_or_the_text_columns(catalog):
    windowed = ("SELECT receptor_id, tag_id, count(*) AS n FROM rfid_stream [range by '2 seconds'] "
                "GROUP BY receptor_id, tag_id")
    assert analyze(windowed, catalog).changes is None
    assert analyze(windowed + " EMIT CHANGES", catalog).changes == ("receptor_id", "tag_id")
    assert analyze(windowed + " EMIT CHANGES BY tag_id", catalog).changes == ("tag_id",)
    selected = analyze("SELECT receptor_id, reads FROM smoothed_rfid_stream emit changes", catalog)
    assert selected.changes == ("receptor_id",)   # its text columns; the windows are selected for it
    assert [name for name, _ in selected.outputs] == ["window_start", "window_end", "receptor_id", "reads"]


def test_views_not_exported_to_the_asker_are_refused(catalog):
    from dataclasses import replace

    catalog.views = [replace(v, readers=("hq",)) if v.name == "smoothed_rfid_stream" else v for v in catalog.views]
    text = "SELECT receptor_id, count(*) AS n FROM smoothed_rfid_stream [range by '2 seconds'] GROUP BY receptor_id"
    assert analyze(text, catalog, "hq").source_kind == "view"
    with pytest.raises(SqlError, match=r"unknown stream or view 'smoothed_rfid_stream' \(or a view not exported"):
        analyze(text, catalog, "store-7")


def test_in_lists_not_and_arithmetic_bind_to_plan_expressions(catalog):
    query = analyze("SELECT tag_id, read_strength * 2 AS doubled FROM rfid_stream "
                    "WHERE receptor_id IN ('door1-r1', 'door2-r2') AND NOT read_strength < 0.5", catalog)
    assert query.predicate.left == BinOp("OR", BinOp("=", Col("receptor_id"), Lit("door1-r1")),
                                         BinOp("=", Col("receptor_id"), Lit("door2-r2")))
    assert query.outputs[1] == ("doubled", BinOp("*", Col("read_strength"), Lit(2)))


def test_adaptive_smoothing_filters_readings_then_exposes_the_smoothed_rows(catalog):
    query = analyze("SELECT location, count(DISTINCT tag_id) AS tags FROM cleaned_rfid_stream "
                    "[adaptive epoch '1 second', delta 0.1] JOIN receptor_locations USING (receptor_id) "
                    "WHERE receptor_id = 'door1-r1' GROUP BY location", catalog)
    assert query.smoothing == Smoothing(1000, 0.1)
    assert query.source_kind == "stream" and query.event_time == "window_start"
    assert query.window == Window(1000, 1000)      # an aggregate keeps the epochs, as over a view
    # the definition's strength threshold and the WHERE both filter the readings
    assert "read_strength" in repr(query.predicate) and "door1-r1" in repr(query.predicate)
    plain = analyze("SELECT tag_id, reads, epochs FROM rfid_stream [adaptive epoch '2 seconds']", catalog)
    assert plain.smoothing == Smoothing(2000, 0.25) and not plain.is_aggregate


def test_product_decodes_an_epc_and_a_computed_key_can_be_grouped_by(catalog):
    from glue.reference import evaluate_expr

    query = analyze("SELECT product(tag_id) AS product, count(DISTINCT tag_id) AS units "
                    "FROM rfid_stream [range by '4 seconds'] WHERE product(tag_id) != 'x' GROUP BY product", catalog)
    assert query.keys == ("product",) and query.derived == (("product", Func("product", (Col("tag_id"),))),)
    assert dict(query.outputs)["product"] == Col("product")
    row = {"tag_id": "urn:epc:id:sgtin:0614141.812345.6789"}
    assert evaluate_expr(query.derived[0][1], row) == "0614141.812345"
    with pytest.raises(SqlError, match="unknown function 'brand'"):
        analyze("SELECT brand(tag_id) AS b FROM rfid_stream", catalog)


def test_indicator_is_an_sgtins_packaging_level_alike_in_the_runtime_and_the_reference():
    import pyarrow as pa

    from dsp.operators.expressions import evaluate
    from edge.epc import Sgtin
    from glue.reference import evaluate_expr

    tags = [Sgtin("0614141", reference, 7, 1).uri for reference in ("012345", "112345", "212345", "812345")]
    tags += ["urn:epc:id:sgtin:0614141", "not an epc", "urn:epc:id:sscc:0614141.1234567890"]
    expr = Func("indicator", (Col("tag_id"),))
    runtime = evaluate(expr, pa.table({"tag_id": tags})).to_pylist()
    assert runtime[:4] == ["0", "1", "2", "8"]
    assert runtime[4:] == tags[4:], "what is no SGTIN stays as it is"
    assert runtime == [evaluate_expr(expr, {"tag_id": t}) for t in tags]


@pytest.mark.parametrize("name, reason", [
    ("smoothed_rfid_stream", "a view named 'smoothed_rfid_stream' already exists (exported at door1, door2)"),
    ("rfid_stream", "'rfid_stream' is the name of a stream"),
    ("receptor_stream", "'receptor_stream' is the name of a stream"),
    ("receptor_locations", "'receptor_locations' is the name of a static relation"),
])
def test_a_new_view_cannot_take_a_name_in_use(catalog, name, reason):
    from glue.analyzer import refuse_taken_view_name
    from glue.sql.parser import parse

    text = f"CREATE VIEW {name} AS SELECT tag_id, ts FROM rfid_stream WHERE read_strength > 0.5"
    with pytest.raises(SqlError) as refused:
        refuse_taken_view_name(parse(text), catalog)
    assert (refused.value.line, refused.value.column) == (1, 13) and reason in refused.value.message
    refuse_taken_view_name(parse(text.replace(name, "strong_reads")), catalog)   # a new name is fine


def test_a_taken_view_name_says_where_only_to_who_may_read_the_view(catalog):
    from dataclasses import replace

    from glue.analyzer import refuse_taken_view_name
    from wire.identity import Identity

    catalog.views = [replace(v, readers=("role:operator",)) if v.name == "smoothed_rfid_stream" else v
                     for v in catalog.views]
    text = "CREATE VIEW smoothed_rfid_stream AS SELECT tag_id, ts FROM rfid_stream"
    with pytest.raises(SqlError) as refused:
        refuse_taken_view_name(parse(text), catalog, Identity("mallory", frozenset({"user"})))
    assert "the view name 'smoothed_rfid_stream' is taken" in str(refused.value) and "door1" not in str(refused.value)
    with pytest.raises(SqlError, match=r"exported at door1, door2"):
        refuse_taken_view_name(parse(text), catalog, Identity("olga", frozenset({"operator"})))


@pytest.mark.parametrize("text, message", [
    ("SELECT tag_id, tag_id + 1 AS t FROM rfid_stream", "line 1, column 23: '+' needs numbers, not string + long"),
    ("SELECT tag_id FROM rfid_stream WHERE tag_id > 3", "line 1, column 45: cannot compare string > long"),
    ("SELECT -tag_id AS x FROM rfid_stream", "line 1, column 8: '-' needs numbers, not -string"),
    ("SELECT tag_id FROM rfid_stream WHERE antenna AND read_strength > 0.5",
     "AND needs true/false on both sides, not int AND boolean"),
])
def test_what_a_node_could_not_evaluate_is_refused_where_it_is_written(catalog, text, message):
    """Once planned, then failed on the node that ran it (pyarrow: no kernel for string + int64),
    restarting its part instead of refusing the query."""
    with pytest.raises(SqlError) as refused:
        analyze(text, catalog)
    assert message in str(refused.value), refused.value


def test_numbers_of_any_width_mix_and_like_types_compare(catalog):
    analyze("SELECT tag_id, antenna * read_strength + 1 AS x FROM rfid_stream WHERE antenna >= 1.5 "
            "AND tag_id != 'x' AND -antenna < 0", catalog)


@pytest.mark.parametrize("literal, column", [("9223372036854775808", 59), ("1" + "0" * 400 + ".5", 59)])
def test_a_number_beyond_64_bits_is_refused_where_it_stands(literal, column):
    with pytest.raises(SqlError, match=rf"line 1, column {column}: .* is out of range"):
        parse(f"SELECT receptor_id FROM rfid_stream WHERE read_strength > {literal}")
    parse("SELECT receptor_id FROM rfid_stream WHERE read_strength > 9223372036854775807")
