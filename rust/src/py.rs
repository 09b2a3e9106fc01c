//! The pyo3 layer: thin wrappers over the core, compiled with the `python`
//! feature. Every call that does I/O or touches more than a few KiB releases
//! the GIL. Errors are mapped to Python exceptions in one place
//! (`impl From<Error> for PyErr`).

use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::cleaner::{
    CleanStats as CoreCleanStats, CleanableInfo as CoreCleanableInfo,
    CleanerConfig as CoreCleanerConfig,
};
use crate::compression::Codec;
use crate::error::Error;
use crate::log::{
    AppendInfo as CoreAppendInfo, LastWriter, Log as CoreLog, LogConfig as CoreLogConfig,
    LogSlice as CoreLogSlice, ProducerBatch as CoreProducerBatch, RecoveryNote as CoreRecoveryNote,
};
use crate::new_logs::{self, NewPartition, NewTopicLogs};
use crate::records::{self, BatchBuilder, RecordProblem, TimestampWindow, ValidateOptions};
use crate::sendfile::{self, SendOutcome};
use crate::txn_index::AbortedTxn;

create_exception!(
    _kbroker,
    KBrokerError,
    PyException,
    "Base class of kbroker storage errors."
);
create_exception!(
    _kbroker,
    CorruptRecordError,
    KBrokerError,
    "Bytes that are not a valid record batch."
);
create_exception!(
    _kbroker,
    InvalidRecordError,
    KBrokerError,
    "A well-formed batch that breaks a rule."
);
create_exception!(
    _kbroker,
    RecordErrorsError,
    InvalidRecordError,
    "Records of a well-formed batch that break a rule of the topic; args are (message, [(batch index, offset, timestamp)]): offset and timestamp are None for a record without a key on a compacted topic, the record's own for a timestamp out of range."
);
create_exception!(
    _kbroker,
    RecordTooLargeError,
    KBrokerError,
    "A batch larger than the configured limit."
);
create_exception!(
    _kbroker,
    OffsetOutOfRangeError,
    KBrokerError,
    "An offset outside the log."
);
create_exception!(
    _kbroker,
    UnexpectedAppendOffsetError,
    OffsetOutOfRangeError,
    "A follower append whose first batch does not start at the log end; args are (message, first offset, last offset of the first batch, log end offset)."
);

create_exception!(
    _kbroker,
    StaleLeaderEpochError,
    KBrokerError,
    "A leader append in a leader epoch below the latest the log knows (a newer leadership began)."
);

/// Above this many bytes a pure computation releases the GIL.
const GIL_RELEASE_BYTES: usize = 4096;

/// Read-only bytes of any C-contiguous bytes-like object (bytes, bytearray,
/// memoryview), without copying: a request's records are a memoryview slice
/// of its frame. The caller must not resize or write the object during the
/// call (the broker never does), as the GIL is released while it is read.
struct ByteView(PyBuffer<u8>);

impl<'a, 'py> FromPyObject<'a, 'py> for ByteView {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let buf = PyBuffer::<u8>::get(&obj)?;
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "a contiguous bytes-like object is required",
            ));
        }
        Ok(ByteView(buf))
    }
}

impl ByteView {
    fn as_slice(&self) -> &[u8] {
        let len = self.0.len_bytes();
        if len == 0 {
            return &[];
        }
        // SAFETY: the buffer is C-contiguous, `len` bytes long, and stays
        // alive (and, by the contract above, unchanged) while `self` lives.
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr() as *const u8, len) }
    }
}

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        let msg = err.to_string();
        match err {
            // OSError(errno, text) becomes the matching subclass
            // (FileNotFoundError, PermissionError, ...).
            Error::Io(e) => match e.raw_os_error() {
                Some(errno) => PyOSError::new_err((errno, msg)),
                None => PyOSError::new_err(msg),
            },
            Error::File(path, e) => match e.raw_os_error() {
                Some(errno) => {
                    PyOSError::new_err((errno, e.to_string(), path.to_string_lossy().into_owned()))
                }
                None => PyOSError::new_err(msg),
            },
            Error::BadStateFile(..) => KBrokerError::new_err(msg),
            Error::CorruptRecord(_) | Error::Varint(_) => CorruptRecordError::new_err(msg),
            Error::InvalidRecord(_) => InvalidRecordError::new_err(msg),
            Error::RecordErrors(errors) => {
                let records: Vec<(usize, Option<i64>, Option<i64>)> = errors
                    .iter()
                    .map(|e| match e.problem {
                        RecordProblem::MissingKey => (e.batch_index, None, None),
                        RecordProblem::TimestampOutOfRange { offset, timestamp } => {
                            (e.batch_index, Some(offset), Some(timestamp))
                        }
                    })
                    .collect();
                RecordErrorsError::new_err((msg, records))
            }
            Error::RecordTooLarge { .. } => RecordTooLargeError::new_err(msg),
            Error::OffsetOutOfRange { .. } => OffsetOutOfRangeError::new_err(msg),
            Error::UnexpectedAppendOffset {
                first_offset,
                last_offset,
                log_end,
            } => UnexpectedAppendOffsetError::new_err((msg, first_offset, last_offset, log_end)),
            Error::InvalidArgument(_) => PyValueError::new_err(msg),
            Error::StaleLeaderEpoch { .. } | Error::Fenced { .. } => {
                StaleLeaderEpochError::new_err(msg)
            }
        }
    }
}

// -- pure functions ------------------------------------------------------

/// CRC-32C of `data`, continuing from `crc`.
#[pyfunction]
#[pyo3(signature = (data, crc = 0))]
fn crc32c(py: Python<'_>, data: ByteView, crc: u32) -> u32 {
    let data = data.as_slice();
    if data.len() > GIL_RELEASE_BYTES {
        py.detach(|| crate::crc32c::crc32c_append(crc, data))
    } else {
        crate::crc32c::crc32c_append(crc, data)
    }
}

/// Header facts of one validated batch.
#[pyclass(frozen, get_all, module = "kbroker._kbroker")]
struct BatchInfo {
    position: usize,
    size: usize,
    base_offset: i64,
    last_offset_delta: i32,
    records: i32,
    first_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    codec: u8,
    is_transactional: bool,
    is_control: bool,
}

