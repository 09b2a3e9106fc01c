"""Which quota applies to whom (Kafka's precedence), who shares a rate, and throttling."""

from __future__ import annotations

import pytest

from kbroker.quota.entity import DEFAULT, QuotaEntity, sanitize
from kbroker.quota.manager import ClientQuotaManager, QuotaManagers

# The eight levels, most specific first, each with its own value.
LEVELS = [
    (QuotaEntity("alice", "app"), 1.0),
    (QuotaEntity("alice", DEFAULT), 2.0),
    (QuotaEntity("alice", None), 3.0),
    (QuotaEntity(DEFAULT, "app"), 4.0),
    (QuotaEntity(DEFAULT, DEFAULT), 5.0),
    (QuotaEntity(DEFAULT, None), 6.0),
    (QuotaEntity(None, "app"), 7.0),
    (QuotaEntity(None, DEFAULT), 8.0),
]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def manager(clock: Clock | None = None) -> ClientQuotaManager:
    return ClientQuotaManager("producer_byte_rate", 11, 1, clock=clock or Clock())


def test_precedence_is_kafkas_most_specific_first() -> None:
    m = manager()
    for entity, value in LEVELS:
        m.set_quota(entity, value)
    for entity, value in LEVELS:
        assert m.quota("alice", "app") == value, f"expected {entity} to apply"
        m.set_quota(entity, None)
    assert m.quota("alice", "app") is None
    assert not m.enabled


def test_other_users_and_clients_fall_to_the_defaults() -> None:
    m = manager()
    m.set_quota(QuotaEntity("alice", None), 3.0)
    m.set_quota(QuotaEntity(None, DEFAULT), 8.0)
    assert m.quota("alice", "x") == 3.0
    assert m.quota("bob", "x") == 8.0
    # An empty client id has no client-id quota, not even the default one.
    assert m.quota("bob", "") is None
    m.set_quota(QuotaEntity(DEFAULT, None), 6.0)
    assert m.quota("bob", "") == 6.0


def test_names_are_matched_sanitized() -> None:
    m = manager()
    m.set_quota(QuotaEntity(sanitize("alice@example.com"), sanitize("my app")), 1.0)
    assert m.quota("alice@example.com", "my app") == 1.0
    assert m.quota("alice@example.com", "my+app") is None


def throttles(m: ClientQuotaManager, user: str, client: str, n: int, size: int) -> list[int]:
    return [m.record(user, client, size) for _ in range(n)]


def test_a_users_quota_is_shared_by_its_clients_and_a_default_is_per_user() -> None:
    clock = Clock()
    m = manager(clock)
    m.set_quota(QuotaEntity("alice", None), 100.0)  # 1000 bytes in the 10 s window
    assert throttles(m, "alice", "a", 1, 600) == [0]
    # The second client of alice shares the rate: now 1200 bytes, over.
    assert m.record("alice", "b", 600) > 0
    m.set_quota(QuotaEntity(DEFAULT, None), 100.0)
    # bob and carol each get the default for themselves.
    assert m.record("bob", "a", 900) == 0
    assert m.record("carol", "a", 900) == 0
    assert m.record("bob", "b", 200) > 0


def test_a_client_id_default_is_per_client_id_across_users() -> None:
    m = manager()
    m.set_quota(QuotaEntity(None, DEFAULT), 100.0)
    assert m.record("alice", "a", 900) == 0
    assert m.record("bob", "b", 900) == 0
    # Same client id, another user: shares the client id's rate.
    assert m.record("bob", "a", 200) > 0


def test_throttle_time_and_its_cap_for_request_quotas() -> None:
    clock = Clock()
    m = manager(clock)
    m.set_quota(QuotaEntity(None, "app"), 100.0)
    assert m.record("u", "app", 1000) == 0  # exactly 100/s over 10 s
    assert m.record("u", "app", 1000) == 10_000  # 200/s: (200-100)/100 * 10 s
    capped = ClientQuotaManager("request_percentage", 11, 1, max_throttle_ms=1000, clock=clock)
    capped.set_quota(QuotaEntity(None, "app"), 1.0)
    assert capped.record("u", "app", 1000) == 1000


def test_unrecord_takes_a_value_back() -> None:
    m = manager()
    m.set_quota(QuotaEntity(None, "app"), 100.0)
    assert m.record("u", "app", 1500) > 0
    m.unrecord("u", "app", 1500)
    assert m.record("u", "app", 900) == 0


def test_max_value_in_window() -> None:
    m = manager()
    assert m.max_value_in_window("u", "app") == float("inf")
    m.set_quota(QuotaEntity(None, "app"), 100.0)
    assert m.max_value_in_window("u", "app") == 1000.0


def test_managers_take_whole_config_sets() -> None:
    q = QuotaManagers(11, 1)
    alice = QuotaEntity("alice", None)
    q.update_entity(
        alice,
        {
            "producer_byte_rate": "1024",
            "consumer_byte_rate": "2048",
            "request_percentage": "50.0",
            "SCRAM-SHA-256": "salt=...",
        },
    )
    assert q.produce.quota("alice", "x") == 1024.0
    assert q.fetch.quota("alice", "x") == 2048.0
    assert q.request.quota("alice", "x") == 50.0
    assert q.produce.enabled and q.fetch.enabled and q.request.enabled
    q.update_entity(alice, {"producer_byte_rate": "not a number", "consumer_byte_rate": "1.5"})
    # Byte rates are whole numbers (Kafka reads them with toLong): both ignored.
    assert q.produce.quota("alice", "x") is None
    assert q.fetch.quota("alice", "x") is None
    assert q.request.quota("alice", "x") is None
    assert not (q.produce.enabled or q.fetch.enabled or q.request.enabled)


@pytest.mark.parametrize("principal", ["User:alice", "User:ANONYMOUS"])
def test_principals_are_named_by_their_user(principal: str) -> None:
    q = QuotaManagers(11, 1)
    name = principal.partition(":")[2]
    q.update_entity(QuotaEntity(name, None), {"producer_byte_rate": "100"})
    assert q.produce_throttle_ms(principal, "c", 1000) == 0
    assert q.produce_throttle_ms(principal, "c", 1000) > 0
