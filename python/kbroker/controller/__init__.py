"""The cluster controller: the one broker that assigns replicas, elects leaders and tells
the other brokers (ZooKeeper mode).

`controller.Controller` handles one event at a time (brokers coming and going,
topics created and deleted, elections, ISR changes, reassignments, feature
updates); `elector` runs the election in every broker and starts it in the
winner; `channel` and `requests` carry its orders to the brokers. The pure
rules live in their own modules so they can be read and tested without a
cluster: `assignment` (where a new partition's replicas go),
`leader_election` (who leads a partition, and with which ISR), `isr_changes`
(AlterPartition judged) and `reassignment` (KIP-455's steps); `context` is
what the controller knows of the cluster.
"""
