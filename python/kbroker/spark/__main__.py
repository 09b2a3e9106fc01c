"""``python -m kbroker.spark``: fetch Spark's Kafka connector jars (if needed) and print
their folder (deploy/setup.sh test runs this; see kbroker.spark.jars)."""

import sys

from kbroker.spark.jars import main

sys.exit(main())