/// Validates every batch in `data` (concatenated v2 batches, as in a Produce
/// request). Raises on the first bad one; returns one BatchInfo per batch.
/// `timestamps` = (now, before max ms, after max ms): the window a record's
/// timestamp must fall in (None: any). Records that break the topic's rules
/// raise RecordErrorsError naming each of them.
#[pyfunction]
#[pyo3(signature = (data, max_batch_bytes, inspect_compressed = false, max_decompressed_bytes = 64 << 20, require_keys = false, timestamps = None))]
fn validate_batches(
    py: Python<'_>,
    data: ByteView,
    max_batch_bytes: usize,
    inspect_compressed: bool,
    max_decompressed_bytes: usize,
    require_keys: bool,
    timestamps: Option<(i64, i64, i64)>,
) -> PyResult<Vec<BatchInfo>> {
    let data = data.as_slice();
    let opts = ValidateOptions {
        max_batch_bytes,
        inspect_compressed,
        max_decompressed_bytes,
        require_keys,
        timestamps: timestamps.map(|(now, before_max_ms, after_max_ms)| TimestampWindow {
            now,
            before_max_ms,
            after_max_ms,
        }),
    };
    let work = || -> Result<Vec<BatchInfo>, Error> {
        let mut out = Vec::new();
        for (position, size) in records::split_batches(data)? {
            let info = records::validate_batch(&data[position..position + size], &opts)?;
            out.push(BatchInfo {
                position,
                size,
                base_offset: info.base_offset,
                last_offset_delta: info.last_offset_delta,
                records: info.records_count,
                first_timestamp: info.first_timestamp,
                max_timestamp: info.max_timestamp,
                producer_id: info.producer_id,
                producer_epoch: info.producer_epoch,
                base_sequence: info.base_sequence,
                codec: info.codec as u8,
                is_transactional: info.is_transactional,
                is_control: info.is_control,
            });
        }
        Ok(out)
    };
    Ok(if data.len() > GIL_RELEASE_BYTES {
        py.detach(work)?
    } else {
        work()?
    })
}

/// Checks every batch in `data` (concatenated v2 batches) as the log may
/// hold them (`records::check_stored_batch`: compaction's gaps and empty
/// batches allowed). Raises on the first bad one; one BatchInfo per batch.
#[pyfunction]
#[pyo3(signature = (data, max_decompressed_bytes = 64 << 20))]
fn check_stored_batches(
    py: Python<'_>,
    data: ByteView,
    max_decompressed_bytes: usize,
) -> PyResult<Vec<BatchInfo>> {
    let data = data.as_slice();
    let work = || -> Result<Vec<BatchInfo>, Error> {
        let mut out = Vec::new();
        for (position, size) in records::split_batches(data)? {
            let info = records::check_stored_batch(
                &data[position..position + size],
                max_decompressed_bytes,
            )?;
            out.push(BatchInfo {
                position,
                size,
                base_offset: info.base_offset,
                last_offset_delta: info.last_offset_delta,
                records: info.records_count,
                first_timestamp: info.first_timestamp,
                max_timestamp: info.max_timestamp,
                producer_id: info.producer_id,
                producer_epoch: info.producer_epoch,
                base_sequence: info.base_sequence,
                codec: info.codec as u8,
                is_transactional: info.is_transactional,
                is_control: info.is_control,
            });
        }
        Ok(out)
    };
    Ok(if data.len() > GIL_RELEASE_BYTES {
        py.detach(work)?
    } else {
        work()?
    })
}

/// Rewrites validated batches so their records are compressed with `codec`
/// (a codec id, 0 = none), for a topic's compression.type: a batch already
/// in it is copied unchanged, any other is recompressed with a new CRC.
/// Releases the GIL.
#[pyfunction]
#[pyo3(signature = (data, codec, max_decompressed_bytes, max_batch_bytes))]
fn recompress_batches<'py>(
    py: Python<'py>,
    data: ByteView,
    codec: u8,
    max_decompressed_bytes: usize,
    max_batch_bytes: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let target = Codec::from_id(codec).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let data = data.as_slice();
    let out = py.detach(|| {
        records::recompress_batches(data, target, max_decompressed_bytes, max_batch_bytes)
    })?;
    Ok(PyBytes::new(py, &out))
}

type PyRecord<'py> = (
    i64,
    i64,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
    Vec<(String, Option<Bound<'py, PyBytes>>)>,
);

/// Decodes the records of one batch (decompressing within a bound) as
/// `(offset, timestamp, key, value, headers)` tuples. For tools and tests;
/// the broker never decodes records on its hot path.
#[pyfunction]
#[pyo3(signature = (batch, max_decompressed_bytes = 64 << 20))]
fn decode_records<'py>(
    py: Python<'py>,
    batch: &[u8],
    max_decompressed_bytes: usize,
) -> PyResult<Vec<PyRecord<'py>>> {
    let decoded = py.detach(|| records::decode_batch_records(batch, max_decompressed_bytes))?;
    Ok(decoded
        .into_iter()
        .map(|r| {
            let headers = r
                .headers
                .into_iter()
                .map(|(k, v)| {
                    (
                        String::from_utf8_lossy(&k).into_owned(),
                        v.map(|v| PyBytes::new(py, &v)),
                    )
                })
                .collect();
            (
                r.offset,
                r.timestamp,
                r.key.map(|k| PyBytes::new(py, &k)),
                r.value.map(|v| PyBytes::new(py, &v)),
                headers,
            )
        })
        .collect())
}

/// Builds one v2 batch. `records` is a list of `(key, value, headers)` or
/// `(key, value, headers, timestamp)`; codec 0-4.
#[pyfunction]
#[pyo3(signature = (records, codec = 0, base_offset = 0, timestamp = 0, producer_id = -1, producer_epoch = -1, base_sequence = -1, transactional = false, log_append_time = false))]
#[allow(clippy::too_many_arguments)]
fn build_batch<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    codec: u8,
    base_offset: i64,
    timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    log_append_time: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let codec = Codec::from_attributes(codec as i16)?;
    let mut builder = BatchBuilder::new(codec, base_offset, timestamp)
        .producer(producer_id, producer_epoch, base_sequence)
        .transactional(transactional)
        .log_append_time(log_append_time);
    for item in records.iter() {
        let tuple = item.cast::<PyTuple>()?;
        let key: Option<Vec<u8>> = tuple.get_item(0)?.extract()?;
        let value: Option<Vec<u8>> = tuple.get_item(1)?.extract()?;
        let headers: Vec<(String, Option<Vec<u8>>)> = tuple.get_item(2)?.extract()?;
        let ts: i64 = if tuple.len() > 3 {
            tuple.get_item(3)?.extract()?
        } else {
            timestamp
        };
        builder.push(ts, key.as_deref(), value.as_deref(), &headers);
    }
    let bytes = py.detach(|| builder.build())?;
    Ok(PyBytes::new(py, &bytes))
}

