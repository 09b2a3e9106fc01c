"""Shutdown answers waiting requests at once, against a real broker process.

A fetch long-polling for data that never comes (max_wait_ms 30 s) used to
hold SIGTERM for the server's 10 s grace; now the broker answers it (empty,
no error) as it stops, and exits well inside that grace.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kbroker.protocol import ApiKey, ErrorCode
from kbroker.tools.client import BrokerClient
from tests.broker.test_bounds import create_topics
from tests.helpers import BrokerProcess, fetch_req

# The server waits this long for unanswered requests before closing them.
SERVER_GRACE_S = 10.0


def test_sigterm_answers_a_long_polling_fetch_at_once(broker: BrokerProcess) -> None:
    client = BrokerClient(broker.bootstrap, timeout=40.0)
    create_topics(client, "quiet")
    answer: dict[str, Any] = {}

    def long_poll() -> None:
        try:
            answer["response"] = client.request(
                ApiKey.FETCH, 12, fetch_req("quiet", max_wait_ms=30_000, min_bytes=1)
            )
        except Exception as exc:  # a closed connection is what the test must catch
            answer["error"] = exc

    poller = threading.Thread(target=long_poll)
    poller.start()
    time.sleep(1.0)  # the fetch is waiting in the purgatory by now
    assert poller.is_alive(), answer
    assert broker.proc is not None
    started = time.monotonic()
    assert broker.stop(timeout=SERVER_GRACE_S + 20) == 0
    stopped_in = time.monotonic() - started
    poller.join(5)
    assert not poller.is_alive()
    assert "error" not in answer, answer["error"]
    [topic] = answer["response"].responses
    [partition] = topic.partitions
    assert partition.error_code == ErrorCode.NONE and not partition.records
    # Answered at once, not at the end of the grace (nor at the 30 s wait).
    assert stopped_in < SERVER_GRACE_S - 2, f"stopping took {stopped_in:.1f} s"
