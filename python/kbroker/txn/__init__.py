"""The transaction coordinator: transactional ids, their transactions, and the markers
that end them.

- `coordinator.TransactionCoordinator`: the flows of the transaction APIs
  (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, the admin
  APIs, KIP-890 verification), the timeouts and expirations; what the
  broker holds.
- `state`: one id's `TransactionMetadata` and its state machine.
- `manager.TxnStateManager`: the ids of the ``__transaction_state``
  partitions this broker leads (loaded on election, dropped on
  resignation), and writing their moves.
- `markers.TxnMarkerChannel`: the markers written to every partition
  leader, then the transaction completed.
- `log`: the ``__transaction_state`` record schemas (Kafka's own).
- `store`: reading and appending ``__transaction_state``.
- `marker_writer`: where markers go: this broker's replica manager, or WriteTxnMarkers to
  another broker.
- `verifier`: KIP-890's verification, the coordinator's side (`CoordinatorVerifier`).
- `peers`: the connections to the other brokers.
- `host`: what the coordinator needs of the broker that holds it.
- `producer_ids`: a single node's producer ids (a cluster's brokers reserve blocks in
  ZooKeeper, `kbroker.cluster.producer_id_blocks`).
"""

from kbroker.txn.coordinator import InitResult, TransactionCoordinator, TxnDescription
from kbroker.txn.state import TransactionMetadata, TxnState

__all__ = [
    "InitResult",
    "TransactionCoordinator",
    "TransactionMetadata",
    "TxnDescription",
    "TxnState",
]
