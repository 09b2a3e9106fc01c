//! One log segment: a `.log` file of record batches plus its offset, time and
//! transaction indexes, all named by the segment's base offset (20 digits,
//! zero padded).
//!
//! The segment owns its log file (through a [`FileSlot`]: opened on demand,
//! closed by the process-wide cache when idle) and the facts derived from it
//! (size, next offset, max timestamp, index entries). Only the log's writer (under
//! its mutex) mutates a segment; readers share it through an `Arc` and see
//! the committed size through atomics, published after the bytes are
//! written. All file access is positional (pread/pwrite), so there is no
//! shared seek state, and an `Arc<Segment>` keeps its file readable after
//! the segment is deleted from the directory (deleting pins the handle).

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::corrupt;
use crate::error::{Error, Result};
use crate::filecache::FileSlot;
use crate::index::{
    offset_entries_look_valid, time_entries_look_valid, Index, IndexEntry, OffsetEntry,
    OffsetIndex, TimeEntry, TimeIndex,
};
use crate::records::{
    check_crc, first_offset_with_timestamp_at_or_after, BatchHeader, HEADER_SIZE,
};
use crate::txn_index::{AbortedTxn, TxnIndex, TXN_INDEX_SUFFIX};

pub const LOG_SUFFIX: &str = ".log";
pub const INDEX_SUFFIX: &str = ".index";
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";

/// Largest segment file: index positions are u32.
pub const MAX_SEGMENT_SIZE: u64 = u32::MAX as u64;

/// Read-ahead used when scanning a segment batch by batch at recovery.
const SCAN_CHUNK: usize = 1 << 20;

/// Cap on decompressed bytes when searching a batch by timestamp.
pub const TIMESTAMP_SEARCH_MAX_DECOMPRESSED: usize = 256 << 20;

/// `00000000000000000042.log` and friends.
pub fn file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// The base offset a segment file name encodes, if it is one of ours.
pub fn parse_file_name(name: &str) -> Option<(i64, &str)> {
    let dot = name.find('.')?;
    let (stem, suffix) = name.split_at(dot);
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let base = stem.parse::<i64>().ok()?;
    Some((base, suffix))
}

/// What the log needs to know about one batch it is appending.
#[derive(Clone, Copy, Debug)]
pub struct BatchInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub size: usize,
}

/// Settings a segment needs from the log config.
#[derive(Clone, Copy, Debug)]
pub struct SegmentConfig {
    pub index_bytes: u64,
    pub index_interval_bytes: u64,
}

/// How a segment is loaded at open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadMode {
    /// Data known good (flushed before the recovery point, or a clean
    /// shutdown): validate the indexes cheaply, scan only the tail.
    Trusted,
    /// Scan every batch (header, size, CRC, offsets), cut at the first bad one.
    Recover,
    /// As `Trusted`, for the last segment of a log whose last writer was
    /// killed under the kernel running now: a batch the end of the file cuts
    /// short (the write in progress when it died) is cut off; anything else
    /// wrong has the segment recovered.
    TrustedTail,
}

/// Bytes recovery cut off the end of a segment's log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Byte position of the cut (the first bad batch).
    pub position: u64,
    /// The offset the first dropped batch would have had to start at.
    pub first_offset: i64,
    pub bytes: u64,
    pub reason: String,
}

/// Result of loading a segment.
pub struct Loaded {
    pub segment: Segment,
    /// Bytes were cut off the end of the log file.
    pub truncated: bool,
    /// What was cut, when `truncated`.
    pub truncation: Option<Truncation>,
    /// The indexes had to be rebuilt.
    pub rebuilt_indexes: bool,
    /// Every batch was checked, CRC included (asked for, or the trusted
    /// data turned out to be damaged).
    pub recovered: bool,
    /// Why the aborted-transaction index was cut, when it was.
    pub txn_index_problem: Option<String>,
}

/// Accumulates index entries while walking batches in log order: one
/// offset entry each time more than `interval` bytes went by since the last,
/// with a time entry beside it when the max timestamp grew.
struct IndexBuilder {
    base_offset: i64,
    interval: u64,
    since: u64,
    max_ts: i64,
    last_time_ts: Option<i64>,
    offset_room: usize,
    time_room: usize,
    offsets: Vec<OffsetEntry>,
    times: Vec<TimeEntry>,
}

impl IndexBuilder {
    fn on_batch(&mut self, position: u64, b: &BatchInfo) {
        self.max_ts = self.max_ts.max(b.max_timestamp);
        if self.since > self.interval && self.offsets.len() < self.offset_room {
            let rel = (b.base_offset - self.base_offset) as u32;
            self.offsets.push(OffsetEntry {
                relative_offset: rel,
                position: position as u32,
            });
            if self.last_time_ts.is_none_or(|t| self.max_ts > t)
                && self.times.len() < self.time_room
            {
                self.times.push(TimeEntry {
                    timestamp: self.max_ts,
                    relative_offset: rel,
                });
                self.last_time_ts = Some(self.max_ts);
            }
            self.since = 0;
        }
        self.since += b.size as u64;
    }
}

pub struct Segment {
    base_offset: i64,
    dir: PathBuf,
    log: Arc<FileSlot>,
    /// Committed bytes of the log file (readers never look past it).
    size: AtomicU64,
    /// Last offset + 1 of the last batch, or the base offset when empty.
    next_offset: AtomicI64,
    /// Largest batch max timestamp, -1 when empty.
    max_timestamp: AtomicI64,
    /// When the first batch went in (for segment.ms); i64::MIN when empty.
    roll_base_ms: AtomicI64,
    /// Log bytes since the last offset index entry.
    bytes_since_index: AtomicU64,
    /// Holds data or index entries not yet fdatasync'ed.
    dirty: AtomicBool,
    interval: AtomicU64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    txn_index: TxnIndex,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("base_offset", &self.base_offset)
            .field("size", &self.size())
            .field("next_offset", &self.next_offset())
            .finish()
    }
}

