"""A started process's heap kept out of the collector's walks, and given back when its nodes stop."""

import gc

from services import heap


def test_what_lives_at_settling_is_left_out_of_collections_until_released():
    before = [object()]
    try:
        heap.settle()
        assert gc.get_freeze_count() > 1000   # the interpreter's and pytest's objects, at least
        after = [object()]   # made later: in the youngest generation, collected as before
        assert any(o is after for o in gc.get_objects(generation=0))
        assert not any(o is before for generation in range(3) for o in gc.get_objects(generation=generation))
    finally:
        heap.release()
    assert gc.get_freeze_count() == 0 and any(o is before for o in gc.get_objects(generation=2))
