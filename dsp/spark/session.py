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
from collections.abc import Mapping

from pyspark.core import context as pyspark_context
from pyspark.sql import SparkSession

from base.jar_sets import jars_of
from dsp.spark.kafka_source import KafkaDataSource
from wire.errors import HiFiError
from wire.kafka import config

_lock = threading.Lock()

# Without Hadoop's native library (not in Spark's jars) the local file system runs a process for
# every chmod and readlink; Spark's default checkpoint files (FileContext's rename, a checksum
# file beside each) cost ~10 such processes per micro-batch: 150-180 ms of a batch's offset-log
# write and again of its commit, and 0.4 cores of a five-node hierarchy in forked processes
# (measured on the 2-core machine). Plain FileSystem renames (atomic on a local disk) and no
# checksum files leave one chmod per file: 6 ms a log write instead of 38, idle or not.
LOCAL_CHECKPOINT_SETTINGS = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}
WARM_UP = "hifi: warm-up"   # the description of the job that starts the Python workers
WORKER_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python_worker.sh")


def use_worker_launcher() -> None:
    """Start Spark's Python processes through dsp/spark/python_worker.sh (see there why): this
    interpreter, without the bundled Spark's archives on its path."""
    import pyspark

    os.environ["HIFI_WORKER_PYTHON"] = sys.executable
    os.environ["HIFI_BUNDLED_SPARK"] = os.path.dirname(os.path.abspath(pyspark.__file__))
    os.environ["PYSPARK_PYTHON"] = WORKER_LAUNCHER


def class_archive() -> str:
    """The JVM's class-data archive of Spark's classes (`python -m dsp.spark.session --archive`, run by
    `make setup` and the image build): a fresh Spark with it starts and runs its first job in
    4.5 s instead of 6.7 s (measured on the 2-core machine), which is most of what a restarted
    node waits for. A JVM that cannot use it (another JDK, other jars) starts without it."""
    return os.environ.get("HIFI_CLASS_ARCHIVE", os.path.join(sys.prefix, "hifi-spark.jsa"))


def _java_options(archive_at_exit: str = "") -> str:
    # Stopping a query interrupts its thread; Spark matches the interrupt's message with a
    # recursive regex that overflows the default 1 MB thread stack.
    options = "-Xss16m"
    if archive_at_exit:
        return f"{options} -XX:ArchiveClassesAtExit={archive_at_exit}"
    if os.path.exists(class_archive()):
        options += f" -XX:SharedArchiveFile={class_archive()} -Xlog:cds=off -Xlog:cds+dynamic=off"
    return options


def network_settings(master: str, environ: Mapping[str, str]) -> dict[str, str]:
    """How the driver listens: on loopback only in local mode (nothing off this machine needs it);
    for a cluster, whose executors must reach it, with every connection authenticated by the
    shared secret HIFI_SPARK_SECRET (the cluster's spark.authenticate.secret) and encrypted."""
    if master.startswith("local"):
        return {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
    secret = environ.get("HIFI_SPARK_SECRET", "")
    if not secret:
        raise SparkSecretMissing("SPARK_MASTER is set: set HIFI_SPARK_SECRET to the cluster's "
                                 "spark.authenticate.secret (its driver listens beyond loopback)")
    return {"spark.authenticate": "true", "spark.authenticate.secret": secret,
            "spark.network.crypto.enabled": "true"}


def cluster_share(master: str, environ: Mapping[str, str]) -> dict[str, str]:
    """On a standalone cluster, the cores one node's application may hold (HIFI_SPARK_CORES_MAX,
    default 2): without a cap the first application takes every core and the next node waits.

    >>> cluster_share("spark://m:7077", {})
    {'spark.cores.max': '2'}
    >>> cluster_share("local[*]", {"HIFI_SPARK_CORES_MAX": "4"})
    {}
    """
    if master.startswith("local"):
        return {}
    return {"spark.cores.max": environ.get("HIFI_SPARK_CORES_MAX", "2")}


def executor_kafka_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The driver's Kafka credentials (wire.kafka.config.client_security) for its executors' Python
    workers, which read the topics: a cluster's executors do not inherit the driver's environment.
    Spark's UI and logs redact the password (its name matches spark.redaction.regex).

    >>> executor_kafka_environment({"HIFI_KAFKA_USERNAME": "node-door1", "PATH": "/bin"})
    {'spark.executorEnv.HIFI_KAFKA_USERNAME': 'node-door1'}
    """
    return {f"spark.executorEnv.{name}": environ[name] for name in config.CLIENT_VARIABLES if environ.get(name)}


def event_log(environ: Mapping[str, str]) -> dict[str, str]:
    """With HIFI_SPARK_EVENT_LOG set, each application writes Spark's event log (every job, stage
    and task with its metrics: what Spark's history server shows) to a file in that folder.

    >>> event_log({"HIFI_SPARK_EVENT_LOG": "/var/log/hifi-spark"})["spark.eventLog.dir"]
    'file:///var/log/hifi-spark'
    >>> event_log({})
    {}
    """
    folder = environ.get("HIFI_SPARK_EVENT_LOG", "")
    if not folder:
        return {}
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{os.path.abspath(folder)}",
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}


def connector_jars() -> str:
    """Spark's own Kafka connector and its dependencies, as `make setup` fetched them (deploy/jvm/
    spark): `spark.jars`, which a cluster's executors fetch from the driver too."""
    found = jars_of("spark")
    if not any(os.path.basename(jar).startswith("spark-sql-kafka-0-10") for jar in found):
        raise SparkConnectorMissing("Spark's Kafka connector is not where `make setup` puts it "
                                    "(.venv/jars/spark, or $HIFI_JARS/spark): run `make setup`")
    return ",".join(found)


