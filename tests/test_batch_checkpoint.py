"""dsp.batch_checkpoint: a node's state saved and read back, also one saved before the plan form moved
(dsp -> base)."""

import pickle

from base.plan import RAW_RFID_SOURCE_COLUMNS, BinOp, Col, Filter, Lit, Source
from dsp.batch_checkpoint import BatchCheckpoint, _Unpickler


def test_parts_state_saved_under_the_old_module_names_loads_as_the_new_classes():
    plan = Filter(Source(("hifi.raw.d1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0), BinOp(">", Col("n"), Lit(1)))
    saved = pickle.dumps({"q1": plan}, protocol=2)   # protocol 2 names each class as "module\nname\n"
    old = saved.replace(b"cbase.plan\n", b"cdsp.plan\n")
    assert old != saved and b"base.plan" not in old
    assert _Unpickler(old).load() == {"q1": plan}


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
