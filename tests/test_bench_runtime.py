"""services.bench.runtime's CPU accounting: what a process tree used, ended processes included."""

import subprocess
import sys

from services.bench.runtime import tree_cpu_s


def test_the_cpu_of_a_child_that_has_ended_stays_in_the_tree():
    # Spark ends a Python worker idle for a minute: its CPU must not leave the idle bench's sum
    before = tree_cpu_s()
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
                                          "while time.process_time() < end: pass"], check=True)
    assert tree_cpu_s() - before >= 0.45
