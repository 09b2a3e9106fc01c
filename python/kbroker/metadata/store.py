"""The metadata store: topics, their partitions and replica assignments, configs.

`MetadataStore` is the interface the broker uses; `LocalMetadataStore` keeps
the metadata of a single node in its data directory (no ZooKeeper): topics
with their partitions' assignments and leadership, topic and dynamic broker
configs, the next block of producer ids, and what a cluster keeps elsewhere
in ZooKeeper (users' and clients' configs, group configs, ACLs, the finalized
features) under the same paths and in the same JSON. `load_meta_properties`
reads, or creates, a data directory's ``meta.properties`` (cluster and broker id).

Runtime partition state that changes with every write (the high watermark)
lives with the partition, not here; what is here changes rarely. A change
takes effect in memory at once and is written by a background thread;
``await store.durable()`` returns once every change made so far is on disk,
and requests that change metadata await it before they are answered.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kbroker.log.manager import StorageErrors
from kbroker.metadata.cache import MetadataCache
from kbroker.metadata.model import PartitionState, TopicMetadata
from kbroker.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"
# The snapshot: the whole metadata as of one change sequence number.
METADATA_FILE = "__kbroker_metadata.json"
# The change log: one JSON line per change after the snapshot.
METADATA_LOG = "__kbroker_metadata.log"
# The change log is folded into a new snapshot once it outgrows both.
SNAPSHOT_MIN_LOG_BYTES = 4 << 20


CLUSTER_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 (a random UUID), as Kafka makes them."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class MetadataError(KafkaError):
    """A metadata change that cannot be made."""


class StateFileError(Exception):
    """A state file the broker cannot trust: names the file, what is wrong, and what to do."""

    def __init__(self, path: Path, problem: str, advice: str = "") -> None:
        super().__init__(f"{path}: {problem}" + (f"; {advice}" if advice else ""))
        self.path = path


class MetadataStore(Protocol):
    """What the broker needs from wherever cluster metadata is kept."""

    @property
    def cluster_id(self) -> str: ...

    def topics(self) -> Mapping[str, TopicMetadata]: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None: ...

    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        internal: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> TopicMetadata: ...

    def delete_topic(self, name: str) -> TopicMetadata: ...

    def deleted_topic_ids(self) -> Mapping[uuid.UUID, str]:
        """Topics deleted whose partition directories may still be on disk."""
        ...

    def forget_deleted(self, topic_id: uuid.UUID) -> None:
        """Records that every directory of the deleted topic ``topic_id`` is gone."""
        ...

    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> TopicMetadata: ...

    def restore_topic(self, name: str, previous: TopicMetadata | None) -> None:
        """Undoes changes to ``name`` that could not be written: back to ``previous``
        (a copy taken before them), or to no topic at all. Recorded as a change of its own."""
        ...

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    def broker_configs(self) -> Mapping[str, str]: ...

    def set_broker_configs(self, configs: Mapping[str, str]) -> None: ...

    def set_partition_state(self, name: str, partition: int, state: PartitionState) -> None: ...

    def allocate_producer_ids(self, count: int) -> int:
        """Reserves ``count`` producer ids no broker will hand out again; returns the first.

        Not durable until ``durable()`` returns: await it before handing one out.
        """
        ...

    async def durable(self) -> None:
        """Returns once every change made so far is on disk; raises OSError if it cannot be."""
        ...

    def close(self) -> None:
        """Writes what is queued, where the disk allows, and stops writing."""
        ...


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomically(path: Path, text: str | Iterable[str]) -> int:
    """Writes ``text`` (or its pieces) to ``path`` so that a crash leaves the old or the new
    file, never a mix; returns the size written."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for piece in [text] if isinstance(text, str) else text:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk keeps no half-written copy
        raise
    _fsync_dir(path.parent)
    return size


# -- the persisted form ----------------------------------------------------------
#
# The snapshot is {"seq", "topics", "broker_configs", "next_producer_id",
# "deleted_topics"}; a change-log line is {"seq": N, <one change>} with the
# change one of {"put_topic": name, "topic": {...}}, {"delete_topic": name,
# "topic_id": id}, {"drop_topic": name} (undoes a creation: no tombstone),
# {"forget_deleted": id}, {"broker_configs": {...}},
# {"next_producer_id": n}, {"put_entry": path, "data": {...}}, {"delete_entry": path}.
# Every change sets absolute values, so replaying a line the snapshot already
# holds changes nothing.


