//! One partition's log: an ordered list of segments in a directory, plus
//! the recovery-point and log-start-offset checkpoints and the
//! clean-shutdown marker.
//!
//! Writers (append, roll, truncate, retention, flush, close) serialize on one
//! mutex. Readers never take it: they load the log end and take a snapshot
//! of the segment list (an `Arc<Vec<Arc<Segment>>>` swapped whole on every
//! change, copy-on-write), so a delete never blocks a read and a slice keeps
//! its segment's file open after the segment is gone.
//!
//! Directory layout:
//! - `<base offset, 20 digits>.log | .index | .timeindex | .txnindex`: the
//!   segments (the transaction index: see `txn_index.rs`);
//! - `recovery-point`: offset below which data is known flushed (decimal);
//! - `log-start-offset`: the first offset a reader may ask for (decimal);
//! - `leader-epoch-checkpoint`: the leader-epoch cache (see `epoch_cache.rs`),
//!   rebuilt from the batches' headers when missing or damaged;
//! - `cleaner-checkpoint`: how far a compacted log is clean (see
//!   `cleaner_state.rs`);
//! - `.clean-shutdown`: present only between `close()` and the next open.
//!
//! Checkpoints are written to `<name>.tmp`, fsync'ed, renamed, and the
//! directory fsync'ed.

use std::fs::{self, File};
use std::io::{self, IoSlice, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::cleaner_state;
use crate::crc32c::crc32c_delta;
use crate::epoch_cache::{self, EpochCache, EpochEntry};
use crate::error::{Error, Result};
use crate::records::{
    check_crc, end_txn_marker, BatchHeader, ATTRIBUTES, BASE_OFFSET, CRC, HEADER_SIZE,
    MAX_TIMESTAMP, PARTITION_LEADER_EPOCH, TIMESTAMP_TYPE_MASK,
};
use crate::segment::{
    parse_file_name, BatchInfo, LoadMode, Scanner, Segment, SegmentConfig, INDEX_SUFFIX,
    LOG_SUFFIX, MAX_SEGMENT_SIZE, TIME_INDEX_SUFFIX,
};
use crate::statefile::{read_state_file, remove_if_present, sync_dir};
use crate::txn_index::{AbortedTxn, Collected, TXN_INDEX_SUFFIX};

pub const RECOVERY_POINT_FILE: &str = "recovery-point";
/// How often at most a flush that `flush.messages` asks for rewrites the
/// `recovery-point` file (two more syncs of their own: it and its
/// directory). Truncation, close, `Log::flush` and the `flush.ms` pass
/// write it at once.
pub const RECOVERY_POINT_CHECKPOINT_MS: i64 = 1_000;
pub const LOG_START_OFFSET_FILE: &str = "log-start-offset";
pub const CLEAN_SHUTDOWN_FILE: &str = ".clean-shutdown";
const TMP_SUFFIX: &str = ".tmp";

/// What is known, at open, of the process that last wrote a log and did not
/// close it (no clean-shutdown marker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastWriter {
    /// Nothing: the machine may have crashed or lost power since, so any
    /// data past the recovery point may be torn or lost anywhere in it.
    Unknown,
    /// It ran under the kernel running now (the same boot), so every write
    /// it made is in the page cache or on disk as it made it, even if it was
    /// killed: only a write in progress when it died can be cut short, at
    /// the end of the log. The tail is checked as after a clean shutdown;
    /// the recovery point stays where the checkpoint has it (the data past
    /// it may not be on disk yet), and that data is synced by the next flush.
    SameKernel,
}

/// Batches per append above which the batches are copied into one buffer
/// instead of being written as header/body iovecs (IOV_MAX is 1024).
const MAX_IOV_BATCHES: usize = 512;

/// Storage settings of one partition (Kafka's topic-level names).
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// segment.bytes
    pub segment_bytes: u64,
    /// segment.ms
    pub segment_ms: i64,
    /// segment.index.bytes: largest index file; the segment rolls when full.
    pub segment_index_bytes: u64,
    /// index.interval.bytes
    pub index_interval_bytes: u64,
    /// retention.ms; -1 = unlimited.
    pub retention_ms: i64,
    /// retention.bytes; -1 = unlimited.
    pub retention_bytes: i64,
    /// flush.messages; u64::MAX = never by count.
    pub flush_messages: u64,
    /// flush.ms; i64::MAX = never by time.
    pub flush_ms: i64,
    /// file.delete.delay.ms (files are deleted at once: open slices keep
    /// their file readable, so no delay is needed).
    pub file_delete_delay_ms: i64,
    /// cleanup.policy contains "compact": the log cleaner dedupes by key.
    pub cleanup_compact: bool,
    /// cleanup.policy contains "delete": retention.ms/.bytes delete segments.
    pub cleanup_delete: bool,
    /// delete.retention.ms: how long the cleaner keeps tombstones after it
    /// first sees them.
    pub delete_retention_ms: i64,
    /// min.compaction.lag.ms: segments with records younger than this are
    /// not cleaned.
    pub min_compaction_lag_ms: i64,
    /// max.compaction.lag.ms: dirty records older than this make the log
    /// due for cleaning whatever its dirty ratio; also caps segment.ms.
    pub max_compaction_lag_ms: i64,
    /// min.cleanable.dirty.ratio
    pub min_cleanable_dirty_ratio: f64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            flush_messages: u64::MAX,
            flush_ms: i64::MAX,
            file_delete_delay_ms: 60_000,
            cleanup_compact: false,
            cleanup_delete: true,
            delete_retention_ms: 24 * 3600 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
        }
    }
}

impl LogConfig {
    pub(crate) fn segment_config(&self) -> SegmentConfig {
        SegmentConfig {
            index_bytes: self.segment_index_bytes,
            index_interval_bytes: self.index_interval_bytes,
        }
    }
    pub(crate) fn max_segment_bytes(&self) -> u64 {
        self.segment_bytes.clamp(1, MAX_SEGMENT_SIZE)
    }
    /// segment.ms, capped by max.compaction.lag.ms on compacted logs (as
    /// Kafka does) so dirty records never wait in the active segment, which
    /// the cleaner does not touch, past their lag.
    fn roll_ms(&self) -> i64 {
        if self.cleanup_compact && self.max_compaction_lag_ms > 0 {
            self.segment_ms.min(self.max_compaction_lag_ms)
        } else {
            self.segment_ms
        }
    }
}

/// Header facts of one appended batch that carries a producer id, for the
/// producer state (its offsets are the log's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub is_transactional: bool,
    pub is_control: bool,
    /// A transaction marker's control type (0 ABORT, 1 COMMIT) and
    /// coordinator epoch; -1 and -1 for any other batch.
    pub control_type: i16,
    pub coordinator_epoch: i32,
}

/// Bound on the decompressed size of a control batch read for its marker
/// (markers are one small uncompressed record).
const MARKER_MAX_DECOMPRESSED: usize = 1 << 20;

/// What an append did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// Largest batch max timestamp (the append time under LogAppendTime).
    pub max_timestamp: i64,
    /// Last offset of the batch holding `max_timestamp` (first offset under
    /// LogAppendTime); batch-level, no record is decoded.
    pub offset_of_max_timestamp: i64,
    /// The assigned LogAppendTime, or -1.
    pub log_append_time: i64,
    pub batches: usize,
    pub records: u64,
    pub bytes: usize,
    /// The partition leader epoch of the last batch, as written.
    pub last_leader_epoch: i32,
    /// The appended batches that carry a producer id (idempotent,
    /// transactional or control), in log order.
    pub producer_batches: Vec<ProducerBatch>,
}

/// A run of whole batches inside one segment file. It holds the file open
/// (whatever the file cache does) until dropped.
#[derive(Clone, Debug)]
pub struct LogSlice {
    pub segment: Arc<Segment>,
    pub file: Arc<File>,
    pub position: u64,
    pub length: usize,
    /// Base offset of the first batch (may be below the offset asked for).
    pub first_offset: i64,
}