fn open_rw(path: &Path, truncate: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)
}

/// pwritev of all of `bufs` at `offset`, retrying on EINTR and short writes.
fn pwritev_all(file: &File, mut bufs: &mut [IoSlice<'_>], mut offset: u64) -> io::Result<()> {
    const IOV_MAX: usize = 1024;
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let count = bufs.len().min(IOV_MAX);
        // SAFETY: IoSlice is ABI-compatible with iovec on Unix; the slices
        // borrow live buffers for the duration of the call.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                bufs.as_ptr() as *const libc::iovec,
                count as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        offset += n as u64;
        IoSlice::advance_slices(&mut bufs, n as usize);
    }
    Ok(())
}

/// Requests at least this far apart, of less than this, are read alone
/// (see [`Scanner::get`]).
const SPARSE_GAP: u64 = 8 << 10;

/// Reads a file forward in large chunks, handing out byte ranges.
pub(crate) struct Scanner<'a> {
    file: &'a File,
    file_len: u64,
    buf: Vec<u8>,
    buf_at: u64,
    /// Where the previous request began.
    last_pos: u64,
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(file: &'a File, file_len: u64) -> Self {
        Scanner {
            file,
            file_len,
            buf: Vec::new(),
            buf_at: 0,
            last_pos: 0,
        }
    }
    /// Bytes [pos, pos+len), or None if the file ends before.
    pub(crate) fn get(&mut self, pos: u64, len: usize) -> Result<Option<&[u8]>> {
        let Some(end) = pos.checked_add(len as u64) else {
            return Ok(None);
        };
        if end > self.file_len {
            return Ok(None);
        }
        let buffered = pos >= self.buf_at && end <= self.buf_at + self.buf.len() as u64;
        // A walk over the headers of large batches asks for a few bytes far
        // apart: reading them alone copies a header per batch, a chunk would
        // copy every byte of the file.
        let sparse = (len as u64) < SPARSE_GAP && pos >= self.last_pos.saturating_add(SPARSE_GAP);
        self.last_pos = pos;
        if !buffered {
            // len is bounded by file_len (checked above).
            let want = if sparse {
                len
            } else {
                (len.max(SCAN_CHUNK) as u64).min(self.file_len - pos) as usize
            };
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.buf_at = pos;
        }
        let from = (pos - self.buf_at) as usize;
        Ok(Some(&self.buf[from..from + len]))
    }
}

/// Outcome of walking a segment's batches.
struct Walk {
    valid_len: u64,
    next_offset: Option<i64>,
    first_max_ts: Option<i64>,
    builder: IndexBuilder,
    /// Why the walk stopped before the end of the file, if it did.
    fault: Option<BatchFault>,
}

/// What is wrong with the bytes at a batch position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchFault {
    /// The framing is broken (a garbled header, bytes past the largest
    /// segment size): no later batch can be found.
    Framing(String),
    /// The file ends inside the batch (a torn header, or a size running past
    /// the end): what a write cut short leaves.
    Torn(String),
    /// A whole batch of `size` bytes whose content is wrong (CRC, offsets),
    /// with the base offset its header gives and the offset a following
    /// batch should start from.
    Content {
        size: usize,
        base_offset: i64,
        next: i64,
        reason: String,
    },
}

impl BatchFault {
    pub fn reason(&self) -> &str {
        match self {
            BatchFault::Framing(r)
            | BatchFault::Torn(r)
            | BatchFault::Content { reason: r, .. } => r,
        }
    }
}

/// Checks the batch at `pos` (a batch boundary): header, size against the
/// file, offsets rising from `expect` and within u32 of `base_offset`, and
/// with `crc` its CRC-32C. `Ok(None)` at the end of the file.
pub(crate) fn check_batch_at(
    scanner: &mut Scanner<'_>,
    pos: u64,
    expect: i64,
    base_offset: i64,
    crc: bool,
) -> Result<Option<std::result::Result<BatchHeader, BatchFault>>> {
    let left = scanner.file_len.saturating_sub(pos);
    if left == 0 {
        return Ok(None);
    }
    let Some(hbytes) = scanner.get(pos, HEADER_SIZE)? else {
        return Ok(Some(Err(BatchFault::Torn(format!(
            "torn batch header: {left} bytes at the end of the file"
        )))));
    };
    let h = match BatchHeader::parse(hbytes) {
        Ok(h) => h,
        Err(e) => return Ok(Some(Err(BatchFault::Framing(e.to_string())))),
    };
    let size = h.total_size();
    let runs_past = || {
        Ok(Some(Err(BatchFault::Torn(format!(
            "batch of {size} bytes runs past the end of the file ({left} bytes left)"
        )))))
    };
    if size as u64 > left {
        return runs_past();
    }
    let content = |next: i64, reason: String| {
        Ok(Some(Err(BatchFault::Content {
            size,
            base_offset: h.base_offset,
            next,
            reason,
        })))
    };
    if h.last_offset_delta < 0 {
        return content(
            expect,
            format!("negative lastOffsetDelta {}", h.last_offset_delta),
        );
    }
    if h.base_offset < expect {
        // Carry on from this batch: one line for one step back.
        return content(
            h.base_offset.saturating_add(h.last_offset_delta as i64 + 1),
            format!(
                "base offset {} is below {expect}, the offset after the previous batch",
                h.base_offset
            ),
        );
    }
    let fits = h
        .base_offset
        .checked_add(h.last_offset_delta as i64)
        .is_some_and(|last| last - base_offset <= u32::MAX as i64);
    if !fits || h.base_offset < base_offset {
        return content(
            expect,
            format!(
                "offsets {} + {} do not fit segment {base_offset}",
                h.base_offset, h.last_offset_delta
            ),
        );
    }
    if crc {
        let Some(batch) = scanner.get(pos, size)? else {
            return runs_past();
        };
        if let Err(e) = check_crc(batch) {
            return content(h.last_offset().saturating_add(1), e.to_string());
        }
    }
    Ok(Some(Ok(h)))
}