@dataclass
class _Persisted:
    """The metadata in its JSON form: what the snapshot holds and the change log updates."""

    seq: int = 0
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    broker_configs: dict[str, str] = field(default_factory=dict)
    next_producer_id: int = 0
    deleted_topics: dict[str, str] = field(default_factory=dict)
    # ZooKeeper-shaped entries (path -> the JSON a cluster keeps in that znode).
    entries: dict[str, Any] = field(default_factory=dict)

    def apply(self, change: Mapping[str, Any]) -> None:
        self.seq = int(change["seq"])
        if "put_topic" in change:
            self.topics[str(change["put_topic"])] = dict(change["topic"])
        elif "delete_topic" in change:
            self.topics.pop(str(change["delete_topic"]), None)
            self.deleted_topics[str(change["topic_id"])] = str(change["delete_topic"])
        elif "drop_topic" in change:
            self.topics.pop(str(change["drop_topic"]), None)
        elif "forget_deleted" in change:
            self.deleted_topics.pop(str(change["forget_deleted"]), None)
        elif "broker_configs" in change:
            self.broker_configs = {str(k): str(v) for k, v in change["broker_configs"].items()}
        elif "next_producer_id" in change:
            self.next_producer_id = int(change["next_producer_id"])
        elif "put_entry" in change:
            self.entries[str(change["put_entry"])] = change["data"]
        elif "delete_entry" in change:
            self.entries.pop(str(change["delete_entry"]), None)
        else:
            raise ValueError(f"unknown change {sorted(change)}")

    def json_pieces(self) -> Iterator[str]:
        """The snapshot's JSON, a topic at a time: no single serialisation holds the GIL
        for the whole metadata."""
        head = {
            "seq": self.seq,
            "broker_configs": self.broker_configs,
            "next_producer_id": self.next_producer_id,
            "deleted_topics": self.deleted_topics,
            "entries": self.entries,
        }
        yield _dumps(head)[:-1] + ',"topics":{'
        for i, (name, topic) in enumerate(self.topics.items()):
            yield ("," if i else "") + _dumps(name) + ":" + _dumps(topic)
        yield "}}"

    @classmethod
    def from_json(cls, data: Any) -> _Persisted:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        topics = data.get("topics", {})
        configs = data.get("broker_configs", {})
        deleted = data.get("deleted_topics", {})
        entries = data.get("entries", {})
        for what, value in (
            ("topics", topics),
            ("broker_configs", configs),
            ("deleted_topics", deleted),
            ("entries", entries),
        ):
            if not isinstance(value, dict):
                raise ValueError(f"{what!r} is not a JSON object")
        return cls(
            seq=int(data.get("seq", 0)),
            topics={str(k): dict(v) for k, v in topics.items()},
            broker_configs={str(k): str(v) for k, v in configs.items()},
            next_producer_id=int(data.get("next_producer_id", 0)),
            deleted_topics={str(k): str(v) for k, v in deleted.items()},
            entries={str(k): v for k, v in entries.items()},
        )


_RESTORE_ADVICE = (
    "restore it from a backup, or move it away and start again to rebuild the topic list "
    "from the partition directories (topic configs and broker settings kept in it are then lost)"
)


def _read_persisted(data_dir: Path) -> _Persisted:
    """Loads the snapshot and replays the change log after it."""
    snapshot_path = data_dir / METADATA_FILE
    state = _Persisted()
    if snapshot_path.exists():
        try:
            state = _Persisted.from_json(json.loads(snapshot_path.read_bytes()))
            for name, topic in state.topics.items():
                TopicMetadata.from_json(name, topic)
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise StateFileError(
                snapshot_path, f"not valid kbroker metadata ({exc})", _RESTORE_ADVICE
            ) from None
    log_path = data_dir / METADATA_LOG
    if not log_path.exists():
        return state
    raw = log_path.read_bytes()
    pos = 0
    line_no = 0
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        line_no += 1
        # Only the last line can be torn, and only short of a whole JSON value.
        torn = end < 0 or not raw[end + 1 :].strip(b"\0\n ")
        try:
            if end < 0:
                raise ValueError("no line end")
            change = json.loads(raw[pos:end])
            torn = False
            if not isinstance(change, dict):
                raise ValueError("not a JSON object")
            if int(change["seq"]) > state.seq:
                state.apply(change)
                if "put_topic" in change:
                    TopicMetadata.from_json(str(change["put_topic"]), change["topic"])
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            if not torn:
                raise StateFileError(
                    log_path, f"line {line_no} is not a valid change ({exc})", _RESTORE_ADVICE
                ) from None
            # A torn last line: the change was never acknowledged.
            log.warning(
                "%s: dropping an incomplete last change (line %d, %d bytes at byte %d): %s",
                log_path,
                line_no,
                len(raw) - pos,
                pos,
                exc,
            )
            with open(log_path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())
            break
        pos = end + 1
    return state


