"""Session: a SparkSession set up for kanal's jobs, with both data sources registered.

Local mode binds everything to 127.0.0.1 (otherwise Spark picks the machine's external address) and runs
the Python workers with this interpreter (so they import the installed kanal). On a real cluster
(`--master spark://...`, `yarn`, `k8s://...`) the executors need kanal installed in their Python; nothing
else changes.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from kanal.spark.kanal_source import KanalDataSource
from kanal.spark.log_source import KanalLogDataSource
from kanal.spark.metadata_source import KanalMetadataDataSource

DEFAULT_MASTER = "local[*]"


def register_sources(spark: SparkSession) -> None:
    spark.dataSource.register(KanalLogDataSource)
    spark.dataSource.register(KanalMetadataDataSource)
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
    # kanal's commands print a progress line of their own; Spark's stage bars would garble it on any master.
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    # The jobs' aggregates are small: Spark's default of 200 shuffle partitions would be 200 tiny tasks.
    builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions or 8))
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_sources(spark)
    return spark