/// A transaction marker batch (COMMIT or ABORT) of a producer, written by
/// the coordinator epoch given; the leader assigns its offset.
#[pyfunction]
fn end_txn_marker_batch<'py>(
    py: Python<'py>,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    committed: bool,
    timestamp: i64,
) -> PyResult<Bound<'py, PyBytes>> {
    let bytes = records::end_txn_marker_batch(
        producer_id,
        producer_epoch,
        coordinator_epoch,
        committed,
        timestamp,
    )?;
    Ok(PyBytes::new(py, &bytes))
}

/// sendfile(2) from `in_fd` at `offset` to `out_fd`. Returns the bytes sent,
/// or None when the socket would block before anything was sent.
#[pyfunction(name = "sendfile")]
fn py_sendfile(
    py: Python<'_>,
    out_fd: RawFd,
    in_fd: RawFd,
    offset: u64,
    count: usize,
) -> PyResult<Option<usize>> {
    match py.detach(|| sendfile::sendfile(out_fd, in_fd, offset, count))? {
        SendOutcome::Sent(n) => Ok(Some(n)),
        SendOutcome::WouldBlock => Ok(None),
    }
}

// -- open segment files --------------------------------------------------

/// Sets the process-wide bound on open segment files (log.max.open.files);
/// handles above it are closed now.
#[pyfunction]
fn set_max_open_files(n: usize) {
    crate::filecache::set_max_open_files(n)
}

/// The bound on open segment files.
#[pyfunction]
fn max_open_files() -> usize {
    crate::filecache::max_open_files()
}

/// Segment files open now (not counting deleted ones readers still hold).
#[pyfunction]
fn open_segment_files() -> usize {
    crate::filecache::open_files()
}

// -- offline verify ------------------------------------------------------

/// A batch `verify_log_dir` found bad.
#[pyclass(frozen, get_all, module = "kbroker._kbroker")]
struct BadBatch {
    segment_file: String,
    position: u64,
    offset: i64,
    reason: String,
    unreadable_after: u64,
}

/// What `verify_log_dir` found in one partition directory.
#[pyclass(frozen, get_all, module = "kbroker._kbroker")]
struct VerifyReport {
    segments: usize,
    batches: u64,
    bytes: u64,
    clean_shutdown: bool,
    bad: Vec<Py<BadBatch>>,
}

