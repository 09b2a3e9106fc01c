"""Partition logs on disk: a `Log` per partition, a `LogManager` per data directory,
the log cleaner's choice of what to compact and when (`cleaner`), ``compression.type``
(`compression`) and the ``partition.metadata`` file (`partition_metadata`)."""

from kbroker.log.log import Log, LogConfig, TopicPartition, log_config_from_topic
from kbroker.log.manager import LogManager

__all__ = ["Log", "LogConfig", "LogManager", "TopicPartition", "log_config_from_topic"]
