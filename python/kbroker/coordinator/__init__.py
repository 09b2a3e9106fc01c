"""The group coordinator: consumer groups, their rebalances and committed offsets.

- `coordinator.GroupCoordinator`: owns every group of this broker and the
  flows of the group APIs (membership); the handlers call it.
- `offsets.OffsetManager`: committed offsets (commit, fetch, delete, expiry).
- `transactions.TxnOffsetManager`: TxnOffsetCommit, offsets pending until their
  transaction's marker.
- `cache.GroupCache`: the groups of the ``__consumer_offsets`` partitions this
  broker leads (loaded on election, dropped on resignation) and their writes.
- `group`: one group's state machine, members and protocol selection.
- `delayed`: DelayedJoin, InitialDelayedJoin, DelayedHeartbeat, PendingMemberTimer.
- `records`: the ``__consumer_offsets`` record schemas (Kafka's own).
- `store`: reading and appending ``__consumer_offsets``.
- `replay`: rebuilding a partition's groups from its batches at load time.
- `consumer_protocol`: the subscription/assignment bytes of consumers.
- `consumer_group`, `consumer_records`, `consumer_coordinator`, `consumer_conversion`:
  groups of the consumer group protocol (KIP-848): their state and rules, their records,
  ConsumerGroupHeartbeat and classic members among them, and conversions between the
  two protocols.
- `group_configs`: the GROUP config resources (a group's session timeout, ...).
- `host`: what the coordinator needs of the broker that holds it.
"""

from kbroker.coordinator.coordinator import (
    GroupCoordinator,
    GroupDescription,
    GroupListing,
    MemberDescription,
)
from kbroker.coordinator.group import GroupState, JoinRequest, JoinResult, SyncResult
from kbroker.coordinator.offsets import FetchedOffset

__all__ = [
    "FetchedOffset",
    "GroupCoordinator",
    "GroupDescription",
    "GroupListing",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "MemberDescription",
    "SyncResult",
]
