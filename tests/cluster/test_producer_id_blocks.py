"""Producer-id blocks from /latest_producer_id_block: several processes never share an id."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kbroker.cluster.errors import ProducerIdBlockError, ZkDataError
from kbroker.cluster.producer_id_blocks import ZkProducerIdAllocator, allocate_producer_id_block
from kbroker.cluster.zk import ZkClient, ZkSettings
from kbroker.cluster.zk_data import (
    INT64_MAX,
    PRODUCER_ID_BLOCK_PATH,
    ProducerIdBlock,
    decode_producer_id_block,
    encode_producer_id_block,
)
from tests.cluster.conftest import run

ROOT = Path(__file__).resolve().parents[2]


def test_blocks_from_concurrent_processes_never_overlap(zk_settings: ZkSettings) -> None:
    async def prepare() -> None:
        async with ZkClient(zk_settings) as zk:
            # As Kafka leaves it at start-up: the znode exists, with no data.
            await zk.ensure_path(PRODUCER_ID_BLOCK_PATH)

    run(prepare())
    workers, per_worker = 3, 15
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.cluster.pid_worker",
                zk_settings.connect,
                str(b),
                str(per_worker),
            ],
            cwd=ROOT,
            env={"PYTHONPATH": f"{ROOT / 'python'}:{ROOT}", "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for b in range(1, workers + 1)
    ]
    blocks = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 0, err.decode()
            blocks += [ProducerIdBlock(*json.loads(line)) for line in out.decode().splitlines()]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert len(blocks) == workers * per_worker
    blocks.sort(key=lambda b: b.first)
    # Disjoint, 1000 each, and together exactly 0 .. n*1000-1: nothing shared, nothing skipped.
    assert [b.first for b in blocks] == [i * 1000 for i in range(len(blocks))]
    assert all(b.size == 1000 for b in blocks)
    assert {b.broker_id for b in blocks} == {1, 2, 3}

    async def last() -> ProducerIdBlock | None:
        async with ZkClient(zk_settings) as zk:
            data, stat = await zk.get(PRODUCER_ID_BLOCK_PATH)
            assert stat.version == len(blocks)
            return decode_producer_id_block(data)

    assert run(last()) == blocks[-1]


def test_allocator_hands_out_ids_block_by_block(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk, ZkClient(zk_settings) as other:
            mine = ZkProducerIdAllocator(zk, broker_id=1, block_size=3)
            theirs = ZkProducerIdAllocator(other, broker_id=2, block_size=3)
            # No znode at all yet: the first block creates it.
            first = await asyncio.gather(*(mine.next_id() for _ in range(3)))
            second = [await theirs.next_id() for _ in range(3)]
            assert sorted(first) == [0, 1, 2] and second == [3, 4, 5]
            # Each block used up: the next id comes from the next block in ZooKeeper.
            assert (await mine.next_id(), await theirs.next_id()) == (6, 9)
            data, _ = await zk.get(PRODUCER_ID_BLOCK_PATH)
            assert json.loads(data) == {
                "version": 1,
                "broker": 2,
                "block_start": "9",
                "block_end": "11",
            }

    run(main())


def test_garbage_and_exhaustion_are_refused(zk_settings: ZkSettings) -> None:
    async def main() -> None:
        async with ZkClient(zk_settings) as zk:
            await zk.create(PRODUCER_ID_BLOCK_PATH, b"{not json")
            with pytest.raises(ZkDataError, match="producer id block"):
                await allocate_producer_id_block(zk, 1)
            end = ProducerIdBlock(1, INT64_MAX - 1500, INT64_MAX - 1000)
            await zk.set(PRODUCER_ID_BLOCK_PATH, encode_producer_id_block(end))
            last = await allocate_producer_id_block(zk, 1)
            assert (last.first, last.last) == (INT64_MAX - 999, INT64_MAX)
            with pytest.raises(ProducerIdBlockError, match="exhausted"):
                await allocate_producer_id_block(zk, 1)
            with pytest.raises(ProducerIdBlockError, match="block size"):
                await allocate_producer_id_block(zk, 1, block_size=0)

    run(main())