def launch_jvm_apart(conf=None, popen_kwargs: dict | None = None):   # noqa: ANN001, ANN201 (pyspark's signature)
    """pyspark's `launch_gateway` with the JVM in a session of its own: a signal to this process's
    group (what `docker stop`, systemd or `timeout` send) then reaches the nodes, which stop in
    order, and not the JVM under them, which their stop still needs (`spark.stop` ends it). It
    dies with this process all the same: it exits when its stdin, a pipe from here, closes. With
    HIFI_SPARK_LOG set, the JVM's output (Spark's log4j lines) is appended to that file."""
    from pyspark import java_gateway

    kwargs = {**(popen_kwargs or {}), "start_new_session": True}
    log_file = os.environ.get("HIFI_SPARK_LOG", "")
    if log_file:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        out = open(log_file, "ab")   # noqa: SIM115 (the JVM's, for its life: closed here once it has it)
        kwargs |= {"stdout": out, "stderr": out}
    try:
        return java_gateway.launch_gateway(conf, kwargs)
    finally:
        if log_file:
            out.close()


class SparkConnectorMissing(HiFiError):
    """Spark's Kafka connector jars were not fetched."""


class SparkSecretMissing(HiFiError):
    """A Spark cluster without the secret that authenticates its connections."""


def spark_session(app_name: str = "hifi", archive_at_exit: str = "") -> SparkSession:
    """Get or create the process's Spark session, with the Kafka data source registered.
    `archive_at_exit`: write the class-data archive there when the JVM exits (see class_archive)."""
    with _lock:
        cores = os.environ.get("HIFI_SPARK_CORES", "*")
        master = os.environ.get("SPARK_MASTER", f"local[{cores}]")
        codegen = os.environ.get("HIFI_SPARK_CODEGEN", "true").strip().lower() != "false"
        if master.startswith("local") and "PYSPARK_PYTHON" not in os.environ and os.access(WORKER_LAUNCHER, os.X_OK):
            use_worker_launcher()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = (
            SparkSession.builder.appName(app_name)
            .master(master)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", _java_options(archive_at_exit))
            .config("spark.jars", connector_jars())
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", os.environ.get("HIFI_SHUFFLE_PARTITIONS", "1"))
            .config("spark.scheduler.mode", "FIFO")
            # A micro-batch's parts are one union of their aggregations (dsp.spark.partials.collect):
            # adaptive execution would run each aggregation's shuffle as a job of its own, and its
            # re-planning buys nothing on a batch's few rows
            .config("spark.sql.adaptive.enabled", os.environ.get("HIFI_SPARK_ADAPTIVE", "false"))
            .config("spark.sql.streaming.stateStore.stateSchemaCheck", "false")
            # PySpark's call-site capture for error messages costs four py4j round trips per DataFrame
            # and function call (the active session, its setting, the origin set); the parts' plans
            # are built anew every batch, and their errors name the part, not a Python line
            .config("spark.python.sql.dataFrameDebugging.enabled", "false")
            # Whole-stage code generation: `false` interprets the plans instead (docs/sql.md)
            .config("spark.sql.codegen.wholeStage", str(codegen).lower())
            .config("spark.sql.codegen.factoryMode", "FALLBACK" if codegen else "NO_CODEGEN")
            # A watermark move would otherwise cost an extra (empty) micro-batch per query; the next
            # data batch closes the windows instead (data and progress markers arrive every trigger).
            .config("spark.sql.streaming.noDataMicroBatches.enabled",
                    os.environ.get("HIFI_NO_DATA_BATCHES", "false"))
            .config("spark.driver.memory", os.environ.get("HIFI_SPARK_DRIVER_MEMORY", "2g"))
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            # a Python process Spark starts (a stream reader's runner, a worker) connects back within
            # this; the default 15 s ran out on a loaded CI machine and left a reader without its runner
            .config("spark.python.authenticate.socketTimeout", "120s")
            # Parquet Spark's tasks write (a batch's archive on the Spark path) as pyarrow writes it
            .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        )
        for key, value in {**network_settings(master, os.environ), **cluster_share(master, os.environ),
                           **executor_kafka_environment(os.environ), **event_log(os.environ)}.items():
            builder = builder.config(key, value)
        if master.startswith("local"):
            # Local workers run this interpreter, where HiFi is installed (a cluster's may not be).
            builder = builder.config("spark.python.daemon.module", "dsp.spark.worker_daemon")
            for key, value in LOCAL_CHECKPOINT_SETTINGS.items():
                builder = builder.config(key, value)
        if os.environ.get("HIFI_SPARK_EVENT_LOG"):
            os.makedirs(os.environ["HIFI_SPARK_EVENT_LOG"], exist_ok=True)   # (Spark writes only into one that exists)
        new = SparkSession.getActiveSession() is None
        pyspark_context.launch_gateway = launch_jvm_apart   # how SparkContext starts its JVM
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel(os.environ.get("HIFI_SPARK_LOG_LEVEL", "ERROR"))
        spark.dataSource.register(KafkaDataSource)
        logging.getLogger("py4j").setLevel(logging.WARNING)
        if new:
            quiet_accumulator_eof(spark)
            start_python_workers(spark)
        return spark


