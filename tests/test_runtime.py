"""dsp.status.Runtime: both runtimes of a node offer it, method by method, parameter by parameter."""

import inspect

import pytest

from dsp.runtime.shared import SharedRuntime
from dsp.spark.manager import DSPManager
from dsp.status import Runtime

MEMBERS = [name for name, member in vars(Runtime).items() if callable(member) and not name.startswith("_")]


@pytest.mark.parametrize("runtime", [SharedRuntime, DSPManager])
def test_each_runtime_of_a_node_offers_every_method_of_the_protocol(runtime):
    assert len(MEMBERS) == 8
    for name in MEMBERS:
        wanted = list(inspect.signature(getattr(Runtime, name)).parameters)
        offered = list(inspect.signature(getattr(runtime, name)).parameters)
        assert offered[:len(wanted)] == wanted, (runtime.__name__, name, offered)
