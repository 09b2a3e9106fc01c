"""`kbroker console` on a cluster that requires SASL and has ACLs (kbroker, and Apache Kafka
3.9.1 with AclAuthorizer for the reference run): the console connects as the user its
--command-config names, so the cluster's ACLs decide what it shows and may change. The
broker and its users are those of tests/security/test_acls_principals.py (`target`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation

from tests.console.conftest import ConsoleProcess
from tests.security.test_acls_principals import (
    PASSWORDS,
    Target,
    acl,
    grant,
    new_topic,
    operator,
    target,
)

__all__ = ["target"]  # the fixture, imported to be used here

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def alice_console(
    target: Target, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    """A console allowed to write, connected over SASL PLAIN as alice."""
    root = tmp_path_factory.mktemp(f"console-alice-{target.system}")
    config = root / "alice.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{PASSWORDS["alice"]}";\n'
    )
    console = ConsoleProcess(
        f"127.0.0.1:{target.sasl}",
        root / "console.log",
        ("--command-config", str(config), "--allow-writes"),
    ).start()
    try:
        yield console
    finally:
        console.stop()
        assert PASSWORDS["alice"] not in console.log_path.read_text()


def test_the_clusters_acls_decide_what_the_console_shows_and_changes(
    target: Target, alice_console: ConsoleProcess, tmp_path: Path
) -> None:
    seen = new_topic(target, "seen")
    hidden = new_topic(target, "hidden")
    grant(target, acl(seen, "User:alice", AclOperation.DESCRIBE))

    listed = alice_console.get("/topics")
    assert listed.status == 200
    assert f'data-name="{seen}"' in listed.body
    assert hidden not in listed.body
    assert PASSWORDS["alice"] not in listed.body

    # Alice may describe the topic but not its configs: the page says so and shows the rest.
    page = alice_console.get(f"/topics/{seen}")
    assert page.status == 200
    assert f'<span id="topic-name">{seen}</span>' in page.body
    assert "its configs cannot be shown: topic" in html.unescape(page.body)
    assert "TOPIC_AUTHORIZATION_FAILED" in page.body

    refused = alice_console.get(f"/topics/{hidden}")
    assert refused.status == 403
    assert f"does not let this console describe topic '{hidden}'" in html.unescape(refused.body)

    # Alice may not create topics: the cluster refuses the console's validation already.
    token = re.search(r'name="csrf-token" content="([^"]+)"', listed.body)
    assert token is not None
    name = f"alice-{seen}"
    created = alice_console.post(
        "/write/topic", {"csrf": token.group(1), "name": name, "partitions": "1"}
    )
    assert created.status == 409
    assert "TOPIC_AUTHORIZATION_FAILED" in created.body
    assert name not in operator(target).list_topics(timeout=10).topics