impl LogSlice {
    /// The slice's bytes, copied (the broker sends them with sendfile).
    pub fn read_bytes(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; self.length];
        let mut done = 0;
        while done < buf.len() {
            match self
                .file
                .read_at(&mut buf[done..], self.position + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Only a concurrent truncation can make the file shorter.
        buf.truncate(done);
        Ok(buf)
    }
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// What an append does when `flush.messages` asks for a flush.
#[derive(Clone, Copy)]
enum FlushDue {
    /// Syncs before it returns, under the writer lock.
    Now,
    /// Returns the offset the flush must reach, for the caller to sync.
    Tell,
}

enum Mode {
    Leader {
        epoch: i32,
        append_time: Option<i64>,
    },
    Follower,
}

/// State only the writer touches.
struct Writer {
    config: LogConfig,
    last_flush_ms: i64,
    scratch: Vec<u8>,
    /// A truncation cut the active segment's file: the next append starts a
    /// new file rather than write where cut bytes were. A fetch answer
    /// holds a slice of a file and sends it later (sendfile); it must read
    /// the bytes it was taken with, or fewer, never batches written since
    /// at the same positions.
    active_was_cut: bool,
    /// Set by whoever owns the log (the partition) whenever what it writes
    /// changes meaning (a leadership change, a truncation): a write
    /// prepared under another value is refused ([`Error::Fenced`]).
    fence: u64,
}

pub struct Log {
    dir: PathBuf,
    segments: RwLock<Arc<Vec<Arc<Segment>>>>,
    writer: Mutex<Writer>,
    /// Held while segments are fdatasync'ed and the recovery point moves, and
    /// by whatever deletes segment files or truncates (always taken after
    /// the writer lock when both are held). A flush takes the writer lock
    /// only to note the log end, so appends go on during its fdatasyncs.
    flushing: Mutex<()>,
    /// Bumped by every truncation: a flush that noted the log end before
    /// one must not move the recovery point.
    truncations: AtomicU64,
    log_start: AtomicI64,
    log_end: AtomicI64,
    recovery_point: AtomicI64,
    /// What the `recovery-point` file says, and when it was written (both
    /// changed with `flushing` held). The file may lag the recovery point:
    /// a flush that `flush.messages` asks for leaves it to the next write
    /// at least [`RECOVERY_POINT_CHECKPOINT_MS`] later, which a crash
    /// before costs only a longer recovery scan.
    checkpointed: AtomicI64,
    checkpointed_ms: AtomicI64,
    closed: AtomicBool,
    /// The log cleaner's checkpoint (see `cleaner.rs`): offsets below it
    /// were cleaned; and the earliest delete horizon of a kept tombstone.
    pub(crate) cleaner_first_dirty: AtomicI64,
    pub(crate) cleaner_horizon: AtomicI64,
    /// Held by the one clean running on this log.
    pub(crate) cleaning: Mutex<()>,
    /// What recovery did at open.
    recovery: Vec<RecoveryNote>,
    /// The leader-epoch cache. Changed under the writer lock (after its
    /// checkpoint is written); read without it.
    epochs: RwLock<EpochCache>,
    /// Some segment has held an aborted transaction since the log opened:
    /// read_committed reads of a log that never had one skip the indexes.
    had_aborted_txns: AtomicBool,
}

fn write_checkpoint(dir: &Path, name: &str, value: i64) -> Result<()> {
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let path = dir.join(name);
    (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(format!("{value}\n").as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &path)
    })()
    .map_err(Error::at(&path))?;
    sync_dir(dir)
}

/// What recovery did to a log, or found wrong with it, at open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryKind {
    /// A torn or corrupt tail was cut off a segment.
    Truncated,
    /// A whole segment after a cut was deleted.
    DeletedSegment,
    /// Every segment was deleted: the log start checkpoint is past all data.
    Reset,
    /// A segment's index files were rebuilt from its log file.
    RebuiltIndexes,
    /// A checkpoint file could not be read and was treated as missing.
    BadCheckpoint,
    /// A segment's aborted-transaction index was cut at a bad entry (the
    /// partition replays its markers from the log to restore it).
    CutTxnIndex,
}

impl RecoveryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryKind::Truncated => "truncated",
            RecoveryKind::DeletedSegment => "deleted-segment",
            RecoveryKind::Reset => "reset",
            RecoveryKind::RebuiltIndexes => "rebuilt-indexes",
            RecoveryKind::BadCheckpoint => "bad-checkpoint",
            RecoveryKind::CutTxnIndex => "cut-txn-index",
        }
    }
}

/// One thing recovery did. `segment` is the segment's base offset (-1 for a
/// checkpoint), `position` the byte position in its log file, `offset` the
/// first offset affected, `bytes` the bytes dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryNote {
    pub kind: RecoveryKind,
    pub segment: i64,
    pub position: u64,
    pub offset: i64,
    pub bytes: u64,
    pub detail: String,
}

impl RecoveryNote {
    /// A checkpoint file that could not be read as one (`detail` names it):
    /// treated as missing.
    fn bad_checkpoint(detail: String) -> Self {
        RecoveryNote {
            kind: RecoveryKind::BadCheckpoint,
            segment: -1,
            position: 0,
            offset: -1,
            bytes: 0,
            detail,
        }
    }
}

/// A checkpoint's value; None when missing, or when unreadable as one (a
/// note says so: every caller can fall back safely).
fn read_checkpoint(dir: &Path, name: &str, notes: &mut Vec<RecoveryNote>) -> Result<Option<i64>> {
    let path = dir.join(name);
    let problem = match read_state_file(&path)? {
        None => return Ok(None),
        Some(Err(problem)) => problem,
        Some(Ok(text)) => match text.trim().parse::<i64>() {
            Ok(v) if v >= 0 => return Ok(Some(v)),
            _ => format!("not a non-negative integer: {:?}", text.trim()),
        },
    };
    notes.push(RecoveryNote::bad_checkpoint(format!(
        "{}: {problem}",
        path.display()
    )));
    Ok(None)
}

fn remove_segment_files(dir: &Path, base: i64) -> Result<()> {
    for suffix in [
        LOG_SUFFIX,
        INDEX_SUFFIX,
        TIME_INDEX_SUFFIX,
        TXN_INDEX_SUFFIX,
    ] {
        remove_if_present(&dir.join(crate::segment::file_name(base, suffix)))?;
    }
    Ok(())
}

/// Calls `f` with the header of every batch of `seg`, in order.
fn for_each_batch_header(seg: &Segment, mut f: impl FnMut(&BatchHeader)) -> Result<()> {
    let limit = seg.size();
    let mut pos = 0;
    while pos < limit {
        let h = seg.header_at(pos, limit)?;
        f(&h);
        pos += h.total_size() as u64;
    }
    Ok(())
}

/// The leader-epoch cache at open: the checkpoint, plus the epochs of the
/// batches at or after `replay_from` (after an unclean shutdown), cut to
/// [log start, log end]. A missing or damaged checkpoint is rebuilt from
/// every batch header. The checkpoint is rewritten when this changed it.
fn load_epoch_cache(
    dir: &Path,
    segments: &[Arc<Segment>],
    replay_from: Option<i64>,
    log_start: i64,
    log_end: i64,
    notes: &mut Vec<RecoveryNote>,
) -> Result<EpochCache> {
    let (mut cache, replay_from, mut changed) = match epoch_cache::read_checkpoint(dir)? {
        Some(Ok(cache)) => (cache, replay_from, false),
        found => {
            if let Some(Err(problem)) = found {
                notes.push(RecoveryNote::bad_checkpoint(format!(
                    "{}: {problem}",
                    dir.join(epoch_cache::LEADER_EPOCH_CHECKPOINT_FILE)
                        .display()
                )));
                // Rewritten even if nothing is found: the damaged file goes.
                (EpochCache::new(), Some(i64::MIN), true)
            } else {
                (EpochCache::new(), Some(i64::MIN), false)
            }
        }
    };
    if let Some(from) = replay_from {
        for seg in segments.iter().filter(|s| s.next_offset() > from) {
            for_each_batch_header(seg, |h| {
                if h.last_offset() >= from {
                    changed |= cache.assign_if_newer(h.partition_leader_epoch, h.base_offset);
                }
            })?;
        }
    }
    changed |= cache.truncate_from_end(log_end);
    changed |= cache.truncate_from_start(log_start);
    if changed {
        epoch_cache::write_checkpoint(dir, &cache)?;
    }
    Ok(cache)
}

fn log_file_len(dir: &Path, base: i64) -> u64 {
    fs::metadata(dir.join(crate::segment::file_name(base, LOG_SUFFIX))).map_or(0, |m| m.len())
}

impl Log {
    /// Opens (creating if needed) the log in `dir` and recovers it: a clean
    /// shutdown trusts the data and checks the indexes; otherwise every
    /// segment from the one holding the recovery point on is checked batch
    /// by batch and cut at the first bad batch.
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<Log> {
        Self::open_after(dir, config, now_ms, LastWriter::Unknown)
    }

