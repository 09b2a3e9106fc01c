//! Log compaction (cleanup.policy=compact): keeps the latest record of every
//! key in the closed segments of a log.
//!
//! One pass of [`Log::clean`]:
//! 1. finds the cleanable range: the closed segments below the first one
//!    that is too young (min.compaction.lag.ms) or reaches past the bound
//!    the caller gives (the partition's last stable offset, itself at most
//!    the high watermark: so every transaction with data in the range has
//!    ended, as in Kafka, where the first uncleanable offset is at most the
//!    LSO). The range splits at the cleaner checkpoint into a clean
//!    head (cleaned before: every key at most once) and a dirty tail;
//! 2. builds an offset map, key -> last offset, over the dirty tail, leaving
//!    out markers and the records of aborted transactions (known from the
//!    segments' `.txnindex` entries); committed transactional records count
//!    like any others. The map
//!    has a fixed memory budget (log.cleaner.dedupe.buffer.size); when it
//!    fills up the pass stops mapping there and the next pass goes on from
//!    that offset, so a log with more keys than fit is cleaned in passes;
//! 3. rewrites every segment from the log start to where mapping stopped,
//!    in groups of consecutive segments that fit one segment, keeping a
//!    record unless the map holds a later offset for its key. Batches keep
//!    their base offset, lastOffsetDelta, producer id, epoch and base
//!    sequence; a batch left with no record stays as an empty,
//!    uncompressed batch when its producer's state or the group's end offset
//!    needs it. Tombstones get a delete horizon (KIP-534: now +
//!    delete.retention.ms, stored as firstTimestamp with attribute bit 6) the
//!    first time they are cleaned and are dropped by a pass after it.
//!    Transactions are cleaned as Kafka's cleaner does: the records of
//!    aborted transactions go; a COMMIT or ABORT marker stays while its
//!    transaction has data in the log, then gets a delete horizon the same
//!    way and goes after it; the cleaned segment's `.txnindex` keeps the
//!    entries of aborted transactions whose markers stay for their data,
//!    and drops the others. A producer's last data batch and last batch
//!    stay, if only as empty batches (producer state);
//! 4. swaps each cleaned group in, one at a time, without blocking readers
//!    (they keep their `Arc<Segment>` snapshots) and holding the writer lock
//!    only for the renames.
//!
//! Swap protocol, per group (named by its first segment's base offset B):
//! - write `B.log.cleaned`, `B.index.cleaned`, `B.timeindex.cleaned`,
//!   `B.txnindex.cleaned`, fsync;
//! - under the writer lock, check the group is unchanged, then rename the
//!   index files to `.swap` and the log file last: `B.log.swap` existing is
//!   the commit point; fsync the directory;
//! - publish the new segment list, delete the old segments' files, rename the
//!   `.swap` files to their final names (log last), fsync the directory.
//!
//! On open ([`recover_swaps`](crate::cleaner_state::recover_swaps)): `.cleaned` files are dropped (the old
//! segments are intact); a `B.log.swap` is finished: every old segment with
//! a base offset in [B, the swap's next offset) goes and the swap files take
//! their final names; an index `.swap` without its log `.swap` is dropped.
//! The cleaned group always ends with the old group's last batch (empty if
//! need be), so its next offset is exactly the old group's and the range
//! covers the old group and nothing else. Reads pass over a segment left
//! with only that pin (see [`Log::read`]). A crash therefore leaves either
//! the old segments or the new ones, never both or neither.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::hash::BuildHasher;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use std::time::{Duration, Instant};

use crate::cleaner_state::{
    remove_group_files, suffixed, CLEANED_SUFFIX, GROUP_SUFFIXES, NO_HORIZON, SWAP_SUFFIX,
};
use crate::compression::Codec;
use crate::error::{Error, Result};
use crate::log::{Log, LogConfig};
use crate::records::{
    check_crc, end_txn_marker, iter_records, records_region, BatchBuilder, BatchHeader, Record,
    DELETE_HORIZON_MASK, HEADER_SIZE,
};
use crate::segment::{BatchInfo, SealedSegmentBuilder, Segment, LOG_SUFFIX, MAX_SEGMENT_SIZE};
use crate::statefile::sync_dir;
use crate::txn_index::AbortedTxn;

/// Bytes one offset map slot takes: two 64-bit key hashes and the offset.
pub const MAP_SLOT_BYTES: usize = 24;
/// Producers whose last batch a pass remembers; past that, empty batches of
/// unknown producers are kept (always safe).
const MAX_TRACKED_PRODUCERS: usize = 1 << 16;

/// Broker-wide cleaner settings (log.cleaner.*).
#[derive(Clone, Debug)]
pub struct CleanerConfig {
    /// log.cleaner.dedupe.buffer.size: memory of the offset map.
    pub dedupe_buffer_bytes: usize,
    /// log.cleaner.io.buffer.load.factor: how full the map may get.
    pub load_factor: f64,
    /// log.cleaner.io.buffer.size: read and write buffer size.
    pub io_buffer_bytes: usize,
    /// log.cleaner.io.max.bytes.per.second: read + write rate cap.
    pub io_max_bytes_per_second: f64,
    /// Bound on one batch's decompressed records; a larger batch is kept as
    /// it is (bomb protection).
    pub max_decompressed_bytes: usize,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_bytes: 128 << 20,
            load_factor: 0.9,
            io_buffer_bytes: 512 << 10,
            io_max_bytes_per_second: f64::INFINITY,
            max_decompressed_bytes: 64 << 20,
        }
    }
}

