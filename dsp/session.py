"""The Spark session that hosts DSPs: one per process, shared by every node the process runs.

Several nodes share one JVM on a small machine; `SPARK_MASTER` points at a real cluster instead.
Jobs are scheduled FIFO, oldest micro-batch first. FAIR pools per node were tried and starve the
upper tiers whenever the CPU is saturated: Spark's fair comparator breaks ties between pools with
no running task by pool *name*, so the doors' always-ready micro-batches won every free slot and
a warehouse's pass-through query never ran (measured on deep.yaml: zero batches in 120 s).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from pyspark.sql import SparkSession

from dsp.kafka_source import KafkaDataSource

_lock = threading.Lock()
WORKER_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_worker.sh")


def use_worker_launcher() -> None:
    """Start Spark's Python processes through dsp/python_worker.sh (see there why): this
    interpreter, without the bundled Spark's archives on its path."""
    import pyspark

    os.environ["HIFI_WORKER_PYTHON"] = sys.executable
    os.environ["HIFI_BUNDLED_SPARK"] = os.path.dirname(os.path.abspath(pyspark.__file__))
    os.environ["PYSPARK_PYTHON"] = WORKER_LAUNCHER


def spark_session(app_name: str = "hifi") -> SparkSession:
    """Get or create the process's Spark session, with the Kafka data source registered."""
    with _lock:
        cores = os.environ.get("HIFI_SPARK_CORES", "*")
        master = os.environ.get("SPARK_MASTER", f"local[{cores}]")
        if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ and os.access(WORKER_LAUNCHER, os.X_OK):
            use_worker_launcher()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = (
            SparkSession.builder.appName(app_name)
            .master(master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            # Stopping a query interrupts its thread; Spark matches the interrupt's message with a
            # recursive regex that overflows the default 1 MB thread stack.
            .config("spark.driver.extraJavaOptions", "-Xss16m")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", os.environ.get("HIFI_SHUFFLE_PARTITIONS", "1"))
            .config("spark.scheduler.mode", "FIFO")
            .config("spark.sql.streaming.stateStore.stateSchemaCheck", "false")
            # A watermark move would otherwise cost an extra (empty) micro-batch per query; the next
            # data batch closes the windows instead (data and progress markers arrive every trigger).
            .config("spark.sql.streaming.noDataMicroBatches.enabled",
                    os.environ.get("HIFI_NO_DATA_BATCHES", "false"))
            .config("spark.driver.memory", os.environ.get("HIFI_SPARK_DRIVER_MEMORY", "2g"))
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        )
        if master.startswith("local"):
            # Local workers run this interpreter, where HiFi is installed (a cluster's may not be).
            builder = builder.config("spark.python.daemon.module", "dsp.worker_daemon")
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel(os.environ.get("HIFI_SPARK_LOG_LEVEL", "ERROR"))
        spark.dataSource.register(KafkaDataSource)
        logging.getLogger("py4j").setLevel(logging.WARNING)
        return spark
