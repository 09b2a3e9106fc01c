"""BrokerConnection, the inter-broker client, against real broker processes: pipelined
requests, a long poll beside quick requests, a timeout, the broker killed mid-request
and restarted, a peer that answers garbage, and close."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

from kbroker.network.client import BrokerConnection, BrokerUnreachable
from kbroker.protocol import ApiKey
from kbroker.protocol.messages.core import ApiVersionsRequest, MetadataRequest
from tests.helpers import BrokerProcess, fetch_req, free_port

pytestmark = pytest.mark.timeout(120)


def api_versions() -> Any:
    return ApiVersionsRequest(client_software_name="t", client_software_version="1")


def metadata(*topics: str) -> Any:
    return MetadataRequest(
        topics=[MetadataRequest.Topic(name=t) for t in topics], allow_auto_topic_creation=True
    )


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_pipelined_requests_get_their_own_answers(broker: BrokerProcess) -> None:
    async def body() -> None:
        conn = BrokerConnection("127.0.0.1", broker.port, "t")
        try:
            topics = [f"pipe{i}" for i in range(20)]
            answers = await asyncio.gather(
                *(conn.request(ApiKey.METADATA, 12, metadata(t), 10) for t in topics),
                conn.request(ApiKey.API_VERSIONS, 3, api_versions(), 10),
            )
            assert [a.topics[0].name for a in answers[:-1]] == topics
            assert answers[-1].error_code == 0 and answers[-1].api_keys
        finally:
            await conn.close()

    run(body())


def test_a_long_poll_and_a_quick_request_share_the_connection(broker: BrokerProcess) -> None:
    async def body() -> None:
        conn = BrokerConnection("127.0.0.1", broker.port, "t")
        try:
            await conn.request(ApiKey.METADATA, 12, metadata("quiet"), 10)
            poll = asyncio.ensure_future(
                conn.request(
                    ApiKey.FETCH, 12, fetch_req("quiet", max_wait_ms=1500, min_bytes=1), 10
                )
            )
            await asyncio.sleep(0.2)
            quick = await conn.request(ApiKey.API_VERSIONS, 3, api_versions(), 10)
            # Kafka answers in order: the quick one waits for the poll's answer.
            assert poll.done() and quick.error_code == 0
            assert (await poll).responses[0].partitions[0].error_code == 0
        finally:
            await conn.close()

    run(body())


def test_no_answer_in_time_fails_the_request_and_the_next_one_reconnects(
    broker: BrokerProcess,
) -> None:
    async def body() -> None:
        conn = BrokerConnection("127.0.0.1", broker.port, "t")
        try:
            await conn.request(ApiKey.METADATA, 12, metadata("slow"), 10)
            with pytest.raises(BrokerUnreachable, match=r"no answer in 0\.3s"):
                await conn.request(
                    ApiKey.FETCH, 12, fetch_req("slow", max_wait_ms=5000, min_bytes=1), 0.3
                )
            assert not conn.connected
            assert (await conn.request(ApiKey.API_VERSIONS, 3, api_versions(), 10)).error_code == 0
        finally:
            await conn.close()

    run(body())


def test_a_killed_broker_fails_requests_in_flight_and_a_restarted_one_serves_again(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    b = broker_factory()

    async def body() -> None:
        conn = BrokerConnection("127.0.0.1", b.port, "t", reconnect_backoff_s=0.2)
        try:
            await conn.request(ApiKey.METADATA, 12, metadata("k"), 10)
            poll = asyncio.ensure_future(
                conn.request(ApiKey.FETCH, 12, fetch_req("k", max_wait_ms=20_000, min_bytes=1), 30)
            )
            await asyncio.sleep(0.3)
            await asyncio.to_thread(b.kill)
            with pytest.raises(BrokerUnreachable, match="connection lost"):
                await poll
            with pytest.raises(BrokerUnreachable, match="cannot connect"):
                await conn.request(ApiKey.API_VERSIONS, 3, api_versions(), 5)
            await asyncio.to_thread(b.start)
            answer = await conn.request(ApiKey.METADATA, 12, metadata("k"), 10)
            assert answer.topics[0].error_code == 0
        finally:
            await conn.close()

    run(body())


def test_a_peer_answering_garbage_is_dropped_with_an_error() -> None:
    port = free_port()
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(10)

    def peer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"\x7f\xff\xff\xff" + b"x" * 16)  # a 2 GiB size: never allocated
            conn.recv(1024)

    thread = threading.Thread(target=peer, daemon=True)
    thread.start()

    async def body() -> None:
        conn = BrokerConnection("127.0.0.1", port, "t", max_response_bytes=1 << 20)
        try:
            with pytest.raises(BrokerUnreachable, match="a response of 2147483647 bytes"):
                await conn.request(ApiKey.API_VERSIONS, 3, api_versions(), 5)
        finally:
            await conn.close()

    try:
        run(body())
    finally:
        server.close()
        thread.join(5)


def test_close_fails_what_waits_and_refuses_more(broker: BrokerProcess) -> None:
    async def body() -> None:
        conn = BrokerConnection("127.0.0.1", broker.port, "t")
        await conn.request(ApiKey.METADATA, 12, metadata("c"), 10)
        poll = asyncio.ensure_future(
            conn.request(ApiKey.FETCH, 12, fetch_req("c", max_wait_ms=10_000, min_bytes=1), 30)
        )
        await asyncio.sleep(0.2)
        await conn.close()
        with pytest.raises(BrokerUnreachable, match="closed"):
            await poll
        with pytest.raises(BrokerUnreachable, match="closed"):
            await conn.request(ApiKey.API_VERSIONS, 3, api_versions(), 5)

    run(body())


def test_a_connect_given_up_on_leaves_no_unretrieved_failure() -> None:
    """A request that stops waiting for its connection (the reconnect backoff outlasts its
    timeout) leaves the connection attempt to fail later on its own: that failure is not
    reported as an exception nobody retrieved."""
    port = free_port()  # nothing listens: every connection is refused
    unhandled: list[dict[str, Any]] = []

    async def run() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unhandled.append(ctx))
        conn = BrokerConnection("127.0.0.1", port, "t", reconnect_backoff_s=0.3)
        body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        with pytest.raises(BrokerUnreachable, match="cannot connect"):
            await conn.request(ApiKey.API_VERSIONS, 3, body, 1.0)
        # The next attempt waits out the backoff: this request gives up first.
        with pytest.raises(BrokerUnreachable, match="not connected in time"):
            await conn.request(ApiKey.API_VERSIONS, 3, body, 0.05)
        await asyncio.sleep(0.5)  # the attempt fails, nobody waiting
        await conn.close()
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(run())
    assert not unhandled, unhandled
