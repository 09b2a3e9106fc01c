"""A single kbroker node keeps users' and clients' configs in its metadata, under Kafka's
ZooKeeper paths and JSON, across restarts, and enforces them from the start."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kbroker.protocol import ApiKey
from kbroker.protocol.messages.core import MetadataRequest
from kbroker.tools.client import BrokerClient
from tests.helpers import KBROKER, BrokerProcess

# A password no log line holds by chance (a random cluster id once held "pw").
SECRET = "zoë-s3cret-Quokka"


def cli(bootstrap: str, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [*KBROKER, *args, "-b", bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_users_and_quotas_survive_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        cli(broker.bootstrap, "user", "create", "zoë", "--password-file", "-", stdin=SECRET + "\n")
        cli(broker.bootstrap, "quota", "set", "--client-id", "busy", "request_percentage=0.0001")
        broker.stop()
        # Kafka's paths and JSON, in the metadata's change log; no secret but the keys.
        changes = [
            json.loads(line)
            for line in (tmp_path / "data" / "__kbroker_metadata.log").read_text().splitlines()
        ]
        entries = {c["put_entry"]: c["data"] for c in changes if "put_entry" in c}
        assert entries["/config/clients/busy"] == {
            "version": 1,
            "config": {"request_percentage": "1.0E-4"},
        }
        credential = entries["/config/users/zo%C3%AB"]["config"]["SCRAM-SHA-256"]
        assert credential.startswith("salt=") and "iterations=8192" in credential
        broker.start()
        rows = json.loads(cli(broker.bootstrap, "user", "list", "--json"))
        assert rows == [{"user": "zoë", "mechanism": "SCRAM-SHA-256", "iterations": 8192}]
        # The quota is enforced from the start.
        with BrokerClient(broker.bootstrap, client_id="busy") as client:
            throttled = 0
            for _ in range(50):
                resp = client.request(
                    ApiKey.METADATA,
                    12,
                    MetadataRequest(topics=None, allow_auto_topic_creation=False),
                )
                throttled = resp.throttle_time_ms
                if throttled:
                    break
        assert throttled > 0
        assert "Traceback" not in broker.output()
        assert SECRET not in broker.output()
    finally:
        broker.kill()