/// How dirty a log is, from segment sizes (no data is read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CleanableInfo {
    /// Bytes of the cleanable range below the cleaner checkpoint.
    pub clean_bytes: u64,
    /// Bytes of the cleanable range from the checkpoint on.
    pub dirty_bytes: u64,
    pub first_dirty_offset: i64,
    /// Base offset of the first segment the cleaner may not touch.
    pub first_uncleanable_offset: i64,
    /// dirty / (clean + dirty), 0 when both are 0.
    pub dirty_ratio: f64,
    /// The oldest dirty data is older than max.compaction.lag.ms.
    pub compaction_lag_due: bool,
    /// A kept tombstone's delete horizon has passed.
    pub delete_horizon_due: bool,
    /// Worth a pass now: a compacted log with dirty bytes at or above
    /// min.cleanable.dirty.ratio or past its max lag, or a due horizon.
    pub due: bool,
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CleanStats {
    pub segments_read: usize,
    /// Cleaned segments swapped in (one per group).
    pub segments_written: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_removed: u64,
    pub tombstones_dropped: u64,
    /// Records of aborted transactions removed.
    pub aborted_records_removed: u64,
    /// Transaction markers removed (or emptied) past their delete horizon.
    pub markers_removed: u64,
    /// Batches left with no record but kept for their producer state or
    /// offsets.
    pub empty_batches: u64,
    /// Batches kept as they were because they could not be read (bad CRC,
    /// too large to decompress).
    pub unreadable_batches: u64,
    pub map_entries: usize,
    pub map_capacity: usize,
    /// The checkpoint after the pass: offsets below it are clean.
    pub first_dirty_offset: i64,
    /// The whole dirty range fitted in the map (no further pass needed).
    pub complete: bool,
    /// The log changed under the pass (or closed); nothing past the last
    /// swapped group was done.
    pub aborted: bool,
    pub elapsed_ms: u64,
    pub throttled_ms: u64,
}

// -- the offset map ---------------------------------------------------------

/// key -> last offset, in a fixed-size open-addressing table. A key is
/// stored as two independent keyed 64-bit SipHashes (random keys per pass),
/// so entries are 24 bytes whatever the key size and a collision needs
/// 128 bits to line up (Kafka stores an MD5 the same way).
struct OffsetMap {
    /// [h1, h2, offset + 1] per slot; offset + 1 == 0 marks a free slot.
    slots: Vec<u64>,
    mask: usize,
    len: usize,
    max_len: usize,
    h1: RandomState,
    h2: RandomState,
}

impl OffsetMap {
    /// A map within `budget` bytes, filled to at most `load_factor`.
    fn with_budget(budget: usize, load_factor: f64) -> OffsetMap {
        let want = (budget / MAP_SLOT_BYTES).max(16);
        // Largest power of two that fits the budget: probing masks.
        let cap = if want.is_power_of_two() {
            want
        } else {
            want.next_power_of_two() / 2
        };
        let load = if load_factor.is_finite() {
            load_factor.clamp(0.1, 0.95)
        } else {
            0.9
        };
        OffsetMap {
            // Zeroed memory is mapped lazily: pages are only touched as
            // slots are used.
            slots: vec![0u64; cap * 3],
            mask: cap - 1,
            len: 0,
            max_len: ((cap as f64 * load) as usize).clamp(1, cap - 1),
            h1: RandomState::new(),
            h2: RandomState::new(),
        }
    }

    fn hashes(&self, key: &[u8]) -> (u64, u64) {
        (self.h1.hash_one(key), self.h2.hash_one(key))
    }

    /// The slot holding `(a, b)` or the free slot where it would go. Double
    /// hashing with an odd step visits every slot of the power-of-two table,
    /// and the table is never full, so this ends.
    fn find(&self, a: u64, b: u64) -> (usize, bool) {
        let mut i = a as usize & self.mask;
        let step = (b as usize | 1) & self.mask;
        loop {
            let s = &self.slots[i * 3..i * 3 + 3];
            if s[2] == 0 {
                return (i, false);
            }
            if s[0] == a && s[1] == b {
                return (i, true);
            }
            i = (i + step) & self.mask;
        }
    }

    /// Records `offset` as the latest of `key`; false when the key is new
    /// and the map is full.
    fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let (a, b) = self.hashes(key);
        let (i, found) = self.find(a, b);
        if !found {
            if self.len >= self.max_len {
                return false;
            }
            self.len += 1;
            self.slots[i * 3] = a;
            self.slots[i * 3 + 1] = b;
        }
        self.slots[i * 3 + 2] = offset as u64 + 1;
        true
    }

    fn get(&self, key: &[u8]) -> Option<i64> {
        let (a, b) = self.hashes(key);
        match self.find(a, b) {
            (i, true) => Some(self.slots[i * 3 + 2] as i64 - 1),
            _ => None,
        }
    }
}

// -- transactions ---------------------------------------------------------------

/// The aborted transactions of the cleanable range, from the segments'
/// `.txnindex` entries, by producer. A data batch of producer P belongs to
/// an aborted transaction when an entry of P spans its base offset: a
/// producer has at most one transaction open, so its entries never overlap.
#[derive(Default)]
struct AbortedTxns {
    /// Entries per producer, by first offset.
    by_producer: HashMap<i64, Vec<AbortedTxn>>,
}

impl AbortedTxns {
    fn new(entries: Vec<AbortedTxn>) -> AbortedTxns {
        let mut by_producer: HashMap<i64, Vec<AbortedTxn>> = HashMap::new();
        for e in entries {
            by_producer.entry(e.producer_id).or_default().push(e);
        }
        for list in by_producer.values_mut() {
            list.sort_unstable_by_key(|e| e.first_offset);
            list.dedup();
        }
        AbortedTxns { by_producer }
    }

    /// The entry of `producer`'s transaction holding `offset`, if aborted.
    fn spanning(&self, producer: i64, offset: i64) -> Option<&AbortedTxn> {
        let list = self.by_producer.get(&producer)?;
        let i = list.partition_point(|e| e.first_offset <= offset);
        list[..i].last().filter(|e| offset <= e.last_offset)
    }

    /// Whether a data batch `h` is part of an aborted transaction.
    fn is_aborted(&self, h: &BatchHeader) -> bool {
        h.is_transactional()
            && !h.is_control()
            && self.spanning(h.producer_id, h.base_offset).is_some()
    }

    /// The entry whose ABORT marker is at `marker_offset`.
    fn ended_by(&self, producer: i64, marker_offset: i64) -> Option<AbortedTxn> {
        self.spanning(producer, marker_offset)
            .filter(|e| e.last_offset == marker_offset)
            .copied()
    }
}

