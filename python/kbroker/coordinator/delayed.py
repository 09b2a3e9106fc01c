"""The coordinator's delayed operations, one small class per kind, on asyncio timers.

- `DelayedJoin`: a rebalance waits until every known member has rejoined,
  or until the longest rebalance timeout passes (then the missing members
  are dropped). It can complete early: the coordinator calls
  `try_complete()` whenever a member joins or leaves.
- `InitialDelayedJoin`: the first rebalance of an empty group waits
  ``group.initial.rebalance.delay.ms`` for more members, extending the wait
  by that delay (up to the rebalance timeout) each time another one came.
- `DelayedHeartbeat`: a member's session; it expires unless the member
  heartbeats (or otherwise shows it is alive) within its session timeout.

Each holds at most one timer handle; `cancel()` makes it inert.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kbroker.coordinator.group import Group, Member


class _Timer:
    def __init__(self) -> None:
        self._handle: asyncio.TimerHandle | None = None

    def _schedule(self, delay_ms: int, fire: Callable[[], None]) -> None:
        self.cancel()
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(max(delay_ms, 0) / 1000, fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    @property
    def active(self) -> bool:
        return self._handle is not None


class DelayedJoin(_Timer):
    """Waits for every member of ``group`` to rejoin, at most ``timeout_ms``."""

    def __init__(self, group: Group, timeout_ms: int, complete: Callable[[Group], None]) -> None:
        super().__init__()
        self.group = group
        self._complete = complete
        self._schedule(timeout_ms, self._expire)

    def try_complete(self) -> bool:
        if self.active and self.group.all_members_joined():
            self._finish()
            return True
        return False

    def _expire(self) -> None:
        self._handle = None
        self._finish()

    def _finish(self) -> None:
        self.cancel()
        if self.group.join_timer is self:
            self._complete(self.group)


class InitialDelayedJoin(_Timer):
    """The first rebalance of an empty group: wait a little for the others."""

    def __init__(
        self, group: Group, delay_ms: int, remaining_ms: int, complete: Callable[[Group], None]
    ) -> None:
        super().__init__()
        self.group = group
        self._complete = complete
        self._delay_ms = delay_ms
        self._remaining_ms = remaining_ms
        self._schedule(delay_ms, self._expire)

    def try_complete(self) -> bool:
        # Only time completes it: the point is to let more members arrive.
        return False

    def _expire(self) -> None:
        self._handle = None
        if self.group.join_timer is not self:
            return
        if self.group.new_member_added and self._remaining_ms > 0:
            self.group.new_member_added = False
            delay = min(self._delay_ms, self._remaining_ms)
            self._remaining_ms = max(self._remaining_ms - delay, 0)
            self._schedule(delay, self._expire)
            return
        self._complete(self.group)


class DelayedHeartbeat(_Timer):
    """A member's session: ``expire(group, member)`` runs unless kept alive in time."""

    def __init__(
        self, group: Group, member: Member, expire: Callable[[Group, Member], None]
    ) -> None:
        super().__init__()
        self.group = group
        self.member = member
        self._expire_cb = expire

    def reset(self, timeout_ms: int) -> None:
        self._schedule(timeout_ms, self._expire)

    def _expire(self) -> None:
        self._handle = None
        member = self.member
        if self.group.members.get(member.member_id) is not member:
            return  # left or replaced already
        if member.awaiting_join or member.awaiting_sync:
            # Blocked in JoinGroup/SyncGroup: alive; the rebalance timeout governs it.
            self.reset(member.session_timeout_ms)
            return
        self._expire_cb(self.group, member)


class PendingMemberTimer(_Timer):
    """A member told MEMBER_ID_REQUIRED must come back within its session timeout."""

    def __init__(
        self, group: Group, member_id: str, timeout_ms: int, expire: Callable[[Group, str], None]
    ) -> None:
        super().__init__()
        self.group = group
        self.member_id = member_id
        self._expire_cb = expire
        self._schedule(timeout_ms, self._expire)

    def _expire(self) -> None:
        self._handle = None
        if self.group.pending_members.get(self.member_id) is self:
            self._expire_cb(self.group, self.member_id)
