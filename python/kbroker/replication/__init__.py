"""Partitions as the broker serves them: leadership, followers, ISR and high watermarks.

- `replica_manager.ReplicaManager`: every partition this broker holds, every produce and
  fetch of them, LeaderAndIsr and StopReplica from the controller.
- `partition.Partition`: one partition's log, leader epoch, ISR and high watermark.
- `fetcher`: the followers' replica fetchers; `alter_partition`: ISR changes sent to the
  controller; `checkpoint`: the high-watermark checkpoint file.
- `purgatory`: produces and fetches that wait (acks=all, long polls).
- `producer_state`: idempotent and transactional producers of a partition; `txn`: what
  the coordinators ask of partitions; `record_errors`: a batch's refused records.
- `batch_reader`: whole batches from the log start, for the coordinators' loads.
"""
