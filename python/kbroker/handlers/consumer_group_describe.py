"""ConsumerGroupDescribe (69): members, epochs and assignments of consumer groups (KIP-848).

A group that is not a consumer group (a classic one, or none) gets
GROUP_ID_NOT_FOUND, which tells admin clients to describe it with
DescribeGroups instead. While the protocol is switched off (group.version 0,
or group.coordinator.rebalance.protocols without ``consumer``) every group gets
UNSUPPORTED_VERSION, as in Kafka. Topics are named as the metadata knows them now.
With an authorizer each group needs Describe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbroker.coordinator.consumer_group import Assignment, ConsumerGroup
from kbroker.handlers.authorization import GROUP, Op, authorize, authorized_operations
from kbroker.network.request import RequestContext
from kbroker.protocol import ApiKey, ErrorCode
from kbroker.protocol.messages.group import INT32_MIN
from kbroker.protocol.messages.group import ConsumerGroupDescribeResponse as Response

if TYPE_CHECKING:
    from kbroker.broker import Broker

Described = Response.DescribedGroup
Member = Described.Member
_Assignment = Member.Assignment
_TopicPartitions = _Assignment.TopicPartitions

# KIP-1099's member types: a classic member among the group's, or one of the protocol's.
CLASSIC_MEMBER = 0
CONSUMER_MEMBER = 1


def _error(group_id: str, error: ErrorCode, message: str | None = None) -> Any:
    return Described(
        error_code=error,
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
        members=[],
        authorized_operations=INT32_MIN,
    )


def _assignment(broker: Broker, assignment: Assignment) -> Any:
    out = []
    for topic_id, partitions in sorted(assignment.items()):
        topic = broker.metadata_cache.topic_by_id(topic_id)
        if topic is not None:
            out.append(_TopicPartitions(topic_id, topic.name, sorted(partitions)))
    return _Assignment(topic_partitions=out)


def _describe(broker: Broker, group: ConsumerGroup, default_assignor: str) -> Any:
    return Described(
        error_code=ErrorCode.NONE,
        error_message=None,
        group_id=group.group_id,
        group_state=group.state,
        group_epoch=group.epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(default_assignor),
        members=[
            Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=_assignment(broker, m.assigned),
                target_assignment=_assignment(broker, group.targets.get(m.member_id, {})),
                member_type=CLASSIC_MEMBER if m.classic is not None else CONSUMER_MEMBER,
            )
            for m in group.members.values()
        ],
        authorized_operations=INT32_MIN,
    )


def handle_consumer_group_describe(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    coordinator = broker.coordinator
    if not coordinator.consumer_groups.enabled:
        # Switched off (group.version 0, or the setting): every group refused, as Kafka does.
        return Response(
            throttle_time_ms=0,
            groups=[_error(g, ErrorCode.UNSUPPORTED_VERSION) for g in request.group_ids],
        )
    default_assignor = (coordinator.consumer_groups.assignors() or ["uniform"])[0]
    out = []
    for group_id in request.group_ids:
        if not authorize(broker, ctx, Op.DESCRIBE, GROUP, group_id):
            out.append(_error(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        error = coordinator.check(group_id, allow_empty=True)
        if error != ErrorCode.NONE:
            out.append(_error(group_id, error))
            continue
        group = coordinator.groups.get(group_id)
        if group is None or group.gone:
            out.append(
                _error(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
            )
            continue
        if group.consumer is None:
            out.append(
                _error(
                    group_id,
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"Group {group_id} is not a consumer group.",
                )
            )
            continue
        described = _describe(broker, group.consumer, default_assignor)
        if request.include_authorized_operations:
            described.authorized_operations = authorized_operations(broker, ctx, GROUP, group_id)
        out.append(described)
    return Response(throttle_time_ms=0, groups=out)


HANDLERS = {ApiKey.CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe}
