"""The single node's metadata store: a change log folded into snapshots, on real files."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import kbroker.metadata.store as metadata
from kbroker.metadata.store import METADATA_FILE, METADATA_LOG, LocalMetadataStore


def _durable(store: LocalMetadataStore) -> None:
    asyncio.run(store.durable())


def _reload(path: Path) -> LocalMetadataStore:
    store = LocalMetadataStore(path, 0)
    store.load()
    return store


def test_changes_survive_reload_and_fold_into_a_snapshot(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(metadata, "SNAPSHOT_MIN_LOG_BYTES", 64 * 1024)
    store = _reload(tmp_path)
    for i in range(3000):
        store.create_topic(f"t{i}", {0: [0], 1: [0]}, {"retention.ms": str(i)})
    for i in range(0, 3000, 3):
        store.delete_topic(f"t{i}")
    store.set_topic_configs("t1", {"cleanup.policy": "compact"})
    store.set_broker_configs({"log.retention.ms": "1000"})
    first_pid = store.allocate_producer_ids(1000)
    _durable(store)
    store.close()
    # The log outgrew the threshold: a snapshot exists, and the log never
    # grows past the snapshot (so a change costs amortized O(1) writes).
    snapshot = (tmp_path / METADATA_FILE).stat().st_size
    assert snapshot > 64 * 1024
    assert (tmp_path / METADATA_LOG).stat().st_size <= snapshot

    again = _reload(tmp_path)
    assert len(again.topics()) == 2000
    assert "t0" not in again.topics() and "t2997" not in again.topics()
    assert again.topics()["t1"].configs == {"cleanup.policy": "compact"}
    assert again.topics()["t2"].configs == {"retention.ms": "2"}
    assert again.broker_configs() == {"log.retention.ms": "1000"}
    assert again.allocate_producer_ids(1000) == first_pid + 1000
    assert set(again.deleted_topic_ids().values()) == {f"t{i}" for i in range(0, 3000, 3)}
    by_id = again.topics()["t5"].topic_id
    assert again.topic_by_id(by_id) is again.topics()["t5"]
    again.close()


def test_log_lines_already_in_the_snapshot_are_skipped(tmp_path: Path) -> None:
    """A crash between writing a snapshot and cutting the log replays nothing twice."""
    store = _reload(tmp_path)
    store.create_topic("a", {0: [0]}, {})
    store.delete_topic("a")
    store.create_topic("a", {0: [0], 1: [0]}, {})
    _durable(store)
    store.close()
    log_bytes = (tmp_path / METADATA_LOG).read_bytes()
    # Fold by hand, as the writer does, but keep the old log as a crash would.
    folded = _reload(tmp_path)
    with open(tmp_path / METADATA_LOG, "ab") as out:
        folded._journal._snapshot(out)  # type: ignore[union-attr]
    folded.close()
    (tmp_path / METADATA_LOG).write_bytes(log_bytes)
    again = _reload(tmp_path)
    assert list(again.topics()) == ["a"] and len(again.topics()["a"].partitions) == 2
    again.close()


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_fails_the_wait_then_heals_without_losing_changes(small_fs: Path) -> None:
    store = _reload(small_fs)
    store.create_topic("before", {0: [0]}, {})
    _durable(store)
    filler = small_fs / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    big = {f"key{i}": "v" * 100 for i in range(100)}
    for i in range(50):
        store.create_topic(f"t{i}", {0: [0]}, big)
    with pytest.raises(OSError):
        _durable(store)
    filler.unlink()

    async def wait_healed() -> None:
        for _ in range(200):
            try:
                await store.durable()
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise AssertionError("the metadata was never written after space came back")

    asyncio.run(wait_healed())
    store.close()
    again = _reload(small_fs)
    assert set(again.topics()) == {"before"} | {f"t{i}" for i in range(50)}
    assert again.topics()["t7"].configs == big
    again.close()


def test_topic_ids_are_kept(tmp_path: Path) -> None:
    store = _reload(tmp_path)
    wanted = uuid.uuid4()
    assert store.create_topic("x", {0: [0]}, {}, topic_id=wanted).topic_id == wanted
    _durable(store)
    store.close()
    assert _reload(tmp_path).topics()["x"].topic_id == wanted


def test_zookeeper_shaped_entries_survive_reload_and_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Users' configs and ACLs of a single node: set, replaced, removed, kept over restarts
    and over a snapshot."""
    monkeypatch.setattr(metadata, "SNAPSHOT_MIN_LOG_BYTES", 16 * 1024)
    store = _reload(tmp_path)
    acl = {"version": 1, "acls": [{"principal": "User:a", "host": "*"}]}
    store.put_entry("/kafka-acl/Topic/orders", acl)
    store.put_entry("/config/users/alice", {"version": 1, "config": {"x": "1"}})
    store.put_entry("/config/users/alice", {"version": 1, "config": {"x": "2"}})
    store.put_entry("/config/users/bob", {"version": 1, "config": {}})
    store.put_entry("/config/users/bob", None)
    store.put_entry("/config/users/nobody", None)  # removing what is not there: no change
    for i in range(400):  # past the snapshot threshold
        store.put_entry(f"/config/clients/c{i}", {"version": 1, "config": {"i": str(i)}})
    _durable(store)
    store.close()
    assert (tmp_path / METADATA_FILE).exists()

    again = _reload(tmp_path)
    assert again.entry("/kafka-acl/Topic/orders") == acl
    assert again.entry("/config/users/bob") is None
    assert again.entries("/config/users/") == {
        "/config/users/alice": {"version": 1, "config": {"x": "2"}}
    }
    assert len(again.entries("/config/clients/")) == 400
    again.close()