impl Segment {
    fn paths(dir: &Path, base: i64) -> (PathBuf, PathBuf, PathBuf) {
        (
            dir.join(file_name(base, LOG_SUFFIX)),
            dir.join(file_name(base, INDEX_SUFFIX)),
            dir.join(file_name(base, TIME_INDEX_SUFFIX)),
        )
    }

    fn assemble(
        dir: &Path,
        base_offset: i64,
        log: Arc<FileSlot>,
        cfg: SegmentConfig,
        offsets: (Vec<OffsetEntry>, usize),
        times: (Vec<TimeEntry>, usize),
    ) -> Segment {
        let (_, index_path, time_path) = Self::paths(dir, base_offset);
        Segment {
            base_offset,
            dir: dir.to_path_buf(),
            log,
            size: AtomicU64::new(0),
            next_offset: AtomicI64::new(base_offset),
            max_timestamp: AtomicI64::new(-1),
            roll_base_ms: AtomicI64::new(i64::MIN),
            bytes_since_index: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            interval: AtomicU64::new(cfg.index_interval_bytes),
            offset_index: Index::new(index_path, cfg.index_bytes, offsets.0, offsets.1),
            time_index: Index::new(time_path, cfg.index_bytes, times.0, times.1),
            txn_index: TxnIndex::with_entries(
                dir.join(file_name(base_offset, TXN_INDEX_SUFFIX)),
                Vec::new(),
            ),
        }
    }

    /// A new, empty segment (any files already bearing its name are emptied).
    pub fn create(dir: &Path, base_offset: i64, cfg: SegmentConfig) -> Result<Segment> {
        let (log_path, index_path, time_path) = Self::paths(dir, base_offset);
        let log = FileSlot::new(log_path.clone(), open_rw(&log_path, true)?);
        open_rw(&index_path, true)?;
        open_rw(&time_path, true)?;
        let mut seg = Self::assemble(dir, base_offset, log, cfg, (Vec::new(), 0), (Vec::new(), 0));
        seg.txn_index = TxnIndex::create(dir.join(file_name(base_offset, TXN_INDEX_SUFFIX)))?;
        seg.dirty.store(true, Ordering::Relaxed);
        Ok(seg)
    }

    /// Opens an existing segment at startup (see [`LoadMode`]). `min_offset`
    /// is the lowest base offset its first batch may have (the previous
    /// segment's next offset).
    pub fn load(
        dir: &Path,
        base_offset: i64,
        cfg: SegmentConfig,
        mode: LoadMode,
        min_offset: i64,
        now_ms: i64,
    ) -> Result<Loaded> {
        let mut loaded = Self::load_data(dir, base_offset, cfg, mode, min_offset, now_ms)?;
        // The transaction index goes by the data as recovered: entries of
        // markers that did not survive are cut.
        let seg = &mut loaded.segment;
        let path = dir.join(file_name(base_offset, TXN_INDEX_SUFFIX));
        let (index, problem) = TxnIndex::load(path, base_offset, seg.next_offset())?;
        seg.txn_index = index;
        loaded.txn_index_problem = problem;
        Ok(loaded)
    }

    fn load_data(
        dir: &Path,
        base_offset: i64,
        cfg: SegmentConfig,
        mode: LoadMode,
        min_offset: i64,
        now_ms: i64,
    ) -> Result<Loaded> {
        let (log_path, index_path, time_path) = Self::paths(dir, base_offset);
        let log = open_rw(&log_path, false).map_err(Error::at(&log_path))?;
        let file_len = log.metadata().map_err(Error::at(&log_path))?.len();
        let min_offset = min_offset.max(base_offset);

        if mode != LoadMode::Recover {
            if let Some(loaded) = Self::load_trusted(
                dir,
                base_offset,
                cfg,
                &log,
                file_len,
                min_offset,
                (&index_path, &time_path),
                now_ms,
                mode == LoadMode::TrustedTail,
            )? {
                return Ok(loaded);
            }
            // The "good" data is not: fall through and recover it.
        }

        let walk = Self::walk(&log, file_len, base_offset, 0, min_offset, true, cfg, None)?;
        let truncated = walk.valid_len < file_len;
        let truncation = truncated.then(|| Truncation {
            position: walk.valid_len,
            first_offset: walk.next_offset.unwrap_or(min_offset),
            bytes: file_len - walk.valid_len,
            reason: walk
                .fault
                .as_ref()
                .map_or("unreadable", |f| f.reason())
                .to_string(),
        });
        if truncated {
            log.set_len(walk.valid_len)?;
        }
        let log = FileSlot::new(log_path, log);
        Ok(Loaded {
            segment: Self::from_walk(dir, base_offset, log, cfg, walk, now_ms)?,
            truncated,
            truncation,
            rebuilt_indexes: true,
            recovered: true,
            txn_index_problem: None,
        })
    }