/// Checks every batch of every segment of a partition directory (magic,
/// sizes, CRC-32C, offsets), read only.
#[pyfunction]
fn verify_log_dir(py: Python<'_>, dir: &str) -> PyResult<VerifyReport> {
    let r = py.detach(|| crate::verify::verify_log_dir(Path::new(dir)))?;
    let bad = r
        .bad
        .into_iter()
        .map(|b| {
            Py::new(
                py,
                BadBatch {
                    segment_file: b.segment_file.to_string_lossy().into_owned(),
                    position: b.position,
                    offset: b.offset,
                    reason: b.reason,
                    unreadable_after: b.unreadable_after,
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(VerifyReport {
        segments: r.segments,
        batches: r.batches,
        bytes: r.bytes,
        clean_shutdown: r.clean_shutdown,
        bad,
    })
}

/// A new topic's logs as Python gives them: its id and each partition's
/// directory and settings.
type NewTopicArg<'py> = (String, Vec<(String, PyRef<'py, PyLogConfig>)>);

/// Creates the logs of new topics: `topics` is a list of (topic id in
/// Kafka's base64 form, [(partition directory, LogConfig)]). The whole batch
/// runs with the GIL released. One entry per topic comes back: its list of
/// Logs, or the exception that refused it (its new directories are gone).
#[pyfunction]
fn create_topic_logs<'py>(
    py: Python<'py>,
    topics: Vec<NewTopicArg<'py>>,
    now_ms: i64,
) -> PyResult<Vec<Py<PyAny>>> {
    let requests: Vec<NewTopicLogs> = topics
        .into_iter()
        .map(|(topic_id, partitions)| NewTopicLogs {
            topic_id,
            partitions: partitions
                .into_iter()
                .map(|(dir, config)| NewPartition {
                    dir: dir.into(),
                    config: CoreLogConfig::from(&*config),
                })
                .collect(),
        })
        .collect();
    let results = py.detach(|| new_logs::create_topic_logs(requests, now_ms));
    results
        .into_iter()
        .map(|result| match result {
            Ok(logs) => {
                let logs = logs
                    .into_iter()
                    .map(|log| Log {
                        inner: Arc::new(log),
                    })
                    .collect::<Vec<_>>();
                Ok(logs.into_pyobject(py)?.into_any().unbind())
            }
            Err(e) => Ok(PyErr::from(e).into_value(py).into_any()),
        })
        .collect()
}

// -- the log -------------------------------------------------------------

/// One thing recovery did when a log was opened. `kind` is one of
/// truncated, deleted-segment, reset, rebuilt-indexes, bad-checkpoint;
/// `segment` is the segment's base offset (-1 for a checkpoint).
#[pyclass(frozen, get_all, module = "kbroker._kbroker")]
struct RecoveryNote {
    kind: &'static str,
    segment: i64,
    position: u64,
    offset: i64,
    bytes: u64,
    detail: String,
}

impl From<&CoreRecoveryNote> for RecoveryNote {
    fn from(n: &CoreRecoveryNote) -> Self {
        RecoveryNote {
            kind: n.kind.as_str(),
            segment: n.segment,
            position: n.position,
            offset: n.offset,
            bytes: n.bytes,
            detail: n.detail.clone(),
        }
    }
}

/// Storage settings of one partition log (Kafka's topic-level names, in snake case).
#[pyclass(name = "LogConfig", module = "kbroker._kbroker", get_all, set_all)]
#[derive(Clone)]
struct PyLogConfig {
    segment_bytes: u64,
    segment_ms: i64,
    segment_index_bytes: u64,
    index_interval_bytes: u64,
    retention_ms: i64,
    retention_bytes: i64,
    flush_messages: u64,
    flush_ms: i64,
    file_delete_delay_ms: i64,
    cleanup_compact: bool,
    cleanup_delete: bool,
    delete_retention_ms: i64,
    min_compaction_lag_ms: i64,
    max_compaction_lag_ms: i64,
    min_cleanable_dirty_ratio: f64,
}

#[pymethods]
impl PyLogConfig {
    /// Every setting is optional; an unset one takes the storage default.
    #[new]
    #[pyo3(signature = (*, segment_bytes=None, segment_ms=None, segment_index_bytes=None, index_interval_bytes=None, retention_ms=None, retention_bytes=None, flush_messages=None, flush_ms=None, file_delete_delay_ms=None, cleanup_compact=None, cleanup_delete=None, delete_retention_ms=None, min_compaction_lag_ms=None, max_compaction_lag_ms=None, min_cleanable_dirty_ratio=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        segment_bytes: Option<u64>,
        segment_ms: Option<i64>,
        segment_index_bytes: Option<u64>,
        index_interval_bytes: Option<u64>,
        retention_ms: Option<i64>,
        retention_bytes: Option<i64>,
        flush_messages: Option<u64>,
        flush_ms: Option<i64>,
        file_delete_delay_ms: Option<i64>,
        cleanup_compact: Option<bool>,
        cleanup_delete: Option<bool>,
        delete_retention_ms: Option<i64>,
        min_compaction_lag_ms: Option<i64>,
        max_compaction_lag_ms: Option<i64>,
        min_cleanable_dirty_ratio: Option<f64>,
    ) -> Self {
        let d = PyLogConfig::from(CoreLogConfig::default());
        PyLogConfig {
            segment_bytes: segment_bytes.unwrap_or(d.segment_bytes),
            segment_ms: segment_ms.unwrap_or(d.segment_ms),
            segment_index_bytes: segment_index_bytes.unwrap_or(d.segment_index_bytes),
            index_interval_bytes: index_interval_bytes.unwrap_or(d.index_interval_bytes),
            retention_ms: retention_ms.unwrap_or(d.retention_ms),
            retention_bytes: retention_bytes.unwrap_or(d.retention_bytes),
            flush_messages: flush_messages.unwrap_or(d.flush_messages),
            flush_ms: flush_ms.unwrap_or(d.flush_ms),
            file_delete_delay_ms: file_delete_delay_ms.unwrap_or(d.file_delete_delay_ms),
            cleanup_compact: cleanup_compact.unwrap_or(d.cleanup_compact),
            cleanup_delete: cleanup_delete.unwrap_or(d.cleanup_delete),
            delete_retention_ms: delete_retention_ms.unwrap_or(d.delete_retention_ms),
            min_compaction_lag_ms: min_compaction_lag_ms.unwrap_or(d.min_compaction_lag_ms),
            max_compaction_lag_ms: max_compaction_lag_ms.unwrap_or(d.max_compaction_lag_ms),
            min_cleanable_dirty_ratio: min_cleanable_dirty_ratio
                .unwrap_or(d.min_cleanable_dirty_ratio),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "LogConfig(segment_bytes={}, segment_ms={}, segment_index_bytes={}, index_interval_bytes={}, retention_ms={}, retention_bytes={}, flush_messages={}, flush_ms={}, file_delete_delay_ms={}, cleanup_compact={}, cleanup_delete={}, delete_retention_ms={}, min_compaction_lag_ms={}, max_compaction_lag_ms={}, min_cleanable_dirty_ratio={})",
            self.segment_bytes, self.segment_ms, self.segment_index_bytes, self.index_interval_bytes,
            self.retention_ms, self.retention_bytes, self.flush_messages, self.flush_ms, self.file_delete_delay_ms,
            py_bool(self.cleanup_compact), py_bool(self.cleanup_delete), self.delete_retention_ms,
            self.min_compaction_lag_ms, self.max_compaction_lag_ms, self.min_cleanable_dirty_ratio
        )
    }
}

impl From<CoreLogConfig> for PyLogConfig {
    fn from(c: CoreLogConfig) -> Self {
        PyLogConfig {
            segment_bytes: c.segment_bytes,
            segment_ms: c.segment_ms,
            segment_index_bytes: c.segment_index_bytes,
            index_interval_bytes: c.index_interval_bytes,
            retention_ms: c.retention_ms,
            retention_bytes: c.retention_bytes,
            flush_messages: c.flush_messages,
            flush_ms: c.flush_ms,
            file_delete_delay_ms: c.file_delete_delay_ms,
            cleanup_compact: c.cleanup_compact,
            cleanup_delete: c.cleanup_delete,
            delete_retention_ms: c.delete_retention_ms,
            min_compaction_lag_ms: c.min_compaction_lag_ms,
            max_compaction_lag_ms: c.max_compaction_lag_ms,
            min_cleanable_dirty_ratio: c.min_cleanable_dirty_ratio,
        }
    }
}

