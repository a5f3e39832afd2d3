"""dsp.spark.worker_daemon: a worker forked after the daemon's imports works (pyarrow's threads)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Run in a fresh interpreter: the daemon imports before it forks, and a child that deadlocks on a
# lock an import's thread held at the fork would hang this test (the alarm ends it: exit 3).
CHILD = textwrap.dedent("""
    import os, signal, sys, tempfile
    from dsp.spark.worker_daemon import WORKER_MODULES, preload
    preload()
    pid = os.fork()
    if pid == 0:
        signal.alarm(60)
        import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
        table = pa.table({"x": list(range(200_000)), "s": [str(i % 97) for i in range(200_000)]})
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "t.parquet")
            pq.write_table(table, path)
            back = pq.read_table(path, use_threads=True)
        grouped = back.group_by("s", use_threads=True).aggregate([("x", "sum")])
        ok = pc.sum(back["x"]).as_py() == sum(range(200_000)) and grouped.num_rows == 97
        os._exit(0 if ok and all(m in sys.modules for m in WORKER_MODULES) else 1)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    sys.exit(code if code >= 0 else 3)   # negative: ended by a signal (the alarm)
""")


def test_a_worker_forked_after_the_preload_uses_arrow_threads_and_has_the_modules():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