/// What the rewrite has seen of each producer's transactions so far, in log
/// order (one walk from the log start per pass, across groups).
#[derive(Default)]
struct TxnWalk {
    /// Producers with a transactional data batch (kept, emptied or dropped
    /// in this pass) since their last marker: that marker must stay, as the
    /// transaction still has data in the log (or had until this pass, which
    /// may yet not be swapped in). The flag says whether any of it remains
    /// after this pass.
    with_data: HashMap<i64, bool>,
}

/// The last batches of a producer a pass saw: the last data batch carries
/// its last sequence (idempotence), the last batch overall its epoch and
/// whether a transaction is open; both stay, if only as empty batches.
#[derive(Clone, Copy)]
struct ProducerLast {
    /// Last offset of its latest data batch (-1: none seen).
    data: i64,
    /// Last offset of its latest batch, data or marker.
    any: i64,
}

// -- throttling and reading ---------------------------------------------------

/// Sleeps as needed to keep bytes moved under a rate.
struct Throttle {
    rate: f64,
    start: Instant,
    bytes: f64,
    slept: Duration,
}

impl Throttle {
    fn new(rate: f64) -> Throttle {
        Throttle {
            rate,
            start: Instant::now(),
            bytes: 0.0,
            slept: Duration::ZERO,
        }
    }

    fn account(&mut self, n: u64) {
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return;
        }
        self.bytes += n as f64;
        let due = Duration::from_secs_f64(self.bytes / self.rate);
        let elapsed = self.start.elapsed();
        // Sleeping in steps of at least 5 ms keeps the syscalls few.
        if due > elapsed + Duration::from_millis(5) {
            let nap = due - elapsed;
            std::thread::sleep(nap);
            self.slept += nap;
        }
    }
}

/// Walks the batches of one segment up to a byte limit, reading ahead in
/// large chunks through the segment's own (possibly unlinked) file.
struct SegmentBatches<'a> {
    seg: &'a Segment,
    pos: u64,
    limit: u64,
    chunk: usize,
    buf: Vec<u8>,
    buf_at: u64,
    bytes_read: u64,
}

impl<'a> SegmentBatches<'a> {
    fn new(seg: &'a Segment, from: u64, limit: u64, chunk: usize) -> Self {
        SegmentBatches {
            seg,
            pos: from,
            limit,
            chunk: chunk.max(HEADER_SIZE),
            buf: Vec::new(),
            buf_at: 0,
            bytes_read: 0,
        }
    }

    /// Makes [pos, pos + len) buffered; false past the limit.
    fn fill(&mut self, pos: u64, len: usize) -> Result<bool> {
        let end = pos + len as u64;
        if end > self.limit {
            return Ok(false);
        }
        if pos >= self.buf_at && end <= self.buf_at + self.buf.len() as u64 {
            return Ok(true);
        }
        let want = (len.max(self.chunk) as u64).min(self.limit - pos) as usize;
        self.buf.resize(want, 0);
        let n = self.seg.read_at(&mut self.buf, pos)?;
        self.buf.truncate(n);
        self.buf_at = pos;
        self.bytes_read += n as u64;
        Ok(n >= len)
    }

    /// The next batch: its position, header and bytes.
    fn next_batch(&mut self) -> Result<Option<(u64, BatchHeader, &[u8])>> {
        let pos = self.pos;
        if pos >= self.limit {
            return Ok(None);
        }
        if !self.fill(pos, HEADER_SIZE)? {
            return crate::corrupt!(
                "segment {}: batch header at {pos} runs past the end",
                self.seg.base_offset()
            );
        }
        let at = (pos - self.buf_at) as usize;
        let h = BatchHeader::parse(&self.buf[at..])?;
        let size = h.total_size();
        if !self.fill(pos, size)? {
            return crate::corrupt!(
                "segment {}: batch at {pos} runs past the end",
                self.seg.base_offset()
            );
        }
        let at = (pos - self.buf_at) as usize;
        self.pos = pos + size as u64;
        Ok(Some((pos, h, &self.buf[at..at + size])))
    }
}

// -- per-batch filtering -----------------------------------------------------

/// What a pass knows when it filters a batch.
struct FilterCtx<'a> {
    map: &'a OffsetMap,
    /// Producer id -> its last batches seen by the pass.
    producers: &'a HashMap<i64, ProducerLast>,
    aborted: &'a AbortedTxns,
    first_dirty: i64,
    now_ms: i64,
    delete_retention_ms: i64,
    max_decompressed: usize,
}

enum Filtered {
    /// Unchanged: copy the bytes as they are.
    Keep,
    /// Nothing of it needs to stay.
    Drop,
    /// A rewritten batch.
    Rewrite(Vec<u8>),
}

/// Outcome of filtering one batch.
struct BatchOutcome {
    action: Filtered,
    /// Delete horizon of tombstones it keeps, if any.
    horizon: Option<i64>,
    records: u64,
    removed: u64,
    tombstones_dropped: u64,
    empty: bool,
    unreadable: bool,
    /// Records of aborted transactions removed.
    aborted_removed: u64,
    /// A transaction marker removed (or emptied) past its delete horizon.
    marker_removed: bool,
    /// The aborted transaction this batch's ABORT marker ends, when the
    /// cleaned segment's `.txnindex` must keep it.
    index_entry: Option<AbortedTxn>,
}

impl BatchOutcome {
    fn keep() -> BatchOutcome {
        BatchOutcome {
            action: Filtered::Keep,
            horizon: None,
            records: 0,
            removed: 0,
            tombstones_dropped: 0,
            empty: false,
            unreadable: false,
            aborted_removed: 0,
            marker_removed: false,
            index_entry: None,
        }
    }
}

/// An empty batch standing for `h`: same offsets, producer fields,
/// transactional and control bits and timestamps, no records and no
/// compression (a codec bit over an empty payload is what clients cannot
/// decode; Kafka writes these uncompressed).
fn empty_batch(h: &BatchHeader) -> Result<Vec<u8>> {
    BatchBuilder::new(Codec::None, h.base_offset, h.max_timestamp)
        .producer(h.producer_id, h.producer_epoch, h.base_sequence)
        .partition_leader_epoch(h.partition_leader_epoch)
        .transactional(h.is_transactional())
        .control(h.is_control())
        .log_append_time(h.is_log_append_time())
        .retain_last_offset_delta(h.last_offset_delta)
        .build()
}

