"""dsp.batch_checkpoint: a node's state saved before the plan form moved (dsp -> base) is read back."""

import pickle

from base.plan import RAW_RFID_SOURCE_COLUMNS, BinOp, Col, Filter, Lit, Source
from dsp.batch_checkpoint import _Unpickler


def test_parts_state_saved_under_the_old_module_names_loads_as_the_new_classes():
    plan = Filter(Source(("hifi.raw.d1",), "rfid", RAW_RFID_SOURCE_COLUMNS, "ts", 0), BinOp(">", Col("n"), Lit(1)))
    saved = pickle.dumps({"q1": plan}, protocol=2)   # protocol 2 names each class as "module\nname\n"
    old = saved.replace(b"cbase.plan\n", b"cdsp.plan\n")
    assert old != saved and b"base.plan" not in old
    assert _Unpickler(old).load() == {"q1": plan}