def stop_session() -> None:
    """Stop the process's Spark session, if one runs (its markers' listener detached first: a
    Python listener still attached can hang the context's stop)."""
    from dsp.spark.progress import detach_markers

    session = SparkSession.getActiveSession()
    if session is not None:
        detach_markers(session)
        session.stop()


def quiet_accumulator_eof(spark: SparkSession) -> None:
    """The JVM closing its connection to pyspark's accumulator server (as Spark stops) ends that
    connection, not in error: pyspark's handler raises `EOFError` there and its server prints the
    traceback (seen as `hifi up` stops). Other errors of the server are printed as before."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is None:
        return
    printed = server.handle_error

    def handle_error(request, address) -> None:   # noqa: ANN001 (socketserver's)
        if not isinstance(sys.exc_info()[1], EOFError):
            printed(request, address)

    server.handle_error = handle_error


def start_python_workers(spark: SparkSession) -> None:
    """Start Spark's Python worker daemon (dsp.spark.worker_daemon) and a worker per core now, not in a
    node's first micro-batch that has records: that batch waited ~0.7 s for them (measured: a
    2 M-reading backlog's 3.9 s batch began with 0.8 s before either task read a record)."""
    context = spark.sparkContext
    cores = context.defaultParallelism
    context.setJobDescription(WARM_UP)   # a job of no batch: the event log tells it apart
    try:
        spark.range(cores, numPartitions=cores).mapInArrow(lambda batches: batches, "id long").collect()
    finally:
        context.setJobDescription(None)   # type: ignore[arg-type] (pyspark clears it so)


def write_class_archive() -> None:
    """Write the class-data archive (see class_archive): a child process starts Spark and runs
    what a node runs first (a job, Arrow out, the data source's schema); its JVM writes the
    archive of the classes it loaded as it exits, and the archive is put in place only then."""
    import subprocess
    import tempfile

    target = class_archive()
    with tempfile.TemporaryDirectory() as scratch:
        writing = os.path.join(scratch, "spark.jsa")
        subprocess.run([sys.executable, "-m", "dsp.spark.session", "--archive-child", writing], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        if not os.path.exists(writing):
            raise RuntimeError("the JVM wrote no class-data archive")
        os.replace(writing, target)
    print(f"class-data archive of Spark's classes: {target}")


def _archive_child(writing: str) -> None:
    from dsp.spark.compiler import CompileContext, topic_reader
    from wire.intake import IntakeRules

    spark = spark_session("hifi-class-archive", archive_at_exit=writing)
    spark.range(10).selectExpr("id * 2 AS x").toArrow()
    topic_reader(CompileContext(spark, "127.0.0.1:9", intake=IntakeRules()), ("hifi.raw.none",), "rfid")
    jvm = spark.sparkContext._gateway.proc   # the JVM pyspark launched: it exits when its stdin closes
    spark.stop()
    jvm.stdin.close()
    jvm.wait(timeout=240)   # it writes the archive as it exits


if __name__ == "__main__":
    if sys.argv[1:] == ["--archive"]:
        write_class_archive()
    elif sys.argv[1:2] == ["--archive-child"]:
        _archive_child(sys.argv[2])
