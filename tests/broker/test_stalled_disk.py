"""A disk that stops taking writes stalls only the writes to it.

The broker's data dir is on a small loop-mounted file system, frozen with
``fsfreeze`` while a produce is being written: the write waits in the kernel
until the thaw. With the writes on I/O threads (``num.io.threads``) the broker
goes on answering everything else meanwhile (Metadata, a Fetch of what was
written before); with ``num.io.threads=0`` (writes on the event loop) the same
stall stops every answer, which is what the test would see if the writes ever
went back onto the loop. Either way the frozen write completes after the thaw.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from bench.faults.disk import SmallDisk

from kbroker._kbroker import build_batch
from kbroker.protocol import ApiKey
from kbroker.tools.client import ClientError
from tests.helpers import (
    BrokerProcess,
    Wire,
    fetch_req,
    metadata,
    wire_create_topic,
    wire_produce,
)

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop device needs root"),
    pytest.mark.skipif(shutil.which("fsfreeze") is None, reason="needs fsfreeze (util-linux)"),
]

TOPIC = "frozen"


def batch(n: int, tag: str) -> bytes:
    return build_batch([(b"k", f"{tag}-{i}".encode(), []) for i in range(n)], 0, 0, 0)


def freeze(mountpoint: Path, frozen: bool) -> None:
    subprocess.run(
        ["fsfreeze", "--freeze" if frozen else "--unfreeze", str(mountpoint)],
        check=True,
        timeout=20,
    )


def answers_while_frozen(bootstrap: str) -> tuple[bool, Any]:
    """(whether Metadata and a Fetch from offset 0 were answered within 3 s, the fetch)."""
    probe = Wire(bootstrap, timeout=3.0)
    try:
        assert metadata(probe, [TOPIC]).topics[0].error_code == 0
        fetched = probe.request(ApiKey.FETCH, 12, fetch_req(TOPIC, 0))
        return True, fetched
    except (ClientError, OSError):
        return False, None
    finally:
        probe.close()


@pytest.mark.parametrize("io_threads", [8, 0])
def test_a_frozen_disk_stalls_only_the_writes_to_it(tmp_path: Path, io_threads: int) -> None:
    with SmallDisk(tmp_path / "img", tmp_path / "disk", size_mb=32) as disk:
        # The data dir is on the small disk, the broker's own log beside it is not (a
        # log line must not wait for the thaw).
        home = tmp_path / "broker"
        home.mkdir()
        (disk.mountpoint / "data").mkdir()
        (home / "data").symlink_to(disk.mountpoint / "data")
        broker = BrokerProcess(home / "data").start(f"num.io.threads={io_threads}")
        frozen = False
        try:
            client = Wire(broker.bootstrap, timeout=30.0)
            assert wire_create_topic(client, TOPIC, 1) == 0
            assert wire_produce(client, TOPIC, batch(5, "before")) == (0, 0)

            freeze(disk.mountpoint, True)
            frozen = True
            outcome: list[tuple[int, int]] = []
            writer = threading.Thread(
                target=lambda: outcome.append(wire_produce(client, TOPIC, batch(3, "during"))),
                daemon=True,
            )
            writer.start()
            time.sleep(1.0)  # the append is in the kernel, waiting for the thaw
            assert not outcome, "a write to a frozen file system went through"
            answered, fetched = answers_while_frozen(broker.bootstrap)
            freeze(disk.mountpoint, False)
            frozen = False

            writer.join(30)
            assert outcome == [(0, 5)], outcome  # written once the disk took it
            if io_threads:
                assert answered, "the broker stopped answering while one write waited"
                part = fetched.responses[0].partitions[0]
                assert part.error_code == 0 and part.high_watermark == 5
                assert part.records is not None and b"before-4" in bytes(part.records)
            else:
                # Writes on the event loop: the stalled write held every answer up.
                assert not answered
            assert answers_while_frozen(broker.bootstrap)[0]
            client.close()
        finally:
            if frozen:
                freeze(disk.mountpoint, False)
            broker.stop()
