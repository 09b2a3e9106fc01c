"""The cluster controller: the one broker that assigns replicas, elects leaders and tells
the other brokers (ZooKeeper mode).

The pure rules live in their own modules so they can be read and tested
without a cluster: `assignment` (where a new partition's replicas go) and
`election` (who leads a partition, and with which ISR).
"""