/// Why a batch left empty stays.
#[derive(PartialEq)]
enum EmptyKeep {
    /// It goes.
    No,
    /// Its producer's latest data batch (it carries the producer's last
    /// sequence, which idempotence needs after a restart) or latest batch of
    /// any kind (its epoch, and whether a transaction is open); a producer
    /// the pass did not track keeps all of its batches.
    Producer,
    /// Only to pin the group's end offset (the group's last batch).
    Pin,
}

fn keep_empty(h: &BatchHeader, ctx: &FilterCtx<'_>, last_of_group: bool) -> EmptyKeep {
    let for_producer = h.producer_id >= 0
        && ctx.producers.get(&h.producer_id).is_none_or(|last| {
            last.any <= h.last_offset() || (!h.is_control() && last.data <= h.last_offset())
        });
    if for_producer {
        EmptyKeep::Producer
    } else if last_of_group {
        EmptyKeep::Pin
    } else {
        EmptyKeep::No
    }
}

/// The outcome for a batch none of whose records stay: dropped, or kept as
/// an empty batch when [`keep_empty`] says so. A batch kept only as the
/// group's end pin carries no producer: it must not look like a transaction
/// still open (or a marker) to whoever rebuilds producer state from the log.
fn emptied(
    h: &BatchHeader,
    ctx: &FilterCtx<'_>,
    last_of_group: bool,
    mut out: BatchOutcome,
) -> BatchOutcome {
    let keep = keep_empty(h, ctx, last_of_group);
    let neutral = h.producer_id < 0 && !h.is_transactional() && !h.is_control();
    let built = match keep {
        EmptyKeep::No => {
            out.action = Filtered::Drop;
            return out;
        }
        EmptyKeep::Producer | EmptyKeep::Pin
            if h.records_count == 0 && (keep == EmptyKeep::Producer || neutral) =>
        {
            out.action = Filtered::Keep;
            return out;
        }
        EmptyKeep::Producer => empty_batch(h),
        EmptyKeep::Pin => BatchBuilder::new(Codec::None, h.base_offset, h.max_timestamp)
            .partition_leader_epoch(h.partition_leader_epoch)
            .log_append_time(h.is_log_append_time())
            .retain_last_offset_delta(h.last_offset_delta)
            .build(),
    };
    match built {
        Ok(b) => {
            out.action = Filtered::Rewrite(b);
            out.empty = true;
            out
        }
        Err(_) => BatchOutcome {
            unreadable: true,
            ..BatchOutcome::keep()
        },
    }
}

/// A transaction marker (control batch), as Kafka's cleaner treats it: it
/// stays while its transaction still has data in the log (seen by this
/// pass), and with it the `.txnindex` entry of an aborted one; once none is
/// left the entry goes, the marker gets a delete horizon (now +
/// delete.retention.ms, so consumers part way through the transaction still
/// see it end) and a pass after the horizon removes it (down to an empty
/// batch if it is its producer's last).
fn filter_marker(
    batch: &[u8],
    h: &BatchHeader,
    ctx: &FilterCtx<'_>,
    walk: &mut TxnWalk,
    last_of_group: bool,
) -> BatchOutcome {
    let data = walk.with_data.remove(&h.producer_id);
    let entry = ctx.aborted.ended_by(h.producer_id, h.last_offset());
    if let Some(remains) = data {
        // When this pass removed all of the transaction's data, the next
        // pass may start the marker's delete horizon: it is due at once
        // rather than when the log is next dirty enough.
        return BatchOutcome {
            index_entry: entry,
            horizon: (!remains).then_some(ctx.now_ms),
            ..BatchOutcome::keep()
        };
    }
    if check_crc(batch).is_err() {
        // An unreadable batch is kept whole, and so is its entry.
        return BatchOutcome {
            index_entry: entry,
            unreadable: true,
            ..BatchOutcome::keep()
        };
    }
    if h.records_count == 0 {
        // Emptied by an earlier pass, past its horizon.
        return emptied(h, ctx, last_of_group, BatchOutcome::keep());
    }
    // Only COMMIT and ABORT markers are known; any other control record is
    // kept whole (Kafka keeps what it does not know too).
    if end_txn_marker(batch, ctx.max_decompressed).is_none() {
        return BatchOutcome {
            index_entry: entry,
            ..BatchOutcome::keep()
        };
    }
    let old_horizon = (h.attributes & DELETE_HORIZON_MASK != 0).then_some(h.first_timestamp);
    let horizon = old_horizon.unwrap_or_else(|| ctx.now_ms.saturating_add(ctx.delete_retention_ms));
    if ctx.now_ms >= horizon {
        let out = BatchOutcome {
            records: h.records_count.max(0) as u64,
            removed: h.records_count.max(0) as u64,
            marker_removed: true,
            ..BatchOutcome::keep()
        };
        return emptied(h, ctx, last_of_group, out);
    }
    let mut out = BatchOutcome {
        horizon: Some(horizon),
        ..BatchOutcome::keep()
    };
    if old_horizon.is_some() {
        return out;
    }
    // First seen without data: rewritten to carry the horizon.
    let rewritten = records_region(batch, ctx.max_decompressed).and_then(|region| {
        let recs = iter_records(&region).collect::<Result<Vec<_>>>()?;
        let mut b = BatchBuilder::new(Codec::None, h.base_offset, h.max_timestamp)
            .producer(h.producer_id, h.producer_epoch, h.base_sequence)
            .partition_leader_epoch(h.partition_leader_epoch)
            .transactional(h.is_transactional())
            .control(true)
            .log_append_time(h.is_log_append_time())
            .retain_last_offset_delta(h.last_offset_delta)
            .delete_horizon(horizon);
        for r in &recs {
            let ts = h.first_timestamp.wrapping_add(r.timestamp_delta);
            b.push_at(r.offset_delta, ts, r.key, r.value, &r.headers);
        }
        b.build()
    });
    match rewritten {
        Ok(bytes) => out.action = Filtered::Rewrite(bytes),
        Err(_) => {
            out.horizon = None;
            out.unreadable = true;
        }
    }
    out
}