impl From<&PyLogConfig> for CoreLogConfig {
    fn from(c: &PyLogConfig) -> Self {
        CoreLogConfig {
            segment_bytes: c.segment_bytes,
            segment_ms: c.segment_ms,
            segment_index_bytes: c.segment_index_bytes,
            index_interval_bytes: c.index_interval_bytes,
            retention_ms: c.retention_ms,
            retention_bytes: c.retention_bytes,
            flush_messages: c.flush_messages,
            flush_ms: c.flush_ms,
            file_delete_delay_ms: c.file_delete_delay_ms,
            cleanup_compact: c.cleanup_compact,
            cleanup_delete: c.cleanup_delete,
            delete_retention_ms: c.delete_retention_ms,
            min_compaction_lag_ms: c.min_compaction_lag_ms,
            max_compaction_lag_ms: c.max_compaction_lag_ms,
            min_cleanable_dirty_ratio: c.min_cleanable_dirty_ratio,
        }
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Broker-wide log cleaner settings (log.cleaner.*, in snake case).
#[pyclass(name = "CleanerConfig", module = "kbroker._kbroker", get_all, set_all)]
#[derive(Clone)]
struct PyCleanerConfig {
    dedupe_buffer_bytes: usize,
    load_factor: f64,
    io_buffer_bytes: usize,
    io_max_bytes_per_second: f64,
    max_decompressed_bytes: usize,
}

#[pymethods]
impl PyCleanerConfig {
    /// Every setting is optional; an unset one takes the cleaner default.
    #[new]
    #[pyo3(signature = (*, dedupe_buffer_bytes=None, load_factor=None, io_buffer_bytes=None, io_max_bytes_per_second=None, max_decompressed_bytes=None))]
    fn new(
        dedupe_buffer_bytes: Option<usize>,
        load_factor: Option<f64>,
        io_buffer_bytes: Option<usize>,
        io_max_bytes_per_second: Option<f64>,
        max_decompressed_bytes: Option<usize>,
    ) -> Self {
        let d = CoreCleanerConfig::default();
        PyCleanerConfig {
            dedupe_buffer_bytes: dedupe_buffer_bytes.unwrap_or(d.dedupe_buffer_bytes),
            load_factor: load_factor.unwrap_or(d.load_factor),
            io_buffer_bytes: io_buffer_bytes.unwrap_or(d.io_buffer_bytes),
            io_max_bytes_per_second: io_max_bytes_per_second.unwrap_or(d.io_max_bytes_per_second),
            max_decompressed_bytes: max_decompressed_bytes.unwrap_or(d.max_decompressed_bytes),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "CleanerConfig(dedupe_buffer_bytes={}, load_factor={}, io_buffer_bytes={}, io_max_bytes_per_second={}, max_decompressed_bytes={})",
            self.dedupe_buffer_bytes, self.load_factor, self.io_buffer_bytes, self.io_max_bytes_per_second, self.max_decompressed_bytes
        )
    }
}

impl From<&PyCleanerConfig> for CoreCleanerConfig {
    fn from(c: &PyCleanerConfig) -> Self {
        CoreCleanerConfig {
            dedupe_buffer_bytes: c.dedupe_buffer_bytes,
            load_factor: c.load_factor,
            io_buffer_bytes: c.io_buffer_bytes,
            io_max_bytes_per_second: c.io_max_bytes_per_second,
            max_decompressed_bytes: c.max_decompressed_bytes,
        }
    }
}

/// How dirty a compacted log is, and whether a cleaning pass is due.
#[pyclass(frozen, get_all, module = "kbroker._kbroker")]
struct CleanableInfo {
    clean_bytes: u64,
    dirty_bytes: u64,
    first_dirty_offset: i64,
    first_uncleanable_offset: i64,
    dirty_ratio: f64,
    compaction_lag_due: bool,
    delete_horizon_due: bool,
    due: bool,
}

impl From<CoreCleanableInfo> for CleanableInfo {
    fn from(c: CoreCleanableInfo) -> Self {
        CleanableInfo {
            clean_bytes: c.clean_bytes,
            dirty_bytes: c.dirty_bytes,
            first_dirty_offset: c.first_dirty_offset,
            first_uncleanable_offset: c.first_uncleanable_offset,
            dirty_ratio: c.dirty_ratio,
            compaction_lag_due: c.compaction_lag_due,
            delete_horizon_due: c.delete_horizon_due,
            due: c.due,
        }
    }
}

/// What one cleaning pass did.
#[pyclass(frozen, get_all, module = "kbroker._kbroker")]
struct CleanStats {
    segments_read: usize,
    segments_written: usize,
    bytes_read: u64,
    bytes_written: u64,
    records_read: u64,
    records_removed: u64,
    tombstones_dropped: u64,
    aborted_records_removed: u64,
    markers_removed: u64,
    empty_batches: u64,
    unreadable_batches: u64,
    map_entries: usize,
    map_capacity: usize,
    first_dirty_offset: i64,
    complete: bool,
    aborted: bool,
    elapsed_ms: u64,
    throttled_ms: u64,
}

impl From<CoreCleanStats> for CleanStats {
    fn from(c: CoreCleanStats) -> Self {
        CleanStats {
            segments_read: c.segments_read,
            segments_written: c.segments_written,
            bytes_read: c.bytes_read,
            bytes_written: c.bytes_written,
            records_read: c.records_read,
            records_removed: c.records_removed,
            tombstones_dropped: c.tombstones_dropped,
            aborted_records_removed: c.aborted_records_removed,
            markers_removed: c.markers_removed,
            empty_batches: c.empty_batches,
            unreadable_batches: c.unreadable_batches,
            map_entries: c.map_entries,
            map_capacity: c.map_capacity,
            first_dirty_offset: c.first_dirty_offset,
            complete: c.complete,
            aborted: c.aborted,
            elapsed_ms: c.elapsed_ms,
            throttled_ms: c.throttled_ms,
        }
    }
}

/// Header facts of an appended batch that carries a producer id.
#[pyclass(frozen, get_all, module = "kbroker._kbroker")]
struct ProducerBatch {
    base_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    is_transactional: bool,
    is_control: bool,
    control_type: i16,
    coordinator_epoch: i32,
}

impl From<CoreProducerBatch> for ProducerBatch {
    fn from(b: CoreProducerBatch) -> Self {
        ProducerBatch {
            base_offset: b.base_offset,
            last_offset: b.last_offset,
            max_timestamp: b.max_timestamp,
            producer_id: b.producer_id,
            producer_epoch: b.producer_epoch,
            base_sequence: b.base_sequence,
            is_transactional: b.is_transactional,
            is_control: b.is_control,
            control_type: b.control_type,
            coordinator_epoch: b.coordinator_epoch,
        }
    }
}

/// What an append did.
#[pyclass(frozen, get_all, module = "kbroker._kbroker")]
struct AppendInfo {
    first_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    log_append_time: i64,
    batches: usize,
    records: u64,
    bytes: usize,
    last_leader_epoch: i32,
    producer_batches: Vec<Py<ProducerBatch>>,
}

impl AppendInfo {
    fn new(py: Python<'_>, a: CoreAppendInfo) -> PyResult<Self> {
        let producer_batches = a
            .producer_batches
            .into_iter()
            .map(|b| Py::new(py, ProducerBatch::from(b)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(AppendInfo {
            first_offset: a.first_offset,
            last_offset: a.last_offset,
            max_timestamp: a.max_timestamp,
            offset_of_max_timestamp: a.offset_of_max_timestamp,
            log_append_time: a.log_append_time,
            batches: a.batches,
            records: a.records,
            bytes: a.bytes,
            last_leader_epoch: a.last_leader_epoch,
            producer_batches,
        })
    }
}

/// A finished append on an I/O thread, and the buffer it read (released
/// with the GIL held, when the result is taken).
type AppendDone = (crate::Result<CoreAppendInfo>, ByteView);

/// Threads that append to logs off the event loop (the core's `IoPool`):
/// `append`/`append_as_follower` queue a write under a ticket and return at
/// once; when `fileno()` is readable, `take_done()` gives each finished
/// ticket with its AppendInfo or its exception. The threads never take the
/// GIL: a write the kernel holds up holds up nothing else.
#[pyclass(frozen, module = "kbroker._kbroker")]
struct IoPool {
    inner: crate::io_pool::IoPool<AppendDone>,
}

impl IoPool {
    /// Queues an append to `log` behind its earlier writes (the pool's key
    /// is the log's address: the job holds the log, so no other log has it
    /// meanwhile). The flush `flush.messages` asks for runs on the pool's
    /// sync lane, the append's answer after it. ``wake``: wake a thread
    /// (else the caller calls `wake` once it has queued its writes).
    #[allow(clippy::too_many_arguments)]
    fn queue(
        &self,
        log: Arc<CoreLog>,
        ticket: u64,
        batches: ByteView,
        now_ms: i64,
        wake: bool,
        write: impl FnOnce(&CoreLog, &[u8]) -> crate::Result<(CoreAppendInfo, Option<i64>)>
            + Send
            + 'static,
    ) -> PyResult<()> {
        use crate::io_pool::Step;
        self.inner
            .queue_steps(Arc::as_ptr(&log) as u64, ticket, move || {
                match write(&log, batches.as_slice()) {
                    Ok((info, Some(end))) => Step::Then(Box::new(move || {
                        (log.flush_through(end, now_ms).map(|()| info), batches)
                    })),
                    Ok((info, None)) => Step::Done((Ok(info), batches)),
                    Err(e) => Step::Done((Err(e), batches)),
                }
            })
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        if wake {
            self.inner.wake();
        }
        Ok(())
    }
}

#[pymethods]
impl IoPool {
    #[new]
    #[pyo3(signature = (threads, name = "kbroker-io"))]
    fn new(threads: usize, name: &str) -> PyResult<Self> {
        Ok(IoPool {
            inner: crate::io_pool::IoPool::new(threads, name)?,
        })
    }

    fn fileno(&self) -> RawFd {
        self.inner.event_fd()
    }

    #[getter]
    fn threads(&self) -> usize {
        self.inner.count()
    }

    fn resize(&self, threads: usize) -> PyResult<()> {
        Ok(self.inner.resize(threads)?)
    }

    /// Wakes a thread for the writes queued with ``wake=False``.
    fn wake(&self) {
        self.inner.wake()
    }

    /// Lets the queued writes finish, then ends the threads.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close())
    }

    /// `Log.append` on a pool thread, after the writes to `log` queued
    /// before it, refused (StaleLeaderEpochError) if the log's fence is no
    /// longer `fence` by then. `batches` must not change until its ticket is
    /// taken (the broker never changes a request's bytes).
    #[pyo3(signature = (ticket, log, batches, leader_epoch, log_append_time_ms, now_ms, fence, wake=true))]
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        ticket: u64,
        log: &Log,
        batches: ByteView,
        leader_epoch: i32,
        log_append_time_ms: Option<i64>,
        now_ms: i64,
        fence: u64,
        wake: bool,
    ) -> PyResult<()> {
        self.queue(
            log.inner.clone(),
            ticket,
            batches,
            now_ms,
            wake,
            move |log, data| {
                log.append_fenced(
                    data,
                    Some((leader_epoch, log_append_time_ms)),
                    now_ms,
                    fence,
                )
            },
        )
    }

    /// `Log.append_as_follower` on a pool thread, fenced as `append` is.
    #[pyo3(signature = (ticket, log, batches, now_ms, fence, wake=true))]
    fn append_as_follower(
        &self,
        ticket: u64,
        log: &Log,
        batches: ByteView,
        now_ms: i64,
        fence: u64,
        wake: bool,
    ) -> PyResult<()> {
        self.queue(
            log.inner.clone(),
            ticket,
            batches,
            now_ms,
            wake,
            move |log, data| log.append_fenced(data, None, now_ms, fence),
        )
    }

    /// (ticket, AppendInfo or the exception the append raised) of each write
    /// finished since the last call.
    fn take_done(&self, py: Python<'_>) -> PyResult<Vec<(u64, Py<PyAny>)>> {
        let done = self.inner.take_done();
        let mut out = Vec::with_capacity(done.len());
        for (ticket, (result, batches)) in done {
            drop(batches);
            let value: Py<PyAny> = match result {
                Ok(info) => Py::new(py, AppendInfo::new(py, info)?)?.into_any(),
                Err(e) => PyErr::from(e).into_value(py).into_any(),
            };
            out.push((ticket, value));
        }
        Ok(out)
    }
}

/// A run of whole batches in one segment file, ready to send.
#[pyclass(frozen, module = "kbroker._kbroker")]
struct LogSlice {
    inner: CoreLogSlice,
}

#[pymethods]
impl LogSlice {
    #[getter]
    fn position(&self) -> u64 {
        self.inner.position
    }
    #[getter]
    fn length(&self) -> usize {
        self.inner.length
    }
    #[getter]
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }
    fn __len__(&self) -> usize {
        self.inner.length
    }
    /// The slice's bytes, copied (for tests and tools; the broker uses sendfile).
    fn read_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py.detach(|| self.inner.read_bytes())?;
        Ok(PyBytes::new(py, &bytes))
    }
    /// Sends `count` bytes of the slice from `offset` (relative to the slice)
    /// to socket `out_fd`. Returns bytes sent, or None on would-block.
    fn sendfile(
        &self,
        py: Python<'_>,
        out_fd: RawFd,
        offset: usize,
        count: usize,
    ) -> PyResult<Option<usize>> {
        if offset > self.inner.length || count > self.inner.length - offset {
            return Err(PyValueError::new_err("range outside the slice"));
        }
        let (in_fd, at) = (self.inner.fd(), self.inner.position + offset as u64);
        match py.detach(|| sendfile::sendfile(out_fd, in_fd, at, count))? {
            SendOutcome::Sent(n) => Ok(Some(n)),
            SendOutcome::WouldBlock => Ok(None),
        }
    }
}

