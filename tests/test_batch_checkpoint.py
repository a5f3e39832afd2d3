"""dsp.runtime.checkpoint: a node's state saved and read back, also one saved before the plan form moved
(dsp -> base) and one saved before dsp's files went into wings (dsp.engine split by family)."""

import pickle

from base.plan import RAW_RFID_SOURCE_COLUMNS, BinOp, Col, Filter, Lit, Source
from dsp.operators.build import build
from dsp.runtime.checkpoint import BatchCheckpoint, _Unpickler


def test_parts_state_saved_under_the_old_module_names_loads_as_the_new_classes():
    plan = Filter(Source(("hifi.raw.d1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0), BinOp(">", Col("n"), Lit(1)))
    saved = pickle.dumps({"q1": plan}, protocol=2)   # protocol 2 names each class as "module\nname\n"
    old = saved.replace(b"cbase.plan\n", b"cdsp.plan\n")
    assert old != saved and b"base.plan" not in old
    assert _Unpickler(old).load() == {"q1": plan}


def test_an_evaluator_saved_under_dsp_engine_loads_and_runs_on_where_it_was():
    import datetime as dt

    import pyarrow as pa

    from base.plan import Aggregate, AggSpec
    from wire.windows import Window

    source = Source(("hifi.raw.d1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0)
    plan = Aggregate(source, ("tag_id",), (AggSpec("n", "count", None),), window=Window(1000, 1000))
    evaluator = build(plan, {})
    stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    names = [name for name, _ in RAW_RFID_SOURCE_COLUMNS]

    def batch(seconds: list[float]) -> pa.Table:
        rows = [{"ts": stamp + dt.timedelta(seconds=s), "tag_id": "t"} for s in seconds]
        return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows])

    evaluator.push("hifi.raw.d1", batch([0.1, 0.2]))
    saved = pickle.dumps(evaluator, protocol=2)
    old = saved
    for family in (b"aggregate", b"source", b"core"):
        old = old.replace(b"cdsp.operators." + family + b"\n", b"cdsp.engine\n")
    assert b"dsp.operators" not in old and b"cdsp.engine\n" in old
    restored = _Unpickler(old).load()
    later = batch([1.5, 2.5])
    expected = evaluator.push("hifi.raw.d1", later).to_pylist()
    assert [row["n"] for row in expected] == [2, 1]   # the saved rows counted with the later ones
    assert restored.push("hifi.raw.d1", later).to_pylist() == expected


def test_a_save_makes_its_directory_and_a_new_checkpoint_reads_it_back(tmp_path):
    state_dir = str(tmp_path / "node" / "state")   # not there yet: made by the first save
    checkpoint = BatchCheckpoint(state_dir, "n")
    checkpoint.fences["raw@id"] = 7
    checkpoint.save({"q1": ("{}", None, 3, 1000, "run")})
    checkpoint.fences["raw@id"] = 8
    checkpoint.save({"q1": ("{}", None, 4, 2000, "run")})
    again = BatchCheckpoint(state_dir, "n")
    assert again.fences == {"raw@id": 8} and again.saved_part("q1") == ("{}", None, 4, 2000, "run")
    assert again.at_last_save() == {"q1": ("{}", None, 4, 2000, "run")}