fn filter_batch(
    batch: &[u8],
    h: &BatchHeader,
    ctx: &FilterCtx<'_>,
    walk: &mut TxnWalk,
    last_of_group: bool,
) -> BatchOutcome {
    if h.is_control() {
        return filter_marker(batch, h, ctx, walk, last_of_group);
    }
    let out = filter_data(batch, h, ctx, last_of_group);
    if h.is_transactional() {
        // Whether a batch of the transaction stays as such (an empty batch
        // pinning a group's end carries no producer).
        let remains = match &out.action {
            Filtered::Keep => true,
            Filtered::Drop => false,
            Filtered::Rewrite(b) => BatchHeader::parse(b).map_or(true, |n| n.is_transactional()),
        };
        *walk.with_data.entry(h.producer_id).or_insert(false) |= remains;
    }
    out
}

/// A data batch: its records filtered by key (and all of them removed for
/// an aborted transaction).
fn filter_data(
    batch: &[u8],
    h: &BatchHeader,
    ctx: &FilterCtx<'_>,
    last_of_group: bool,
) -> BatchOutcome {
    // is_aborted holds only for transactional data; committed transactional
    // records are compacted by key like any others.
    if ctx.aborted.is_aborted(h) {
        // Nothing of an aborted transaction is ever read again (its marker
        // stays while this batch may: see filter_marker).
        let n = h.records_count.max(0) as u64;
        let out = BatchOutcome {
            records: n,
            removed: n,
            aborted_removed: n,
            ..BatchOutcome::keep()
        };
        return emptied(h, ctx, last_of_group, out);
    }
    let unreadable = || BatchOutcome {
        unreadable: true,
        ..BatchOutcome::keep()
    };
    if check_crc(batch).is_err() {
        return unreadable();
    }
    if h.records_count == 0 {
        return emptied(h, ctx, last_of_group, BatchOutcome::keep());
    }
    let Ok(region) = records_region(batch, ctx.max_decompressed) else {
        return unreadable();
    };
    let old_horizon = (h.attributes & DELETE_HORIZON_MASK != 0).then_some(h.first_timestamp);
    let horizon = old_horizon.unwrap_or_else(|| ctx.now_ms.saturating_add(ctx.delete_retention_ms));
    let mut kept: Vec<Record<'_>> = Vec::new();
    let (mut records, mut removed, mut dropped) = (0u64, 0u64, 0u64);
    let mut has_tombstone = false;
    for r in iter_records(&region) {
        let Ok(r) = r else {
            return unreadable();
        };
        records += 1;
        let offset = r.offset(h);
        let latest = r.key.and_then(|k| ctx.map.get(k));
        if latest.is_some_and(|l| offset < l) {
            removed += 1;
            continue;
        }
        if r.key.is_some() && r.value.is_none() {
            // A tombstone may go once no older value of its key can remain:
            // it is the key's mapped latest (every older record goes in this
            // pass), or it sits in the clean head, where keys are unique.
            let alone = latest == Some(offset) || (latest.is_none() && offset < ctx.first_dirty);
            if alone && ctx.now_ms >= horizon {
                removed += 1;
                dropped += 1;
                continue;
            }
            has_tombstone = true;
        }
        kept.push(r);
    }
    let mut out = BatchOutcome {
        records,
        removed,
        tombstones_dropped: dropped,
        horizon: has_tombstone.then_some(horizon),
        ..BatchOutcome::keep()
    };
    // A batch whose only news is a first tombstone is rewritten to carry
    // the horizon that starts its delete.retention.ms.
    if removed == 0 && (!has_tombstone || old_horizon.is_some()) {
        return out;
    }
    if kept.is_empty() {
        return emptied(h, ctx, last_of_group, out);
    }
    let Ok(codec) = Codec::from_attributes(h.attributes) else {
        return unreadable();
    };
    let mut b = BatchBuilder::new(codec, h.base_offset, h.max_timestamp)
        .producer(h.producer_id, h.producer_epoch, h.base_sequence)
        .partition_leader_epoch(h.partition_leader_epoch)
        .transactional(h.is_transactional())
        .log_append_time(h.is_log_append_time())
        .retain_last_offset_delta(h.last_offset_delta);
    if has_tombstone {
        b = b.delete_horizon(horizon);
    }
    for r in &kept {
        // The stored timestamp, even in a LogAppendTime batch (where readers
        // use maxTimestamp instead), so nothing the producer wrote changes.
        let ts = h.first_timestamp.wrapping_add(r.timestamp_delta);
        b.push_at(r.offset_delta, ts, r.key, r.value, &r.headers);
    }
    match b.build() {
        Ok(bytes) => out.action = Filtered::Rewrite(bytes),
        // A record that cannot be re-encoded (a timestamp too far from the
        // horizon): keep the batch as it was.
        Err(_) => return unreadable(),
    }
    out
}

// -- the pass ----------------------------------------------------------------

/// How a group ended.
enum GroupOutcome {
    Swapped,
    Unchanged,
    Aborted,
}

fn rename_group(dir: &Path, base: i64, from: &str, to: &str) -> Result<()> {
    // The log file last: its new name is what recovery goes by.
    for suffix in GROUP_SUFFIXES {
        fs::rename(
            suffixed(dir, base, suffix, from),
            suffixed(dir, base, suffix, to),
        )?;
    }
    sync_dir(dir)
}

impl Log {
    /// How dirty the log is and whether a pass is due (see [`CleanableInfo`]).
    /// `max_offset` (the high watermark) bounds what may be cleaned: data
    /// above it may still be truncated away, and must not erase older
    /// values of its keys.
    pub fn cleanable(&self, now_ms: i64, max_offset: Option<i64>) -> CleanableInfo {
        let segs = self.segments();
        let (info, _) = self.cleanable_in(&segs, &self.config(), now_ms, max_offset);
        info
    }

