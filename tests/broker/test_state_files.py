"""Damaged or missing state files: no log is ever deleted on a guess, and every
damaged file is named in one line (issue 10, items 1 and 4).

Each test runs a real broker process on real files and damages them as an
operator's mistake, a bad restore or a disk fault would.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kbroker.log.partition_metadata import read_partition_metadata
from kbroker.metadata.store import METADATA_FILE, METADATA_LOG, LocalMetadataStore
from tests.helpers import KBROKER, BrokerProcess, consume_all, create_topic, produce

WAIT = 30


def produce_values(bootstrap: str, topic: str, partitions: int, count: int) -> list[bytes]:
    values = [f"{topic}-{i}".encode() for i in range(count)]
    records = [(None, v, None, i % partitions) for i, v in enumerate(values)]
    produce(bootstrap, topic, records, flush_timeout=WAIT, acks="all")
    return values


def consume_values(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    return [m.value() for m in consume_all(bootstrap, topic, partitions, expected, timeout=100)]


def topic_ids(bootstrap: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=WAIT)
    return {name: str(len(t.partitions)) for name, t in md.topics.items()}


def run_serve(data_dir: Path, port: int, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Starts `kbroker serve` expecting it to refuse; returns what it printed."""
    return subprocess.run(
        [*KBROKER, "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def filled(broker_factory) -> tuple[BrokerProcess, dict[str, list[bytes]]]:  # type: ignore[no-untyped-def]
    """A stopped broker whose data dir holds two topics with records (one with a config)."""
    b = broker_factory()
    create_topic(b.bootstrap, "alpha", 3)
    create_topic(b.bootstrap, "beta.logs", 2, **{"retention.ms": "86400000"})
    data = {
        "alpha": produce_values(b.bootstrap, "alpha", 3, 300),
        "beta.logs": produce_values(b.bootstrap, "beta.logs", 2, 50),
    }
    assert b.stop() == 0
    return b, data


@pytest.mark.parametrize("remove", [[METADATA_FILE], [METADATA_FILE, METADATA_LOG]])
def test_missing_metadata_rebuilds_topics_from_their_directories(filled, remove) -> None:  # type: ignore[no-untyped-def]
    b, data = filled
    ids_before = {
        tp: read_partition_metadata(b.data_dir / tp) for tp in ("alpha-0", "alpha-2", "beta.logs-1")
    }
    assert all(ids_before.values()), "every partition directory names its topic"
    for name in remove:
        (b.data_dir / name).unlink(missing_ok=True)
    b.start()
    for topic, values in data.items():
        partitions = 3 if topic == "alpha" else 2
        assert sorted(consume_values(b.bootstrap, topic, partitions, len(values))) == sorted(values)
    assert topic_ids(b.bootstrap)["alpha"] == "3"
    for tp, topic_id in ids_before.items():
        assert read_partition_metadata(b.data_dir / tp) == topic_id
    assert b.stop() == 0
    if remove == [METADATA_FILE, METADATA_LOG]:
        assert "rebuilt topic alpha" in b.output()
    # It stays rebuilt: one more start finds it in the metadata.
    b.start()
    assert sorted(consume_values(b.bootstrap, "alpha", 3, 300)) == sorted(data["alpha"])
    b.stop()


def test_unknown_directory_is_adopted_never_deleted(filled) -> None:  # type: ignore[no-untyped-def]
    """A directory the metadata does not know (restored from a backup, say) is kept and served."""
    b, _ = filled
    # A copy of a partition directory under a topic name the metadata never had.
    subprocess.run(
        ["cp", "-a", str(b.data_dir / "alpha-1"), str(b.data_dir / "restored-0")], check=True
    )
    (b.data_dir / "restored-0" / "partition.metadata").unlink()
    b.start()
    got = consume_values(b.bootstrap, "restored", 1, 100)
    assert len(got) == 100 and all(v.startswith(b"alpha-") for v in got)
    b.stop()
    assert (b.data_dir / "restored-0").is_dir()
    assert "rebuilt topic restored" in b.output()


def test_directory_of_a_deleted_topic_is_removed_on_instruction(filled) -> None:  # type: ignore[no-untyped-def]
    """The broker stopped after recording a deletion but before removing the files."""
    b, _ = filled
    store = LocalMetadataStore(b.data_dir, 0)
    store.load()
    store.delete_topic("alpha")

    async def flush() -> None:
        await store.durable()

    asyncio.run(flush())
    store.close()
    b.start()
    names = topic_ids(b.bootstrap)
    assert "alpha" not in names and "beta.logs" in names
    assert not any(p.name.startswith("alpha-") for p in b.data_dir.iterdir())
    b.stop()
    assert "was deleted" in b.output()


def test_torn_last_change_is_dropped_with_a_warning(filled) -> None:  # type: ignore[no-untyped-def]
    b, data = filled
    with open(b.data_dir / METADATA_LOG, "ab") as f:
        f.write(b'{"seq": 99999, "put_topic": "ghost", "top')
    b.start()
    assert sorted(consume_values(b.bootstrap, "alpha", 3, 300)) == sorted(data["alpha"])
    assert "ghost" not in topic_ids(b.bootstrap)
    b.stop()
    assert "dropping an incomplete last change" in b.output()


DAMAGE = {
    "empty": b"",
    "truncated": None,  # the first half of the file
    "garbage": bytes(range(256)) * 4,
    "wrong-json": b'{"topics": [1, 2, 3], "broker_configs": "x"}\n',
}


@pytest.mark.parametrize(
    ("file", "damage"),
    [
        (file, damage)
        for file in ("meta.properties", METADATA_FILE, METADATA_LOG)
        for damage in sorted(DAMAGE)
        if (file, damage) != (METADATA_LOG, "empty")  # an empty change log is a valid one
    ],
)
def test_damaged_state_file_is_named_in_one_line(filled, file, damage) -> None:  # type: ignore[no-untyped-def]
    b, _ = filled
    path = b.data_dir / file
    if file == METADATA_FILE:
        # Make sure there is a snapshot to damage: fold the change log into one.
        store = LocalMetadataStore(b.data_dir, 0)
        store.load()
        store.close()
        path.write_text(json.dumps({"seq": 0, "topics": {}}))
    original = path.read_bytes()
    content = DAMAGE[damage]
    if content is None:
        content = original[: len(original) // 2]
    if file == METADATA_LOG and damage == "truncated":
        content = original[: len(original) // 2] + b"\n" + original[len(original) // 2 :]
    path.write_bytes(content)
    result = run_serve(b.data_dir, b.port)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and str(path) in errors[0], out
    # Nothing was deleted while refusing.
    assert (b.data_dir / "alpha-0").is_dir() and (b.data_dir / "beta.logs-1").is_dir()


def test_damaged_partition_metadata_is_rewritten(filled) -> None:  # type: ignore[no-untyped-def]
    b, data = filled
    topic_id = read_partition_metadata(b.data_dir / "alpha-0")
    (b.data_dir / "alpha-0" / "partition.metadata").write_bytes(b"\x00garbage\xff")
    b.start()
    assert sorted(consume_values(b.bootstrap, "alpha", 3, 300)) == sorted(data["alpha"])
    b.stop()
    assert read_partition_metadata(b.data_dir / "alpha-0") == topic_id
    assert "not a valid partition.metadata" in b.output()


def test_damaged_producer_snapshot_is_rebuilt_from_the_log(filled) -> None:  # type: ignore[no-untyped-def]
    b, _ = filled
    snapshots = list(b.data_dir.glob("alpha-*/producer-state.json"))
    assert snapshots, "a clean stop writes producer-state snapshots"
    for s in snapshots:
        s.write_bytes(b'{"offset": "x", "producers": [')
    b.start()
    values = produce_values(b.bootstrap, "alpha", 3, 30)
    assert len(consume_values(b.bootstrap, "alpha", 3, 330)) == 330
    b.stop()
    assert "producer state is rebuilt from the log" in b.output()
    assert values


def test_pipeline_without_pyspark_says_what_to_install() -> None:
    # sys.modules[name] = None makes every import of it fail, as on an install without the extra.
    code = (
        "import sys; sys.modules['pyspark'] = None;"
        "sys.argv = ['kbroker', 'pipeline', 'archive', '--topic', 't', '--output', '/tmp/x'];"
        "from kbroker.cli import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "pip install 'kbroker[spark]'" in result.stderr