def read_meta_properties(path: Path) -> dict[str, str]:
    """Parses a meta.properties file; StateFileError when it is unreadable or incomplete."""
    advice = (
        "it records the cluster id and broker id of this data directory: restore it from a "
        "backup, or, if this directory holds no data you need, remove it"
    )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise StateFileError(path, "not a text file", advice) from None
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise StateFileError(path, f"line {line!r} is not key=value", advice)
        key, _, value = line.partition("=")
        props[key.strip()] = value.strip()
    if props.get("version") != "0":
        raise StateFileError(path, f"version {props.get('version')!r} is not 0", advice)
    if not CLUSTER_ID.match(props.get("cluster.id", "")):
        raise StateFileError(
            path, f"cluster.id {props.get('cluster.id')!r} is not a 22-character id", advice
        )
    if not props.get("broker.id", "").isdigit():
        raise StateFileError(path, f"broker.id {props.get('broker.id')!r} is not a number", advice)
    return props


def load_meta_properties(data_dir: Path, broker_id: int, cluster_id: str | None = None) -> str:
    """The cluster id recorded in ``data_dir``'s meta.properties, which is created when
    missing (with ``cluster_id``, or a new id).

    StateFileError when the directory belongs to another broker id, or to another
    cluster than ``cluster_id`` (the cluster's id in ZooKeeper): its logs are
    another cluster's data, never to be mixed into this one.
    """
    path = data_dir / META_PROPERTIES
    if path.exists():
        props = read_meta_properties(path)
        stored_broker = int(props.get("broker.id", broker_id))
        if stored_broker != broker_id:
            raise StateFileError(
                path,
                f"the data directory belongs to broker {stored_broker}, not {broker_id}",
                "start with the broker id it belongs to, or use another data directory",
            )
        if cluster_id is not None and props["cluster.id"] != cluster_id:
            raise StateFileError(
                path,
                f"the data directory belongs to cluster {props['cluster.id']}, but ZooKeeper "
                f"holds cluster {cluster_id}",
                "check zookeeper.connect (and its chroot), or use another data directory",
            )
        return props["cluster.id"]
    cluster_id = cluster_id or new_cluster_id()
    data_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(path, f"version=0\ncluster.id={cluster_id}\nbroker.id={broker_id}\n")
    return cluster_id


