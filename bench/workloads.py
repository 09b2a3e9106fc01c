"""The workloads, modelled on published broker benchmarks, and their sizes.

* ``kreps.*``  Jay Kreps, "Benchmarking Apache Kafka: 2 Million Writes Per
  Second" (2014): 100-byte records, 6 partitions; one producer with acks=1
  and acks=all, three producers; a consumer alone on data already written;
  a producer and a consumer together; end-to-end latency with no load.
* ``omb.*``    OpenMessaging Benchmark style: 1 KiB records, one topic of 16
  partitions; the maximum rate, then a fixed rate at 50% of the measured
  maximum (the lower of the systems' medians, so every system gets the same
  rate); publish and end-to-end latency p50/p99/p99.9 from a probe.
* ``catchup.*`` several GiB of 1 KiB records written first, then read from
  offset 0 by one consumer and by three (each reads everything): the
  sendfile path.
* ``flush.*``  the same produce workloads with log.flush.interval.messages=M
  on both brokers (the other runs keep data in the page cache only).
* ``sec.*``    the cost of security (``python -m bench --security ...``): the
  same 1 KiB produce at full speed over a PLAINTEXT, an SSL and a SASL_SSL
  (PLAIN) listener of one broker, then a catch-up read of one of those
  topics over each.
* ``wire.*``   the broker measured, not the client: bench/wire.py's generator (pre-encoded
  Produce requests pipelined over several connections; Fetch into a reused buffer)
  writes 100 B, 1 KiB and 16 KiB records with acks 1 and all to 1, 16 and 256
  partitions; writes a catch-up data set and reads it from offset 0; produces and
  consumes together; and produces at fixed rates (50% and 80% of the lower median
  maximum of ``wire.produce.1kib.p16.acks1``) beside the latency probe.
* ``txn.*``    transactional produce (``python -m bench --transactions``):
  transactions of 1, 100 and 10,000 records of 1 KiB from several
  transactional producers, committed one after another by each, on a single
  node (``txn.single.*``) and on three brokers with replication factor 3
  (``txn.rf3.*``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # produce | consume | prodcons | e2e | rate
    record_bytes: int
    partitions: int
    producers: int = 0
    consumers: int = 0
    acks: str = "1"
    records: int = 0  # produce: records written; consume: read from ``source``
    seconds: float = 0  # e2e and rate: how long
    source: str = ""  # consume: the workload whose topic is read
    probe: bool = False  # run the latency probe alongside
    security: str = "PLAINTEXT"  # the listener's security protocol the clients use
    transaction_records: int = 0  # transactions: records per transaction
    replicas: int = 1  # the topic's replication factor
    rate_fraction: float = 0  # wire.rate*: the fraction of the reference maximum


@dataclass(frozen=True)
class Sizes:
    kreps_records: int
    prodcons_records: int
    e2e_seconds: float
    omb_records: int
    rate_seconds: float
    catchup_records: int  # 1 KiB each
    reps: int
    warmup_records: int  # untimed, at the start of every broker session
    security_records: int  # per protocol, in the security session
    security_record_bytes: int = 1024
    # Transactions: records in all for transactions of 1, 100 and 10,000 records (each row
    # stops beginning transactions after ``transaction_seconds``).
    transaction_records: tuple[int, int, int] = (40_000, 2_000_000, 2_000_000)
    transaction_seconds: float = 10
    # wire.*: each produce row runs this long or until this many bytes of values;
    # the catch-up data set's size; the matrix of the produce rows.
    wire_seconds: float = 6
    wire_bytes: int = 2 << 30
    wire_catchup_bytes: int = 3 << 30
    wire_record_bytes: tuple[int, ...] = (100, 1024, 16384)
    wire_partitions: tuple[int, ...] = (1, 16, 256)


# FULL: ~11 minutes for two systems on 2 vCPUs; QUICK: about a minute.
FULL = Sizes(
    kreps_records=2_000_000,
    prodcons_records=1_000_000,
    e2e_seconds=10,
    omb_records=1_000_000,
    rate_seconds=15,
    catchup_records=3 << 20,
    reps=3,
    warmup_records=400_000,
    security_records=2_000_000,
)
QUICK = Sizes(
    kreps_records=100_000,
    prodcons_records=50_000,
    e2e_seconds=2,
    omb_records=40_000,
    rate_seconds=3,
    catchup_records=48_000,
    reps=1,
    warmup_records=20_000,
    security_records=40_000,
    transaction_records=(400, 20_000, 80_000),
    transaction_seconds=4,
    wire_seconds=1,
    wire_bytes=64 << 20,
    wire_catchup_bytes=48 << 20,
    wire_record_bytes=(1024,),
    wire_partitions=(16,),  # the reference row's shape (the rate rows pace it)
)


def base_session(s: Sizes) -> list[Workload]:
    """One broker, page cache only: Kreps, OMB at max rate, catch-up."""
    return [
        Workload(
            "kreps.produce.p1.acks1",
            "produce",
            100,
            6,
            producers=1,
            acks="1",
            records=s.kreps_records,
        ),
        Workload(
            "kreps.produce.p1.acksall",
            "produce",
            100,
            6,
            producers=1,
            acks="all",
            records=s.kreps_records,
        ),
        Workload(
            "kreps.produce.p3.acks1",
            "produce",
            100,
            6,
            producers=3,
            acks="1",
            records=s.kreps_records,
        ),
        Workload(
            "kreps.consume.c1", "consume", 100, 6, consumers=1, source="kreps.produce.p3.acks1"
        ),
        Workload(
            "kreps.prodcons.p1c1",
            "prodcons",
            100,
            6,
            producers=1,
            consumers=1,
            records=s.prodcons_records,
        ),
        Workload("kreps.e2e", "e2e", 100, 1, seconds=s.e2e_seconds, probe=True),
        Workload(
            "omb.max", "produce", 1024, 16, producers=2, acks="1", records=s.omb_records, probe=True
        ),
        Workload(
            "catchup.fill", "produce", 1024, 16, producers=2, acks="1", records=s.catchup_records
        ),
        Workload("catchup.c1", "consume", 1024, 16, consumers=1, source="catchup.fill"),
        Workload("catchup.c3", "consume", 1024, 16, consumers=3, source="catchup.fill"),
    ]


def flush_session(s: Sizes) -> list[Workload]:
    """The produce workloads again on a broker that flushes every M messages."""
    return [
        Workload(
            "flush.kreps.produce.p1.acks1",
            "produce",
            100,
            6,
            producers=1,
            acks="1",
            records=s.kreps_records,
        ),
        Workload(
            "flush.omb.max", "produce", 1024, 16, producers=2, acks="1", records=s.omb_records
        ),
    ]


def rate_session(s: Sizes) -> list[Workload]:
    """OMB at a fixed rate (set once every system's maximum is known)."""
    return [
        Workload(
            "omb.rate50",
            "rate",
            1024,
            16,
            producers=2,
            acks="1",
            seconds=s.rate_seconds,
            probe=True,
        )
    ]


def security_session(
    s: Sizes, protocols: list[str], rep: int = 1, producers: int = 2
) -> list[Workload]:
    """For each security protocol, records (1 KiB unless the sizes say otherwise) from
    ``producers`` processes (two: OMB's shape) at full speed, acks=1; then, for each, one
    consumer reading from offset 0 all of the topic the first of them wrote: every listener
    serves the same bytes in the same batches (a topic written at another rate has other
    batch sizes, and its catch-up another cost). The protocols' order turns with the
    repetition, so none is always first on a fresh broker."""
    turn = (rep - 1) % len(protocols) if protocols else 0
    order = protocols[turn:] + protocols[:turn]
    produce = [
        Workload(
            f"sec.{protocol.lower()}.produce",
            "produce",
            s.security_record_bytes,
            16,
            producers=producers,
            acks="1",
            records=s.security_records,
            security=protocol,
        )
        for protocol in order
    ]
    consume = [
        Workload(
            f"sec.{protocol.lower()}.consume",
            "consume",
            s.security_record_bytes,
            16,
            consumers=1,
            source=produce[0].name,
            security=protocol,
        )
        for protocol in order
    ]
    return produce + consume


# Records per transaction of the txn.* rows.
TRANSACTION_SIZES = (1, 100, 10_000)
TRANSACTION_PARTITIONS = 6


def transactions_session(s: Sizes, replicas: int = 1, producers: int = 8) -> list[Workload]:
    """Transactions of 1, 100 and 10,000 records of 1 KiB from ``producers`` transactional
    producers, each committing its transactions one after another, to a topic of 6 partitions
    with ``replicas`` replicas (3: min.insync.replicas 2); record i of a producer goes to
    partition i % 6, so a transaction of n records spans min(n, 6) partitions."""
    setup = "single" if replicas == 1 else f"rf{replicas}"
    return [
        Workload(
            f"txn.{setup}.t{n}",
            "transactions",
            1024,
            TRANSACTION_PARTITIONS,
            producers=producers,
            acks="all",
            records=records,
            seconds=s.transaction_seconds,
            transaction_records=n,
            replicas=replicas,
        )
        for n, records in zip(TRANSACTION_SIZES, s.transaction_records, strict=True)
    ]


# The wire generator's shape for every wire.* produce row: connections (Workload.producers)
# and requests in flight on each (Kafka handles one request of a connection at a time).
WIRE_CONNECTIONS = 4
WIRE_IN_FLIGHT = 8
# The row whose maximum sets the wire.rate* rows' rates, and the fractions of it.
WIRE_REFERENCE = "wire.produce.1kib.p16.acks1"
WIRE_RATE_FRACTIONS = (0.5, 0.8)


def size_label(record_bytes: int) -> str:
    return f"{record_bytes // 1024}kib" if record_bytes >= 1024 else f"{record_bytes}b"


def wire_session(s: Sizes) -> list[Workload]:
    """The wire generator at full speed: the produce matrix, then a catch-up data set read
    from offset 0, then produce and consume together."""
    rows = [
        Workload(
            f"wire.produce.{size_label(size)}.p{partitions}.acks{acks}",
            "wire.produce",
            size,
            partitions,
            producers=WIRE_CONNECTIONS,
            acks=acks,
            records=s.wire_bytes // size,
            seconds=s.wire_seconds,
        )
        for size in s.wire_record_bytes
        for partitions in s.wire_partitions
        for acks in ("1", "all")
    ]
    return [
        *rows,
        Workload(
            "wire.catchup.fill",
            "wire.produce",
            1024,
            16,
            producers=WIRE_CONNECTIONS,
            acks="1",
            records=s.wire_catchup_bytes // 1024,
            seconds=600,
        ),
        Workload(
            "wire.catchup.c1", "wire.consume", 1024, 16, consumers=1, source="wire.catchup.fill"
        ),
        Workload(
            "wire.prodcons",
            "wire.prodcons",
            1024,
            16,
            producers=WIRE_CONNECTIONS,
            consumers=1,
            acks="1",
            records=s.wire_bytes // 1024,
            seconds=s.wire_seconds,
        ),
    ]


def wire_rate_session(s: Sizes) -> list[Workload]:
    """The reference row's shape at fixed fractions of its maximum, beside the probe."""
    return [
        Workload(
            f"wire.rate{round(f * 100)}",
            "wire.rate",
            1024,
            16,
            producers=WIRE_CONNECTIONS,
            acks="1",
            seconds=max(s.rate_seconds, s.wire_seconds),
            probe=True,
            rate_fraction=f,
        )
        for f in WIRE_RATE_FRACTIONS
    ]