    /// A segment whose indexes are rebuilt from a full walk; writes them out.
    fn from_walk(
        dir: &Path,
        base_offset: i64,
        log: Arc<FileSlot>,
        cfg: SegmentConfig,
        walk: Walk,
        now_ms: i64,
    ) -> Result<Segment> {
        let b = walk.builder;
        let seg = Self::assemble(dir, base_offset, log, cfg, (b.offsets, 0), (b.times, 0));
        seg.size.store(walk.valid_len, Ordering::Relaxed);
        seg.next_offset
            .store(walk.next_offset.unwrap_or(base_offset), Ordering::Relaxed);
        seg.max_timestamp.store(
            if walk.valid_len == 0 { -1 } else { b.max_ts },
            Ordering::Relaxed,
        );
        seg.bytes_since_index.store(b.since, Ordering::Relaxed);
        seg.set_roll_base_from(walk.first_max_ts, now_ms);
        // Rewrite both index files now: whatever was there is untrusted.
        seg.offset_index.write_pending()?;
        seg.time_index.write_pending()?;
        seg.dirty.store(true, Ordering::Relaxed);
        Ok(seg)
    }

    fn set_roll_base_from(&self, first_max_ts: Option<i64>, now_ms: i64) {
        // As Kafka does: time a recovered segment from its first batch's
        // timestamp (never in the future, never unset).
        let base = match first_max_ts {
            Some(ts) if ts >= 0 => ts.min(now_ms),
            Some(_) => now_ms,
            None => i64::MIN,
        };
        self.roll_base_ms.store(base, Ordering::Relaxed);
    }

    #[allow(clippy::too_many_arguments)]
    fn load_trusted(
        dir: &Path,
        base_offset: i64,
        cfg: SegmentConfig,
        log: &File,
        file_len: u64,
        min_offset: i64,
        (index_path, time_path): (&Path, &Path),
        now_ms: i64,
        cut_torn: bool,
    ) -> Result<Option<Loaded>> {
        // Each entry stands for a batch of at least HEADER_SIZE bytes.
        let cap = (file_len / HEADER_SIZE as u64) as usize + 1;
        let offsets = OffsetIndex::read_file(index_path, cap)?
            .filter(|es| offset_entries_look_valid(es, file_len))
            .filter(|es| Self::entry_points_at_batch(log, file_len, base_offset, es.last()));
        let Some(offsets) = offsets else {
            return Self::rebuild_trusted(dir, base_offset, cfg, log, file_len, min_offset, now_ms);
        };
        let times = TimeIndex::read_file(time_path, cap)?;
        let last_time_ts = times.as_ref().and_then(|t| t.last()).map(|t| t.timestamp);
        // Walk the tail after the last offset entry, headers only, adding
        // the entries a partly written index lacks.
        let (tail_from, tail_min) = offsets
            .last()
            .map(|e| (e.position as u64, base_offset + e.relative_offset as i64))
            .unwrap_or((0, min_offset));
        let tail_cfg = SegmentConfig {
            index_bytes: cfg
                .index_bytes
                .saturating_sub((offsets.len() * OffsetEntry::SIZE) as u64),
            ..cfg
        };
        let mut walk = Self::walk(
            log,
            file_len,
            base_offset,
            tail_from,
            tail_min,
            false,
            tail_cfg,
            last_time_ts,
        )?;
        let mut file_len = file_len;
        let mut truncation = None;
        match walk.fault.take() {
            None => {}
            Some(BatchFault::Torn(reason)) if cut_torn => {
                truncation = Some(Truncation {
                    position: walk.valid_len,
                    first_offset: walk.next_offset.unwrap_or(tail_min),
                    bytes: file_len - walk.valid_len,
                    reason,
                });
                log.set_len(walk.valid_len)?;
                file_len = walk.valid_len;
            }
            Some(_) => return Ok(None),
        }
        let first_max_ts = Self::first_batch_max_ts(log, file_len)?;
        let next_offset = walk.next_offset.unwrap_or(base_offset);
        let max_rel = if next_offset > base_offset {
            Some((next_offset - 1 - base_offset) as u32)
        } else {
            None
        };
        let Some(mut times) = times.filter(|es| time_entries_look_valid(es, max_rel)) else {
            return Self::rebuild_trusted(dir, base_offset, cfg, log, file_len, min_offset, now_ms);
        };
        let tail_max = if walk.next_offset.is_some() {
            walk.builder.max_ts
        } else {
            -1
        };
        let max_ts = times.last().map_or(tail_max, |t| t.timestamp.max(tail_max));
        let (n_off, n_time) = (offsets.len(), times.len());
        let mut offsets = offsets;
        offsets.append(&mut walk.builder.offsets);
        let room = ((cfg.index_bytes / TimeEntry::SIZE as u64) as usize).saturating_sub(n_time);
        walk.builder.times.truncate(room);
        times.append(&mut walk.builder.times);
        let rebuilt_indexes = offsets.len() > n_off || times.len() > n_time;
        let seg = Self::assemble(
            dir,
            base_offset,
            Self::slot_of(dir, base_offset, log)?,
            cfg,
            (offsets, n_off),
            (times, n_time),
        );
        seg.size.store(file_len, Ordering::Relaxed);
        seg.next_offset.store(next_offset, Ordering::Relaxed);
        seg.max_timestamp
            .store(if file_len == 0 { -1 } else { max_ts }, Ordering::Relaxed);
        seg.bytes_since_index
            .store(walk.builder.since, Ordering::Relaxed);
        seg.set_roll_base_from(first_max_ts, now_ms);
        Ok(Some(Loaded {
            segment: seg,
            truncated: truncation.is_some(),
            truncation,
            rebuilt_indexes,
            recovered: false,
            txn_index_problem: None,
        }))
    }