    /// The cleanable info and the number of cleanable segments in `segs`.
    fn cleanable_in(
        &self,
        segs: &[Arc<Segment>],
        cfg: &LogConfig,
        now_ms: i64,
        max_offset: Option<i64>,
    ) -> (CleanableInfo, usize) {
        let closed = &segs[..segs.len().saturating_sub(1)];
        let limit = max_offset.unwrap_or(i64::MAX);
        let count = closed
            .iter()
            .take_while(|s| {
                s.next_offset() <= limit
                    && (cfg.min_compaction_lag_ms <= 0
                        || now_ms.saturating_sub(s.max_timestamp()) >= cfg.min_compaction_lag_ms)
            })
            .count();
        let first_uncleanable = segs
            .get(count)
            .map_or_else(|| self.log_end_offset(), |s| s.base_offset());
        let first_dirty = self
            .cleaner_first_dirty
            .load(Ordering::Acquire)
            .max(self.log_start_offset())
            .min(first_uncleanable);
        let (mut clean, mut dirty) = (0u64, 0u64);
        let mut first_dirty_seg = None;
        for s in &segs[..count] {
            if s.next_offset() <= first_dirty {
                clean += s.size();
                continue;
            }
            first_dirty_seg.get_or_insert(s);
            if s.base_offset() >= first_dirty {
                dirty += s.size();
                continue;
            }
            let split = match s.find_batch(first_dirty, s.size()) {
                Ok(Some((pos, _))) => pos,
                _ => 0,
            };
            clean += split;
            dirty += s.size() - split;
        }
        let total = clean + dirty;
        let ratio = if total == 0 {
            0.0
        } else {
            dirty as f64 / total as f64
        };
        let lag_due = dirty > 0
            && cfg.max_compaction_lag_ms < i64::MAX
            && first_dirty_seg
                .and_then(|s| s.roll_base_ms())
                .is_some_and(|t| now_ms.saturating_sub(t) > cfg.max_compaction_lag_ms);
        let horizon_due = count > 0 && self.cleaner_horizon.load(Ordering::Acquire) <= now_ms;
        let due = cfg.cleanup_compact
            && ((dirty > 0 && (ratio >= cfg.min_cleanable_dirty_ratio || lag_due)) || horizon_due);
        let info = CleanableInfo {
            clean_bytes: clean,
            dirty_bytes: dirty,
            first_dirty_offset: first_dirty,
            first_uncleanable_offset: first_uncleanable,
            dirty_ratio: ratio,
            compaction_lag_due: lag_due,
            delete_horizon_due: horizon_due,
            due,
        };
        (info, count)
    }