class _Journal:
    """Writes metadata changes in the background: append, fsync, fold into a snapshot.

    Changes come from the event loop (``submit``); one thread writes whatever
    has accumulated with one write and one fsync, so many changes made
    together cost one disk flush. The thread keeps its own copy of the
    persisted form, so writing a snapshot never reads the event loop's state.
    A failed write (a full disk) is undone, reported to the waiters, and
    retried with backoff; the changes stay queued.
    """

    RETRY_MIN_S = 0.1
    RETRY_MAX_S = 5.0

    def __init__(self, data_dir: Path, state: _Persisted) -> None:
        self._dir = data_dir
        self._state = state
        self._log_path = data_dir / METADATA_LOG
        self._cond = threading.Condition()
        self._pending: list[dict[str, Any]] = []
        self._submitted = state.seq
        self._written = state.seq
        self._error: OSError | None = None
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._closing = False
        self._thread: threading.Thread | None = None
        self._snapshot_size = 0
        # A full disk is retried with backoff; logged once a minute, not once a retry.
        self._errors = StorageErrors()

    def start(self) -> None:
        snapshot = self._dir / METADATA_FILE
        self._snapshot_size = snapshot.stat().st_size if snapshot.exists() else 0
        self._thread = threading.Thread(target=self._run, name="metadata-writer", daemon=True)
        self._thread.start()

    def submit(self, change: dict[str, Any]) -> None:
        with self._cond:
            self._submitted += 1
            change["seq"] = self._submitted
            self._pending.append(change)
            self._cond.notify()

    async def durable(self) -> None:
        loop = asyncio.get_running_loop()
        with self._cond:
            target = self._submitted
            if self._written >= target:
                return
            if self._error is not None:
                raise self._error
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((target, loop, fut))
        await fut

    def close(self) -> None:
        """Writes what is queued (unless the disk refuses) and stops the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    # -- the writer thread -------------------------------------------------------

    def _run(self) -> None:
        backoff = self.RETRY_MIN_S
        out: Any = None
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._closing:
                        self._cond.wait()
                    if not self._pending:
                        return
                    batch = list(self._pending)
                try:
                    if out is None:
                        out = open(self._log_path, "ab")  # noqa: SIM115 - closed below
                    self._write(out, batch)
                except Exception as exc:
                    error = exc if isinstance(exc, OSError) else OSError(errno.EIO, repr(exc))
                    self._report(None, error)
                    self._errors.failed("writing metadata changes to", self._log_path, exc)
                    with self._cond:
                        if self._closing:
                            return
                        self._cond.wait(backoff)
                    backoff = min(backoff * 2, self.RETRY_MAX_S)
                    continue
                backoff = self.RETRY_MIN_S
                self._errors.succeeded("writing metadata changes to", self._log_path)
                with self._cond:
                    del self._pending[: len(batch)]
                self._report(batch[-1]["seq"], None)
        finally:
            if out is not None:
                out.close()

    def _write(self, out: Any, batch: list[dict[str, Any]]) -> None:
        data = b"".join(_dumps(c).encode() + b"\n" for c in batch)
        good = out.tell()
        try:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        except OSError:
            # Nothing half-written may stay: the next attempt appends from here.
            try:
                out.truncate(good)
                out.seek(good)
            except (OSError, ValueError):
                pass
            raise
        for change in batch:
            self._state.apply(change)
        log_size = good + len(data)
        if log_size > max(SNAPSHOT_MIN_LOG_BYTES, self._snapshot_size):
            try:
                self._snapshot(out)
            except OSError as exc:
                log.warning("cannot fold the metadata change log into a snapshot yet: %s", exc)

    def _snapshot(self, out: Any) -> None:
        self._snapshot_size = write_atomically(self._dir / METADATA_FILE, self._state.json_pieces())
        # Lines the snapshot holds are skipped on load by their sequence number,
        # so a crash before this truncation is harmless.
        out.truncate(0)
        out.seek(0)
        os.fsync(out.fileno())

    def _report(self, written: int | None, error: OSError | None) -> None:
        with self._cond:
            if written is not None:
                self._written = written
            self._error = error
            ready = [w for w in self._waiters if error is not None or w[0] <= self._written]
            self._waiters = [w for w in self._waiters if w not in ready]
        for _, loop, fut in ready:
            loop.call_soon_threadsafe(_settle, fut, error)


def _settle(fut: asyncio.Future[None], error: OSError | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(OSError(error.errno, f"metadata not written: {error.strerror or error}"))


class LocalMetadataStore:
    """A single node's metadata, in its data directory.

    A snapshot (``__kbroker_metadata.json``) and a log of the changes made
    since (``__kbroker_metadata.log``, one JSON line each): a change costs
    one appended line, whatever the number of topics, and the log is folded
    into a new snapshot (atomically: temp file, fsync, rename) once it
    outgrows it. A crash loses at most changes not yet acknowledged; a torn
    last line is dropped at the next start, with a warning.
    """

    def __init__(self, data_dir: Path, broker_id: int, cache: MetadataCache | None = None) -> None:
        self._dir = data_dir
        self._broker_id = broker_id
        # The store's topics live in the cache it feeds: one copy of each fact.
        self.cache = cache if cache is not None else MetadataCache()
        self._deleted: dict[uuid.UUID, str] = {}
        self._broker_configs: dict[str, str] = {}
        self._cluster_id = ""
        self._next_producer_id = 0
        self._entries: dict[str, Any] = {}
        self._journal: _Journal | None = None
        self.loaded_existing = False

    def load(self) -> None:
        """Reads meta.properties and the metadata; StateFileError names a damaged file."""
        self._dir.mkdir(parents=True, exist_ok=True)
        self._cluster_id = self._load_meta_properties()
        state = _read_persisted(self._dir)
        self.loaded_existing = (self._dir / METADATA_FILE).exists() or (
            self._dir / METADATA_LOG
        ).exists()
        for name, t in state.topics.items():
            self.cache.put_topic(TopicMetadata.from_json(name, t))
        self.cache.cluster_id = self._cluster_id
        self._deleted = {uuid.UUID(i): name for i, name in state.deleted_topics.items()}
        self._broker_configs = dict(state.broker_configs)
        self._next_producer_id = state.next_producer_id
        self._entries = dict(state.entries)
        self._journal = _Journal(self._dir, state)
        self._journal.start()

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()

    def _load_meta_properties(self) -> str:
        """Reads or creates meta.properties (cluster id and broker id)."""
        return load_meta_properties(self._dir, self._broker_id)

    def _record(self, change: dict[str, Any]) -> None:
        assert self._journal is not None, "load() first"
        self._journal.submit(change)

    def _put(self, topic: TopicMetadata) -> None:
        self._record({"put_topic": topic.name, "topic": topic.to_json()})

    async def durable(self) -> None:
        assert self._journal is not None, "load() first"
        await self._journal.durable()

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def topics(self) -> Mapping[str, TopicMetadata]:
        return self.cache.topics()

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self.cache.topic_by_id(topic_id)

    def create_topic(
        self,
        name: str,
        assignment: Mapping[int, list[int]],
        configs: Mapping[str, str],
        internal: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> TopicMetadata:
        if self.cache.topic(name) is not None:
            raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        topic = TopicMetadata(
            name=name,
            topic_id=topic_id or uuid.uuid4(),
            partitions={
                p: PartitionState(replicas=list(r), leader=r[0], leader_epoch=0, isr=list(r))
                for p, r in assignment.items()
            },
            configs=dict(configs),
            internal=internal,
        )
        self.cache.put_topic(topic)
        self._put(topic)
        return topic

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.cache.remove_topic(name)
        if topic is None:
            raise MetadataError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
            )
        self._deleted[topic.topic_id] = name
        self._record({"delete_topic": name, "topic_id": str(topic.topic_id)})
        return topic

    def deleted_topic_ids(self) -> Mapping[uuid.UUID, str]:
        return self._deleted

    def forget_deleted(self, topic_id: uuid.UUID) -> None:
        if self._deleted.pop(topic_id, None) is not None:
            self._record({"forget_deleted": str(topic_id)})

    def add_partitions(self, name: str, assignment: Mapping[int, list[int]]) -> TopicMetadata:
        topic = self._topic(name)
        for p, r in assignment.items():
            topic.partitions[p] = PartitionState(replicas=list(r), leader=r[0], isr=list(r))
        self._put(topic)
        return topic

    def restore_topic(self, name: str, previous: TopicMetadata | None) -> None:
        self.cache.remove_topic(name)
        if previous is None:
            self._record({"drop_topic": name})
            return
        topic = previous.copy()
        self.cache.put_topic(topic)
        self._put(topic)
        self.forget_deleted(topic.topic_id)

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        topic = self._topic(name)
        topic.configs = dict(configs)
        self._put(topic)

    def _topic(self, name: str) -> TopicMetadata:
        topic = self.cache.topic(name)
        if topic is None:
            raise MetadataError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
            )
        return topic

    def broker_configs(self) -> Mapping[str, str]:
        return self._broker_configs

    def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        self._broker_configs = dict(configs)
        self._record({"broker_configs": dict(configs)})

    def set_partition_state(self, name: str, partition: int, state: PartitionState) -> None:
        topic = self._topic(name)
        topic.partitions[partition] = state
        self._put(topic)

    def allocate_producer_ids(self, count: int) -> int:
        first = self._next_producer_id
        self._next_producer_id += count
        self._record({"next_producer_id": self._next_producer_id})
        return first

    # -- ZooKeeper-shaped entries ----------------------------------------------------
    # What a cluster keeps in ZooKeeper beside the topics (users' and clients'
    # configs, group configs, ACLs, the finalized features) a single node keeps
    # here, under the same paths and in the same JSON, so one codec serves both.

    def entry(self, path: str) -> Any:
        """The JSON kept at ``path`` (a ZooKeeper path, e.g. /config/users/alice), or None."""
        return self._entries.get(path)

    def entries(self, prefix: str) -> dict[str, Any]:
        """Every entry whose path starts with ``prefix``."""
        return {p: v for p, v in self._entries.items() if p.startswith(prefix)}

    def put_entry(self, path: str, data: Any) -> None:
        """Sets (or with None, removes) the JSON at ``path``; `durable` records it."""
        if data is None:
            if self._entries.pop(path, None) is not None:
                self._record({"delete_entry": path})
            return
        self._entries[path] = data
        self._record({"put_entry": path, "data": data})
