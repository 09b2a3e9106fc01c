"""Producer ids unique across a cluster: blocks of 1000 reserved in /latest_producer_id_block.

The znode holds the last block handed out (Kafka's JSON: version 1, broker,
block_start and block_end as strings). A broker takes the next block with a
conditional write naming the version it read; when another broker wrote
first the write fails and it reads again, so no two brokers ever get the
same block. A write whose answer was lost (connection loss, timeout) is read
back: if the znode shows this broker's block the block is ours, otherwise it
is skipped (ids are wasted, never shared).

`ZkProducerIdAllocator` has the shape of `kbroker.txn.producer_ids.ProducerIdAllocator`
(``await next_id()``), so cluster mode swaps one for the other.
"""

from __future__ import annotations

import asyncio
import logging
import random

from kbroker.cluster.errors import (
    ProducerIdBlockError,
    ZkBadVersionError,
    ZkConnectionLossError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkTimeoutError,
)
from kbroker.cluster.zk import ZkClient
from kbroker.cluster.zk_data import (
    INT64_MAX,
    PRODUCER_ID_BLOCK_PATH,
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdBlock,
    decode_producer_id_block,
    encode_producer_id_block,
)

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 100


async def _read(zk: ZkClient) -> tuple[ProducerIdBlock | None, int | None]:
    """The last block handed out and the znode's version (None: no znode)."""
    try:
        data, stat = await zk.get(PRODUCER_ID_BLOCK_PATH)
    except ZkNoNodeError:
        return None, None
    return decode_producer_id_block(data), stat.version


async def allocate_producer_id_block(
    zk: ZkClient,
    broker_id: int,
    block_size: int = PRODUCER_ID_BLOCK_SIZE,
    max_attempts: int = MAX_ATTEMPTS,
) -> ProducerIdBlock:
    """Reserves the next block for `broker_id`; ProducerIdBlockError when none can be had."""
    if not 0 < block_size <= 1 << 31:
        raise ProducerIdBlockError(f"block size {block_size} is not in (0, 2^31]")
    for attempt in range(max_attempts):
        current, version = await _read(zk)
        first = current.next_first if current is not None else 0
        if first > INT64_MAX - block_size + 1:
            raise ProducerIdBlockError(
                f"producer ids are exhausted: the last block ends at {first - 1}"
            )
        block = ProducerIdBlock(broker_id, first, first + block_size - 1)
        data = encode_producer_id_block(block)
        try:
            if version is None:
                await zk.create(PRODUCER_ID_BLOCK_PATH, data, makepath=True)
            else:
                await zk.set(PRODUCER_ID_BLOCK_PATH, data, version)
            return block
        except (ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError):
            pass  # another broker took a block meanwhile: read again
        except (ZkConnectionLossError, ZkTimeoutError) as exc:
            log.info("producer id block write unanswered (%s); reading it back", exc)
            await zk.wait_connected(zk.settings.connection_timeout_s)
            written, _ = await _read(zk)
            if written == block:
                return block
        # Spread contending brokers apart a little.
        await asyncio.sleep(random.uniform(0, 0.002 * min(attempt + 1, 50)))
    raise ProducerIdBlockError(
        f"no producer id block after {max_attempts} attempts: too many brokers writing "
        f"{PRODUCER_ID_BLOCK_PATH} at once"
    )


class ZkProducerIdAllocator:
    """Hands out producer ids from blocks reserved in ZooKeeper for this broker."""

    def __init__(
        self, zk: ZkClient, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE
    ) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._block_size = block_size
        self._next = 0
        self._end = 0  # exclusive
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        """A producer id no broker of the cluster has handed out."""
        async with self._lock:
            if self._next >= self._end:
                block = await allocate_producer_id_block(
                    self._zk, self._broker_id, self._block_size
                )
                self._next, self._end = block.first, block.last + 1
            pid = self._next
            self._next += 1
            return pid
