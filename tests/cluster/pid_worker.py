"""A separate process that reserves producer-id blocks and prints them, one JSON list per line.

python -m tests.cluster.pid_worker CONNECT BROKER_ID COUNT
"""

from __future__ import annotations

import asyncio
import json
import sys

from kbroker.cluster.producer_id_blocks import allocate_producer_id_block
from kbroker.cluster.zk import ZkClient, ZkSettings


async def main(connect: str, broker_id: int, count: int) -> None:
    async with ZkClient(ZkSettings.parse(connect, session_timeout_ms=4000)) as zk:
        for _ in range(count):
            block = await allocate_producer_id_block(zk, broker_id)
            print(json.dumps([block.broker_id, block.first, block.last]), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
