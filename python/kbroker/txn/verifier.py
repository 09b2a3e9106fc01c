"""KIP-890 part 1, the coordinator's side: is a partition in a producer's ongoing transaction?

`CoordinatorVerifier` is the `TxnVerifier` the broker gives its replica
manager. A partition leader asks it before it appends the first
transactional batch of a producer's transaction; it asks the transaction
coordinator of the transactional id (the leader of its ``__transaction_state``
partition, as this broker's metadata knows it): `TransactionCoordinator.
verify_partitions` directly when that is this broker, else AddPartitionsToTxn
v4 with ``verify_only`` over the inter-broker listener, as Kafka's
AddPartitionsToTxnManager does. Every partition gets an answer: NONE, the
coordinator's error, or why the coordinator could not be asked
(COORDINATOR_NOT_AVAILABLE, NETWORK_EXCEPTION); it never raises for those.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kbroker.log import TopicPartition
from kbroker.network.client import BrokerUnreachable
from kbroker.protocol import ApiKey
from kbroker.protocol.errors import ErrorCode, to_error_code
from kbroker.protocol.messages.txn import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from kbroker.txn.log import TRANSACTION_STATE_TOPIC
from kbroker.txn.peers import PeerConnections

if TYPE_CHECKING:
    from kbroker.txn.coordinator import TransactionCoordinator
    from kbroker.txn.host import TxnHost

log = logging.getLogger(__name__)

E = ErrorCode

# The batched form with verify_only, which Kafka 3.9 and kbroker both take.
VERIFY_VERSION = 4
REQUEST_TIMEOUT_S = 30.0


class CoordinatorVerifier:
    def __init__(
        self,
        host: TxnHost,
        coordinator: TransactionCoordinator,
        peers: PeerConnections,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.host = host
        self.coordinator = coordinator
        self.peers = peers
        self.request_timeout_s = request_timeout_s

    async def verify(
        self, transactional_id: str, producer_id: int, epoch: int, tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        partitions = list(tps)
        leader = self._coordinator_of(transactional_id)
        if leader is None:
            return dict.fromkeys(partitions, E.COORDINATOR_NOT_AVAILABLE)
        if leader == self.host.broker_id:
            return self.coordinator.verify_partitions(
                transactional_id, producer_id, epoch, partitions
            )
        return await self._ask(leader, transactional_id, producer_id, epoch, partitions)

    def _coordinator_of(self, transactional_id: str) -> int | None:
        index = self.coordinator.partition_of(transactional_id)
        if index is None:
            return None
        cache = self.host.metadata_cache
        state = cache.partition_state(TRANSACTION_STATE_TOPIC, index)
        if state is None or state.leader < 0 or cache.broker(state.leader) is None:
            return None
        return state.leader

    async def _ask(
        self,
        broker_id: int,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        request = AddPartitionsToTxnRequest(
            transactions=[
                AddPartitionsToTxnRequest.Transaction(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    verify_only=True,
                    topics=[
                        AddPartitionsToTxnTopic(name=topic, partitions=ids)
                        for topic, ids in by_topic.items()
                    ],
                )
            ]
        )
        try:
            answer = await self.peers.request(
                broker_id,
                ApiKey.ADD_PARTITIONS_TO_TXN,
                VERIFY_VERSION,
                request,
                self.request_timeout_s,
            )
        except BrokerUnreachable as exc:
            log.info("cannot verify %s with broker %d: %s", transactional_id, broker_id, exc)
            return dict.fromkeys(partitions, E.NETWORK_EXCEPTION)
        if answer.error_code != E.NONE:
            return dict.fromkeys(partitions, to_error_code(answer.error_code))
        found: dict[TopicPartition, ErrorCode] = {}
        for result in answer.results_by_transaction:
            if result.transactional_id != transactional_id:
                continue
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    found[TopicPartition(topic.name, p.partition_index)] = to_error_code(
                        p.partition_error_code
                    )
        # A partition the coordinator did not answer for is not taken as verified.
        return {tp: found.get(tp, E.NETWORK_EXCEPTION) for tp in partitions}
