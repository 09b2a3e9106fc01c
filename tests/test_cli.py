"""The kbroker command line: clear refusals, config files, and the dump tool."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kbroker._kbroker import Log, LogConfig, build_batch
from tests.helpers import BrokerProcess, free_port

KBROKER = [sys.executable, "-m", "kbroker.cli"]


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KBROKER, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "no.such.setting=1"], "unknown setting 'no.such.setting'"),
        (["--set", "num.partitions=abc"], "num.partitions: 'abc' is not a valid int"),
        (["--set", "num.partitions=0"], "num.partitions: 0 is below the minimum 1"),
        (["--set", "log.cleanup.policy=shred"], "'shred' is not one of delete, compact"),
        (["--set", "auto.create.topics.enable=maybe"], "is not a valid boolean"),
        (["--config", "/nonexistent/server.properties"], "cannot read config file"),
        # Kafka settings kbroker knows but whose non-default value it cannot honour.
        (["--set", "process.roles=broker"], "process.roles: KRaft mode is not supported"),
        (
            ["--set", "remote.log.storage.system.enable=true"],
            "remote.log.storage.system.enable: tiered storage (remote log storage) is not "
            "supported (only 'false' is accepted)",
        ),
        (["--set", "create.topic.policy.class.name=a.B"], "Java plug-in classes cannot run"),
        (["--set", "num.io.threads=many"], "num.io.threads: 'many' is not a valid int"),
    ],
)
def test_bad_settings_are_refused_at_start(tmp_path: Path, args: list[str], message: str) -> None:
    result = run(
        "serve", "--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{free_port()}", *args
    )
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_listen_address_is_a_usage_error(tmp_path: Path) -> None:
    result = run("serve", "--data-dir", str(tmp_path), "--listen", "nowhere")
    assert result.returncode == 2
    assert "expected HOST:PORT" in result.stderr


def test_config_file_and_set_override(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    props = tmp_path / "server.properties"
    props.write_text("# a comment\nnum.partitions = 3\nlog.retention.hours=1\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            *KBROKER,
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--listen",
            f"127.0.0.1:{port}",
            "--config",
            str(props),
            "--set",
            "num.partitions=4",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        partitions = None
        deadline = time.monotonic() + 30
        while partitions is None and time.monotonic() < deadline:
            try:
                md = admin.list_topics("auto-created", timeout=2)
                if md.topics["auto-created"].error is None:
                    partitions = len(md.topics["auto-created"].partitions)
            except Exception:
                time.sleep(0.2)
        assert partitions == 4  # --set wins over the file, which wins over the default
    finally:
        proc.kill()
        proc.wait()


# The settings of Apache Kafka 3.9.1's own config/server.properties, with the setup's
# addresses and paths substituted.
KAFKA_SERVER_PROPERTIES = """\
broker.id=0
listeners=PLAINTEXT://127.0.0.1:{port}
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={data}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connect={zookeeper}
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""


def test_kafkas_own_server_properties_start_kbroker(tmp_path: Path, zookeeper: Any) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    port = free_port()
    props = tmp_path / "server.properties"
    props.write_text(
        KAFKA_SERVER_PROPERTIES.format(
            port=port, data=tmp_path / "data", zookeeper=zookeeper.connect + "/kafka-props"
        )
    )
    log = open(tmp_path / "out.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([*KBROKER, "serve", "--config", str(props)], stdout=log, stderr=log)
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        resource = ConfigResource(ResourceType.BROKER, "0")
        deadline = time.monotonic() + 60
        described = None
        while described is None:
            assert proc.poll() is None, (tmp_path / "out.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "out.log").read_text()
            try:
                described = admin.describe_configs([resource])[resource].result(5)
            except Exception:
                time.sleep(0.3)
        # The file's settings are reported as given (num.io.threads, the I/O threads,
        # is dynamic, as Kafka's is).
        threads = described["num.io.threads"]
        assert (threads.value, threads.source, threads.is_read_only) == ("8", 4, False)
        assert described["log.retention.ms"].synonyms["log.retention.hours"].value == "168"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


def test_port_in_use_and_locked_data_dir(broker: BrokerProcess, tmp_path: Path) -> None:
    taken = run("serve", "--data-dir", str(tmp_path / "other"), "--listen", broker.bootstrap)
    assert taken.returncode == 1
    assert "cannot start" in taken.stderr and "Traceback" not in taken.stderr
    locked = run(
        "serve", "--data-dir", str(broker.data_dir), "--listen", f"127.0.0.1:{free_port()}"
    )
    assert locked.returncode == 1
    assert "in use by another kbroker process" in locked.stderr


def test_dump_log_prints_batches_and_stops_at_damage(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig(), 0)
    for i in range(3):
        log.append(
            build_batch([(b"k%d" % i, b"v%d" % i, [("h", b"x")])], codec=i, timestamp=5), 0, None, 0
        )
    log.close()
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    result = run("dump-log", "--print-data", str(segment))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum("baseOffset:" in line for line in lines) == 3
    assert "compresscodec: snappy" in result.stdout
    assert "| offset: 2 timestamp: 5 key: b'k2' value: b'v2' headers: [h:b'x']" in result.stdout
    with open(segment, "ab") as f:
        f.write(b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"nonsense" * 10)
    damaged = run("dump-log", str(segment))
    assert damaged.returncode == 1
    assert "invalid batch length" in damaged.stdout
    assert "invalid data after the last valid batch" in damaged.stderr


def test_settings_lists_defaults() -> None:
    result = run("settings")
    assert result.returncode == 0
    assert any(
        line.startswith("log.retention.ms") and "604800000" in line
        for line in result.stdout.splitlines()
    )
