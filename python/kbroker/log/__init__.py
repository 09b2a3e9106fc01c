"""Partition logs on disk: a `Log` per partition, a `LogManager` per data directory."""

from kbroker.log.log import Log, LogConfig, TopicPartition, log_config_from_topic
from kbroker.log.manager import LogManager

__all__ = ["Log", "LogConfig", "LogManager", "TopicPartition", "log_config_from_topic"]
