"""What the ``kbroker`` command line does, as plain functions and data: each admin, produce
and consume command over the Kafka protocol (`client`, `cluster`: a blocking client of any
Kafka-compatible cluster), the offline tools over data files (`dump`), and the import of
offsets old consumers kept in ZooKeeper (`zk_import`). The command line (kbroker.cli)
parses, calls these and prints (`output`)."""
