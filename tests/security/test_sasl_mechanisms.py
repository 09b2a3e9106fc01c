"""PLAIN and SCRAM checked message by message: what passes, and every way to fail."""

from __future__ import annotations

import base64

import pytest

from kbroker.config import ConfigError
from kbroker.security.credentials import CredentialCache
from kbroker.security.errors import AuthenticationFailed
from kbroker.security.jaas import parse_jaas
from kbroker.security.plain import PlainServer, plain_client_message
from kbroker.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    decode_saslname,
    encode_saslname,
)


def test_rfc7677_credential() -> None:
    """RFC 7677's example: user "user", password "pencil", its salt and 4096 iterations
    give the server signature the RFC prints for its exchange."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, salt)
    auth_message = (
        b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    signature = SCRAM_SHA_256.hmac(cred.server_key, auth_message)
    assert base64.b64encode(signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert ScramCredential.from_kafka(cred.to_kafka()) == cred


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_exchange_passes_with_the_right_password(mechanism: ScramMechanism) -> None:
    cred = ScramCredential.from_password(mechanism, "secret", 4096)
    server = ScramServer(mechanism, {"al,ice=": cred}.get)
    client = ScramClient(mechanism, "al,ice=", "secret")
    server_first = server.evaluate(client.first())
    server_final = server.evaluate(client.final(server_first))
    client.verify(server_final)
    assert server.complete and server.user == "al,ice="


def _exchange_until_final(password: str, user: str = "alice") -> tuple[ScramServer, bytes]:
    cred = ScramCredential.from_password(SCRAM_SHA_256, "secret", 4096)
    server = ScramServer(SCRAM_SHA_256, {"alice": cred}.get)
    client = ScramClient(SCRAM_SHA_256, user, password)
    return server, client.final(server.evaluate(client.first()))


def test_scram_refuses_a_wrong_password_and_an_unknown_user_alike() -> None:
    for password, user in (("wrong", "alice"), ("secret", "mallory")):
        server, final = _exchange_until_final(password, user)
        with pytest.raises(AuthenticationFailed, match="invalid credentials"):
            server.evaluate(final)
        assert not server.complete


def test_scram_salt_of_an_unknown_user_does_not_change_between_attempts() -> None:
    salts = set()
    for _ in range(2):
        server = ScramServer(SCRAM_SHA_256, lambda _user: None)
        first = server.evaluate(ScramClient(SCRAM_SHA_256, "ghost", "x").first()).decode()
        salts.add(first.split(",")[1])
    assert len(salts) == 1


def test_scram_refuses_a_replayed_final_message() -> None:
    """A client-final message recorded from one exchange is worthless in another: the
    server's half of the nonce differs."""
    server, final = _exchange_until_final("secret")
    server.evaluate(final)
    assert server.complete
    cred = ScramCredential.from_password(SCRAM_SHA_256, "secret", 4096)
    again = ScramServer(SCRAM_SHA_256, {"alice": cred}.get)
    again.evaluate(b"n,,n=alice,r=" + final.split(b",r=")[1].split(b",")[0][:32])
    with pytest.raises(AuthenticationFailed, match="nonce"):
        again.evaluate(final)


def _librdkafka_2_0_final(server_first: bytes, client_nonce: str, password: str) -> bytes:
    """The client-final message librdkafka 2.0 (Debian 12's kcat) sends: its own nonce
    again before the combined one, the proof computed over the message as sent."""
    mech = SCRAM_SHA_256
    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = mech.salted_password(password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    without_proof = f"c=biws,r={client_nonce}{attrs['r']}"
    auth = f"n=alice,r={client_nonce},{server_first.decode()},{without_proof}".encode()
    client_key = mech.hmac(salted, b"Client Key")
    signature = mech.hmac(mech.hash(client_key), auth)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def test_scram_takes_a_final_nonce_ending_with_the_exchanges_as_kafka_does() -> None:
    """Kafka 3.9.1 takes a client-final nonce that ends with the exchange's whole nonce:
    librdkafka 2.0 repeats its own nonce in front. Anything else still fails."""
    cred = ScramCredential.from_password(SCRAM_SHA_256, "secret", 4096)
    for nonce, password, outcome in (
        ("xyz=;<}~", "secret", None),
        ("xyz=;<}~", "wrong", "invalid credentials"),
    ):
        server = ScramServer(SCRAM_SHA_256, {"alice": cred}.get)
        server_first = server.evaluate(f"n,,n=alice,r={nonce}".encode())
        final = _librdkafka_2_0_final(server_first, nonce, password)
        if outcome is None:
            assert server.evaluate(final).startswith(b"v=") and server.complete
        else:
            with pytest.raises(AuthenticationFailed, match=outcome):
                server.evaluate(final)
    # The combined nonce cut short, or followed by more, is not this exchange's.
    for change in (lambda r: r[:-1], lambda r: r + "x", lambda r: r[1:]):
        server = ScramServer(SCRAM_SHA_256, {"alice": cred}.get)
        server_first = server.evaluate(b"n,,n=alice,r=abc")
        combined = dict(p.split("=", 1) for p in server_first.decode().split(","))["r"]
        with pytest.raises(AuthenticationFailed, match="nonce"):
            server.evaluate(f"c=biws,r={change(combined)},p=AAAA".encode())


def test_scram_refuses_a_forged_proof() -> None:
    server, final = _exchange_until_final("secret")
    head, _, proof = final.rpartition(b",p=")
    forged = bytearray(base64.b64decode(proof))
    forged[0] ^= 1
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        server.evaluate(head + b",p=" + base64.b64encode(bytes(forged)))


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"\xff\xfe",
        b"n,,",
        b"n,,r=abc",
        b"n,,n=alice",
        b"p=tls-unique,,n=alice,r=abc",
        b"n,a=bob,n=alice,r=abc",
        b"n,,n=al=ice,r=abc",
        b"n,,n=alice,r=ab,c",
        b"n,,n=alice,r=" + b"x" * 1000,
        b"n,,n=alice,r=abc,m=mandatory",
    ],
)
def test_scram_refuses_malformed_first_messages(first: bytes) -> None:
    server = ScramServer(SCRAM_SHA_256, lambda _user: None)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(first)


