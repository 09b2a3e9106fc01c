"""ListPartitionReassignments (46): a reassignment completes as it is made (see
alter_partition_reassignments; none moves a replica yet), so none is ever in progress:
every answer, for all topics or the ones named, lists no partition, as Kafka's does when
nothing moves. In a cluster only the controller answers (others: NOT_CONTROLLER)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import ListPartitionReassignmentsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_list_partition_reassignments(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if broker.cluster is not None and broker.cluster.controller is None:
        return ListPartitionReassignmentsResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NOT_CONTROLLER,
            error_message="This is not the correct controller for this cluster.",
            topics=[],
        )
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=[]
    )


HANDLERS = {ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments}
