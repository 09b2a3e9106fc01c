"""kbroker: a streaming broker that speaks the Apache Kafka wire protocol."""

from kbroker._kbroker import __version__

__all__ = ["__version__"]
