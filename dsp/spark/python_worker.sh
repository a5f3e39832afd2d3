#!/bin/sh
# Spark's Python launcher on a local Spark (PYSPARK_PYTHON, set by dsp.spark.session): runs
# $HIFI_WORKER_PYTHON with the bundled Spark's archives taken off PYTHONPATH.
#
# Spark puts pyspark.zip, py4j's zip and the spark-core jar first on every Python process it
# starts. A module imported from a zip is compiled from source on every start (the zip holds no
# bytecode), so a Python data source's runner took ~1.9 s to start instead of ~0.8 s on an idle
# machine; Spark waits a fixed 10 s for it to connect back and fails the query when a busy machine
# makes it slower.
# The same pyspark and py4j are installed, byte-compiled, beside HIFI_WORKER_PYTHON; only entries
# under HIFI_BUNDLED_SPARK (that installation's own Spark home) are dropped.
set -f
kept=""
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    "$HIFI_BUNDLED_SPARK"/python/lib/*|"$HIFI_BUNDLED_SPARK"/jars/*) ;;
    *) kept="${kept:+$kept:}$entry" ;;
  esac
done
unset IFS
PYTHONPATH=$kept
export PYTHONPATH
exec "$HIFI_WORKER_PYTHON" "$@"