    /// Trusted data, damaged indexes: rebuild them from a header walk (no
    /// CRC). Returns None when the data turns out to be damaged too.
    fn rebuild_trusted(
        dir: &Path,
        base_offset: i64,
        cfg: SegmentConfig,
        log: &File,
        file_len: u64,
        min_offset: i64,
        now_ms: i64,
    ) -> Result<Option<Loaded>> {
        let walk = Self::walk(log, file_len, base_offset, 0, min_offset, false, cfg, None)?;
        if walk.fault.is_some() {
            return Ok(None);
        }
        let log = Self::slot_of(dir, base_offset, log)?;
        let seg = Self::from_walk(dir, base_offset, log, cfg, walk, now_ms)?;
        Ok(Some(Loaded {
            segment: seg,
            truncated: false,
            truncation: None,
            rebuilt_indexes: true,
            recovered: false,
            txn_index_problem: None,
        }))
    }

    fn slot_of(dir: &Path, base_offset: i64, log: &File) -> Result<Arc<FileSlot>> {
        let path = dir.join(file_name(base_offset, LOG_SUFFIX));
        Ok(FileSlot::new(path, log.try_clone()?))
    }

    fn first_batch_max_ts(log: &File, file_len: u64) -> Result<Option<i64>> {
        if file_len < HEADER_SIZE as u64 {
            return Ok(None);
        }
        let mut h = [0u8; HEADER_SIZE];
        log.read_exact_at(&mut h, 0)?;
        Ok(BatchHeader::parse(&h).ok().map(|h| h.max_timestamp))
    }

    fn entry_points_at_batch(
        log: &File,
        file_len: u64,
        base_offset: i64,
        e: Option<&OffsetEntry>,
    ) -> bool {
        let Some(e) = e else { return true };
        let pos = e.position as u64;
        if pos + HEADER_SIZE as u64 > file_len {
            return false;
        }
        let mut h = [0u8; HEADER_SIZE];
        if log.read_exact_at(&mut h, pos).is_err() {
            return false;
        }
        match BatchHeader::parse(&h) {
            Ok(h) => {
                h.base_offset == base_offset + e.relative_offset as i64
                    && pos + h.total_size() as u64 <= file_len
            }
            Err(_) => false,
        }
    }

