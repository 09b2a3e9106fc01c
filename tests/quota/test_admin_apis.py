"""Users' SCRAM credentials and client quotas through the admin APIs, with Kafka 3.9.1's
kafka-configs, confluent-kafka and plain requests: each test runs against a kbroker node
and against Apache Kafka 3.9.1 (ZooKeeper mode) with the same assertions."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from confluent_kafka.error import KafkaException

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.quotas import (
    AlterClientQuotasRequest,
    AlterUserScramCredentialsRequest,
    DescribeClientQuotasRequest,
)
from kbroker.tools.client import BrokerClient
from tests.quota.systems import kafka_configs

pytestmark = pytest.mark.timeout(180)

ACQ = AlterClientQuotasRequest
AUSC = AlterUserScramCredentialsRequest
DCQ = DescribeClientQuotasRequest


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def described(out: str, subject: str) -> dict[str, set[str]]:
    """kafka-configs --describe lines about ``subject`` ("user-principal 'alice'"): the kind
    ("Quota", "SCRAM credential") -> its key=value items (the tool prints them in the order
    of a hash map, so only the set is compared)."""
    found = {}
    for line in out.splitlines():
        for kind in ("Quota", "SCRAM credential"):
            head = f"{kind} configs for {subject} are "
            if line.startswith(head):
                found[kind] = set(line[len(head) :].split(", "))
    return found


# -- Kafka's kafka-configs tool ------------------------------------------------------------


def test_kafka_configs_sets_describes_and_deletes_quotas_and_credentials(bootstrap: str) -> None:
    user, client = unique("alice"), unique("app")
    # (The tool alters quotas and credentials of users in separate calls.)
    kafka_configs(
        bootstrap,
        "--alter",
        "--add-config",
        "producer_byte_rate=1024,consumer_byte_rate=2048,request_percentage=50",
        "--entity-type",
        "users",
        "--entity-name",
        user,
    )
    kafka_configs(
        bootstrap,
        "--alter",
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=pw],SCRAM-SHA-512=[password=pw2]",
        "--entity-type",
        "users",
        "--entity-name",
        user,
    )
    kafka_configs(
        bootstrap,
        "--alter",
        "--add-config",
        "producer_byte_rate=4096",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--entity-type",
        "clients",
        "--entity-name",
        client,
    )
    out = kafka_configs(bootstrap, "--describe", "--entity-type", "users", "--entity-name", user)
    assert described(out, f"user-principal '{user}'") == {
        "Quota": {
            "consumer_byte_rate=2048.0",
            "producer_byte_rate=1024.0",
            "request_percentage=50.0",
        },
        "SCRAM credential": {"SCRAM-SHA-256=iterations=8192", "SCRAM-SHA-512=iterations=4096"},
    }
    out = kafka_configs(
        bootstrap,
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--entity-type",
        "clients",
        "--entity-name",
        client,
    )
    assert (
        f"Quota configs for user-principal '{user}', client-id '{client}' are "
        "producer_byte_rate=4096.0"
    ) in out
    for deleted in ("producer_byte_rate", "SCRAM-SHA-512"):
        kafka_configs(
            bootstrap,
            "--alter",
            "--delete-config",
            deleted,
            "--entity-type",
            "users",
            "--entity-name",
            user,
        )
    out = kafka_configs(bootstrap, "--describe", "--entity-type", "users", "--entity-name", user)
    assert described(out, f"user-principal '{user}'") == {
        "Quota": {"consumer_byte_rate=2048.0", "request_percentage=50.0"},
        "SCRAM credential": {"SCRAM-SHA-256=iterations=8192"},
    }


def test_kafka_configs_defaults_of_clients(bootstrap: str) -> None:
    kafka_configs(
        bootstrap,
        "--alter",
        "--add-config",
        "consumer_byte_rate=777",
        "--entity-type",
        "clients",
        "--entity-default",
    )
    out = kafka_configs(bootstrap, "--describe", "--entity-type", "clients", "--entity-default")
    assert "Quota configs for the default client-id are consumer_byte_rate=777.0" in out
    kafka_configs(
        bootstrap,
        "--alter",
        "--delete-config",
        "consumer_byte_rate",
        "--entity-type",
        "clients",
        "--entity-default",
    )
    out = kafka_configs(bootstrap, "--describe", "--entity-type", "clients", "--entity-default")
    assert "consumer_byte_rate" not in out


# -- confluent-kafka's SCRAM admin calls ---------------------------------------------------


def test_confluent_kafka_alters_and_describes_scram_credentials(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    user, other = unique("carol"), unique("dave")
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw", b"salt-1"
            ),
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 10000), b"pw", b"salt-2"
            ),
        ]
    )
    for f in futures.values():
        f.result(timeout=30)
    description = admin.describe_user_scram_credentials([user])[user].result(timeout=30)
    infos = sorted((i.mechanism, i.iterations) for i in description.scram_credential_infos)
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 10000)]
    everyone = admin.describe_user_scram_credentials().result(timeout=30)
    assert user in everyone and other not in everyone
    with pytest.raises(KafkaException) as raised:
        admin.describe_user_scram_credentials([other])[other].result(timeout=30)
    assert raised.value.args[0].code() == ErrorCode.RESOURCE_NOT_FOUND
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)]
    )
    futures[user].result(timeout=30)
    description = admin.describe_user_scram_credentials([user])[user].result(timeout=30)
    assert [i.mechanism for i in description.scram_credential_infos] == [
        ScramMechanism.SCRAM_SHA_256
    ]


# -- the requests' validation ----------------------------------------------------------------


def alter_scram(
    client: BrokerClient, deletions: list[Any], upsertions: list[Any]
) -> dict[str, int]:
    resp = client.request(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, AUSC(deletions=deletions, upsertions=upsertions)
    )
    return {r.user: r.error_code for r in resp.results}


def upsertion(name: str, mechanism: int = 1, iterations: int = 4096) -> Any:
    return AUSC.Upsertion(
        name=name,
        mechanism=mechanism,
        iterations=iterations,
        salt=b"0123456789abcdef",
        salted_password=bytes(32 if mechanism != 2 else 64),
    )


def test_scram_alterations_are_validated_as_kafka_does(bootstrap: str) -> None:
    ok, few, many, unknown, twice, nothing = (
        unique(n) for n in ("ok", "few", "many", "unk", "twice", "none")
    )
    with BrokerClient(bootstrap) as client:
        codes = alter_scram(
            client,
            [AUSC.Deletion(name=nothing, mechanism=1)],
            [
                upsertion(ok),
                upsertion(few, iterations=4095),
                upsertion(many, iterations=16385),
                upsertion(unknown, mechanism=3),
                upsertion(twice),
                upsertion(twice),
                upsertion(""),
            ],
        )
        assert codes == {
            ok: ErrorCode.NONE,
            few: ErrorCode.UNACCEPTABLE_CREDENTIAL,
            many: ErrorCode.UNACCEPTABLE_CREDENTIAL,
            unknown: ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            twice: ErrorCode.DUPLICATE_RESOURCE,
            "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            nothing: ErrorCode.RESOURCE_NOT_FOUND,
        }
        # A user with one bad alteration has none applied.
        codes = alter_scram(
            client, [AUSC.Deletion(name=ok, mechanism=2)], [upsertion(ok, mechanism=2)]
        )
        assert codes == {ok: ErrorCode.DUPLICATE_RESOURCE}


def alter_quota(
    client: BrokerClient,
    entity: list[tuple[str, str | None]],
    ops: list[tuple[str, float | None]],
    validate_only: bool = False,
) -> tuple[int, str | None]:
    req = ACQ(
        entries=[
            ACQ.EntryData(
                entity=[ACQ.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[ACQ.EntryData.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops],
            )
        ],
        validate_only=validate_only,
    )
    [entry] = client.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, req).entries
    return entry.error_code, entry.error_message


def describe_quotas(
    client: BrokerClient, components: list[tuple[str, int, str | None]], strict: bool
) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    req = DCQ(
        components=[DCQ.Component(entity_type=t, match_type=m, match=n) for t, m, n in components],
        strict=strict,
    )
    resp = client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, req)
    assert resp.error_code == ErrorCode.NONE, resp.error_message
    return {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
            v.key: v.value for v in entry.values
        }
        for entry in resp.entries
    }


def test_quota_alterations_are_validated_as_kafka_does(bootstrap: str) -> None:
    user = unique("erin")
    with BrokerClient(bootstrap) as client:
        bad = [
            ([], [("producer_byte_rate", 1.0)]),
            ([("user", "")], [("producer_byte_rate", 1.0)]),
            ([("group", "g")], [("producer_byte_rate", 1.0)]),
            ([("user", user)], [("no_such_quota", 1.0)]),
            ([("user", user)], [("producer_byte_rate", 10.5)]),
            ([("client-id", user)], [("consumer_byte_rate", 0.25)]),
        ]
        for entity, ops in bad:
            code, _ = alter_quota(client, entity, ops)
            assert code == ErrorCode.INVALID_REQUEST, (entity, ops)
        # Validate-only changes nothing.
        assert (
            alter_quota(
                client, [("user", user)], [("producer_byte_rate", 5.0)], validate_only=True
            )[0]
            == 0
        )
        assert describe_quotas(client, [("user", 0, user)], strict=True) == {}
        assert (
            alter_quota(
                client,
                [("user", user)],
                [("producer_byte_rate", 5.0), ("request_percentage", 12.5)],
            )[0]
            == 0
        )
        assert describe_quotas(client, [("user", 0, user)], strict=True) == {
            (("user", user),): {"producer_byte_rate": 5.0, "request_percentage": 12.5}
        }
        assert alter_quota(client, [("user", user)], [("producer_byte_rate", None)])[0] == 0
        assert describe_quotas(client, [("user", 0, user)], strict=True) == {
            (("user", user),): {"request_percentage": 12.5}
        }


def test_describe_matches_entities_as_kafka_does(bootstrap: str) -> None:
    u, c = unique("frank"), unique("batch")
    with BrokerClient(bootstrap) as client:
        for entity, value in [
            ([("user", u)], 1.0),
            ([("user", u), ("client-id", c)], 2.0),
            ([("user", u), ("client-id", None)], 3.0),
            ([("user", None), ("client-id", c)], 4.0),
            ([("client-id", c)], 5.0),
        ]:
            assert alter_quota(client, entity, [("producer_byte_rate", value)])[0] == 0
        user_only = (("user", u),)
        pair = (("client-id", c), ("user", u))
        user_default_client = (("client-id", None), ("user", u))
        default_user_pair = (("client-id", c), ("user", None))
        client_only = (("client-id", c),)

        def rates(components: list[tuple[str, int, str | None]], strict: bool) -> dict[Any, float]:
            found = describe_quotas(client, components, strict)
            return {
                k: v["producer_byte_rate"] for k, v in found.items() if u in str(k) or c in str(k)
            }

        # An exact user, strict: only the user's own entity.
        assert rates([("user", 0, u)], strict=True) == {user_only: 1.0}
        # Not strict: the user's entities with any client part too.
        assert rates([("user", 0, u)], strict=False) == {
            user_only: 1.0,
            pair: 2.0,
            user_default_client: 3.0,
        }
        # The user with the default client.
        assert rates([("user", 0, u), ("client-id", 1, None)], strict=True) == {
            user_default_client: 3.0
        }
        # Any user (the default included) with the exact client.
        assert rates([("user", 2, None), ("client-id", 0, c)], strict=True) == {
            pair: 2.0,
            default_user_pair: 4.0,
        }
        # The exact client, strict: only the client's own entity; not strict: all with it.
        assert rates([("client-id", 0, c)], strict=True) == {client_only: 5.0}
        assert rates([("client-id", 0, c)], strict=False) == {
            pair: 2.0,
            default_user_pair: 4.0,
            client_only: 5.0,
        }
        # The default user's entities.
        assert rates([("user", 1, None), ("client-id", 0, c)], strict=True) == {
            default_user_pair: 4.0
        }
        # Bad filters.
        for components, code in [
            ([("user", 0, u), ("user", 0, u)], ErrorCode.INVALID_REQUEST),
            ([("", 0, u)], ErrorCode.INVALID_REQUEST),
            ([("group", 0, u)], ErrorCode.UNSUPPORTED_VERSION),
        ]:
            req = DCQ(
                components=[
                    DCQ.Component(entity_type=t, match_type=m, match=n) for t, m, n in components
                ],
                strict=False,
            )
            assert client.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, req).error_code == code