/// One partition's segment log.
#[pyclass(frozen, module = "kbroker._kbroker")]
struct Log {
    inner: Arc<CoreLog>,
}

#[pymethods]
impl Log {
    /// ``same_kernel``: the process that last wrote the log ran under the
    /// kernel running now (see the core's `LastWriter::SameKernel`).
    #[new]
    #[pyo3(signature = (dir, config, now_ms, same_kernel=false))]
    fn open(
        py: Python<'_>,
        dir: &str,
        config: &PyLogConfig,
        now_ms: i64,
        same_kernel: bool,
    ) -> PyResult<Self> {
        let cfg = CoreLogConfig::from(config);
        let last_writer = if same_kernel {
            LastWriter::SameKernel
        } else {
            LastWriter::Unknown
        };
        let log = py.detach(|| CoreLog::open_after(Path::new(dir), cfg, now_ms, last_writer))?;
        Ok(Log {
            inner: Arc::new(log),
        })
    }

    #[pyo3(signature = (batches, leader_epoch, log_append_time_ms, now_ms))]
    fn append(
        &self,
        py: Python<'_>,
        batches: ByteView,
        leader_epoch: i32,
        log_append_time_ms: Option<i64>,
        now_ms: i64,
    ) -> PyResult<AppendInfo> {
        let batches = batches.as_slice();
        let info = py.detach(|| {
            self.inner
                .append(batches, leader_epoch, log_append_time_ms, now_ms)
        })?;
        AppendInfo::new(py, info)
    }