    /// Walks batches from `from` (a batch boundary) to the end of the file,
    /// checking each header, its size against the file, that offsets rise
    /// from `min_offset` and fit the segment, and (with `crc`) its CRC.
    /// Stops at the first batch that fails.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        log: &File,
        file_len: u64,
        base_offset: i64,
        from: u64,
        min_offset: i64,
        crc: bool,
        cfg: SegmentConfig,
        last_time_ts: Option<i64>,
    ) -> Result<Walk> {
        let index_room = (cfg.index_bytes / OffsetEntry::SIZE as u64) as usize;
        let time_room = (cfg.index_bytes / TimeEntry::SIZE as u64) as usize;
        let mut builder = IndexBuilder {
            base_offset,
            interval: cfg.index_interval_bytes,
            since: 0,
            max_ts: last_time_ts.unwrap_or(-1),
            last_time_ts,
            offset_room: index_room,
            time_room,
            offsets: Vec::new(),
            times: Vec::new(),
        };
        let mut scanner = Scanner::new(log, file_len.min(MAX_SEGMENT_SIZE));
        let mut pos = from;
        let mut expect = min_offset;
        let mut next_offset = None;
        let mut first_max_ts = None;
        let fault = loop {
            let h = match check_batch_at(&mut scanner, pos, expect, base_offset, crc)? {
                None => break None,
                Some(Err(fault)) => break Some(fault),
                Some(Ok(h)) => h,
            };
            let size = h.total_size();
            let info = BatchInfo {
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
                max_timestamp: h.max_timestamp,
                size,
            };
            if pos == 0 {
                first_max_ts = Some(h.max_timestamp);
            }
            builder.on_batch(pos, &info);
            expect = info.last_offset.saturating_add(1);
            next_offset = Some(expect);
            pos += size as u64;
        };
        let fault = match fault {
            None if pos < file_len => Some(BatchFault::Framing(format!(
                "{} bytes past the largest segment size",
                file_len - pos
            ))),
            f => f,
        };
        Ok(Walk {
            valid_len: pos,
            next_offset,
            first_max_ts,
            builder,
            fault,
        })
    }

    // -- facts ------------------------------------------------------------

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    pub fn is_empty(&self) -> bool {
        self.size() == 0
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset.load(Ordering::Acquire)
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp.load(Ordering::Acquire)
    }
    pub fn roll_base_ms(&self) -> Option<i64> {
        let v = self.roll_base_ms.load(Ordering::Relaxed);
        (v != i64::MIN).then_some(v)
    }
    /// The open log file (opened again if the cache closed it). Hold it
    /// for as long as a read or sendfile of it lasts.
    pub fn file(&self) -> Result<Arc<File>> {
        Ok(self.log.get()?)
    }
    /// Whether the log file is open now (not closed by the cache).
    pub fn is_file_open(&self) -> bool {
        self.log.is_open()
    }
    /// Lets the file cache close the log file when idle (see
    /// [`SealedSegmentBuilder::finish`]).
    pub fn unpin_file(&self) {
        self.log.unpin();
    }
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(file_name(self.base_offset, LOG_SUFFIX))
    }
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    pub fn txn_index(&self) -> &TxnIndex {
        &self.txn_index
    }
    pub fn indexes_full(&self) -> bool {
        self.offset_index.is_full() || self.time_index.is_full()
    }
    pub fn set_index_interval(&self, bytes: u64) {
        self.interval.store(bytes, Ordering::Relaxed);
    }

    // -- writing (the log's writer only) ------------------------------------

    /// Writes `data` (whole batches described by `batches`) at the end of
    /// the log file with one pwritev, then publishes the new size and
    /// index entries. On failure the file is cut back and nothing changes.
    pub fn append(
        &self,
        data: &mut [IoSlice<'_>],
        batches: &[BatchInfo],
        now_ms: i64,
    ) -> Result<()> {
        let start = self.size.load(Ordering::Relaxed);
        let file = self.file()?;
        if let Err(e) = pwritev_all(&file, data, start) {
            let _ = file.set_len(start);
            return Err(e.into());
        }
        self.after_write(start, batches, now_ms);
        Ok(())
    }

    /// As [`Segment::append`] for bytes already laid out in one buffer.
    pub fn append_bytes(&self, data: &[u8], batches: &[BatchInfo], now_ms: i64) -> Result<()> {
        let start = self.size.load(Ordering::Relaxed);
        let file = self.file()?;
        if let Err(e) = file.write_all_at(data, start) {
            let _ = file.set_len(start);
            return Err(e.into());
        }
        self.after_write(start, batches, now_ms);
        Ok(())
    }

    fn after_write(&self, start: u64, batches: &[BatchInfo], now_ms: i64) {
        let mut b = IndexBuilder {
            base_offset: self.base_offset,
            interval: self.interval.load(Ordering::Relaxed),
            since: self.bytes_since_index.load(Ordering::Relaxed),
            max_ts: self.max_timestamp.load(Ordering::Relaxed),
            last_time_ts: self.time_index.last().map(|t| t.timestamp),
            offset_room: self
                .offset_index
                .max_entries()
                .saturating_sub(self.offset_index.len()),
            time_room: self
                .time_index
                .max_entries()
                .saturating_sub(self.time_index.len()),
            offsets: Vec::new(),
            times: Vec::new(),
        };
        let mut pos = start;
        for info in batches {
            b.on_batch(pos, info);
            pos += info.size as u64;
        }
        self.offset_index.push_all(&b.offsets);
        self.time_index.push_all(&b.times);
        self.bytes_since_index.store(b.since, Ordering::Relaxed);
        if start == 0 {
            self.roll_base_ms.store(now_ms, Ordering::Relaxed);
        }
        self.dirty.store(true, Ordering::Relaxed);
        self.max_timestamp.store(b.max_ts, Ordering::Release);
        if let Some(last) = batches.last() {
            self.next_offset
                .store(last.last_offset + 1, Ordering::Release);
        }
        self.size.store(pos, Ordering::Release);
    }

    /// Called when the segment stops being the active one (roll, close):
    /// records the final max timestamp in the time index and writes the
    /// pending index entries out (fdatasync is left to the next flush).
    pub fn seal(&self) -> Result<()> {
        if self.push_final_time_entry() {
            self.dirty.store(true, Ordering::Relaxed);
        }
        self.offset_index.write_pending()?;
        self.time_index.write_pending()?;
        Ok(())
    }

    /// Adds the time index entry for the segment's max timestamp if the
    /// index lacks it. Returns whether it did.
    fn push_final_time_entry(&self) -> bool {
        let max_ts = self.max_timestamp();
        let next = self.next_offset();
        if next > self.base_offset && self.time_index.last().is_none_or(|t| max_ts > t.timestamp) {
            let rel = (next - 1 - self.base_offset) as u32;
            self.time_index.push_all(&[TimeEntry {
                timestamp: max_ts,
                relative_offset: rel,
            }]);
            return true;
        }
        false
    }

    /// Writes both indexes whole to `<their file name><suffix>`, fsync'ed;
    /// the renamed copies then count as the index files.
    pub fn write_index_copies(&self, suffix: &str) -> Result<()> {
        let with_suffix = |p: &Path| {
            let mut name = p.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        self.offset_index
            .write_copy(&with_suffix(self.offset_index.path()))?;
        self.time_index
            .write_copy(&with_suffix(self.time_index.path()))?;
        self.txn_index.write_copy(suffix)
    }

    /// fdatasync of the log and its indexes, when anything changed.
    pub fn flush(&self) -> Result<()> {
        self.txn_index.flush()?;
        if self.dirty.swap(false, Ordering::AcqRel) {
            let r = (|| {
                self.file()?.sync_data()?;
                self.offset_index.sync()?;
                self.time_index.sync()
            })();
            if r.is_err() {
                self.dirty.store(true, Ordering::Relaxed);
            }
            r?;
        }
        Ok(())
    }

    /// Index entries not yet written to their files.
    pub fn index_pending(&self) -> bool {
        self.offset_index.has_pending() || self.time_index.has_pending()
    }

    /// Marks the segment as holding writes that may not be on disk (the next
    /// flush syncs it).
    pub(crate) fn mark_dirty(&self) {
        self.dirty.store(true, Ordering::Relaxed);
    }

    /// Marks a new, empty segment as needing no fdatasync: a log that is
    /// created empty does not depend on its files surviving a crash.
    pub(crate) fn mark_synced(&self) {
        self.dirty.store(false, Ordering::Relaxed);
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Relaxed)
    }

    /// Releases the index file handles (a sealed segment is only read).
    pub fn close_index_files(&self) {
        self.offset_index.close_file();
        self.time_index.close_file();
    }

    /// Drops every batch that holds an offset >= `offset` (a batch holding
    /// `offset` goes whole). Returns the base offset of the first batch
    /// removed, if any was. On an error nothing has changed; once the file
    /// is cut, the segment's state follows it at once (a size left behind
    /// would put the next append past the end, leaving a hole of zeros). The
    /// index files catch up at the next flush.
    pub fn truncate_to(&self, offset: i64) -> Result<Option<i64>> {
        let size = self.size();
        let Some((pos, h)) = self.find_batch(offset, size)? else {
            return Ok(None);
        };
        let file = self.file()?;
        let cut_rel = h.base_offset - self.base_offset;
        // What survives, from the last index entry before the cut on.
        let last_entry = self.offset_index.lower_by(pos, |e| e.position as u64);
        let (from, min_off) = last_entry
            .map(|e| {
                (
                    e.position as u64,
                    self.base_offset + e.relative_offset as i64,
                )
            })
            .unwrap_or((0, self.base_offset));
        let no_entries = SegmentConfig {
            index_bytes: 0,
            index_interval_bytes: u64::MAX,
        };
        let walk = Self::walk(
            &file,
            pos,
            self.base_offset,
            from,
            min_off,
            false,
            no_entries,
            None,
        )?;
        let tail_max = if walk.next_offset.is_some() {
            walk.builder.max_ts
        } else {
            -1
        };
        let max_ts = self
            .time_index
            .lower_by(cut_rel, |e| e.relative_offset as i64)
            .map_or(tail_max, |t| t.timestamp.max(tail_max));

        self.txn_index.truncate_from(h.base_offset)?;
        file.set_len(pos)?;
        self.offset_index
            .truncate_from(|e| e.position as u64 >= pos);
        self.time_index
            .truncate_from(|e| e.relative_offset as i64 >= cut_rel);
        self.max_timestamp
            .store(if pos == 0 { -1 } else { max_ts }, Ordering::Release);
        self.bytes_since_index.store(pos - from, Ordering::Relaxed);
        self.next_offset.store(
            walk.next_offset.unwrap_or(self.base_offset),
            Ordering::Release,
        );
        if pos == 0 {
            self.roll_base_ms.store(i64::MIN, Ordering::Relaxed);
        }
        self.size.store(pos, Ordering::Release);
        self.dirty.store(true, Ordering::Relaxed);
        Ok(Some(h.base_offset))
    }

    /// Removes the segment's files (open handles stay readable: the log
    /// file's handle is pinned open for as long as the segment lives).
    pub fn delete_files(&self) -> Result<()> {
        self.close_index_files();
        match self.log.pin() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        self.txn_index.delete_file()?;
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            match fs::remove_file(self.dir.join(file_name(self.base_offset, suffix))) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    // -- reading ------------------------------------------------------------

    /// Reads up to `buf.len()` bytes at `pos`; fewer only at end of file.
    pub fn read_at(&self, buf: &mut [u8], pos: u64) -> Result<usize> {
        let file = self.file()?;
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], pos + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(done)
    }

    /// The header of the batch at `pos`, which must lie whole below `limit`.
    pub fn header_at(&self, pos: u64, limit: u64) -> Result<BatchHeader> {
        let mut h = [0u8; HEADER_SIZE];
        if pos + HEADER_SIZE as u64 > limit || self.read_at(&mut h, pos)? < HEADER_SIZE {
            return corrupt!(
                "segment {}: batch header at {pos} runs past the end",
                self.base_offset
            );
        }
        let h = BatchHeader::parse(&h)?;
        if pos + h.total_size() as u64 > limit {
            return corrupt!(
                "segment {}: batch at {pos} runs past the end",
                self.base_offset
            );
        }
        Ok(h)
    }

    /// Position of a batch boundary at or before the batch holding `offset`.
    fn index_position_for(&self, offset: i64) -> u64 {
        if offset <= self.base_offset {
            return 0;
        }
        let rel = (offset - self.base_offset).min(u32::MAX as i64) as u32;
        self.offset_index
            .floor_by(rel, |e| e.relative_offset)
            .map_or(0, |e| e.position as u64)
    }

    /// The first batch below `limit` whose last offset is >= `offset`.
    pub fn find_batch(&self, offset: i64, limit: u64) -> Result<Option<(u64, BatchHeader)>> {
        let mut pos = self.index_position_for(offset).min(limit);
        while pos < limit {
            let h = self.header_at(pos, limit)?;
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    /// Whether every batch from the boundary `from` to `limit` is a bare
    /// empty batch ([`BatchHeader::is_bare_empty`]).
    pub fn only_bare_empty_from(&self, from: u64, limit: u64) -> Result<bool> {
        let mut pos = from;
        while pos < limit {
            let h = self.header_at(pos, limit)?;
            if !h.is_bare_empty() {
                return Ok(false);
            }
            pos += h.total_size() as u64;
        }
        Ok(true)
    }

    /// Position of the first batch at or after `from` whose base offset is
    /// >= `offset`, or `limit` when there is none.
    pub fn position_of_first_batch_from(&self, offset: i64, from: u64, limit: u64) -> Result<u64> {
        let mut pos = self.index_position_for(offset).max(from);
        while pos < limit {
            let h = self.header_at(pos, limit)?;
            if h.base_offset >= offset {
                return Ok(pos);
            }
            pos += h.total_size() as u64;
        }
        Ok(limit)
    }

    /// The last batch boundary <= `end`, walking from the boundary `start`
    /// (jumping ahead through the offset index).
    pub fn last_boundary_within(&self, start: u64, end: u64, limit: u64) -> Result<u64> {
        let mut pos = self
            .offset_index
            .floor_by(end.min(u32::MAX as u64) as u32, |e| e.position)
            .map_or(start, |e| (e.position as u64).max(start));
        while pos < end {
            let h = self.header_at(pos, limit)?;
            let next = pos + h.total_size() as u64;
            if next > end {
                break;
            }
            pos = next;
        }
        Ok(pos)
    }

    /// The first record with timestamp >= `ts` and offset >= `min_offset`
    /// in this segment, as (offset, timestamp).
    pub fn find_timestamp(&self, ts: i64, min_offset: i64) -> Result<Option<(i64, i64)>> {
        if self.max_timestamp() < ts {
            return Ok(None);
        }
        let limit = self.size();
        // Every record up to the entry's offset is older than ts.
        let mut pos = match self.time_index.lower_by(ts, |e| e.timestamp) {
            Some(e) => self.index_position_for(self.base_offset + e.relative_offset as i64),
            None => 0,
        };
        while pos < limit {
            let h = self.header_at(pos, limit)?;
            let size = h.total_size();
            if h.max_timestamp >= ts && h.last_offset() >= min_offset {
                let mut batch = vec![0u8; size];
                if self.read_at(&mut batch, pos)? < size {
                    return corrupt!("segment {}: batch at {pos} cut short", self.base_offset);
                }
                if let Some((off, t)) = first_offset_with_timestamp_at_or_after(
                    &batch,
                    ts,
                    TIMESTAMP_SEARCH_MAX_DECOMPRESSED,
                )? {
                    return Ok(Some((off.max(min_offset), t)));
                }
            }
            pos += size as u64;
        }
        Ok(None)
    }
}

/// Builds a sealed segment around a log file written whole elsewhere (the
/// log cleaner writes `<base>.log.cleaned`): index entries are collected as
/// the batches are written, exactly as appends would have made them, so the
/// file is never read back.
pub struct SealedSegmentBuilder {
    base_offset: i64,
    cfg: SegmentConfig,
    builder: IndexBuilder,
    size: u64,
    next_offset: Option<i64>,
    first_max_ts: Option<i64>,
    aborted: Vec<AbortedTxn>,
}

impl SealedSegmentBuilder {
    pub fn new(base_offset: i64, cfg: SegmentConfig) -> Self {
        SealedSegmentBuilder {
            base_offset,
            cfg,
            builder: IndexBuilder {
                base_offset,
                interval: cfg.index_interval_bytes,
                since: 0,
                max_ts: -1,
                last_time_ts: None,
                offset_room: (cfg.index_bytes / OffsetEntry::SIZE as u64) as usize,
                time_room: (cfg.index_bytes / TimeEntry::SIZE as u64) as usize,
                offsets: Vec::new(),
                times: Vec::new(),
            },
            size: 0,
            next_offset: None,
            first_max_ts: None,
            aborted: Vec::new(),
        }
    }

    /// Records an aborted transaction whose marker is among the batches
    /// written (in marker order).
    pub fn add_aborted_txn(&mut self, txn: AbortedTxn) {
        self.aborted.push(txn);
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Records the next batch, written at the current end of the file.
    pub fn on_batch(&mut self, info: &BatchInfo) {
        if self.size == 0 {
            self.first_max_ts = Some(info.max_timestamp);
        }
        self.builder.on_batch(self.size, info);
        self.size += info.size as u64;
        self.next_offset = Some(info.last_offset + 1);
    }

    /// The segment over `log` (which must hold exactly the batches given),
    /// sealed as a roll leaves it; its index files are not written (see
    /// [`Segment::write_index_copies`]). `log` is not yet at the segment's
    /// path, so its handle stays open until [`Segment::unpin_file`].
    pub fn finish(self, dir: &Path, log: File, now_ms: i64) -> Segment {
        let b = self.builder;
        let path = dir.join(file_name(self.base_offset, LOG_SUFFIX));
        let mut seg = Segment::assemble(
            dir,
            self.base_offset,
            FileSlot::pinned(path, log),
            self.cfg,
            (b.offsets, 0),
            (b.times, 0),
        );
        seg.size.store(self.size, Ordering::Relaxed);
        seg.next_offset.store(
            self.next_offset.unwrap_or(self.base_offset),
            Ordering::Relaxed,
        );
        seg.max_timestamp.store(
            if self.size == 0 { -1 } else { b.max_ts },
            Ordering::Relaxed,
        );
        seg.bytes_since_index.store(b.since, Ordering::Relaxed);
        seg.set_roll_base_from(self.first_max_ts, now_ms);
        seg.push_final_time_entry();
        seg.txn_index = TxnIndex::with_entries(
            dir.join(file_name(self.base_offset, TXN_INDEX_SUFFIX)),
            self.aborted,
        );
        seg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip() {
        assert_eq!(file_name(42, LOG_SUFFIX), "00000000000000000042.log");
        assert_eq!(
            parse_file_name("00000000000000000042.timeindex"),
            Some((42, ".timeindex"))
        );
        assert_eq!(
            parse_file_name("00000000000000000042.log.tmp"),
            Some((42, ".log.tmp"))
        );
        assert_eq!(parse_file_name("0000000000000000042.log"), None);
        assert_eq!(parse_file_name("recovery-point"), None);
        assert_eq!(parse_file_name("9999999999999999999x.log"), None);
    }
}