    /// One cleaning pass (see the module documentation). Blocks for the
    /// whole pass, so callers run it off their event loop; appends and reads
    /// go on meanwhile. Fails if the log is not compacted or another pass on
    /// it is running; returns early (`aborted`) if the log closes.
    pub fn clean(
        &self,
        now_ms: i64,
        cfg: &CleanerConfig,
        max_offset: Option<i64>,
    ) -> Result<CleanStats> {
        let started = Instant::now();
        let _pass = match self.cleaning.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(Error::InvalidArgument(
                    "the log is being cleaned already".into(),
                ))
            }
        };
        if self.is_closed() {
            return Err(Error::InvalidArgument(format!(
                "log {} is closed",
                self.dir().display()
            )));
        }
        let lc = self.config();
        if !lc.cleanup_compact {
            return Err(Error::InvalidArgument(
                "cleanup.policy does not include compact".into(),
            ));
        }
        let segs = self.segments();
        let (info, count) = self.cleanable_in(&segs, &lc, now_ms, max_offset);
        let mut stats = CleanStats {
            first_dirty_offset: info.first_dirty_offset,
            ..CleanStats::default()
        };
        let mut throttle = Throttle::new(cfg.io_max_bytes_per_second);
        let cleanable = &segs[..count];

        // Phase 1: the offset map over the dirty range.
        let mut map = OffsetMap::with_budget(cfg.dedupe_buffer_bytes, cfg.load_factor);
        let mut producers = HashMap::new();
        // The aborted transactions with data below the first uncleanable
        // offset, wherever their markers are (Kafka's collectAbortedTransactions
        // reads on past the range until no later one can start below it).
        // The caller's bound (the last stable offset) means every
        // transaction with data in the range has ended.
        let aborted = AbortedTxns::new(
            self.collect_aborted_txns(self.log_start_offset(), info.first_uncleanable_offset),
        );
        let Some(map_end) = self.build_offset_map(
            cleanable,
            info.first_dirty_offset,
            info.first_uncleanable_offset,
            &mut map,
            &mut producers,
            &aborted,
            cfg,
            &mut throttle,
        )?
        else {
            stats.aborted = true;
            return Ok(self.finish_stats(stats, started, &throttle));
        };
        stats.map_entries = map.len;
        stats.map_capacity = map.max_len;
        stats.complete = map_end >= info.first_uncleanable_offset;

        // Phase 2: rewrite from the log start to where the map ends.
        if map_end <= info.first_dirty_offset && !info.delete_horizon_due {
            return Ok(self.finish_stats(stats, started, &throttle));
        }
        let n = cleanable.partition_point(|s| s.base_offset() < map_end);
        let ctx = FilterCtx {
            map: &map,
            producers: &producers,
            aborted: &aborted,
            first_dirty: info.first_dirty_offset,
            now_ms,
            delete_retention_ms: lc.delete_retention_ms.max(0),
            max_decompressed: cfg.max_decompressed_bytes,
        };
        let mut horizon = NO_HORIZON;
        let mut walk = TxnWalk::default();
        for group in group_segments(&cleanable[..n], lc.max_segment_bytes()) {
            match self.clean_group(
                group,
                &ctx,
                &mut walk,
                &lc,
                cfg,
                &mut throttle,
                &mut stats,
                &mut horizon,
            )? {
                GroupOutcome::Swapped => stats.segments_written += 1,
                GroupOutcome::Unchanged => {}
                GroupOutcome::Aborted => {
                    stats.aborted = true;
                    return Ok(self.finish_stats(stats, started, &throttle));
                }
            }
        }
        // Tombstones of dirty segments not rewritten yet wait for their
        // first pass; those already kept with a horizon set it.
        self.store_cleaner_checkpoint(map_end, horizon)?;
        stats.first_dirty_offset = self.cleaner_first_dirty.load(Ordering::Acquire);
        Ok(self.finish_stats(stats, started, &throttle))
    }

    fn finish_stats(
        &self,
        mut stats: CleanStats,
        started: Instant,
        throttle: &Throttle,
    ) -> CleanStats {
        stats.elapsed_ms = started.elapsed().as_millis() as u64;
        stats.throttled_ms = throttle.slept.as_millis() as u64;
        stats
    }

    /// Maps key -> last offset over [first_dirty, end), record by record,
    /// until the map is full. Returns the first offset not mapped (`end`
    /// when everything fitted), or None if the log closed meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn build_offset_map(
        &self,
        cleanable: &[Arc<Segment>],
        first_dirty: i64,
        end: i64,
        map: &mut OffsetMap,
        producers: &mut HashMap<i64, ProducerLast>,
        aborted: &AbortedTxns,
        cfg: &CleanerConfig,
        throttle: &mut Throttle,
    ) -> Result<Option<i64>> {
        // The clean head's producers, from batch headers alone: a producer
        // that has not written since the last pass still has its last
        // batches there, and only with them known can the older ones go.
        for seg in cleanable.iter().filter(|s| s.base_offset() < first_dirty) {
            let limit = seg.size();
            let mut pos = 0;
            while pos < limit {
                if self.is_closed() {
                    return Ok(None);
                }
                let h = seg.header_at(pos, limit)?;
                if h.base_offset >= first_dirty {
                    break;
                }
                track_producer(producers, &h);
                pos += h.total_size() as u64;
                throttle.account(HEADER_SIZE as u64);
            }
        }
        for seg in cleanable.iter().filter(|s| s.next_offset() > first_dirty) {
            let limit = seg.size();
            let from = if seg.base_offset() >= first_dirty {
                0
            } else {
                seg.find_batch(first_dirty, limit)?
                    .map_or(limit, |(pos, _)| pos)
            };
            let mut batches = SegmentBatches::new(seg, from, limit, cfg.io_buffer_bytes);
            let mut accounted = 0;
            loop {
                throttle.account(batches.bytes_read - accounted);
                accounted = batches.bytes_read;
                let Some((_, h, batch)) = batches.next_batch()? else {
                    break;
                };
                if self.is_closed() {
                    return Ok(None);
                }
                if h.last_offset() >= first_dirty {
                    track_producer(producers, &h);
                }
                // Keys of markers, of aborted transactions' records (the
                // pass removes them) and of batches it keeps whole are not
                // mapped: nothing may be removed on their account.
                if h.is_control()
                    || aborted.is_aborted(&h)
                    || h.records_count == 0
                    || check_crc(batch).is_err()
                {
                    continue;
                }
                let Ok(region) = records_region(batch, cfg.max_decompressed_bytes) else {
                    continue;
                };
                // Parse the whole batch first: a batch that fails half way
                // is kept whole, so none of its keys may count.
                let Ok(recs) = iter_records(&region).collect::<Result<Vec<_>>>() else {
                    continue;
                };
                for r in recs {
                    let offset = r.offset(&h);
                    let Some(key) = r.key else { continue };
                    if offset < first_dirty || offset >= end {
                        continue;
                    }
                    if !map.put(key, offset) {
                        return Ok(Some(offset));
                    }
                }
            }
        }
        Ok(Some(end))
    }

    /// Writes the cleaned copy of one group and swaps it in.
    #[allow(clippy::too_many_arguments)]
    fn clean_group(
        &self,
        group: &[Arc<Segment>],
        ctx: &FilterCtx<'_>,
        walk: &mut TxnWalk,
        lc: &LogConfig,
        cfg: &CleanerConfig,
        throttle: &mut Throttle,
        stats: &mut CleanStats,
        horizon: &mut i64,
    ) -> Result<GroupOutcome> {
        let dir = self.dir();
        let base = group[0].base_offset();
        // Sizes now: the swap refuses the group if any of them changed.
        let old: Vec<(Arc<Segment>, u64)> = group.iter().map(|s| (s.clone(), s.size())).collect();
        let log_path = suffixed(&dir, base, LOG_SUFFIX, CLEANED_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)?;
        let written = self.write_cleaned(&file, &old, ctx, walk, lc, cfg, throttle, stats, horizon);
        let (builder, changed) = match written {
            Ok(Some(w)) => w,
            Ok(None) => {
                remove_group_files(&dir, base, CLEANED_SUFFIX);
                return Ok(GroupOutcome::Aborted);
            }
            Err(e) => {
                remove_group_files(&dir, base, CLEANED_SUFFIX);
                return Err(e);
            }
        };
        stats.segments_read += group.len();
        if !changed && group.len() == 1 {
            remove_group_files(&dir, base, CLEANED_SUFFIX);
            return Ok(GroupOutcome::Unchanged);
        }
        let seg = builder.finish(&dir, file, ctx.now_ms);
        let swapped = seg.write_index_copies(CLEANED_SUFFIX).and_then(|()| {
            self.swap_segments(
                &old,
                Arc::new(seg),
                || rename_group(&dir, base, CLEANED_SUFFIX, SWAP_SUFFIX),
                || rename_group(&dir, base, SWAP_SUFFIX, ""),
            )
        });
        match swapped {
            Ok(true) => Ok(GroupOutcome::Swapped),
            Ok(false) => {
                remove_group_files(&dir, base, CLEANED_SUFFIX);
                Ok(GroupOutcome::Aborted)
            }
            Err(e) => {
                remove_group_files(&dir, base, CLEANED_SUFFIX);
                Err(e)
            }
        }
    }

    /// Filters the group's batches into `file` (fsync'ed). Returns the
    /// segment builder and whether anything changed, or None if the log
    /// closed meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn write_cleaned(
        &self,
        file: &File,
        old: &[(Arc<Segment>, u64)],
        ctx: &FilterCtx<'_>,
        walk: &mut TxnWalk,
        lc: &LogConfig,
        cfg: &CleanerConfig,
        throttle: &mut Throttle,
        stats: &mut CleanStats,
        horizon: &mut i64,
    ) -> Result<Option<(SealedSegmentBuilder, bool)>> {
        let mut builder = SealedSegmentBuilder::new(old[0].0.base_offset(), lc.segment_config());
        let mut out = BufWriter::with_capacity(cfg.io_buffer_bytes.max(4096), file);
        let mut changed = false;
        // The old group's aborted-transaction entries; the cleaned one keeps
        // those whose transactions still have data (see filter_marker).
        let old_entries: usize = old.iter().map(|(s, _)| s.txn_index().len()).sum();
        let mut kept_entries = 0usize;
        for (i, (seg, size)) in old.iter().enumerate() {
            let mut batches = SegmentBatches::new(seg, 0, *size, cfg.io_buffer_bytes);
            let mut accounted = 0;
            loop {
                throttle.account(batches.bytes_read - accounted);
                accounted = batches.bytes_read;
                let Some((pos, h, batch)) = batches.next_batch()? else {
                    break;
                };
                if self.is_closed() {
                    return Ok(None);
                }
                let last_of_group = i + 1 == old.len() && pos + batch.len() as u64 == *size;
                let o = filter_batch(batch, &h, ctx, walk, last_of_group);
                if let Some(entry) = o.index_entry {
                    if !matches!(o.action, Filtered::Drop) {
                        builder.add_aborted_txn(entry);
                        kept_entries += 1;
                    }
                }
                stats.aborted_records_removed += o.aborted_removed;
                stats.markers_removed += o.marker_removed as u64;
                stats.records_read += o.records;
                stats.records_removed += o.removed;
                stats.tombstones_dropped += o.tombstones_dropped;
                stats.empty_batches += o.empty as u64;
                stats.unreadable_batches += o.unreadable as u64;
                if let Some(t) = o.horizon {
                    *horizon = (*horizon).min(t);
                }
                let bytes: &[u8] = match &o.action {
                    Filtered::Keep => batch,
                    Filtered::Drop => {
                        changed = true;
                        continue;
                    }
                    Filtered::Rewrite(b) => {
                        changed = true;
                        b
                    }
                };
                // A rewritten batch is re-read for its header: the builder
                // recomputed maxTimestamp.
                let nh = BatchHeader::parse(bytes)?;
                if builder.size() + bytes.len() as u64 > MAX_SEGMENT_SIZE {
                    return Err(Error::InvalidArgument(format!(
                        "cleaned segment {} would pass {MAX_SEGMENT_SIZE} bytes",
                        old[0].0.base_offset()
                    )));
                }
                out.write_all(bytes)?;
                builder.on_batch(&BatchInfo {
                    base_offset: nh.base_offset,
                    last_offset: nh.last_offset(),
                    max_timestamp: nh.max_timestamp,
                    size: bytes.len(),
                });
                stats.bytes_written += bytes.len() as u64;
                throttle.account(bytes.len() as u64);
            }
            stats.bytes_read += batches.bytes_read;
        }
        changed |= kept_entries != old_entries;
        out.flush()?;
        drop(out);
        file.sync_data()?;
        Ok(Some((builder, changed)))
    }
}

