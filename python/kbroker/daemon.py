"""The broker daemon: a `Broker` with the request handlers, run until a signal.

Composes what ``kbroker serve`` runs (the broker and the handlers that
answer its clients), so the broker itself does not depend on its handlers.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal

from kbroker.broker import Broker
from kbroker.config import BrokerConfig
from kbroker.handlers import Dispatcher
from kbroker.log.manager import DataDirLocked
from kbroker.metadata import MetadataError, StateFileError

log = logging.getLogger(__name__)


def raise_open_files_limit() -> None:
    """Raises the soft limit on open files to the hard limit (logs live in files)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, exc)
            return
        log.info("raised the open files limit from %d to %d", soft, hard)


def run_broker(config: BrokerConfig, log_level: str = "INFO") -> int:
    """The daemon: runs until SIGTERM/SIGINT, then shuts down cleanly. Returns the exit code."""
    logging.basicConfig(
        level=getattr(logging, log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    raise_open_files_limit()

    async def main() -> int:
        broker = Broker(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await broker.start(Dispatcher(broker).dispatch)
        except (OSError, DataDirLocked, MetadataError, StateFileError) as exc:
            log.error("cannot start: %s", exc)
            return 1
        await stop.wait()
        log.info("shutting down")
        await broker.stop()
        return 0

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(main())
    return uvloop.run(main())
