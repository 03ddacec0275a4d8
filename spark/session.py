"""Session: a SparkSession set up for kanal's jobs, with kanal's data sources registered.

Local mode binds everything to 127.0.0.1 (otherwise Spark picks the machine's external address) and runs
the Python workers with this interpreter (so they import the installed kanal). On a real cluster
(`--master spark://...`, `yarn`, `k8s://...`) the executors need kanal installed in their Python; nothing
else changes.
"""

from __future__ import annotations

import os
import sys

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from kanal.spark import jvm_jar
from kanal.spark.kanal_source import KanalDataSource
from kanal.spark.log_source import KanalLogDataSource, KanalLogPythonSource
from kanal.spark.metadata_source import KanalMetadataDataSource, KanalMetadataPythonSource

DEFAULT_MASTER = "local[*]"


def jvm_log_source(spark: SparkSession) -> bool:
    """Whether this session's JVM has the kanal-spark jar's tables (jvm_jar.py)."""
    try:
        loader = spark._jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()  # type: ignore[union-attr]
        spark._jvm.java.lang.Class.forName(jvm_jar.PROVIDER_CLASS, False, loader)  # type: ignore[union-attr]
    except Py4JJavaError as exc:  # py4j's wrapper of the Java exception
        if exc.java_exception.getClass().getName() != "java.lang.ClassNotFoundException":
            raise
        return False
    return True


def register_sources(spark: SparkSession) -> None:
    """kanal; kanal-log and kanal-metadata: the jar's JVM tables when the session has them, else the Python
    sources under those names. The Python sources are also `<name>-python` in every session (the JVM
    kanal-metadata streams through it)."""
    if not jvm_log_source(spark):
        spark.dataSource.register(KanalLogDataSource)
        spark.dataSource.register(KanalMetadataDataSource)
    spark.dataSource.register(KanalLogPythonSource)
    spark.dataSource.register(KanalMetadataPythonSource)
    spark.dataSource.register(KanalDataSource)


def kanal_session(master: str = DEFAULT_MASTER, app_name: str = "kanal", *,
                  shuffle_partitions: int | None = None, driver_memory: str | None = None) -> SparkSession:
    """Get (or create) the session and register kanal-log, kanal-metadata and kanal. `driver_memory` (e.g.
    "2g") applies only when this call starts the JVM: a running session keeps its heap."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "false"))
    if driver_memory:
        builder = builder.config("spark.driver.memory", driver_memory)
    try:
        jar = jvm_jar.jar_path()
    except RuntimeError as exc:  # javac failed (another pyspark's API): the Python sources, and say why
        print(f"kanal: {exc}; kanal-log and kanal-metadata run as the Python sources", file=sys.stderr)
        jar = None
    if jar is not None:  # without javac: the Python sources (jvm_jar.py)
        builder = builder.config("spark.jars", str(jar))
    # kanal's commands print a progress line of their own; Spark's stage bars would garble it on any master.
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    # The jobs' aggregates are small: Spark's default of 200 shuffle partitions would be 200 tiny tasks.
    builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions or 8))
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_sources(spark)
    return spark
