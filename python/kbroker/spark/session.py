"""A SparkSession wired to kbroker: Spark's own Kafka connector on the classpath,
kbroker's Python data source registered, settings that suit small local runs.

`spark_session()` is the one place a session is built. It must run before any
other SparkSession exists in the process: ``spark.jars`` is read when the JVM
starts, so a session created earlier without the connector cannot be fixed up
afterwards (this raises `SessionError` rather than failing later with
"Failed to find data source: kafka").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kbroker.spark.jars import connector_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


class SessionError(Exception):
    """The SparkSession cannot be built as asked."""


def spark_session(
    master: str | None = None,
    app_name: str = "kbroker",
    conf: Mapping[str, str] | None = None,
    *,
    shuffle_partitions: int | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession on ``master`` (``local[*]`` by default; any Spark master URL,
    e.g. ``spark://host:7077`` or ``yarn``) with the Kafka connector's jars in
    ``spark.jars`` and the ``kbroker`` Python data source registered.

    Local masters get few shuffle partitions (the data is small and the cores
    few); ``shuffle_partitions`` overrides that for any master. Session time is
    UTC so that dates and hours derived from timestamps do not depend on the
    machine's zone. Python workers use this interpreter unless PYSPARK_PYTHON
    says otherwise (the data source needs kbroker and pyarrow there).
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SessionError("PySpark is not installed: pip install 'kbroker[spark]'") from None

    master = master or os.environ.get("KBROKER_SPARK_MASTER") or DEFAULT_MASTER
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    settings: dict[str, str] = {
        "spark.jars": ",".join(str(p) for p in connector_jars()),
        "spark.sql.session.timeZone": "UTC",
        # Parquet readers other than Spark (pyarrow, Hive, Trino) read these; INT96 is legacy.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.ui.showConsoleProgress": "false",
    }
    if shuffle_partitions is None and master.startswith("local"):
        shuffle_partitions = 4
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    settings.update(conf or {})

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    _check_connector(spark)

    from kbroker.spark.datasource import KBrokerDataSource

    spark.dataSource.register(KBrokerDataSource)
    return spark


def _check_connector(spark: SparkSession) -> None:
    """Fails clearly when the driver cannot load the connector: the JVM was started
    (by an earlier session in this process) without the jars in spark.jars."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    try:
        loader.loadClass(KAFKA_PROVIDER)
    except Exception:
        raise SessionError(
            "Spark's Kafka connector is not on this JVM's classpath: another SparkSession was "
            "started in this process before kbroker.spark.spark_session(); build kbroker's first"
        ) from None
