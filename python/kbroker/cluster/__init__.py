"""Cluster mode on ZooKeeper: the layer between a broker and a Kafka-compatible ZooKeeper tree.

- `zk_data`: the znode paths and JSON of Kafka 3.9 (pure codecs, no I/O).
- `zk`: `ZkClient`, an asyncio bridge over kazoo's threads, with watches and
  session events delivered on the event loop.
- `registration`: this broker's ephemeral registration, the cluster id and
  the persistent paths every broker expects.
- `producer_id_blocks`: producer-id blocks shared by every broker of a cluster.
- `controller_election`: the controller election (``/controller``), its epoch
  and the fencing of the controller's writes; the controller's work itself is
  `kbroker.controller`.
- `configs`, `entity_configs`: dynamic topic, broker, group, user and client
  configs, and the change notifications every broker follows.
- `acls`: ACLs stored as Kafka stores them, and their change notifications.
- `features`: the finalized features (``/feature``).
- `member`: `ClusterMember`, a broker's part in the cluster, composed of the
  above (and of the controller, when elected).
- `errors`: the exceptions of all of these.

Nothing here imports the broker; the broker imports these.
"""
