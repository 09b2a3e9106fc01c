"""Quota entities: Kafka's Sanitizer names, paths and the wire form."""

from __future__ import annotations

import pytest

from kbroker.cluster.zk_data import quota_entity_config_path
from kbroker.quota.entity import DEFAULT, QuotaEntity, desanitize, sanitize


@pytest.mark.parametrize(
    ("name", "sanitized"),
    [
        ("alice", "alice"),
        ("a.b-c_d09", "a.b-c_d09"),
        ("alice@example.com", "alice%40example.com"),
        ("a b", "a%20b"),  # Java's URLEncoder writes "+", the Sanitizer "%20"
        ("a*b", "a%2Ab"),
        ("a~b", "a%7Eb"),  # Java encodes "~", Python's quote would not
        ("a/b", "a%2Fb"),
        ("<default>", "%3Cdefault%3E"),
        ("日本", "%E6%97%A5%E6%9C%AC"),
        ("", ""),
    ],
)
def test_sanitize_as_kafka(name: str, sanitized: str) -> None:
    assert sanitize(name) == sanitized
    assert desanitize(sanitized) == name


def test_desanitize_reads_plus_as_space_and_refuses_broken_escapes() -> None:
    assert desanitize("a+b") == "a b"
    for bad in ("%", "%4", "%zz", "a%G0"):
        with pytest.raises(ValueError):
            desanitize(bad)


def test_paths_of_every_kind_of_entity() -> None:
    cases = {
        QuotaEntity("alice", None): "/config/users/alice",
        QuotaEntity(DEFAULT, None): "/config/users/<default>",
        QuotaEntity(None, "app%201"): "/config/clients/app%201",
        QuotaEntity(None, DEFAULT): "/config/clients/<default>",
        QuotaEntity("alice", "app"): "/config/users/alice/clients/app",
        QuotaEntity(DEFAULT, DEFAULT): "/config/users/<default>/clients/<default>",
    }
    for entity, path in cases.items():
        assert quota_entity_config_path(entity) == path
        kind, _, name = path.removeprefix("/config/").partition("/")
        assert QuotaEntity.from_path(kind, name) == entity


def test_a_user_named_default_is_not_the_default() -> None:
    named = QuotaEntity.of("<default>", None, named=(True, False))
    default = QuotaEntity.of(None, None, named=(True, False))
    assert named != default
    assert named.path == "users/%3Cdefault%3E"
    assert named.wire_entries() == [("user", "<default>")]
    assert default.wire_entries() == [("user", None)]


def test_bad_entity_paths_are_refused() -> None:
    for kind, name in [
        ("users", ""),
        ("users", "a/b"),
        ("users", "a/clients"),
        ("clients", "a/clients/b"),
        ("topics", "t"),
        ("users", "bad%zz"),
    ]:
        with pytest.raises(ValueError):
            QuotaEntity.from_path(kind, name)
    with pytest.raises(ValueError):
        QuotaEntity(None, None)
