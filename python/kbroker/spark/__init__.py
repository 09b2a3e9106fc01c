"""kbroker with Apache Spark: a wired SparkSession, the pipeline jobs, a Python data source.

Owns everything Spark-related; only the command line imports it, inside the
``kbroker pipeline`` commands, so PySpark is only needed once it is used
(``pip install 'kbroker[spark]'``):

- `spark_session()` (session.py): a SparkSession (``local[*]`` or any master
  URL) with Spark's Kafka connector from the jar cache (jars.py,
  ``python -m kbroker.spark``) and the ``kbroker`` data source registered;
- `archive()` (archive.py): topics to Parquet by topic/date/hour, exactly once;
- `aggregate()` (aggregate.py): windowed per-key count/sum/avg to a topic;
- ``kbroker`` data source (datasource.py): topics read over kbroker's own
  protocol layer (kafka.py) by Python workers, rows equal to the connector's.

The ``kbroker pipeline`` commands (kbroker.cli) are thin wrappers of these.
"""

from kbroker.spark.aggregate import aggregate, start_aggregate
from kbroker.spark.archive import archive, remove_uncommitted_files, start_archive
from kbroker.spark.common import parse_duration
from kbroker.spark.jars import JarsError, connector_jars
from kbroker.spark.kafka import PipelineError
from kbroker.spark.session import SessionError, spark_session

__all__ = [
    "JarsError",
    "PipelineError",
    "SessionError",
    "aggregate",
    "archive",
    "connector_jars",
    "parse_duration",
    "remove_uncommitted_files",
    "spark_session",
    "start_aggregate",
    "start_archive",
]