    /// Appends batches exactly as the leader wrote them; raises
    /// UnexpectedAppendOffsetError when the first does not start at or
    /// after the log end.
    fn append_as_follower(
        &self,
        py: Python<'_>,
        batches: ByteView,
        now_ms: i64,
    ) -> PyResult<AppendInfo> {
        let batches = batches.as_slice();
        let info = py.detach(|| self.inner.append_as_follower(batches, now_ms))?;
        AppendInfo::new(py, info)
    }

    #[pyo3(signature = (offset, max_bytes, max_offset = None, min_one_batch = true))]
    fn read(
        &self,
        py: Python<'_>,
        offset: i64,
        max_bytes: usize,
        max_offset: Option<i64>,
        min_one_batch: bool,
    ) -> PyResult<Option<LogSlice>> {
        let slice = py.detach(|| {
            self.inner
                .read(offset, max_bytes, max_offset, min_one_batch)
        })?;
        Ok(slice.map(|inner| LogSlice { inner }))
    }

    /// Records an aborted transaction in the index of its marker's segment;
    /// False when that marker's entry is there already.
    fn add_aborted_txn(
        &self,
        py: Python<'_>,
        producer_id: i64,
        first_offset: i64,
        last_offset: i64,
        last_stable_offset: i64,
    ) -> PyResult<bool> {
        let txn = AbortedTxn {
            producer_id,
            first_offset,
            last_offset,
            last_stable_offset,
        };
        Ok(py.detach(|| self.inner.add_aborted_txn(txn))?)
    }

    /// (producer id, first offset) of the transactions aborted between
    /// `start` and `upper` (see the core's `collect_aborted_txns`).
    fn collect_aborted_txns(&self, start: i64, upper: i64) -> Vec<(i64, i64)> {
        self.inner
            .collect_aborted_txns(start, upper)
            .iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect()
    }

    /// (producer id, first offset) of the transactions a read_committed
    /// reader of `slice`, read from `start`, must know were aborted.
    fn aborted_txns_for_slice(&self, start: i64, slice: &LogSlice) -> PyResult<Vec<(i64, i64)>> {
        Ok(self
            .inner
            .aborted_txns_for_slice(start, &slice.inner)?
            .iter()
            .map(|t| (t.producer_id, t.first_offset))
            .collect())
    }

