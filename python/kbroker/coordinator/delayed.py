"""The coordinator's delayed operations, on the shared `DelayedOperation` base.

They live in the coordinator's two purgatories, as in Kafka:

- the rebalance purgatory, keyed by group id:
  - `DelayedJoin`: a rebalance waits until every known member has rejoined
    (the coordinator calls ``check_and_complete(group_id)`` whenever a
    member joins or leaves), or until the longest rebalance timeout passes
    (then the members missing are dropped).
  - `InitialDelayedJoin`: the first rebalance of an empty group waits
    ``group.initial.rebalance.delay.ms`` for more members, and waits that
    long again (up to the rebalance timeout) each time another one came.
    Only time completes it.
- the heartbeat purgatory, keyed by `member_key` (group id, member id):
  - `DelayedHeartbeat`: a member's session. Each sign of life completes the
    member's current one (``heartbeat_satisfied``) and the coordinator
    watches a new one; one that expires means the member is gone.
  - `PendingMemberTimer`: a member told MEMBER_ID_REQUIRED must come back
    within its session timeout; its JoinGroup (or LeaveGroup) completes it.

They decide when; what happens then is the coordinator's business (the
callbacks they are given), which checks that the group still is what the
operation was created for.
"""

from __future__ import annotations

from collections.abc import Callable

from kbroker.coordinator.group import Group, Member
from kbroker.replication.purgatory import DelayedOperation, Purgatory

MemberKey = tuple[str, str]


def member_key(group_id: str, member_id: str) -> MemberKey:
    return (group_id, member_id)


class DelayedJoin(DelayedOperation):
    """Waits for every member of ``group`` to rejoin, at most ``timeout_ms``."""

    def __init__(self, group: Group, timeout_ms: int, complete: Callable[[Group], None]) -> None:
        super().__init__(timeout_ms)
        self.group = group
        self._complete = complete

    def try_complete(self) -> bool:
        if self.group.all_members_joined():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self.group.join_timer is self:
            self._complete(self.group)


class InitialDelayedJoin(DelayedOperation):
    """The first rebalance of an empty group: wait a little for the others."""

    def __init__(
        self,
        purgatory: Purgatory[str],
        group: Group,
        configured_delay_ms: int,
        delay_ms: int,
        remaining_ms: int,
        complete: Callable[[Group], None],
    ) -> None:
        super().__init__(delay_ms)
        self.purgatory = purgatory
        self.group = group
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms
        self._complete = complete

    def try_complete(self) -> bool:
        # Only time completes it: the point is to let more members arrive.
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.join_timer is not self:
            return
        if group.new_member_added and self.remaining_ms > 0:
            # Someone came during the wait: wait again for who may follow.
            group.new_member_added = False
            nxt = InitialDelayedJoin(
                self.purgatory,
                group,
                self.configured_delay_ms,
                min(self.configured_delay_ms, self.remaining_ms),
                max(self.remaining_ms - self.delay_ms, 0),
                self._complete,
            )
            group.join_timer = nxt
            self.purgatory.try_complete_else_watch(nxt, [group.group_id])
            return
        self._complete(group)


class DelayedHeartbeat(DelayedOperation):
    """A member's session: ``expire(group, member, self)`` runs unless kept alive in time."""

    def __init__(
        self,
        group: Group,
        member: Member,
        timeout_ms: int,
        expire: Callable[[Group, Member, DelayedHeartbeat], None],
    ) -> None:
        super().__init__(timeout_ms)
        self.group = group
        self.member = member
        self.key = member_key(group.group_id, member.member_id)
        self._expired = expire

    def try_complete(self) -> bool:
        if self.member.heartbeat_satisfied or self.member.heartbeat is not self:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass  # kept alive: the coordinator watches the next one

    def on_expire(self) -> None:
        self._expired(self.group, self.member, self)


class PendingMemberTimer(DelayedOperation):
    """A member id handed out with MEMBER_ID_REQUIRED, waiting for its member to join."""

    def __init__(
        self,
        group: Group,
        member_id: str,
        timeout_ms: int,
        expire: Callable[[Group, str, PendingMemberTimer], None],
    ) -> None:
        super().__init__(timeout_ms)
        self.group = group
        self.member_id = member_id
        self.key = member_key(group.group_id, member_id)
        self._expired = expire

    def try_complete(self) -> bool:
        # Done once the id is no longer pending: its member joined or left.
        if self.group.pending_members.get(self.member_id) is not self:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expire(self) -> None:
        self._expired(self.group, self.member_id, self)
