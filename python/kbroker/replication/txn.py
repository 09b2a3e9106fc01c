"""The partition side's transaction interfaces: what the transaction and group coordinators
use of the replica manager, and what it asks of them.

- `TxnMarker`: a COMMIT or ABORT marker the transaction coordinator has the leaders of
  a transaction's partitions write (`ReplicaManager.write_txn_markers`, and the
  WriteTxnMarkers request of another broker's coordinator).
- `MarkerListener`: told of every marker written (`ReplicaManager.add_marker_listener`),
  so the group coordinator turns pending transactional offsets of ``__consumer_offsets``
  into committed ones, or drops them.
- `TxnVerifier`: KIP-890 part 1. The replica manager asks it, before the first
  transactional batch of a producer's transaction is appended to a partition, whether
  the coordinator has the partition in that transaction; the transaction coordinator
  implements it (`ReplicaManager.set_txn_verifier`).
- `AppendOrigin`: who appends, which decides what is checked (Kafka's AppendOrigin).

`produce_error_for_verification` turns a coordinator's answer into the error a producer
expects for its batch, as Kafka's replica manager does; `coordinator_error_for_verification`
the one a coordinator's own write gets (the group coordinator's TxnOffsetCommit, which
converts it further itself).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kbroker.errors import ErrorCode

if TYPE_CHECKING:
    from kbroker.log import TopicPartition


class AppendOrigin(enum.Enum):
    """Who appends: a client's produce (every producer rule is checked: sequences,
    epochs, transactions, KIP-890), a coordinator (the group coordinator's offsets,
    transaction markers: epochs and transactions, no sequences), or replication (a
    follower copies the leader's batches: nothing is refused)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One transaction's outcome, to be written to ``partitions`` as a control batch."""

    producer_id: int
    producer_epoch: int
    # The transaction coordinator's epoch (its partition's leader epoch): a marker of an
    # older coordinator than one a partition has seen is refused (TRANSACTION_COORDINATOR_FENCED).
    coordinator_epoch: int
    committed: bool
    partitions: Sequence[TopicPartition] = field(default_factory=tuple)


# (partition, producer id, committed, offset of the marker): told of each marker once it
# is written (a leader: once the in-sync replicas have it; a follower: when it copies it).
MarkerListener = Callable[["TopicPartition", int, bool, int], None]


class TxnVerifier(Protocol):
    """Asks the transaction coordinator of ``transactional_id`` whether each of ``tps``
    is in the ongoing transaction of ``producer_id`` at ``epoch`` (AddPartitionsToTxn v4
    with verify_only, or the local coordinator directly).

    Answers every partition of ``tps``: NONE when it is in the transaction, else the
    coordinator's error as AddPartitionsToTxn answers it (INVALID_TXN_STATE,
    PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, ...), or the error of reaching the
    coordinator (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
    COORDINATOR_LOAD_IN_PROGRESS, NETWORK_EXCEPTION). It never raises for such
    failures; the replica manager turns each into the producer's error
    (`produce_error_for_verification`).
    """

    async def verify(
        self, transactional_id: str, producer_id: int, epoch: int, tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]: ...


# Failures of verification a producer should retry; older producers do not retry
# them correctly, so they are answered NOT_ENOUGH_REPLICAS, which every producer
# retries and which does not make it refresh its metadata (Kafka's choice).
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)


def produce_error_for_verification(code: ErrorCode) -> tuple[ErrorCode, str | None]:
    """The produce error (and message) for a partition whose verification answered
    ``code`` (not NONE)."""
    if code in (ErrorCode.PRODUCER_FENCED,):
        return ErrorCode.INVALID_PRODUCER_EPOCH, None
    if code in (
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.TRANSACTION_ABORTABLE,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ):
        return ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction"
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return (
            ErrorCode.NOT_ENOUGH_REPLICAS,
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {code.name}",
        )
    return code, None


def coordinator_error_for_verification(code: ErrorCode) -> ErrorCode:
    """The error a coordinator's write (TxnOffsetCommit's offsets) gets for a partition whose
    verification answered ``code`` (not NONE): the coordinator's answer as Kafka's
    AddPartitionsToTxnManager passes it on, a fenced producer as INVALID_PRODUCER_EPOCH."""
    return ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED else code