    /// fsync of the transaction indexes written since their last sync.
    fn sync_txn_indexes(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.detach(|| self.inner.sync_txn_indexes())?)
    }

    /// Every entry of the aborted-transaction indexes: (producer id, first
    /// offset, last offset, last stable offset), in marker order.
    fn aborted_txns(&self) -> Vec<(i64, i64, i64, i64)> {
        self.inner
            .aborted_txns()
            .iter()
            .map(|t| {
                (
                    t.producer_id,
                    t.first_offset,
                    t.last_offset,
                    t.last_stable_offset,
                )
            })
            .collect()
    }

    /// Up to `max_batches` batches with a producer id from the one holding
    /// `from_offset` on, and the offset to go on from (the log end when done).
    fn producer_batches_from(
        &self,
        py: Python<'_>,
        from_offset: i64,
        max_batches: usize,
    ) -> PyResult<(Vec<ProducerBatch>, i64)> {
        let (batches, next) =
            py.detach(|| self.inner.producer_batches_from(from_offset, max_batches))?;
        Ok((batches.into_iter().map(ProducerBatch::from).collect(), next))
    }

    fn offset_for_timestamp(&self, py: Python<'_>, timestamp: i64) -> PyResult<Option<(i64, i64)>> {
        Ok(py.detach(|| self.inner.offset_for_timestamp(timestamp))?)
    }

    fn max_timestamp_and_offset(&self) -> (i64, i64) {
        self.inner.max_timestamp_and_offset()
    }

    fn truncate_to(&self, py: Python<'_>, offset: i64) -> PyResult<()> {
        Ok(py.detach(|| self.inner.truncate_to(offset))?)
    }

    fn truncate_fully_and_start_at(&self, py: Python<'_>, offset: i64) -> PyResult<()> {
        Ok(py.detach(|| self.inner.truncate_fully_and_start_at(offset))?)
    }

    /// (epoch, end offset) as OffsetForLeaderEpoch answers; (-1, -1) when undefined.
    fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.inner.end_offset_for_epoch(epoch)
    }

    fn maybe_assign_epoch_start_offset(
        &self,
        py: Python<'_>,
        epoch: i32,
        start_offset: i64,
    ) -> PyResult<()> {
        Ok(py.detach(|| {
            self.inner
                .maybe_assign_epoch_start_offset(epoch, start_offset)
        })?)
    }

    /// The log's fence from now on, once the write in progress is done
    /// (writes queued under an older one are refused).
    fn set_fence(&self, py: Python<'_>, fence: u64) {
        py.detach(|| self.inner.set_fence(fence))
    }

    /// Starts `epoch` at the log end once appends in progress are written;
    /// returns that log end (see the core's `start_epoch_at_log_end`).
    fn start_epoch_at_log_end(&self, py: Python<'_>, epoch: i32) -> PyResult<i64> {
        Ok(py.detach(|| self.inner.start_epoch_at_log_end(epoch))?)
    }

    #[getter]
    fn latest_epoch(&self) -> Option<i32> {
        self.inner.latest_epoch()
    }

    /// The leader-epoch cache as (epoch, start offset) pairs, oldest first.
    #[getter]
    fn epoch_entries(&self) -> Vec<(i32, i64)> {
        self.inner
            .epoch_entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    fn delete_records_before(&self, py: Python<'_>, offset: i64) -> PyResult<i64> {
        Ok(py.detach(|| self.inner.delete_records_before(offset))?)
    }

    #[pyo3(signature = (now_ms, max_offset = None))]
    fn apply_retention(
        &self,
        py: Python<'_>,
        now_ms: i64,
        max_offset: Option<i64>,
    ) -> PyResult<usize> {
        Ok(py.detach(|| self.inner.apply_retention_below(now_ms, max_offset))?)
    }

    #[pyo3(signature = (now_ms, max_offset = None))]
    fn cleanable(&self, py: Python<'_>, now_ms: i64, max_offset: Option<i64>) -> CleanableInfo {
        py.detach(|| self.inner.cleanable(now_ms, max_offset))
            .into()
    }

    #[pyo3(signature = (now_ms, config, max_offset = None))]
    fn clean(
        &self,
        py: Python<'_>,
        now_ms: i64,
        config: &PyCleanerConfig,
        max_offset: Option<i64>,
    ) -> PyResult<CleanStats> {
        let cfg = CoreCleanerConfig::from(config);
        Ok(py
            .detach(|| self.inner.clean(now_ms, &cfg, max_offset))?
            .into())
    }

    fn maybe_roll(&self, py: Python<'_>, now_ms: i64) -> PyResult<()> {
        Ok(py.detach(|| self.inner.maybe_roll(now_ms))?)
    }

    fn maybe_flush(&self, py: Python<'_>, now_ms: i64) -> PyResult<bool> {
        Ok(py.detach(|| self.inner.maybe_flush(now_ms))?)
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.detach(|| self.inner.flush())?)
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.detach(|| self.inner.close())?)
    }

    fn delete(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.detach(|| self.inner.delete())?)
    }

    fn set_config(&self, config: &PyLogConfig) {
        self.inner.set_config(CoreLogConfig::from(config))
    }

    #[getter]
    fn log_start_offset(&self) -> i64 {
        self.inner.log_start_offset()
    }
    #[getter]
    fn log_end_offset(&self) -> i64 {
        self.inner.log_end_offset()
    }
    #[getter]
    fn recovery_point(&self) -> i64 {
        self.inner.recovery_point()
    }
    #[getter]
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    #[getter]
    fn segment_count(&self) -> usize {
        self.inner.segment_count()
    }
    #[getter]
    fn segment_base_offsets(&self) -> Vec<i64> {
        self.inner.segment_base_offsets()
    }
    #[getter]
    fn active_segment_base_offset(&self) -> i64 {
        self.inner.active_segment_base_offset()
    }
    #[getter]
    fn dir(&self) -> String {
        self.inner.dir().to_string_lossy().into_owned()
    }
    /// What recovery did when the log was opened.
    #[getter]
    fn recovery_notes(&self) -> Vec<RecoveryNote> {
        self.inner
            .recovery_notes()
            .iter()
            .map(RecoveryNote::from)
            .collect()
    }
}

#[pymodule]
fn _kbroker(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("KBrokerError", py.get_type::<KBrokerError>())?;
    m.add("CorruptRecordError", py.get_type::<CorruptRecordError>())?;
    m.add("InvalidRecordError", py.get_type::<InvalidRecordError>())?;
    m.add("RecordErrorsError", py.get_type::<RecordErrorsError>())?;
    m.add("RecordTooLargeError", py.get_type::<RecordTooLargeError>())?;
    m.add(
        "OffsetOutOfRangeError",
        py.get_type::<OffsetOutOfRangeError>(),
    )?;
    m.add(
        "UnexpectedAppendOffsetError",
        py.get_type::<UnexpectedAppendOffsetError>(),
    )?;
    m.add(
        "StaleLeaderEpochError",
        py.get_type::<StaleLeaderEpochError>(),
    )?;
    m.add_function(wrap_pyfunction!(crc32c, m)?)?;
    m.add_function(wrap_pyfunction!(validate_batches, m)?)?;
    m.add_function(wrap_pyfunction!(check_stored_batches, m)?)?;
    m.add_function(wrap_pyfunction!(recompress_batches, m)?)?;
    m.add_function(wrap_pyfunction!(decode_records, m)?)?;
    m.add_function(wrap_pyfunction!(build_batch, m)?)?;
    m.add_function(wrap_pyfunction!(end_txn_marker_batch, m)?)?;
    m.add_function(wrap_pyfunction!(py_sendfile, m)?)?;
    m.add_function(wrap_pyfunction!(set_max_open_files, m)?)?;
    m.add_function(wrap_pyfunction!(max_open_files, m)?)?;
    m.add_function(wrap_pyfunction!(open_segment_files, m)?)?;
    m.add_function(wrap_pyfunction!(verify_log_dir, m)?)?;
    m.add_function(wrap_pyfunction!(create_topic_logs, m)?)?;
    m.add_class::<RecoveryNote>()?;
    m.add_class::<BadBatch>()?;
    m.add_class::<VerifyReport>()?;
    m.add_class::<BatchInfo>()?;
    m.add_class::<PyLogConfig>()?;
    m.add_class::<PyCleanerConfig>()?;
    m.add_class::<CleanableInfo>()?;
    m.add_class::<CleanStats>()?;
    m.add_class::<ProducerBatch>()?;
    m.add_class::<AppendInfo>()?;
    m.add_class::<LogSlice>()?;
    m.add_class::<Log>()?;
    m.add_class::<IoPool>()?;
    Ok(())
}