/// Notes `h` among its producer's last batches (within the tracking bound).
fn track_producer(producers: &mut HashMap<i64, ProducerLast>, h: &BatchHeader) {
    if h.producer_id < 0
        || (producers.len() >= MAX_TRACKED_PRODUCERS && !producers.contains_key(&h.producer_id))
    {
        return;
    }
    let last = producers
        .entry(h.producer_id)
        .or_insert(ProducerLast { data: -1, any: -1 });
    last.any = last.any.max(h.last_offset());
    if !h.is_control() {
        last.data = last.data.max(h.last_offset());
    }
}

/// Splits consecutive segments into runs that fit one segment: at most
/// `max_bytes` together and offsets within u32 of the first base.
fn group_segments(segs: &[Arc<Segment>], max_bytes: u64) -> Vec<&[Arc<Segment>]> {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < segs.len() {
        let start = i;
        let mut size = segs[i].size();
        i += 1;
        while i < segs.len()
            && size + segs[i].size() <= max_bytes
            && segs[i].next_offset() - 1 - segs[start].base_offset() <= u32::MAX as i64
        {
            size += segs[i].size();
            i += 1;
        }
        groups.push(&segs[start..i]);
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_map_keeps_latest_and_honours_its_budget() {
        let mut m = OffsetMap::with_budget(64 * MAP_SLOT_BYTES, 0.5);
        assert_eq!(m.max_len, 32);
        for i in 0..32i64 {
            assert!(m.put(format!("k{i}").as_bytes(), i));
        }
        assert!(!m.put(b"one too many", 99));
        // Updating a known key still works when full.
        assert!(m.put(b"k3", 100));
        assert_eq!(m.get(b"k3"), Some(100));
        assert_eq!(m.get(b"k4"), Some(4));
        assert_eq!(m.get(b"absent"), None);
        assert_eq!(m.slots.len() * 8, 64 * MAP_SLOT_BYTES);
    }

    #[test]
    fn aborted_txns_span_their_producers_data_and_end_at_their_marker() {
        let t = |pid, first, last| AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        };
        let a = AbortedTxns::new(vec![t(2, 20, 25), t(1, 10, 15), t(1, 30, 31), t(1, 10, 15)]);
        assert_eq!(a.by_producer[&1].len(), 2);
        for (pid, offset, want) in [
            (1, 9, false),
            (1, 10, true),
            (1, 15, true),
            (1, 16, false),
            (1, 30, true),
            (1, 20, false),
            (2, 20, true),
            (3, 20, false),
        ] {
            assert_eq!(a.spanning(pid, offset).is_some(), want, "{pid} {offset}");
        }
        assert_eq!(a.ended_by(1, 15), Some(t(1, 10, 15)));
        assert_eq!(a.ended_by(1, 14), None);
        assert_eq!(a.ended_by(2, 15), None);
    }

    #[test]
    fn offset_map_budget_rounds_down_to_a_power_of_two() {
        let m = OffsetMap::with_budget(100 * MAP_SLOT_BYTES, 0.9);
        assert_eq!(m.slots.len() / 3, 64);
        let tiny = OffsetMap::with_budget(0, 0.9);
        assert_eq!(tiny.slots.len() / 3, 16);
    }
}