    /// [`Log::open`], told what is known of the log's last writer: one that
    /// ran under this kernel leaves at most a torn tail, which is all an
    /// unclean shutdown then checks (see [`LastWriter::SameKernel`]).
    pub fn open_after(
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
        last_writer: LastWriter,
    ) -> Result<Log> {
        // A directory made here holds nothing to recover: none of its files is
        // looked for (creating thousands of partitions costs the fewest calls).
        let made = match fs::create_dir(dir) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Its parent is missing too: made now, with it.
                fs::create_dir_all(dir).map_err(Error::at(dir))?;
                true
            }
            Err(e) => return Err(Error::at(dir)(e)),
        };
        let clean = !made && dir.join(CLEAN_SHUTDOWN_FILE).exists();
        // Killed under this kernel: everything it wrote is as written, only
        // a torn tail to find (the trusted load checks the tail).
        let only_tail = !clean && last_writer == LastWriter::SameKernel;
        // An interrupted compaction swap is finished or undone first, so
        // what follows sees one consistent set of segments.
        if !made {
            cleaner_state::recover_swaps(dir)?;
        }
        let mut notes = Vec::new();
        let cleaner_checkpoint = if made {
            Ok((0, cleaner_state::NO_HORIZON))
        } else {
            cleaner_state::read_cleaner_checkpoint(dir)?
        };
        let (cleaner_first_dirty, cleaner_horizon) = match cleaner_checkpoint {
            Ok(checkpoint) => checkpoint,
            Err(problem) => {
                notes.push(RecoveryNote::bad_checkpoint(problem));
                (0, cleaner_state::NO_HORIZON)
            }
        };

        // Sweep: leftovers of interrupted writes go, stray indexes go.
        let mut bases = Vec::new();
        let mut index_files = Vec::new();
        let entries = if made {
            Vec::new()
        } else {
            fs::read_dir(dir)
                .map_err(Error::at(dir))?
                .collect::<io::Result<Vec<_>>>()
                .map_err(Error::at(dir))?
        };
        for entry in entries {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(TMP_SUFFIX) || name.ends_with(".deleted") {
                remove_if_present(&entry.path())?;
                continue;
            }
            match parse_file_name(name) {
                Some((base, LOG_SUFFIX)) => bases.push(base),
                Some((base, INDEX_SUFFIX | TIME_INDEX_SUFFIX | TXN_INDEX_SUFFIX)) => {
                    index_files.push((base, entry.path()))
                }
                _ => {}
            }
        }
        bases.sort_unstable();
        for (base, path) in index_files {
            if bases.binary_search(&base).is_err() {
                remove_if_present(&path)?;
            }
        }

        let (checkpoint_rp, checkpoint_start) = if made {
            (None, None)
        } else {
            (
                read_checkpoint(dir, RECOVERY_POINT_FILE, &mut notes)?,
                read_checkpoint(dir, LOG_START_OFFSET_FILE, &mut notes)?,
            )
        };
        // Segments from this index on are scanned batch by batch.
        let first_to_recover = if clean || only_tail {
            bases.len()
        } else {
            let rp = checkpoint_rp.unwrap_or(0);
            bases.partition_point(|b| *b <= rp).saturating_sub(1)
        };

        let seg_cfg = config.segment_config();
        let mut segments: Vec<Arc<Segment>> = Vec::new();
        let mut recovering = false;
        // Any segment recovered, or cut: what was kept is synced at the end.
        let mut recovered_any = false;
        let mut min_offset = i64::MIN;
        for (i, &base) in bases.iter().enumerate() {
            let mode = if recovering || i >= first_to_recover {
                LoadMode::Recover
            } else if only_tail && i + 1 == bases.len() {
                LoadMode::TrustedTail
            } else {
                LoadMode::Trusted
            };
            let loaded = Segment::load(dir, base, seg_cfg, mode, min_offset, now_ms)?;
            if mode != LoadMode::Recover && loaded.recovered {
                recovering = true;
            }
            recovered_any |= loaded.recovered || loaded.truncated;
            let seg = loaded.segment;
            let is_last = i + 1 == bases.len();
            if let Some(problem) = &loaded.txn_index_problem {
                notes.push(RecoveryNote {
                    kind: RecoveryKind::CutTxnIndex,
                    segment: base,
                    position: 0,
                    offset: base,
                    bytes: 0,
                    detail: problem.clone(),
                });
            }
            if let Some(t) = &loaded.truncation {
                notes.push(RecoveryNote {
                    kind: RecoveryKind::Truncated,
                    segment: base,
                    position: t.position,
                    offset: t.first_offset,
                    bytes: t.bytes,
                    detail: t.reason.clone(),
                });
            } else if loaded.rebuilt_indexes && mode != LoadMode::Recover {
                notes.push(RecoveryNote {
                    kind: RecoveryKind::RebuiltIndexes,
                    segment: base,
                    position: 0,
                    offset: base,
                    bytes: 0,
                    detail: String::new(),
                });
            }
            if loaded.truncated {
                // Everything after a torn or corrupt batch is gone.
                for &later in &bases[i + 1..] {
                    notes.push(RecoveryNote {
                        kind: RecoveryKind::DeletedSegment,
                        segment: later,
                        position: 0,
                        offset: later,
                        bytes: log_file_len(dir, later),
                        detail: format!("after the cut in segment {base}"),
                    });
                    remove_segment_files(dir, later)?;
                }
            }
            // An empty segment holds nothing, unless it is the last one and
            // its base offset (past everything before it) is the log end.
            if seg.is_empty() && (!(is_last || loaded.truncated) || base < min_offset) {
                drop(seg);
                remove_segment_files(dir, base)?;
                if loaded.truncated {
                    break;
                }
                continue;
            }
            if !(is_last || loaded.truncated) && (loaded.rebuilt_indexes || seg.index_pending()) {
                // A sealed segment: its indexes end as a roll leaves them.
                seg.seal()?;
                seg.close_index_files();
            }
            min_offset = seg.next_offset();
            segments.push(Arc::new(seg));
            if loaded.truncated {
                break;
            }
        }

        // A new log: nothing to sync or checkpoint (missing checkpoints
        // and files mean an empty log at 0 on the next open), so creating
        // many partitions costs no fsync.
        let fresh = bases.is_empty() && checkpoint_start.is_none() && checkpoint_rp.is_none();
        let mut log_start = checkpoint_start.unwrap_or(0);
        if segments.is_empty() {
            let seg = Segment::create(dir, log_start, seg_cfg)?;
            if fresh {
                seg.mark_synced();
            }
            segments.push(Arc::new(seg));
        }
        log_start = log_start.max(segments[0].base_offset());
        let last = segments.last().expect("one segment at least");
        let mut log_end = last.next_offset();
        if log_start > log_end {
            // Data the log start says exists was lost: start over there.
            notes.push(RecoveryNote {
                kind: RecoveryKind::Reset,
                segment: segments[0].base_offset(),
                position: 0,
                offset: segments[0].base_offset(),
                bytes: segments.iter().map(|s| s.size()).sum(),
                detail: format!("the log start offset {log_start} is past the log end {log_end}"),
            });
            for s in segments.drain(..) {
                s.delete_files()?;
            }
            segments.push(Arc::new(Segment::create(dir, log_start, seg_cfg)?));
            log_end = log_start;
        }

        // After an unclean shutdown, batches from the recovery point on may
        // lack their epoch in the checkpoint (it is written after the data).
        // Not after a kill under this kernel: the checkpoint is written
        // before the data it covers, so it covers every batch written.
        let replay_from = (!clean && !only_tail).then(|| checkpoint_rp.unwrap_or(0));
        let epochs = load_epoch_cache(dir, &segments, replay_from, log_start, log_end, &mut notes)?;

        let empty = segments.iter().all(|s| s.is_empty());
        let had_aborted_txns = segments.iter().any(|s| !s.txn_index().is_empty());
        // A damaged checkpoint file is rewritten, a missing one may stay so.
        let rp_file_present = dir.join(RECOVERY_POINT_FILE).exists();
        let log = Log {
            dir: dir.to_path_buf(),
            segments: RwLock::new(Arc::new(segments)),
            writer: Mutex::new(Writer {
                config,
                last_flush_ms: now_ms,
                scratch: Vec::new(),
                active_was_cut: false,
                fence: 0,
            }),
            flushing: Mutex::new(()),
            truncations: AtomicU64::new(0),
            log_start: AtomicI64::new(log_start),
            log_end: AtomicI64::new(log_end),
            recovery_point: AtomicI64::new(checkpoint_rp.unwrap_or(if empty && !rp_file_present {
                // Nothing to recover: a missing checkpoint means the same.
                log_end
            } else {
                -1
            })),
            checkpointed: AtomicI64::new(checkpoint_rp.unwrap_or(i64::MIN)),
            checkpointed_ms: AtomicI64::new(now_ms),
            closed: AtomicBool::new(false),
            cleaner_first_dirty: AtomicI64::new(cleaner_first_dirty),
            cleaner_horizon: AtomicI64::new(cleaner_horizon),
            cleaning: Mutex::new(()),
            had_aborted_txns: AtomicBool::new(had_aborted_txns),
            recovery: notes,
            epochs: RwLock::new(epochs),
        };
        // A missing log start checkpoint means the first segment's base.
        let implied_start = checkpoint_start.is_none()
            && !dir.join(LOG_START_OFFSET_FILE).exists()
            && log_start == log.segments()[0].base_offset();
        if checkpoint_start != Some(log_start) && !implied_start {
            write_checkpoint(dir, LOG_START_OFFSET_FILE, log_start)?;
        }
        if only_tail && !recovered_any {
            // The data past the recovery point is whole but maybe not on
            // disk: its segments are synced by the next flush, which moves
            // the recovery point (none is synced here, on the way to serving).
            let rp = log.recovery_point.load(Ordering::Acquire);
            for seg in log.snapshot().iter().filter(|s| s.next_offset() > rp) {
                seg.mark_dirty();
            }
        } else {
            // Whatever recovery kept is now synced and becomes the recovery point.
            let mut w = log.lock_writer();
            log.flush_locked(&mut w)?;
        }
        if clean {
            fs::remove_file(dir.join(CLEAN_SHUTDOWN_FILE))?;
            sync_dir(dir)?;
        }
        Ok(log)
    }

    // -- helpers --------------------------------------------------------------

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `change` to a copy of the epoch cache; when it changed, the
    /// checkpoint is written, then the copy is published. The caller holds
    /// the writer lock, so changes never race.
    fn update_epochs(&self, change: impl FnOnce(&mut EpochCache) -> bool) -> Result<()> {
        let mut cache = self
            .epochs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if change(&mut cache) {
            epoch_cache::write_checkpoint(&self.dir, &cache)?;
            *self.epochs.write().unwrap_or_else(|p| p.into_inner()) = cache;
        }
        Ok(())
    }

    /// Drops the epochs at or past `end` after a truncation: in memory first,
    /// where the log already is; a checkpoint that cannot be written keeps
    /// entries past the log end, which the next open drops.
    fn drop_epochs_from(&self, end: i64) -> Result<()> {
        let cache = {
            let mut epochs = self.epochs.write().unwrap_or_else(|p| p.into_inner());
            if !epochs.truncate_from_end(end) {
                return Ok(());
            }
            epochs.clone()
        };
        epoch_cache::write_checkpoint(&self.dir, &cache)
    }

    fn lock_flushing(&self) -> MutexGuard<'_, ()> {
        self.flushing.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn snapshot(&self) -> Arc<Vec<Arc<Segment>>> {
        self.segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn publish(&self, segments: Vec<Arc<Segment>>) {
        *self.segments.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(segments);
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!(
                "log {} is closed",
                self.dir.display()
            )));
        }
        Ok(())
    }

    fn active(&self) -> Arc<Segment> {
        self.snapshot()
            .last()
            .cloned()
            .expect("a log always has an active segment")
    }

    fn out_of_range(&self, offset: i64) -> Error {
        Error::OffsetOutOfRange {
            offset,
            start: self.log_start_offset(),
            end: self.log_end_offset(),
        }
    }

    /// Seals the active segment and starts a new one at `base`. An empty
    /// active segment is replaced rather than kept (or kept as it is, when
    /// it starts at `base` and nothing was ever cut from its file).
    fn roll(&self, w: &mut Writer, base: i64) -> Result<Arc<Segment>> {
        let segs = self.snapshot();
        let active = segs.last().expect("active segment");
        let mut list: Vec<Arc<Segment>> = segs.iter().cloned().collect();
        if active.is_empty() {
            if active.base_offset() == base && !w.active_was_cut {
                return Ok(active.clone());
            }
            // Not while a flush syncs it: its index sync would make the files anew.
            let _f = self.lock_flushing();
            list.pop();
            active.delete_files()?;
        } else {
            active.seal()?;
            active.close_index_files();
        }
        let seg = Arc::new(Segment::create(&self.dir, base, w.config.segment_config())?);
        list.push(seg.clone());
        self.publish(list);
        w.active_was_cut = false;
        Ok(seg)
    }

    fn time_to_roll(active: &Segment, cfg: &LogConfig, now_ms: i64) -> bool {
        !active.is_empty()
            && active
                .roll_base_ms()
                .is_some_and(|b| now_ms.saturating_sub(b) > cfg.roll_ms())
    }

    /// fdatasyncs every dirty segment, then moves the recovery point to the
    /// log end and checkpoints it, with the writer lock held (appends wait):
    /// for truncation, close and flush.messages. A flush on its own is
    /// [`Log::flush`].
    fn flush_locked(&self, _w: &mut Writer) -> Result<()> {
        let _f = self.lock_flushing();
        self.sync_and_checkpoint(None)
    }

    /// [`Log::flush_locked`]'s work; the caller holds both locks.
    /// ``lazy_now``: the time, when the file may lag (see `checkpointed`).
    fn sync_and_checkpoint(&self, lazy_now: Option<i64>) -> Result<()> {
        let end = self.log_end_offset();
        for seg in self.snapshot().iter() {
            seg.flush()?;
        }
        let lagging_allowed = lazy_now.is_some_and(|now| !self.checkpoint_due(now))
            && self.checkpointed.load(Ordering::Acquire) <= end;
        if self.checkpointed.load(Ordering::Acquire) != end && !lagging_allowed {
            self.checkpoint_recovery_point(end, lazy_now)?;
        }
        self.recovery_point.store(end, Ordering::Release);
        Ok(())
    }

    /// Writes `value` to the `recovery-point` file (`flushing` held; what
    /// it names is synced). ``now_ms``: when, if known.
    fn checkpoint_recovery_point(&self, value: i64, now_ms: Option<i64>) -> Result<()> {
        write_checkpoint(&self.dir, RECOVERY_POINT_FILE, value)?;
        self.checkpointed.store(value, Ordering::Release);
        if let Some(now) = now_ms {
            self.checkpointed_ms.store(now, Ordering::Release);
        }
        Ok(())
    }

    /// Whether a lazy checkpoint may be written at `now_ms`.
    fn checkpoint_due(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.checkpointed_ms.load(Ordering::Acquire))
            >= RECOVERY_POINT_CHECKPOINT_MS
    }

    /// A flush that lets appends go on during its fdatasyncs: the log end
    /// (`end`, and `truncations` then) was noted under the writer lock, and
    /// the recovery point moves to it only, once everything written before
    /// is synced. Segments are listed after the flushing lock is taken (what
    /// was deleted meanwhile needs no sync, and nothing is deleted while it
    /// is held). A truncation meanwhile leaves the recovery point to the
    /// truncation's own flush. ``lazy_now``: the time, when the file may
    /// lag (see `checkpointed`); None writes it now.
    fn sync_up_to(&self, end: i64, truncations: u64, lazy_now: Option<i64>) -> Result<()> {
        let _f = self.lock_flushing();
        if self.is_closed() {
            return Ok(()); // close flushed, or delete removed the files
        }
        #[cfg(test)]
        tests::in_flush();
        for seg in self.snapshot().iter() {
            seg.flush()?;
        }
        if self.truncations.load(Ordering::Acquire) == truncations
            && self.recovery_point.load(Ordering::Acquire) < end
        {
            match lazy_now {
                Some(now) if !self.checkpoint_due(now) => {}
                _ => self.checkpoint_recovery_point(end, lazy_now)?,
            }
            self.recovery_point.store(end, Ordering::Release);
        }
        Ok(())
    }

    /// Drops the first `count` segments from the list, deletes their files,
    /// and raises the log start to the new first segment.
    fn delete_oldest(&self, count: usize) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let _f = self.lock_flushing();
        let segs = self.snapshot();
        let new_first = segs[count].base_offset();
        if new_first > self.log_start_offset() {
            write_checkpoint(&self.dir, LOG_START_OFFSET_FILE, new_first)?;
            self.log_start.store(new_first, Ordering::Release);
            self.update_epochs(|c| c.truncate_from_start(new_first))?;
        }
        self.publish(segs[count..].to_vec());
        for seg in &segs[..count] {
            seg.delete_files()?;
        }
        Ok(())
    }

    // -- appends --------------------------------------------------------------

    /// Appends batches as the leader: offsets are assigned from the log end
    /// (baseOffset and partitionLeaderEpoch rewritten, CRC untouched), and
    /// with `log_append_time_ms` every batch becomes LogAppendTime.
    pub fn append(
        &self,
        batches: &[u8],
        partition_leader_epoch: i32,
        log_append_time_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        let mode = Mode::Leader {
            epoch: partition_leader_epoch,
            append_time: log_append_time_ms,
        };
        Ok(self
            .append_inner(batches, mode, now_ms, None, FlushDue::Now)?
            .0)
    }

    /// Appends batches as a follower, byte for byte as the leader wrote
    /// them (offsets, leader epochs, timestamps kept). Only their shape and
    /// CRCs are checked, and their offsets: the first batch must start at
    /// or after the log end ([`Error::UnexpectedAppendOffset`] otherwise:
    /// a stale fetch answer, or a leader whose log start is inside the
    /// batch, see [`Log::truncate_fully_and_start_at`]) and each batch
    /// after the one before (InvalidRecord otherwise). A gap is kept as
    /// it is: the leader's cleaner leaves gaps where it removed batches.
    /// The batches' leader epochs go into the epoch cache.
    pub fn append_as_follower(&self, batches: &[u8], now_ms: i64) -> Result<AppendInfo> {
        Ok(self
            .append_inner(batches, Mode::Follower, now_ms, None, FlushDue::Now)?
            .0)
    }

    /// The log's fence from now on, once the write in progress is done: a
    /// write prepared under an older value and run later (on another
    /// thread) is refused ([`Log::append_fenced`]).
    pub fn set_fence(&self, fence: u64) {
        self.lock_writer().fence = fence;
    }

    /// [`Log::append`] (`leader` is (epoch, append time)) or
    /// [`Log::append_as_follower`] (`leader` None), only while the log's
    /// fence is still `fence`. The flush that `flush.messages` asks for is
    /// left to the caller, who gets the offset it must reach (see
    /// [`Log::flush_through`]): another thread can sync while this one goes
    /// on appending to other logs.
    pub fn append_fenced(
        &self,
        batches: &[u8],
        leader: Option<(i32, Option<i64>)>,
        now_ms: i64,
        fence: u64,
    ) -> Result<(AppendInfo, Option<i64>)> {
        let mode = match leader {
            Some((epoch, append_time)) => Mode::Leader { epoch, append_time },
            None => Mode::Follower,
        };
        self.append_inner(batches, mode, now_ms, Some(fence), FlushDue::Tell)
    }

    /// Syncs everything written if the recovery point is below `end` (one
    /// flush serves the appends before it: those that asked meanwhile find
    /// it done). Appends go on during its fdatasyncs.
    pub fn flush_through(&self, end: i64, now_ms: i64) -> Result<()> {
        if self.recovery_point() >= end {
            return Ok(());
        }
        let (end, truncations) = {
            let mut w = self.lock_writer();
            self.check_open()?;
            w.last_flush_ms = now_ms;
            (
                self.log_end_offset(),
                self.truncations.load(Ordering::Acquire),
            )
        };
        self.sync_up_to(end, truncations, Some(now_ms))
    }

    fn append_inner(
        &self,
        batches: &[u8],
        mode: Mode,
        now_ms: i64,
        fence: Option<u64>,
        flush_due: FlushDue,
    ) -> Result<(AppendInfo, Option<i64>)> {
        let mut w = self.lock_writer();
        self.check_open()?;
        if let Some(fence) = fence {
            if fence != w.fence {
                return Err(Error::Fenced {
                    prepared: fence,
                    now: w.fence,
                });
            }
        }
        let max_segment = w.config.max_segment_bytes();

        // Check every batch before touching anything.
        let mut headers: Vec<(usize, BatchHeader)> = Vec::new();
        let mut pos = 0;
        while pos < batches.len() {
            let rest = &batches[pos..];
            let h = BatchHeader::parse(rest)?;
            let size = h.total_size();
            if size > rest.len() {
                return crate::corrupt!(
                    "batch at byte {pos} claims {size} bytes, {} present",
                    rest.len()
                );
            }
            check_crc(&rest[..size])?;
            if h.last_offset_delta < 0 {
                return Err(Error::InvalidRecord(format!(
                    "negative lastOffsetDelta {}",
                    h.last_offset_delta
                )));
            }
            // The leader checked its own limit; a follower takes any batch
            // a segment can hold.
            let max_batch = match mode {
                Mode::Leader { .. } => max_segment,
                Mode::Follower => MAX_SEGMENT_SIZE,
            };
            if size as u64 > max_batch {
                return Err(Error::RecordTooLarge {
                    size,
                    max: max_batch as usize,
                });
            }
            headers.push((pos, h));
            pos += size;
        }
        if headers.is_empty() {
            return Err(Error::InvalidRecord("no record batch to append".into()));
        }
        if batches.len() as u64 > MAX_SEGMENT_SIZE {
            return Err(Error::RecordTooLarge {
                size: batches.len(),
                max: MAX_SEGMENT_SIZE as usize,
            });
        }

        // A leader writes in its own epoch, never below one the log knows: an
        // append prepared before a newer leadership began (it may run on
        // another thread) must not land after that epoch's start.
        if let Mode::Leader { epoch, .. } = mode {
            if let Some(latest) = self.read_epochs().latest_epoch() {
                if epoch < latest {
                    return Err(Error::StaleLeaderEpoch { epoch, latest });
                }
            }
        }

        // Offsets.
        let log_end = self.log_end_offset();
        let append_time = match mode {
            Mode::Leader { append_time, .. } => append_time,
            Mode::Follower => None,
        };
        let mut next = log_end;
        let mut infos = Vec::with_capacity(headers.len());
        let mut records: u64 = 0;
        let mut producer_batches = Vec::new();
        for (i, (start, h)) in headers.iter().enumerate() {
            let base = match mode {
                Mode::Leader { .. } => next,
                Mode::Follower if i == 0 && h.base_offset < next => {
                    return Err(Error::UnexpectedAppendOffset {
                        first_offset: h.base_offset,
                        last_offset: h.base_offset.saturating_add(h.last_offset_delta as i64),
                        log_end: next,
                    });
                }
                Mode::Follower => {
                    if h.base_offset < next {
                        return Err(Error::InvalidRecord(format!(
                            "offsets out of order: batch base offset {} is below {next}, \
                             the offset after the batch before it",
                            h.base_offset
                        )));
                    }
                    h.base_offset
                }
            };
            let Some(last) = base.checked_add(h.last_offset_delta as i64) else {
                return Err(Error::InvalidRecord("offset overflow".into()));
            };
            if h.producer_id >= 0 {
                let (control_type, coordinator_epoch) = if h.is_control() {
                    let batch = &batches[*start..start + h.total_size()];
                    end_txn_marker(batch, MARKER_MAX_DECOMPRESSED).unwrap_or((-1, -1))
                } else {
                    (-1, -1)
                };
                producer_batches.push(ProducerBatch {
                    base_offset: base,
                    last_offset: last,
                    max_timestamp: append_time.unwrap_or(h.max_timestamp),
                    producer_id: h.producer_id,
                    producer_epoch: h.producer_epoch,
                    base_sequence: h.base_sequence,
                    is_transactional: h.is_transactional(),
                    is_control: h.is_control(),
                    control_type,
                    coordinator_epoch,
                });
            }
            infos.push(BatchInfo {
                base_offset: base,
                last_offset: last,
                max_timestamp: append_time.unwrap_or(h.max_timestamp),
                size: h.total_size(),
            });
            records += h.records_count.max(0) as u64;
            next = last + 1;
        }
        let first_offset = infos[0].base_offset;
        let last_offset = next - 1;

        // Roll first if this append does not fit the active segment.
        let mut active = self.active();
        let rel_overflow = |seg: &Segment| last_offset - seg.base_offset() > u32::MAX as i64;
        let must_roll = if w.active_was_cut {
            true
        } else if active.is_empty() {
            rel_overflow(&active) || first_offset < active.base_offset()
        } else {
            active.size() + batches.len() as u64 > max_segment
                || Self::time_to_roll(&active, &w.config, now_ms)
                || active.indexes_full()
                || rel_overflow(&active)
        };
        if must_roll {
            active = self.roll(&mut w, first_offset)?;
        }

        // Epochs first: a crash before the data is written leaves entries
        // past the log end, which the next open drops; the other way round
        // it would leave data of an epoch the cache does not know.
        // Most appends are in the latest epoch: checked without a copy.
        let epochs = || {
            headers.iter().zip(&infos).map(|((_, h), info)| match mode {
                Mode::Leader { epoch, .. } => (epoch, info.base_offset),
                Mode::Follower => (h.partition_leader_epoch, info.base_offset),
            })
        };
        let changes = {
            let cache = self.read_epochs();
            epochs().any(|(e, o)| cache.assign_changes(e, o))
        };
        if changes {
            self.update_epochs(|c| {
                epochs().fold(false, |changed, (e, o)| c.assign(e, o) | changed)
            })?;
        }
        let last_leader_epoch = epochs().next_back().map_or(-1, |(e, _)| e);

        // Write: followers' bytes go as they are; a leader's go with
        // rewritten headers, as header/body iovecs in one pwritev.
        match mode {
            Mode::Follower => active.append_bytes(batches, &infos, now_ms)?,
            Mode::Leader { epoch, append_time } => {
                let mut new_headers = Vec::with_capacity(headers.len());
                for ((start, h), info) in headers.iter().zip(&infos) {
                    let body = &batches[start + HEADER_SIZE..start + h.total_size()];
                    let mut hdr = [0u8; HEADER_SIZE];
                    hdr.copy_from_slice(&batches[*start..start + HEADER_SIZE]);
                    hdr[BASE_OFFSET..BASE_OFFSET + 8]
                        .copy_from_slice(&info.base_offset.to_be_bytes());
                    hdr[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
                        .copy_from_slice(&epoch.to_be_bytes());
                    if let Some(t) = append_time {
                        // LogAppendTime: type bit + maxTimestamp, as the
                        // records module's set_max_timestamp_log_append does,
                        // but on the header copy (the body is never copied).
                        // The CRC is patched from the XOR of the changed
                        // header bytes (CRC-32C is linear), not recomputed.
                        let attrs = h.attributes | TIMESTAMP_TYPE_MASK;
                        hdr[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attrs.to_be_bytes());
                        hdr[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&t.to_be_bytes());
                        let old = &batches[start + ATTRIBUTES..start + HEADER_SIZE];
                        let mut delta = [0u8; HEADER_SIZE - ATTRIBUTES];
                        for (d, (a, b)) in delta.iter_mut().zip(old.iter().zip(&hdr[ATTRIBUTES..]))
                        {
                            *d = a ^ b;
                        }
                        let crc = h.crc ^ crc32c_delta(&delta, body.len());
                        hdr[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
                    }
                    new_headers.push(hdr);
                }
                if headers.len() <= MAX_IOV_BATCHES {
                    let mut iov = Vec::with_capacity(headers.len() * 2);
                    for ((start, h), hdr) in headers.iter().zip(&new_headers) {
                        iov.push(IoSlice::new(hdr));
                        iov.push(IoSlice::new(
                            &batches[start + HEADER_SIZE..start + h.total_size()],
                        ));
                    }
                    active.append(&mut iov, &infos, now_ms)?;
                } else {
                    let mut buf = std::mem::take(&mut w.scratch);
                    buf.clear();
                    for ((start, h), hdr) in headers.iter().zip(&new_headers) {
                        buf.extend_from_slice(hdr);
                        buf.extend_from_slice(
                            &batches[start + HEADER_SIZE..start + h.total_size()],
                        );
                    }
                    let r = active.append_bytes(&buf, &infos, now_ms);
                    w.scratch = buf;
                    r?;
                }
            }
        }
        self.log_end.store(next, Ordering::Release);

        let (mut max_ts, mut offset_of_max) = (i64::MIN, last_offset);
        for info in &infos {
            if info.max_timestamp > max_ts {
                max_ts = info.max_timestamp;
                offset_of_max = info.last_offset;
            }
        }
        if append_time.is_some() {
            offset_of_max = first_offset;
        }
        let info = AppendInfo {
            first_offset,
            last_offset,
            max_timestamp: max_ts,
            offset_of_max_timestamp: offset_of_max,
            log_append_time: append_time.unwrap_or(-1),
            batches: infos.len(),
            records,
            bytes: batches.len(),
            last_leader_epoch,
            producer_batches,
        };

        let unflushed = next - self.recovery_point.load(Ordering::Acquire).max(0);
        if w.config.flush_messages != u64::MAX && unflushed as u64 >= w.config.flush_messages {
            match flush_due {
                FlushDue::Now => {
                    let _f = self.lock_flushing();
                    self.sync_and_checkpoint(Some(now_ms))?;
                    w.last_flush_ms = now_ms;
                }
                FlushDue::Tell => return Ok((info, Some(next))),
            }
        }
        Ok((info, None))
    }

    // -- reads ----------------------------------------------------------------

    /// Whole batches from the one holding `offset`, up to `max_bytes`
    /// (the first batch whole regardless with `min_one_batch`), none whose
    /// base offset is >= `max_offset`. None when there is nothing to return.
    ///
    /// A segment that holds from `offset` on only bare empty batches (the
    /// end pins a cleaning pass leaves where it removed every record) is
    /// read past, as Kafka reads past a segment its cleaner emptied: the
    /// answer is the next segment's batches, or the pins themselves when
    /// nothing readable follows (so the reader still moves past them). A run
    /// of answers without a record is what a consumer cannot tell from a
    /// batch too large for its fetch size (librdkafka doubles that size on
    /// each and reports MSG_SIZE_TOO_LARGE after ten).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: Option<i64>,
        min_one_batch: bool,
    ) -> Result<Option<LogSlice>> {
        let start = self.log_start_offset();
        let end = self.log_end_offset();
        if offset < start || offset > end {
            return Err(Error::OffsetOutOfRange { offset, start, end });
        }
        if offset == end || max_offset.is_some_and(|m| offset >= m) {
            return Ok(None);
        }
        let segs = self.snapshot();
        let Some(first) = segs.first() else {
            return Ok(None);
        };
        if offset < first.base_offset() {
            // Retention raced this read.
            return Err(self.out_of_range(offset));
        }
        let i = segs
            .partition_point(|s| s.base_offset() <= offset)
            .saturating_sub(1);
        // The first run of end pins read past, for when nothing follows.
        let mut pins: Option<LogSlice> = None;
        for seg in &segs[i..] {
            let limit = seg.size();
            let Some((pos, h)) = seg.find_batch(offset, limit)? else {
                continue;
            };
            if max_offset.is_some_and(|m| h.base_offset >= m) {
                return Ok(pins);
            }
            let mut end_at = limit.min(pos.saturating_add(max_bytes as u64));
            if let Some(m) = max_offset {
                if m < seg.next_offset() {
                    end_at = end_at.min(seg.position_of_first_batch_from(m, pos, limit)?);
                }
            }
            let mut stop = seg.last_boundary_within(pos, end_at, limit)?;
            if stop == pos {
                if !min_one_batch {
                    return Ok(pins);
                }
                stop = pos + h.total_size() as u64;
            }
            let slice = LogSlice {
                segment: seg.clone(),
                file: seg.file()?,
                position: pos,
                length: (stop - pos) as usize,
                first_offset: h.base_offset,
            };
            if h.is_bare_empty() && seg.only_bare_empty_from(pos + h.total_size() as u64, limit)? {
                pins.get_or_insert(slice);
                continue;
            }
            return Ok(Some(slice));
        }
        Ok(pins)
    }

    /// The first record with timestamp >= `ts` at or after the log start,
    /// as (offset, timestamp).
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>> {
        let start = self.log_start_offset();
        let segs = self.snapshot();
        let i = segs
            .partition_point(|s| s.base_offset() <= start)
            .saturating_sub(1);
        for seg in segs.iter().skip(i) {
            if let Some(found) = seg.find_timestamp(ts, start)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// (max timestamp, offset of the first record carrying it) over the
    /// whole log, for ListOffsets MAX_TIMESTAMP; (-1, -1) when empty.
    pub fn max_timestamp_and_offset(&self) -> (i64, i64) {
        let segs = self.snapshot();
        let Some(seg) = segs.iter().filter(|s| !s.is_empty()).reduce(|a, b| {
            if b.max_timestamp() > a.max_timestamp() {
                b
            } else {
                a
            }
        }) else {
            return (-1, -1);
        };
        let max_ts = seg.max_timestamp();
        if max_ts < 0 {
            return (-1, -1);
        }
        match seg.find_timestamp(max_ts, self.log_start_offset()) {
            Ok(Some((offset, ts))) => (ts, offset),
            _ => (max_ts, seg.next_offset() - 1),
        }
    }

    // -- removing data --------------------------------------------------------

    /// Drops every offset >= `offset` (a batch holding `offset` goes whole),
    /// indexes and epoch cache included; the log end becomes `offset` (the
    /// cut batch's base offset when `offset` is inside one). `offset` may
    /// not be below the log start (OffsetOutOfRange: a follower that has to
    /// go further back starts over with [`Log::truncate_fully_and_start_at`]);
    /// truncating to the log start empties the log.
    ///
    /// At or past the log end no record goes, but an epoch starting at the
    /// log end still does: a replica that became leader noted its epoch's
    /// start there (`maybe_assign_epoch_start_offset`) and lost the
    /// leadership before it wrote a record; kept, that epoch would be the
    /// last one it fetches with, and a leader that never had it would answer
    /// every fetch with a divergence that truncates nothing.
    pub fn truncate_to(&self, offset: i64) -> Result<()> {
        let mut w = self.lock_writer();
        self.check_open()?;
        if offset < self.log_start_offset() {
            return Err(self.out_of_range(offset));
        }
        if offset >= self.log_end_offset() {
            let end = self.log_end_offset();
            return self.update_epochs(|c| c.truncate_from_end(end));
        }
        let _f = self.lock_flushing();
        self.truncations.fetch_add(1, Ordering::AcqRel);
        self.lower_cleaner_checkpoint(offset)?;
        let segs = self.snapshot();
        let keep = segs.partition_point(|s| s.base_offset() < offset);
        if keep == 0 {
            // `offset` is the log start and the first segment's base.
            self.start_empty_at(&mut w, offset)?;
        } else {
            let survivor = segs[keep - 1].clone();
            // Shrink the list first so readers stop finding the dropped data.
            self.log_end.store(offset, Ordering::Release);
            self.publish(segs[..keep].to_vec());
            for s in &segs[keep..] {
                s.delete_files()?;
            }
            // The log end follows the survivor whatever happens: cut, or not
            // (an error leaves it as it was).
            let cut = survivor.truncate_to(offset);
            let new_end = match cut {
                Ok(Some(base)) if base < offset => base.max(self.log_start_offset()),
                Ok(_) => offset,
                Err(_) => survivor.next_offset(),
            };
            self.log_end.store(new_end, Ordering::Release);
            if cut?.is_some() {
                w.active_was_cut = true;
            }
            self.drop_epochs_from(new_end)?;
        }
        // Make the cut durable and move the recovery point back to the end.
        self.sync_and_checkpoint(None)
    }

    /// Empties the log and starts it again at `offset` (any offset, below,
    /// inside or past the old range): log start, log end and recovery point
    /// become `offset` and the epoch cache is cleared. A follower does this
    /// when its fetch offset is out of the leader's range, or when its first
    /// fetch answers with a batch that starts before its (empty) log's end.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<()> {
        let mut w = self.lock_writer();
        self.check_open()?;
        if offset < 0 {
            return Err(Error::InvalidArgument(format!(
                "cannot start a log at {offset}"
            )));
        }
        let _f = self.lock_flushing();
        self.truncations.fetch_add(1, Ordering::AcqRel);
        self.lower_cleaner_checkpoint(offset)?;
        self.start_empty_at(&mut w, offset)?;
        self.sync_and_checkpoint(None)
    }

    /// Data the cleaner called clean at or after `offset` is about to go
    /// and may be replaced by new appends.
    fn lower_cleaner_checkpoint(&self, offset: i64) -> Result<()> {
        if self.cleaner_first_dirty.load(Ordering::Acquire) > offset {
            self.cleaner_first_dirty.store(offset, Ordering::Release);
            cleaner_state::write_cleaner_checkpoint(
                &self.dir,
                offset,
                self.cleaner_horizon.load(Ordering::Acquire),
            )?;
        }
        Ok(())
    }

    /// Replaces every segment by one empty segment at `offset`. Both locks
    /// are held. The log start checkpoint goes first: a crash after it
    /// reopens as the same empty log at `offset` (or keeps the old data when
    /// `offset` is below it, as if nothing happened).
    fn start_empty_at(&self, w: &mut Writer, offset: i64) -> Result<()> {
        write_checkpoint(&self.dir, LOG_START_OFFSET_FILE, offset)?;
        self.update_epochs(|c| c.clear())?;
        let segs = self.snapshot();
        for s in segs.iter() {
            s.delete_files()?;
        }
        let seg = Arc::new(Segment::create(
            &self.dir,
            offset,
            w.config.segment_config(),
        )?);
        self.publish(vec![seg]);
        w.active_was_cut = false;
        self.log_start.store(offset, Ordering::Release);
        self.log_end.store(offset, Ordering::Release);
        Ok(())
    }

    /// DeleteRecords: raises the log start to `offset` (<= log end; the
    /// caller checks the high watermark) and deletes the segments wholly
    /// below it. Returns the new log start.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64> {
        let _w = self.lock_writer();
        self.check_open()?;
        if offset > self.log_end_offset() || offset < 0 {
            return Err(self.out_of_range(offset));
        }
        if offset <= self.log_start_offset() {
            return Ok(self.log_start_offset());
        }
        write_checkpoint(&self.dir, LOG_START_OFFSET_FILE, offset)?;
        self.log_start.store(offset, Ordering::Release);
        self.update_epochs(|c| c.truncate_from_start(offset))?;
        let segs = self.snapshot();
        let whole = segs
            .iter()
            .skip(1)
            .take_while(|s| s.base_offset() <= offset)
            .count();
        self.delete_oldest(whole)?;
        Ok(self.log_start_offset())
    }

    /// retention.ms (by each segment's max timestamp, oldest first; an
    /// expired non-empty active segment is rolled first), retention.bytes
    /// (by total size, never the active segment), and segments wholly below
    /// the log start. Returns how many segments were deleted.
    pub fn apply_retention(&self, now_ms: i64) -> Result<usize> {
        self.apply_retention_below(now_ms, None)
    }

    /// [`Log::apply_retention`], deleting only segments that end at or below
    /// `max_offset` (a replica's high watermark: records above it may still be
    /// needed by followers or truncated, and are never deleted by retention).
    pub fn apply_retention_below(&self, now_ms: i64, max_offset: Option<i64>) -> Result<usize> {
        let mut w = self.lock_writer();
        self.check_open()?;
        let segs = self.snapshot();
        let n = segs.len();
        let start = self.log_start_offset();
        let mut count = segs
            .iter()
            .skip(1)
            .take_while(|s| s.base_offset() <= start)
            .count();
        // A compact-only log keeps everything the cleaner leaves.
        if w.config.retention_ms >= 0 && w.config.cleanup_delete {
            while count < n {
                let s = &segs[count];
                let expired = !s.is_empty()
                    && now_ms.saturating_sub(s.max_timestamp()) > w.config.retention_ms;
                if !expired {
                    break;
                }
                count += 1;
            }
        }
        if w.config.retention_bytes >= 0 && w.config.cleanup_delete {
            let mut excess = segs[count.min(n)..]
                .iter()
                .map(|s| s.size() as i64)
                .sum::<i64>()
                - w.config.retention_bytes;
            while count + 1 < n && excess - segs[count].size() as i64 >= 0 {
                excess -= segs[count].size() as i64;
                count += 1;
            }
        }
        if let Some(bound) = max_offset {
            // A segment ends where the next begins (the active one at the log end).
            let end_of = |i: usize| {
                if i + 1 < n {
                    segs[i + 1].base_offset()
                } else {
                    self.log_end_offset()
                }
            };
            count = (0..count).take_while(|&i| end_of(i) <= bound).count();
        }
        if count == n {
            // The active segment expired too: roll so it can go.
            self.roll(&mut w, self.log_end_offset())?;
        }
        self.delete_oldest(count)?;
        Ok(count)
    }

    // -- rolling and flushing -------------------------------------------------

    /// Rolls the active segment when segment.ms has passed (idle logs).
    pub fn maybe_roll(&self, now_ms: i64) -> Result<()> {
        let mut w = self.lock_writer();
        self.check_open()?;
        let active = self.active();
        if Self::time_to_roll(&active, &w.config, now_ms) {
            self.roll(&mut w, self.log_end_offset())?;
        }
        Ok(())
    }

    /// Flushes when flush.ms has passed since the last flush and there is
    /// something to flush. Returns whether it flushed. Writes the
    /// `recovery-point` file if it lags (see `checkpointed`).
    pub fn maybe_flush(&self, now_ms: i64) -> Result<bool> {
        let (end, truncations) = {
            let mut w = self.lock_writer();
            self.check_open()?;
            if w.config.flush_ms == i64::MAX
                || now_ms.saturating_sub(w.last_flush_ms) < w.config.flush_ms
            {
                drop(w);
                self.checkpoint_if_lagging(now_ms)?;
                return Ok(false);
            }
            w.last_flush_ms = now_ms;
            if self.recovery_point() == self.log_end_offset() {
                drop(w);
                self.checkpoint_if_lagging(now_ms)?;
                return Ok(false);
            }
            (
                self.log_end_offset(),
                self.truncations.load(Ordering::Acquire),
            )
        };
        self.sync_up_to(end, truncations, None)?;
        Ok(true)
    }

    /// Writes the recovery point the file lags behind, once it may.
    fn checkpoint_if_lagging(&self, now_ms: i64) -> Result<()> {
        if self.checkpointed.load(Ordering::Acquire) == self.recovery_point()
            || !self.checkpoint_due(now_ms)
        {
            return Ok(());
        }
        let _f = self.lock_flushing();
        if self.is_closed() {
            return Ok(());
        }
        let rp = self.recovery_point();
        if rp >= 0 && self.checkpointed.load(Ordering::Acquire) != rp {
            self.checkpoint_recovery_point(rp, Some(now_ms))?;
        }
        Ok(())
    }

    /// fdatasync of everything written; advances the recovery point. Appends
    /// are not held up by its fdatasyncs.
    pub fn flush(&self) -> Result<()> {
        let (end, truncations) = {
            let _w = self.lock_writer();
            self.check_open()?;
            (
                self.log_end_offset(),
                self.truncations.load(Ordering::Acquire),
            )
        };
        self.sync_up_to(end, truncations, None)
    }

    /// Flushes, seals the active segment's indexes and leaves the
    /// clean-shutdown marker. Later writes fail; reads still work.
    pub fn close(&self) -> Result<()> {
        let mut w = self.lock_writer();
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.active().seal()?;
        self.flush_locked(&mut w)?;
        for seg in self.snapshot().iter() {
            seg.close_index_files();
        }
        // An empty marker: the directory sync makes its existence durable.
        File::create(self.dir.join(CLEAN_SHUTDOWN_FILE))?;
        sync_dir(&self.dir)?;
        self.closed.store(true, Ordering::Release);
        Ok(())
    }

    /// Removes the whole partition directory.
    pub fn delete(&self) -> Result<()> {
        let _w = self.lock_writer();
        let _f = self.lock_flushing();
        self.closed.store(true, Ordering::Release);
        for seg in self.snapshot().iter() {
            seg.close_index_files();
        }
        match fs::remove_dir_all(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub fn set_config(&self, config: LogConfig) {
        let mut w = self.lock_writer();
        self.active()
            .set_index_interval(config.index_interval_bytes);
        w.config = config;
    }

    pub fn config(&self) -> LogConfig {
        self.lock_writer().config.clone()
    }

    // -- for the log cleaner ---------------------------------------------------

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Replaces the run of segments `old` (each with the size it had when
    /// it was cleaned) by `new`, under the writer lock. Returns false,
    /// touching nothing, when the log is closed or the run changed meanwhile
    /// (retention, truncation or DeleteRecords got there first). Otherwise
    /// `commit` makes the swap durable, the list is published, the old files
    /// are deleted and `finish` renames the new files into place; readers
    /// holding the old segments keep reading them.
    pub(crate) fn swap_segments(
        &self,
        old: &[(Arc<Segment>, u64)],
        new: Arc<Segment>,
        commit: impl FnOnce() -> Result<()>,
        finish: impl FnOnce() -> Result<()>,
    ) -> Result<bool> {
        let _w = self.lock_writer();
        let _f = self.lock_flushing();
        if self.is_closed() || old.is_empty() {
            return Ok(false);
        }
        let segs = self.snapshot();
        let Some(at) = segs.iter().position(|s| Arc::ptr_eq(s, &old[0].0)) else {
            return Ok(false);
        };
        // The active segment is never part of a run.
        if at + old.len() >= segs.len() {
            return Ok(false);
        }
        let unchanged = old
            .iter()
            .zip(&segs[at..at + old.len()])
            .all(|((o, size), s)| Arc::ptr_eq(o, s) && s.size() == *size);
        if !unchanged {
            return Ok(false);
        }
        commit()?;
        let mut list = Vec::with_capacity(segs.len() + 1 - old.len());
        list.extend_from_slice(&segs[..at]);
        list.push(new.clone());
        list.extend_from_slice(&segs[at + old.len()..]);
        self.publish(list);
        for (seg, _) in old {
            seg.delete_files()?;
        }
        finish()?;
        new.unpin_file();
        Ok(true)
    }

    /// Records the cleaner's progress (never past the log end, which a
    /// truncation may have lowered meanwhile) and persists it.
    pub(crate) fn store_cleaner_checkpoint(&self, first_dirty: i64, horizon: i64) -> Result<()> {
        let _w = self.lock_writer();
        let first_dirty = first_dirty.min(self.log_end_offset());
        cleaner_state::write_cleaner_checkpoint(&self.dir, first_dirty, horizon)?;
        self.cleaner_first_dirty
            .store(first_dirty, Ordering::Release);
        self.cleaner_horizon.store(horizon, Ordering::Release);
        Ok(())
    }

    // -- facts ------------------------------------------------------------------

    pub fn log_start_offset(&self) -> i64 {
        self.log_start.load(Ordering::Acquire)
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end.load(Ordering::Acquire)
    }
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point.load(Ordering::Acquire)
    }
    pub fn size_bytes(&self) -> u64 {
        self.snapshot().iter().map(|s| s.size()).sum()
    }
    pub fn segment_count(&self) -> usize {
        self.snapshot().len()
    }
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.snapshot().iter().map(|s| s.base_offset()).collect()
    }
    /// The base offset of the segment appends go to (it changes when the log rolls).
    pub fn active_segment_base_offset(&self) -> i64 {
        self.active().base_offset()
    }
    pub fn segments(&self) -> Vec<Arc<Segment>> {
        self.snapshot().to_vec()
    }
    pub fn dir(&self) -> PathBuf {
        self.dir.clone()
    }
    /// What recovery did when the log was opened.
    pub fn recovery_notes(&self) -> &[RecoveryNote] {
        &self.recovery
    }

    // -- aborted transactions ---------------------------------------------------

    /// Records an aborted transaction in the index of the segment that holds
    /// its marker (`txn.last_offset`, which must be in the log). An entry for
    /// the same marker already there stays as it is. Returns whether it added.
    pub fn add_aborted_txn(&self, txn: AbortedTxn) -> Result<bool> {
        let _w = self.lock_writer();
        self.check_open()?;
        let segs = self.snapshot();
        let at = segs.partition_point(|s| s.base_offset() <= txn.last_offset);
        let seg = match at.checked_sub(1).map(|i| &segs[i]) {
            Some(seg) if txn.last_offset < seg.next_offset() => seg,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "no segment holds marker offset {} (log [{}, {}))",
                    txn.last_offset,
                    self.log_start_offset(),
                    self.log_end_offset()
                )))
            }
        };
        let added = seg.txn_index().add(txn)?;
        self.had_aborted_txns.store(true, Ordering::Release);
        Ok(added)
    }

    /// The aborted transactions a read_committed reader from `start` needs
    /// up to `upper` (Kafka's `collectAbortedTransactions`): those whose
    /// marker is at or after `start` and whose first offset is below `upper`,
    /// searched from the segment holding `start` on, in marker order.
    pub fn collect_aborted_txns(&self, start: i64, upper: i64) -> Vec<AbortedTxn> {
        if !self.had_aborted_txns.load(Ordering::Acquire) {
            return Vec::new();
        }
        let segs = self.snapshot();
        let from = segs
            .partition_point(|s| s.base_offset() <= start)
            .saturating_sub(1);
        let mut found = Collected::default();
        for seg in &segs[from..] {
            seg.txn_index().collect(start, upper, &mut found);
            if found.complete {
                break;
            }
        }
        found.txns
    }

    /// [`Log::collect_aborted_txns`] for a read of `slice` from `start`: up
    /// to the offset after the slice's last batch.
    pub fn aborted_txns_for_slice(&self, start: i64, slice: &LogSlice) -> Result<Vec<AbortedTxn>> {
        if !self.had_aborted_txns.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
        let seg = &slice.segment;
        let end = slice.position + slice.length as u64;
        let size = seg.size();
        let upper = if end < size {
            seg.header_at(end, size)?.base_offset
        } else {
            seg.next_offset()
        };
        Ok(self.collect_aborted_txns(start, upper))
    }

    /// The batches that carry a producer id from the one holding `from` on,
    /// in log order, for rebuilding producer state: at most `max_batches`
    /// of them, and the offset to go on from (the log end when done). Only
    /// headers are read, and a marker's one record.
    pub fn producer_batches_from(
        &self,
        from: i64,
        max_batches: usize,
    ) -> Result<(Vec<ProducerBatch>, i64)> {
        let segs = self.snapshot();
        let end = self.log_end_offset();
        let first = segs
            .partition_point(|s| s.base_offset() <= from)
            .saturating_sub(1);
        let mut out = Vec::new();
        let mut next = from;
        for seg in &segs[first..] {
            let limit = seg.size();
            let Some((start, _)) = seg.find_batch(next, limit)? else {
                continue;
            };
            let file = seg.file()?;
            let mut scanner = Scanner::new(&file, limit);
            let mut pos = start;
            while pos < limit {
                if out.len() >= max_batches {
                    return Ok((out, next));
                }
                let Some(bytes) = scanner.get(pos, HEADER_SIZE)? else {
                    return crate::corrupt!(
                        "segment {}: batch header at {pos} runs past the end",
                        seg.base_offset()
                    );
                };
                let h = BatchHeader::parse(bytes)?;
                let size = h.total_size();
                if h.producer_id >= 0 && h.last_offset() >= from {
                    let (control_type, coordinator_epoch) = if h.is_control() {
                        let Some(batch) = scanner.get(pos, size)? else {
                            return crate::corrupt!(
                                "segment {}: batch at {pos} runs past the end",
                                seg.base_offset()
                            );
                        };
                        end_txn_marker(batch, MARKER_MAX_DECOMPRESSED).unwrap_or((-1, -1))
                    } else {
                        (-1, -1)
                    };
                    out.push(ProducerBatch {
                        base_offset: h.base_offset,
                        last_offset: h.last_offset(),
                        max_timestamp: h.max_timestamp,
                        producer_id: h.producer_id,
                        producer_epoch: h.producer_epoch,
                        base_sequence: h.base_sequence,
                        is_transactional: h.is_transactional(),
                        is_control: h.is_control(),
                        control_type,
                        coordinator_epoch,
                    });
                }
                next = next.max(h.last_offset() + 1);
                pos += size as u64;
            }
        }
        Ok((out, end.max(next)))
    }

    /// fsync of every transaction index with entries not yet synced (before a
    /// producer-state snapshot that counts on them).
    pub fn sync_txn_indexes(&self) -> Result<()> {
        for seg in self.snapshot().iter() {
            seg.txn_index().flush()?;
        }
        Ok(())
    }

    /// Every aborted transaction of the log, in marker order (tools, tests).
    pub fn aborted_txns(&self) -> Vec<AbortedTxn> {
        self.snapshot()
            .iter()
            .flat_map(|s| s.txn_index().entries())
            .collect()
    }

    // -- leader epochs ----------------------------------------------------------

    fn read_epochs(&self) -> std::sync::RwLockReadGuard<'_, EpochCache> {
        self.epochs.read().unwrap_or_else(|p| p.into_inner())
    }

    /// OffsetForLeaderEpoch for `epoch`: (the largest epoch <= it, where
    /// that epoch's data ends); see [`EpochCache::end_offset_for`].
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let cache = self.read_epochs();
        cache.end_offset_for(epoch, self.log_end_offset())
    }

    /// Notes that `epoch` starts at `start_offset` (<= the log end), as a
    /// new leader does at its log end before it writes anything, so
    /// followers asking for the previous epoch learn where it ended.
    pub fn maybe_assign_epoch_start_offset(&self, epoch: i32, start_offset: i64) -> Result<()> {
        let _w = self.lock_writer();
        self.check_open()?;
        if epoch < 0
            || start_offset < self.log_start_offset()
            || start_offset > self.log_end_offset()
        {
            return Err(Error::InvalidArgument(format!(
                "epoch {epoch} cannot start at {start_offset} in [{}, {}]",
                self.log_start_offset(),
                self.log_end_offset()
            )));
        }
        self.update_epochs(|c| c.assign(epoch, start_offset))
    }

    /// A new leader's first act: `epoch` starts at the log end as it is
    /// once every append in progress is written (the writer lock orders it
    /// after them), when the log holds anything. Returns that log end.
    pub fn start_epoch_at_log_end(&self, epoch: i32) -> Result<i64> {
        let _w = self.lock_writer();
        self.check_open()?;
        let end = self.log_end_offset();
        if epoch >= 0 && end > self.log_start_offset() {
            self.update_epochs(|c| c.assign(epoch, end))?;
        }
        Ok(end)
    }

    /// The latest leader epoch the log knows, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.read_epochs().latest_epoch()
    }

    /// The epoch cache's entries, oldest first.
    pub fn epoch_entries(&self) -> Vec<EpochEntry> {
        self.read_epochs().entries().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compression::Codec;
    use crate::records::{BatchBuilder, NO_HEADERS};
    use std::sync::mpsc;
    use std::thread;
    use std::time::Duration;

    type Hook = Arc<dyn Fn() + Send + Sync>;

    /// Runs in [`Log::sync_up_to`] before its fdatasyncs, for the log whose
    /// directory a test registered (tests run in parallel).
    static HOOKS: Mutex<Vec<(PathBuf, Hook)>> = Mutex::new(Vec::new());

    thread_local! {
        static FLUSHING_DIR: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
    }

    pub(super) fn in_flush() {
        let dir = FLUSHING_DIR.with(|d| d.borrow().clone());
        let hook = HOOKS
            .lock()
            .unwrap()
            .iter()
            .find(|(d, _)| Some(d) == dir.as_ref())
            .map(|(_, h)| h.clone());
        if let Some(h) = hook {
            h();
        }
    }

    fn batch(n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(Codec::None, 0, 1_700_000_000_000);
        for i in 0..n {
            let value = format!("v{i}");
            b.push(
                1_700_000_000_000,
                Some(&b"k"[..]),
                Some(value.as_bytes()),
                NO_HEADERS,
            );
        }
        b.build().unwrap()
    }

    /// A flush in a thread that marks which log it flushes (for `in_flush`).
    fn flush_in_thread(log: &Arc<Log>) -> thread::JoinHandle<Result<()>> {
        let log = log.clone();
        thread::spawn(move || {
            FLUSHING_DIR.with(|d| *d.borrow_mut() = Some(log.dir()));
            log.flush()
        })
    }

    #[test]
    fn appends_go_on_while_a_flush_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Log::open(dir.path(), LogConfig::default(), 0).unwrap());
        log.append(&batch(3), 0, None, 0).unwrap();
        let (entered_tx, entered) = mpsc::channel::<()>();
        let (release, release_rx) = mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let entered_tx = Mutex::new(entered_tx);
        HOOKS.lock().unwrap().push((
            log.dir(),
            Arc::new(move || {
                entered_tx.lock().unwrap().send(()).unwrap();
                let _ = release_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(30));
            }),
        ));
        let flush = flush_in_thread(&log);
        entered.recv_timeout(Duration::from_secs(10)).unwrap();

        // The flush is under way (parked before its fdatasyncs): an append
        // must not wait for it.
        let appender = {
            let log = log.clone();
            let (done_tx, done) = mpsc::channel();
            thread::spawn(move || {
                done_tx
                    .send(log.append(&batch(2), 0, None, 0).map(|i| i.last_offset))
                    .unwrap()
            });
            done
        };
        let appended = appender.recv_timeout(Duration::from_secs(10));
        release.send(()).unwrap();
        assert_eq!(appended.expect("an append waited for a flush").unwrap(), 4);
        flush.join().unwrap().unwrap();
        // The recovery point moved only to what was written before the flush began.
        assert_eq!(log.recovery_point(), 3);
        assert_eq!(log.log_end_offset(), 5);
        HOOKS.lock().unwrap().retain(|(d, _)| *d != log.dir());
        log.flush().unwrap();
        assert_eq!(log.recovery_point(), 5);
        log.close().unwrap();
    }

    #[test]
    fn flushes_beside_appends_truncations_and_retention() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LogConfig {
            segment_bytes: 4096,
            ..LogConfig::default()
        };
        let log = Arc::new(Log::open(dir.path(), cfg, 0).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let flusher = {
            let (log, stop) = (log.clone(), stop.clone());
            thread::spawn(move || {
                let mut flushes = 0;
                while !stop.load(Ordering::Acquire) {
                    log.flush().unwrap();
                    assert!(log.recovery_point() <= log.log_end_offset());
                    flushes += 1;
                }
                flushes
            })
        };
        let one = batch(4);
        for i in 0..1500 {
            log.append(&one, 0, None, 0).unwrap();
            if i % 300 == 299 {
                log.truncate_to(log.log_end_offset() - 6).unwrap();
                assert_eq!(log.recovery_point(), log.log_end_offset());
            }
            if i % 500 == 499 {
                log.delete_records_before(log.log_end_offset() - 100)
                    .unwrap();
            }
        }
        stop.store(true, Ordering::Release);
        assert!(flusher.join().unwrap() > 0);
        log.flush().unwrap();
        let end = log.log_end_offset();
        assert_eq!(log.recovery_point(), end);
        log.close().unwrap();
        drop(log);
        // Everything is there after a reopen, and no deleted segment left files behind.
        let again = Log::open(
            dir.path(),
            LogConfig {
                segment_bytes: 4096,
                ..LogConfig::default()
            },
            0,
        )
        .unwrap();
        assert_eq!(again.log_end_offset(), end);
        let bases: Vec<i64> = again.segment_base_offsets();
        let mut files = 0;
        for e in fs::read_dir(dir.path()).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".index") || name.ends_with(".log") {
                let base: i64 = name.split('.').next().unwrap().parse().unwrap();
                assert!(bases.contains(&base), "{name} outlived its segment");
                files += 1;
            }
        }
        assert!(files >= bases.len());
    }
}
