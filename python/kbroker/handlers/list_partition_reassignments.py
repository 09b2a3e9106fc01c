"""ListPartitionReassignments (46): a reassignment on one broker completes as it is made
(see alter_partition_reassignments), so none is ever in progress: every answer, for all
topics or the ones named, lists no partition, as Kafka's does when nothing moves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.admin import ListPartitionReassignmentsResponse

if TYPE_CHECKING:
    from kbroker.broker import Broker


def handle_list_partition_reassignments(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=[]
    )


HANDLERS = {ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments}