@pytest.mark.parametrize(
    "final",
    [
        b"",
        b"c=biws",
        b"c=biws,r=x,p=",
        b"c=!!,r=x,p=AAAA",
        b"c=eSws,r=x,p=AAAA",
        b"r=x,c=biws,p=AA",
    ],
)
def test_scram_refuses_malformed_final_messages(final: bytes) -> None:
    server, _ = _exchange_until_final("secret")
    with pytest.raises(AuthenticationFailed):
        server.evaluate(final)


def test_scram_exchange_ends_after_two_messages() -> None:
    server, final = _exchange_until_final("secret")
    server.evaluate(final)
    with pytest.raises(AuthenticationFailed, match="after the exchange ended"):
        server.evaluate(final)


def test_scram_client_checks_the_broker() -> None:
    client = ScramClient(SCRAM_SHA_256, "alice", "secret")
    client.first()
    with pytest.raises(AuthenticationFailed, match="nonce"):
        client.final(b"r=someone-elses,s=AAAA,i=4096")
    nonce = client.first()[7:].split(b"r=")[1]
    with pytest.raises(AuthenticationFailed, match="too few"):
        client.final(b"r=" + nonce + b"x,s=AAAA,i=1")
    with pytest.raises(AuthenticationFailed, match="too many"):
        client.final(b"r=" + nonce + b"x,s=AAAA,i=999999999")


def test_saslnames_escape_commas_and_equals() -> None:
    assert encode_saslname("a,b=c") == "a=2Cb=3Dc"
    assert decode_saslname("a=2Cb=3Dc") == "a,b=c"


def test_kafka_credential_text_is_checked() -> None:
    for bad in ("", "salt=AA==", "salt=!,stored_key=AA==,server_key=AA==,iterations=1",
                "salt=AA==,stored_key=AA==,server_key=AA==,iterations=x",
                "salt=AA==,stored_key=AA==,server_key=AA==,iterations=0"):  # fmt: skip
        with pytest.raises(ValueError) as info:
            ScramCredential.from_kafka(bad)
        assert "AA==" not in str(info.value)


def test_credential_cache_keeps_only_credentials() -> None:
    cache = CredentialCache()
    cred = ScramCredential.from_password(SCRAM_SHA_512, "pw", 4096)
    cache.update_user(
        "alice",
        {"SCRAM-SHA-512": cred.to_kafka(), "SCRAM-SHA-256": "junk", "producer_byte_rate": "1"},
    )
    assert cache.get("SCRAM-SHA-512", "alice") == cred
    assert cache.get("SCRAM-SHA-256", "alice") is None
    cache.update_user("alice", {"producer_byte_rate": "1"})
    assert cache.get("SCRAM-SHA-512", "alice") is None


def test_plain_checks_the_password_in_the_jaas_users() -> None:
    users = {"alice": "alice-secret"}
    server = PlainServer(users.get)
    server.evaluate(plain_client_message("alice", "alice-secret"))
    assert server.complete and server.user == "alice"
    for message in (
        plain_client_message("alice", "wrong"),
        plain_client_message("bob", "alice-secret"),
        b"bob\0alice\0alice-secret",
        b"\0alice",
        b"\0\0pw",
        b"\0alice\0",
        b"\0al\xffice\0pw",
    ):
        with pytest.raises(AuthenticationFailed):
            PlainServer(users.get).evaluate(message)


def test_jaas_configuration_is_read_as_kafka_writes_it() -> None:
    jaas = parse_jaas(
        "x",
        'org.apache.kafka.common.security.plain.PlainLoginModule required\n username="admin"'
        ' password="ad min\\"1" user_admin="ad min\\"1" user_alice=alice-secret;',
    )
    assert jaas.login_module.endswith("PlainLoginModule")
    assert jaas.credentials() == ("admin", 'ad min"1')
    assert jaas.users == {"admin": 'ad min"1', "alice": "alice-secret"}
    for bad in ("", "Module required", 'Module always user_a="b";', 'Module required user_a "b";'):
        with pytest.raises(ConfigError) as info:
            parse_jaas("x", bad)
        assert '"b"' not in str(info.value)
