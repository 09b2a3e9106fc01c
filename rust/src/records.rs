//! Record batch v2 (magic 2), as laid out in the design documents:
//!
//! ```text
//! baseOffset: int64 | batchLength: int32 | partitionLeaderEpoch: int32
//! magic: int8 | crc: uint32 (CRC-32C of attributes..end)
//! attributes: int16 | lastOffsetDelta: int32 | firstTimestamp: int64
//! maxTimestamp: int64 | producerId: int64 | producerEpoch: int16
//! baseSequence: int32 | recordsCount: int32 | records...
//!
//! record: length: varint | attributes: int8 | timestampDelta: varlong
//!         offsetDelta: varint | keyLength: varint | key | valueLength: varint
//!         value | headerCount: varint | [headerKeyLength: varint | headerKey
//!         | headerValueLength: varint | headerValue]
//! ```
//!
//! `batchLength` counts the bytes after itself. baseOffset and
//! partitionLeaderEpoch sit outside the CRC, so the broker assigns them in
//! place without re-encoding. For a compressed batch everything after
//! recordsCount is one compressed blob holding the records.
//!
//! What lives here:
//! * framing: [`BatchHeader::parse`], [`split_batches`] /
//!   [`split_batches_prefix`] / [`batches`] over concatenated batches;
//! * checking: [`validate_batch`] (the produce path's full check),
//!   [`check_batch_integrity`] (framing + CRC only, for stored or
//!   replicated data such as compacted batches), [`check_crc`];
//! * reading: [`records_region`] + [`iter_records`] (zero-copy
//!   [`Record`]s), [`decode_batch_records`] (owned, for tools),
//!   [`first_offset_with_timestamp_at_or_after`] (ListOffsets by time);
//! * writing: [`BatchBuilder`], [`assign_offsets`],
//!   [`set_max_timestamp_log_append`].
//!
//! Every reader is bounds checked: lengths are compared with the bytes
//! actually present before any slice or allocation, so arbitrary input
//! yields an error, never a panic or an attacker-sized allocation.

use std::borrow::Cow;

use crate::compression::{self, Codec};
use crate::corrupt;
use crate::crc32c::{crc32c, crc32c_delta};
use crate::error::{Error, Result};
pub use crate::error::{RecordError, RecordProblem};
use crate::varint::{
    decode_varint, decode_varlong, encode_varint, encode_varlong, varint_size, varlong_size,
};

pub const BASE_OFFSET: usize = 0;
pub const BATCH_LENGTH: usize = 8;
pub const PARTITION_LEADER_EPOCH: usize = 12;
pub const MAGIC: usize = 16;
pub const CRC: usize = 17;
pub const ATTRIBUTES: usize = 21;
pub const LAST_OFFSET_DELTA: usize = 23;
pub const FIRST_TIMESTAMP: usize = 27;
pub const MAX_TIMESTAMP: usize = 35;
pub const PRODUCER_ID: usize = 43;
pub const PRODUCER_EPOCH: usize = 51;
pub const BASE_SEQUENCE: usize = 53;
pub const RECORDS_COUNT: usize = 57;
pub const RECORDS: usize = 61;

/// Bytes of a batch header, up to and including recordsCount.
pub const HEADER_SIZE: usize = RECORDS;
/// baseOffset + batchLength: the bytes not counted by batchLength.
pub const LOG_OVERHEAD: usize = 12;
pub const CURRENT_MAGIC: i8 = 2;

pub const COMPRESSION_MASK: i16 = 0x07;
pub const TIMESTAMP_TYPE_MASK: i16 = 0x08;
pub const TRANSACTIONAL_MASK: i16 = 0x10;
pub const CONTROL_MASK: i16 = 0x20;
/// KIP-534: firstTimestamp holds the delete horizon of a compacted batch.
pub const DELETE_HORIZON_MASK: i16 = 0x40;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
pub const NO_SEQUENCE: i32 = -1;
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;

#[inline]
pub(crate) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
pub(crate) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}
#[inline]
pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// The fixed header of one batch, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub first_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Decodes the header at the start of `buf`. Checks only what the header
    /// alone can tell: enough bytes for a header, magic 2, and a batchLength
    /// that covers at least the header. It does not check the CRC nor that
    /// the whole batch is present (see [`check_crc`], [`BatchHeader::total_size`]).
    pub fn parse(buf: &[u8]) -> Result<BatchHeader> {
        if buf.len() < HEADER_SIZE {
            return corrupt!(
                "batch header needs {HEADER_SIZE} bytes, {} present",
                buf.len()
            );
        }
        let magic = buf[MAGIC] as i8;
        if magic != CURRENT_MAGIC {
            return corrupt!("unsupported magic {magic} (only 2 is accepted)");
        }
        let batch_length = be_i32(buf, BATCH_LENGTH);
        if (batch_length as i64) < (HEADER_SIZE - LOG_OVERHEAD) as i64 {
            return corrupt!("batch length {batch_length} is smaller than a batch header");
        }
        Ok(BatchHeader {
            base_offset: be_i64(buf, BASE_OFFSET),
            batch_length,
            partition_leader_epoch: be_i32(buf, PARTITION_LEADER_EPOCH),
            magic,
            crc: be_i32(buf, CRC) as u32,
            attributes: be_i16(buf, ATTRIBUTES),
            last_offset_delta: be_i32(buf, LAST_OFFSET_DELTA),
            first_timestamp: be_i64(buf, FIRST_TIMESTAMP),
            max_timestamp: be_i64(buf, MAX_TIMESTAMP),
            producer_id: be_i64(buf, PRODUCER_ID),
            producer_epoch: be_i16(buf, PRODUCER_EPOCH),
            base_sequence: be_i32(buf, BASE_SEQUENCE),
            records_count: be_i32(buf, RECORDS_COUNT),
        })
    }

    /// Bytes the whole batch occupies, LOG_OVERHEAD included.
    #[inline]
    pub fn total_size(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD
    }
    #[inline]
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    #[inline]
    pub fn compression_codec(&self) -> u8 {
        (self.attributes & COMPRESSION_MASK) as u8
    }
    /// true for LogAppendTime, false for CreateTime.
    #[inline]
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_MASK != 0
    }
    #[inline]
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_MASK != 0
    }
    #[inline]
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_MASK != 0
    }
    /// A batch with no record and no producer, transaction or control role:
    /// nothing in it for a consumer or for producer state (the cleaner keeps
    /// one only to pin a cleaned segment's end offset).
    #[inline]
    pub fn is_bare_empty(&self) -> bool {
        self.records_count == 0
            && self.producer_id < 0
            && !self.is_transactional()
            && !self.is_control()
    }
}

/// Checks the CRC-32C of a complete batch (`batch` holds exactly one batch).
pub fn check_crc(batch: &[u8]) -> Result<()> {
    if batch.len() < HEADER_SIZE {
        return corrupt!("batch of {} bytes is shorter than a header", batch.len());
    }
    let stored = be_i32(batch, CRC) as u32;
    let computed = crc32c(&batch[ATTRIBUTES..]);
    if stored != computed {
        return corrupt!("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}");
    }
    Ok(())
}

fn invalid<T>(msg: String) -> Result<T> {
    Err(Error::InvalidRecord(msg))
}

// -- framing -------------------------------------------------------------

/// Reads the framing of the batch starting at `buf[pos..]`: its total size
/// (LOG_OVERHEAD included) once batchLength and magic are sane. `Ok(None)`
/// means the bytes left are too few to hold the whole batch (or its
/// length prefix).
fn frame_at(buf: &[u8], pos: usize) -> Result<Option<usize>> {
    let rest = &buf[pos..];
    if rest.len() < LOG_OVERHEAD {
        return Ok(None);
    }
    let batch_length = be_i32(rest, BATCH_LENGTH);
    if (batch_length as i64) < (HEADER_SIZE - LOG_OVERHEAD) as i64 {
        return corrupt!(
            "batch at byte {pos}: batch length {batch_length} is smaller than a batch header"
        );
    }
    let total = batch_length as usize + LOG_OVERHEAD;
    if rest.len() > MAGIC {
        let magic = rest[MAGIC] as i8;
        if magic != CURRENT_MAGIC {
            return corrupt!("batch at byte {pos}: unsupported magic {magic} (only 2 is accepted)");
        }
    }
    Ok((rest.len() >= total).then_some(total))
}

/// Iterator over the `(position, size)` of each batch in a buffer of
/// concatenated batches; see [`batches`].
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

/// Walks concatenated batches (a produce payload, a fetch response, a file
/// region), checking each frame (batchLength, magic, presence of all its
/// bytes) but not CRCs or contents. Yields `Err` once, at the first bad or
/// incomplete batch, then stops.
pub fn batches(buf: &[u8]) -> Batches<'_> {
    Batches {
        buf,
        pos: 0,
        failed: false,
    }
}

impl<'a> Batches<'a> {
    /// Bytes covered by the complete batches yielded so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl Iterator for Batches<'_> {
    type Item = Result<(usize, usize)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        match frame_at(self.buf, self.pos) {
            Ok(Some(size)) => {
                let at = self.pos;
                self.pos += size;
                Some(Ok((at, size)))
            }
            Ok(None) => {
                self.failed = true;
                let left = self.buf.len() - self.pos;
                Some(corrupt!(
                    "partial batch at byte {}: {left} bytes left",
                    self.pos
                ))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// `(position, size)` of every batch in `buf`, which must consist of whole
/// batches only (a produce payload): a partial trailing batch is an error.
pub fn split_batches(buf: &[u8]) -> Result<Vec<(usize, usize)>> {
    batches(buf).collect()
}

/// Like [`split_batches`] but tolerant of a bad tail, for log recovery and
/// fetch-size trimming: returns the batches up to the first partial or
/// malformed one, and the byte length of that valid prefix.
pub fn split_batches_prefix(buf: &[u8]) -> (Vec<(usize, usize)>, usize) {
    let mut it = batches(buf);
    let spans: Vec<_> = it.by_ref().map_while(|r| r.ok()).collect();
    let valid = it.position();
    (spans, valid)
}

// -- validation ----------------------------------------------------------

/// What [`validate_batch`] checks beyond framing and CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidateOptions {
    /// Largest batch accepted, LOG_OVERHEAD included (`max.message.bytes`).
    pub max_batch_bytes: usize,
    /// Decompress compressed batches and check their records too. Costs a
    /// decompression per batch; without it a compressed batch is checked
    /// up to its header only.
    pub inspect_compressed: bool,
    /// Bound on one batch's decompressed records (bomb protection).
    pub max_decompressed_bytes: usize,
    /// Reject records without a key (compacted topics).
    pub require_keys: bool,
    /// Reject records whose (CreateTime) timestamp falls outside this
    /// window; None: any timestamp (LogAppendTime topics).
    pub timestamps: Option<TimestampWindow>,
}

/// A record's timestamp when it has none (old clients): never out of range.
const NO_TIMESTAMP: i64 = -1;

/// The timestamps a CreateTime topic accepts: at most `before_max_ms`
/// behind and `after_max_ms` ahead of `now` (the broker's clock, in ms),
/// Kafka's `message.timestamp.before.max.ms` / `after.max.ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampWindow {
    pub now: i64,
    pub before_max_ms: i64,
    pub after_max_ms: i64,
}

impl TimestampWindow {
    /// Whether `timestamp` lies within the window; computed without
    /// overflow, so extreme timestamps and bounds compare correctly.
    /// Records without a timestamp (-1) always do.
    fn admits(&self, timestamp: i64) -> bool {
        if timestamp == NO_TIMESTAMP {
            return true;
        }
        let behind = self.now as i128 - timestamp as i128;
        behind <= self.before_max_ms as i128 && -behind <= self.after_max_ms as i128
    }
}

impl Default for ValidateOptions {
    /// Kafka's defaults: 1 MiB + 12 bytes per batch, look inside compressed
    /// batches, 64 MiB decompression bound, keys optional.
    fn default() -> Self {
        ValidateOptions {
            max_batch_bytes: 1_048_588,
            inspect_compressed: true,
            max_decompressed_bytes: 64 << 20,
            require_keys: false,
            timestamps: None,
        }
    }
}

/// The header facts of a validated batch that the broker needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Bytes of the batch, LOG_OVERHEAD included.
    pub size: usize,
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub records_count: i32,
    pub first_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub codec: Codec,
    pub is_log_append_time: bool,
    pub is_transactional: bool,
    pub is_control: bool,
}

impl BatchInfo {
    fn new(h: &BatchHeader, codec: Codec) -> BatchInfo {
        BatchInfo {
            size: h.total_size(),
            base_offset: h.base_offset,
            partition_leader_epoch: h.partition_leader_epoch,
            attributes: h.attributes,
            last_offset_delta: h.last_offset_delta,
            records_count: h.records_count,
            first_timestamp: h.first_timestamp,
            max_timestamp: h.max_timestamp,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            codec,
            is_log_append_time: h.is_log_append_time(),
            is_transactional: h.is_transactional(),
            is_control: h.is_control(),
        }
    }

    /// Whether the batch comes from an idempotent/transactional producer.
    #[inline]
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// The last record's sequence number; sequences wrap from i32::MAX to 0.
    #[inline]
    pub fn last_sequence(&self) -> i32 {
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }
}

/// `seq + inc` in producer sequence space, which wraps to 0 after i32::MAX.
#[inline]
pub fn increment_sequence(seq: i32, inc: i32) -> i32 {
    if seq < 0 {
        return seq;
    }
    ((seq as i64 + inc as i64) % (i32::MAX as i64 + 1)) as i32
}

/// Framing (exact size), size limit, magic and CRC of a buffer holding one
/// whole batch; returns its header.
fn check_frame_and_crc(batch: &[u8], max_batch_bytes: usize) -> Result<BatchHeader> {
    if batch.len() < LOG_OVERHEAD {
        return corrupt!(
            "batch of {} bytes is shorter than its length prefix",
            batch.len()
        );
    }
    let batch_length = be_i32(batch, BATCH_LENGTH);
    if (batch_length as i64) < (HEADER_SIZE - LOG_OVERHEAD) as i64 {
        return corrupt!("batch length {batch_length} is smaller than a batch header");
    }
    let total = batch_length as usize + LOG_OVERHEAD;
    if total > batch.len() {
        return corrupt!(
            "truncated batch: {total} bytes declared, {} present",
            batch.len()
        );
    }
    if total < batch.len() {
        return corrupt!(
            "batch of {total} bytes followed by {} stray bytes",
            batch.len() - total
        );
    }
    if total > max_batch_bytes {
        return Err(Error::RecordTooLarge {
            size: total,
            max: max_batch_bytes,
        });
    }
    let h = BatchHeader::parse(batch)?;
    check_crc(batch)?;
    Ok(h)
}

/// Integrity of one stored or replicated batch: exact framing, magic, CRC,
/// a known codec and a non-negative record count. Unlike
/// [`validate_batch`] it accepts what the log itself may legitimately hold
/// (empty batches and offset gaps left by compaction, control batches),
/// which is what log recovery needs.
pub fn check_batch_integrity(batch: &[u8]) -> Result<BatchHeader> {
    let h = check_frame_and_crc(batch, usize::MAX)?;
    Codec::from_attributes(h.attributes)?;
    if h.records_count < 0 {
        return corrupt!("negative record count {}", h.records_count);
    }
    if h.last_offset_delta < 0 {
        return corrupt!("negative lastOffsetDelta {}", h.last_offset_delta);
    }
    Ok(h)
}

/// Checks one batch as the log may hold it (what `kbroker dump-log` reads):
/// [`check_batch_integrity`], then its records, decompressed within
/// `max_decompressed`: they parse exactly to the end, their number is
/// recordsCount, and their offset deltas rise within lastOffsetDelta (the
/// cleaner leaves gaps and empty batches, which a producer may not send);
/// a control batch's records have control keys.
pub fn check_stored_batch(batch: &[u8], max_decompressed: usize) -> Result<BatchInfo> {
    let h = check_batch_integrity(batch)?;
    let codec = Codec::from_attributes(h.attributes)?;
    let info = BatchInfo::new(&h, codec);
    if h.records_count == 0 {
        return Ok(info);
    }
    let region = records_region(batch, max_decompressed)?;
    let mut n: i64 = 0;
    let mut previous = -1i64;
    for r in iter_records(&region) {
        let r = r?;
        n += 1;
        if n > h.records_count as i64 {
            return corrupt!("records continue past recordsCount {}", h.records_count);
        }
        let delta = r.offset_delta as i64;
        if delta <= previous || delta > h.last_offset_delta as i64 {
            return corrupt!(
                "record {} has offsetDelta {delta}, not above {previous} and within lastOffsetDelta {}",
                n - 1,
                h.last_offset_delta
            );
        }
        previous = delta;
        if h.is_control() {
            parse_control_key(r.key)?;
        }
    }
    if n != h.records_count as i64 {
        return corrupt!(
            "recordsCount is {} but the batch holds {n} records",
            h.records_count
        );
    }
    Ok(info)
}

/// Fully validates one batch as received from a producer (`batch` holds
/// exactly one batch). In order:
///
/// 1. framing: batchLength matches the bytes present exactly
///    (`CorruptRecord`); size <= `max_batch_bytes` (`RecordTooLarge`);
/// 2. magic 2 and the CRC (`CorruptRecord`);
/// 3. attributes: codec id 0-4 (`CorruptRecord`). Bits 6-15 are *ignored*,
///    like Kafka does: bit 6 is KIP-534's delete-horizon flag, and the rest
///    are reserved for future use, where rejecting would break newer
///    clients for no safety gain (the CRC already vouches for the bytes);
/// 4. header consistency (`InvalidRecord`): recordsCount >= 1 (a negative
///    count is `CorruptRecord`; an empty batch would consume offsets with
///    nothing in them, Kafka refuses those from clients too),
///    lastOffsetDelta == recordsCount - 1, a producer id if transactional,
///    and a base sequence if it has a producer id (control batches aside);
/// 5. records, for uncompressed batches, and for compressed ones when
///    `inspect_compressed` (decompressed within `max_decompressed_bytes`):
///    they parse exactly to the end, their number equals recordsCount,
///    offsetDeltas run 0, 1, ..., n-1; keys present if `require_keys`;
///    control batches hold well-formed control records, and a transaction
///    marker sits alone in a transactional batch.
///
/// baseOffset and partitionLeaderEpoch are not checked: the broker
/// overwrites both ([`assign_offsets`]).
pub fn validate_batch(batch: &[u8], opts: &ValidateOptions) -> Result<BatchInfo> {
    let h = check_frame_and_crc(batch, opts.max_batch_bytes)?;
    let codec = Codec::from_attributes(h.attributes)?;
    let info = BatchInfo::new(&h, codec);
    if h.records_count < 0 {
        return corrupt!("negative record count {}", h.records_count);
    }
    if h.records_count == 0 {
        return invalid("batch has no records".into());
    }
    if h.last_offset_delta != h.records_count - 1 {
        return invalid(format!(
            "lastOffsetDelta {} does not match recordsCount {}",
            h.last_offset_delta, h.records_count
        ));
    }
    if info.is_transactional && !info.has_producer_id() {
        return invalid("transactional batch without a producer id".into());
    }
    if info.has_producer_id() && h.base_sequence < 0 && !info.is_control {
        return invalid(format!(
            "invalid sequence number {} for producer id {}",
            h.base_sequence, h.producer_id
        ));
    }
    let payload = &batch[RECORDS..];
    match codec {
        Codec::None => check_records(payload, &info, opts)?,
        _ if opts.inspect_compressed => {
            // A record takes at least 7 bytes: refuse impossible counts
            // before spending a decompression on them.
            if h.records_count as usize > opts.max_decompressed_bytes / MIN_RECORD_SIZE {
                return corrupt!(
                    "{} records cannot fit in {} decompressed bytes",
                    h.records_count,
                    opts.max_decompressed_bytes
                );
            }
            let region = compression::decompress(codec, payload, opts.max_decompressed_bytes)?;
            check_records(&region, &info, opts)?;
        }
        _ => {}
    }
    Ok(info)
}

/// Smallest possible encoded record: 1-byte length, attributes, and
/// 1-byte timestamp delta, offset delta, key length, value length, header
/// count.
const MIN_RECORD_SIZE: usize = 7;

/// The record-level half of [`validate_batch`].
fn check_records(region: &[u8], info: &BatchInfo, opts: &ValidateOptions) -> Result<()> {
    let expected = info.records_count as usize;
    if expected > region.len() / MIN_RECORD_SIZE {
        return corrupt!("{expected} records cannot fit in {} bytes", region.len());
    }
    let mut pos = 0;
    let mut n: usize = 0;
    let mut txn_marker = false;
    // Every refused record is reported (Kafka's record_errors), not just
    // the first; a malformed record still ends the check at once.
    let mut refused: Vec<RecordError> = Vec::new();
    while pos < region.len() {
        if n == expected {
            return corrupt!("records continue past recordsCount {expected}");
        }
        let r = parse_record(region, &mut pos, None)?;
        if r.offset_delta as i64 != n as i64 {
            return invalid(format!(
                "record {n} has offsetDelta {}, expected {n}",
                r.offset_delta
            ));
        }
        if info.is_control {
            let (_, kind) = parse_control_key(r.key)?;
            txn_marker |= kind == CONTROL_ABORT || kind == CONTROL_COMMIT;
        } else if opts.require_keys && r.key.is_none() {
            refused.push(RecordError {
                batch_index: n,
                problem: RecordProblem::MissingKey,
            });
        } else if let Some(window) = &opts.timestamps {
            let timestamp = if info.is_log_append_time {
                info.max_timestamp
            } else {
                info.first_timestamp.wrapping_add(r.timestamp_delta)
            };
            if !window.admits(timestamp) {
                refused.push(RecordError {
                    batch_index: n,
                    problem: RecordProblem::TimestampOutOfRange {
                        offset: info.base_offset.wrapping_add(r.offset_delta as i64),
                        timestamp,
                    },
                });
            }
        }
        n += 1;
    }
    if n != expected {
        return corrupt!("recordsCount is {expected} but the batch holds {n} records");
    }
    if !refused.is_empty() {
        return Err(Error::RecordErrors(refused));
    }
    if txn_marker && (expected != 1 || !info.is_transactional) {
        return invalid(
            "a transaction marker must be the only record of a transactional batch".into(),
        );
    }
    Ok(())
}

// -- control records -----------------------------------------------------

/// Control record type of an abort marker.
pub const CONTROL_ABORT: i16 = 0;
/// Control record type of a commit marker.
pub const CONTROL_COMMIT: i16 = 1;

/// The key of a control record: version (0) and type.
pub fn control_key(kind: i16) -> [u8; 4] {
    let mut k = [0u8; 4];
    k[2..].copy_from_slice(&kind.to_be_bytes());
    k
}

/// The value of a transaction marker (version 0, coordinator epoch).
pub fn end_txn_marker_value(coordinator_epoch: i32) -> [u8; 6] {
    let mut v = [0u8; 6];
    v[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    v
}

/// A transaction marker as a control batch (Kafka's
/// `MemoryRecords.withEndTransactionMarker`): offset 0 (the leader assigns
/// it), transactional, no sequence, uncompressed, one record whose key is
/// the control key and whose value carries the coordinator epoch.
pub fn end_txn_marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    committed: bool,
    timestamp: i64,
) -> Result<Vec<u8>> {
    let kind = if committed {
        CONTROL_COMMIT
    } else {
        CONTROL_ABORT
    };
    let mut b = BatchBuilder::new(Codec::None, 0, timestamp)
        .producer(producer_id, producer_epoch, NO_SEQUENCE)
        .transactional(true)
        .control(true);
    b.push(
        timestamp,
        Some(&control_key(kind)),
        Some(&end_txn_marker_value(coordinator_epoch)),
        NO_HEADERS,
    );
    b.build()
}

/// What the transaction marker in a control batch says: (control type,
/// coordinator epoch). None when the batch (the whole batch, at the start
/// of `batch`) is no control batch, holds no record (compaction emptied
/// it), or its first record is no readable COMMIT or ABORT marker. Markers
/// are written uncompressed; a compressed one is read within
/// `max_decompressed` bytes.
pub fn end_txn_marker(batch: &[u8], max_decompressed: usize) -> Option<(i16, i32)> {
    let (h, batch) = whole_batch(batch).ok()?;
    if !h.is_control() || h.records_count <= 0 {
        return None;
    }
    let region = records_region(batch, max_decompressed).ok()?;
    let record = iter_records(&region).next()?.ok()?;
    let (_, kind) = parse_control_key(record.key).ok()?;
    if kind != CONTROL_ABORT && kind != CONTROL_COMMIT {
        return None;
    }
    // Value: version (int16), coordinator epoch (int32); a later version
    // may add fields after them (Kafka reads newer versions the same way).
    let value = record.value.filter(|v| v.len() >= 6)?;
    Some((kind, be_i32(value, 2)))
}

/// `(version, type)` of a control record's key. Unknown types are allowed
/// (future control records); a missing or short key or a negative version
/// is not.
pub fn parse_control_key(key: Option<&[u8]>) -> Result<(i16, i16)> {
    let Some(k) = key.filter(|k| k.len() >= 4) else {
        return invalid("control record without a 4-byte key".into());
    };
    let version = be_i16(k, 0);
    if version < 0 {
        return invalid(format!("control record key version {version}"));
    }
    Ok((version, be_i16(k, 2)))
}

// -- reading records -----------------------------------------------------

/// A record header: (key, value).
pub type Header<'a> = (&'a [u8], Option<&'a [u8]>);

/// One record, borrowing its bytes from the records region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// (key, value); keys are UTF-8 by contract but not checked here
    /// (Kafka decodes them leniently too).
    pub headers: Vec<Header<'a>>,
}

impl Record<'_> {
    /// The record's offset in the log.
    #[inline]
    pub fn offset(&self, h: &BatchHeader) -> i64 {
        h.base_offset.wrapping_add(self.offset_delta as i64)
    }
    /// The record's timestamp: maxTimestamp for LogAppendTime batches,
    /// firstTimestamp + delta otherwise.
    #[inline]
    pub fn timestamp(&self, h: &BatchHeader) -> i64 {
        record_timestamp(h, self.timestamp_delta)
    }
}

#[inline]
fn record_timestamp(h: &BatchHeader, delta: i64) -> i64 {
    if h.is_log_append_time() {
        h.max_timestamp
    } else {
        h.first_timestamp.wrapping_add(delta)
    }
}

/// The fields of a record except its headers.
struct RecordCore<'a> {
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
}

/// A bounds-checked reader over one record's bytes. Varint errors inside
/// a record surface as `CorruptRecord`: at this level they mean a corrupt
/// batch, not a caller mistake.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize, // invariant: pos <= buf.len()
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
    #[inline(always)]
    fn varint(&mut self, what: &str) -> Result<i32> {
        match decode_varint(self.rest()) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(e) => corrupt!("record {what}: {e}"),
        }
    }
    #[inline(always)]
    fn varlong(&mut self, what: &str) -> Result<i64> {
        match decode_varlong(self.rest()) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(e) => corrupt!("record {what}: {e}"),
        }
    }
    /// A length-prefixed byte string; length -1 means null.
    #[inline(always)]
    fn bytes(&mut self, what: &str) -> Result<Option<&'a [u8]>> {
        let len = self.varint(what)?;
        if len == -1 {
            return Ok(None);
        }
        let left = self.buf.len() - self.pos;
        if len < 0 || len as usize > left {
            return corrupt!("record {what} length {len} with {left} bytes left");
        }
        let b = &self.buf[self.pos..self.pos + len as usize];
        self.pos += len as usize;
        Ok(Some(b))
    }
}

/// Parses the record at `region[*pos..]` and advances `*pos` past it.
/// Headers are checked always and collected only when `headers` is given,
/// so validation allocates nothing.
fn parse_record<'a>(
    region: &'a [u8],
    pos: &mut usize,
    mut headers: Option<&mut Vec<Header<'a>>>,
) -> Result<RecordCore<'a>> {
    let rest = &region[*pos..];
    let (len, n) = match decode_varint(rest) {
        Ok(v) => v,
        Err(e) => return corrupt!("record length at byte {}: {e}", *pos),
    };
    let left = rest.len() - n;
    if len < 0 || len as usize > left {
        return corrupt!(
            "record length {len} at byte {} with {left} bytes left",
            *pos
        );
    }
    let mut c = Cursor {
        buf: &rest[n..n + len as usize],
        pos: 0,
    };
    let Some(&attributes) = c.buf.first() else {
        return corrupt!("empty record at byte {}", *pos);
    };
    c.pos = 1;
    let timestamp_delta = c.varlong("timestampDelta")?;
    let offset_delta = c.varint("offsetDelta")?;
    let key = c.bytes("key")?;
    let value = c.bytes("value")?;
    let count = c.varint("header count")?;
    // Each header takes at least 2 bytes: refuse counts the bytes cannot
    // hold before reserving anything.
    if count < 0 || count as usize > (c.buf.len() - c.pos) / 2 {
        return corrupt!(
            "record header count {count} with {} bytes left",
            c.buf.len() - c.pos
        );
    }
    if let Some(h) = headers.as_deref_mut() {
        h.reserve(count as usize);
    }
    for _ in 0..count {
        let Some(k) = c.bytes("header key")? else {
            return corrupt!("record header with a null key");
        };
        let v = c.bytes("header value")?;
        if let Some(h) = headers.as_deref_mut() {
            h.push((k, v));
        }
    }
    if c.pos != c.buf.len() {
        return corrupt!(
            "record at byte {} has {} bytes past its last field",
            *pos,
            c.buf.len() - c.pos
        );
    }
    *pos += n + len as usize;
    Ok(RecordCore {
        attributes: attributes as i8,
        timestamp_delta,
        offset_delta,
        key,
        value,
    })
}

/// Iterator over the records of a records region; see [`iter_records`].
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    region: &'a [u8],
    pos: usize,
    failed: bool,
}

/// Iterates the records of `region` (the bytes after recordsCount of an
/// uncompressed batch, or a compressed batch's decompressed payload, as
/// [`records_region`] returns). Stops after the first error. Does not
/// compare with recordsCount; [`validate_batch`] does.
pub fn iter_records(region: &[u8]) -> RecordIter<'_> {
    RecordIter {
        region,
        pos: 0,
        failed: false,
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.region.len() {
            return None;
        }
        let mut headers = Vec::new();
        match parse_record(self.region, &mut self.pos, Some(&mut headers)) {
            Ok(r) => Some(Ok(Record {
                attributes: r.attributes,
                timestamp_delta: r.timestamp_delta,
                offset_delta: r.offset_delta,
                key: r.key,
                value: r.value,
                headers,
            })),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// The header of a buffer that starts with one whole batch, and that batch.
fn whole_batch(batch: &[u8]) -> Result<(BatchHeader, &[u8])> {
    let h = BatchHeader::parse(batch)?;
    let total = h.total_size();
    if batch.len() < total {
        return corrupt!(
            "truncated batch: {total} bytes declared, {} present",
            batch.len()
        );
    }
    Ok((h, &batch[..total]))
}

/// The records region of the batch at the start of `batch`: borrowed for an
/// uncompressed batch, decompressed (at most `max_decompressed` bytes) for a
/// compressed one. Does not check the CRC.
pub fn records_region(batch: &[u8], max_decompressed: usize) -> Result<Cow<'_, [u8]>> {
    let (h, batch) = whole_batch(batch)?;
    let payload = &batch[RECORDS..];
    match Codec::from_attributes(h.attributes)? {
        Codec::None => Ok(Cow::Borrowed(payload)),
        codec => Ok(Cow::Owned(compression::decompress(
            codec,
            payload,
            max_decompressed,
        )?)),
    }
}

/// One record with owned bytes and absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Decodes every record of one batch (CRC checked, decompressing within
/// `max_decompressed`). Allocates per record: for tools and tests, not the
/// hot path.
pub fn decode_batch_records(batch: &[u8], max_decompressed: usize) -> Result<Vec<DecodedRecord>> {
    let (h, batch) = whole_batch(batch)?;
    check_crc(batch)?;
    let region = records_region(batch, max_decompressed)?;
    let mut out =
        Vec::with_capacity((h.records_count.max(0) as usize).min(region.len() / MIN_RECORD_SIZE));
    for r in iter_records(&region) {
        let r = r?;
        out.push(DecodedRecord {
            offset: r.offset(&h),
            timestamp: r.timestamp(&h),
            key: r.key.map(<[u8]>::to_vec),
            value: r.value.map(<[u8]>::to_vec),
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect(),
        });
    }
    Ok(out)
}

/// The first record of `batch` whose timestamp is >= `ts`, as (offset,
/// timestamp), for ListOffsets by time. A batch whose maxTimestamp is below
/// `ts` is answered from its header alone. In a LogAppendTime batch every
/// record carries maxTimestamp. Compressed batches are decompressed within
/// `max_decompressed`.
pub fn first_offset_with_timestamp_at_or_after(
    batch: &[u8],
    ts: i64,
    max_decompressed: usize,
) -> Result<Option<(i64, i64)>> {
    let (h, batch) = whole_batch(batch)?;
    if h.max_timestamp < ts || h.records_count <= 0 {
        return Ok(None);
    }
    let region = records_region(batch, max_decompressed)?;
    let mut pos = 0;
    while pos < region.len() {
        let r = parse_record(&region, &mut pos, None)?;
        let t = record_timestamp(&h, r.timestamp_delta);
        if t >= ts {
            return Ok(Some((h.base_offset.wrapping_add(r.offset_delta as i64), t)));
        }
    }
    Ok(None)
}

// -- rewriting in place --------------------------------------------------

/// Stamps the broker-assigned baseOffset and partitionLeaderEpoch into a
/// batch. Both fields sit outside the CRC, so nothing else changes.
/// Fails (leaving the bytes untouched) only if `batch` is shorter than a
/// batch header.
pub fn assign_offsets(
    batch: &mut [u8],
    base_offset: i64,
    partition_leader_epoch: i32,
) -> Result<()> {
    if batch.len() < HEADER_SIZE {
        return Err(Error::InvalidArgument(format!(
            "{} bytes is not a batch",
            batch.len()
        )));
    }
    batch[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&partition_leader_epoch.to_be_bytes());
    Ok(())
}

/// Turns a batch into a LogAppendTime batch stamped `ts`: sets the
/// timestamp-type attribute bit and maxTimestamp (what consumers read as
/// every record's timestamp); firstTimestamp and the records are left as
/// the producer wrote them, as Kafka does.
///
/// Both fields are inside the CRC, so the CRC must change. It is *patched*
/// from the XOR difference of the two fields (CRC-32C is linear) instead of
/// recomputed over the batch: O(log size) work, and a batch that was
/// corrupt stays detectably corrupt rather than being blessed with a fresh
/// CRC. `batch` must hold exactly one whole batch.
pub fn set_max_timestamp_log_append(batch: &mut [u8], ts: i64) -> Result<()> {
    let h = BatchHeader::parse(batch)
        .map_err(|e| Error::InvalidArgument(format!("not a batch: {e}")))?;
    if h.total_size() != batch.len() {
        return Err(Error::InvalidArgument(format!(
            "buffer of {} bytes does not hold exactly one batch of {}",
            batch.len(),
            h.total_size()
        )));
    }
    let attributes = h.attributes | TIMESTAMP_TYPE_MASK;
    // delta covers attributes..=maxTimestamp; the rest of the CRC'd bytes
    // are unchanged.
    let mut delta = [0u8; PRODUCER_ID - ATTRIBUTES];
    let d_attr = (h.attributes ^ attributes).to_be_bytes();
    let d_max = (h.max_timestamp ^ ts).to_be_bytes();
    delta[..2].copy_from_slice(&d_attr);
    delta[MAX_TIMESTAMP - ATTRIBUTES..].copy_from_slice(&d_max);
    let crc = h.crc ^ crc32c_delta(&delta, batch.len() - PRODUCER_ID);
    batch[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&ts.to_be_bytes());
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

// -- recompression (compression.type) ---------------------------------------

/// Rewrites validated batches (concatenated, as in a Produce request) so
/// their records are stored with `target`, as Kafka does for a topic's
/// `compression.type`: a batch already in `target` is copied unchanged; any
/// other has its records region decompressed (within `max_decompressed`)
/// and compressed with `target` (kept as is for `Codec::None`), its
/// attributes' codec bits and batchLength set and its CRC computed over the
/// new bytes. Record bytes, timestamps, producer fields and every other
/// attribute bit stay. Fails with `RecordTooLarge` when a rewritten batch
/// passes `max_batch_bytes` (as Kafka checks the size after conversion).
pub fn recompress_batches(
    batches: &[u8],
    target: Codec,
    max_decompressed: usize,
    max_batch_bytes: usize,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(batches.len());
    for (pos, size) in split_batches(batches)? {
        let batch = &batches[pos..pos + size];
        let h = BatchHeader::parse(batch)?;
        let codec = Codec::from_attributes(h.attributes)?;
        if codec == target {
            out.extend_from_slice(batch);
            continue;
        }
        let region = records_region(batch, max_decompressed)?;
        let payload = match target {
            Codec::None => region,
            _ => Cow::Owned(compression::compress(target, &region)?),
        };
        let total = HEADER_SIZE + payload.len();
        if total > max_batch_bytes {
            return Err(Error::RecordTooLarge {
                size: total,
                max: max_batch_bytes,
            });
        }
        let Ok(batch_length) = i32::try_from(total - LOG_OVERHEAD) else {
            return Err(Error::RecordTooLarge {
                size: total,
                max: i32::MAX as usize,
            });
        };
        let start = out.len();
        out.extend_from_slice(&batch[..HEADER_SIZE]);
        out.extend_from_slice(&payload);
        let new = &mut out[start..];
        new[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
        let attributes = (h.attributes & !COMPRESSION_MASK) | target as i16;
        new[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
        let crc = crc32c(&new[ATTRIBUTES..]);
        new[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }
    Ok(out)
}

// -- building ------------------------------------------------------------

/// An empty header list for [`BatchBuilder::push`] (a bare `&[]` leaves the
/// header types uninferred).
pub const NO_HEADERS: &[(&[u8], Option<&[u8]>)] = &[];

/// Builds one v2 batch. Records are encoded as they are pushed; `build`
/// compresses, writes the header and computes the CRC.
///
/// ```
/// use kbroker::compression::Codec;
/// use kbroker::records::{validate_batch, BatchBuilder, ValidateOptions};
/// let mut b = BatchBuilder::new(Codec::Lz4, 0, 1_700_000_000_000);
/// b.push(1_700_000_000_000, Some(b"k"), Some(b"v"), &[("h", Some(b"x"))]);
/// let batch = b.build().unwrap();
/// assert_eq!(validate_batch(&batch, &ValidateOptions::default()).unwrap().records_count, 1);
/// ```
///
/// Errors in pushed records (a timestamp delta or length that does not fit
/// its field, offset deltas out of order) are kept and reported by
/// [`BatchBuilder::build`], so pushing stays infallible.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    codec: Codec,
    base_offset: i64,
    timestamp: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    log_append_time: bool,
    delete_horizon: bool,
    min_last_offset_delta: i32,
    records: Vec<u8>,
    count: i32,
    first_timestamp: Option<i64>,
    max_timestamp: i64,
    last_offset_delta: i32,
    error: Option<String>,
}

impl BatchBuilder {
    /// A builder for a batch at `base_offset`. `timestamp` is the batch's
    /// timestamp when it has no records, and the append time written as
    /// maxTimestamp when [`log_append_time`](Self::log_append_time) is set.
    pub fn new(codec: Codec, base_offset: i64, timestamp: i64) -> Self {
        BatchBuilder {
            codec,
            base_offset,
            timestamp,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            log_append_time: false,
            delete_horizon: false,
            min_last_offset_delta: 0,
            records: Vec::new(),
            count: 0,
            first_timestamp: None,
            max_timestamp: i64::MIN,
            last_offset_delta: -1,
            error: None,
        }
    }

    /// Producer id, epoch and base sequence (idempotent/transactional).
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }
    pub fn transactional(mut self, on: bool) -> Self {
        self.transactional = on;
        self
    }
    /// Marks a control batch (transaction markers); push records whose key
    /// is [`control_key`].
    pub fn control(mut self, on: bool) -> Self {
        self.control = on;
        self
    }
    /// Timestamp type LogAppendTime, maxTimestamp = the builder's timestamp.
    pub fn log_append_time(mut self, on: bool) -> Self {
        self.log_append_time = on;
        self
    }
    /// KIP-534: marks the batch with the delete-horizon flag and stores
    /// `horizon_ms` as firstTimestamp (the time after which the cleaner may
    /// drop its tombstones). Call before pushing: record timestamp deltas
    /// are then taken from the horizon, so every record keeps its timestamp.
    pub fn delete_horizon(mut self, horizon_ms: i64) -> Self {
        self.delete_horizon = true;
        self.first_timestamp = Some(horizon_ms);
        self
    }
    /// Keeps lastOffsetDelta at least `delta` even if fewer records remain:
    /// compaction must preserve a batch's offset range and last sequence.
    pub fn retain_last_offset_delta(mut self, delta: i32) -> Self {
        self.min_last_offset_delta = delta;
        self
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends a record at the next offset delta.
    pub fn push<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(K, Option<V>)],
    ) -> &mut Self {
        let delta = self.last_offset_delta.wrapping_add(1);
        self.push_at(delta, timestamp, key, value, headers)
    }

    /// Appends a record at an explicit offset delta, which must exceed the
    /// previous one (compaction leaves gaps).
    pub fn push_at<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        offset_delta: i32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(K, Option<V>)],
    ) -> &mut Self {
        if self.error.is_none() {
            if let Err(e) = self.encode(offset_delta, timestamp, key, value, headers) {
                self.error = Some(e);
            }
        }
        self
    }

    fn encode<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        offset_delta: i32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(K, Option<V>)],
    ) -> std::result::Result<(), String> {
        if offset_delta <= self.last_offset_delta || offset_delta < 0 {
            return Err(format!(
                "offset delta {offset_delta} after {}",
                self.last_offset_delta
            ));
        }
        if self.count == i32::MAX {
            return Err("too many records".into());
        }
        let first = *self.first_timestamp.get_or_insert(timestamp);
        let ts_delta = timestamp
            .checked_sub(first)
            .ok_or_else(|| format!("timestamp {timestamp} too far from the first, {first}"))?;
        fn field_size(b: Option<&[u8]>) -> std::result::Result<usize, String> {
            match b {
                None => Ok(1),
                Some(b) => {
                    let len = i32::try_from(b.len())
                        .map_err(|_| format!("field of {} bytes", b.len()))?;
                    Ok(varint_size(len) + b.len())
                }
            }
        }
        let header_count =
            i32::try_from(headers.len()).map_err(|_| "too many headers".to_string())?;
        let mut size = 1 + varlong_size(ts_delta) + varint_size(offset_delta);
        size += field_size(key)? + field_size(value)? + varint_size(header_count);
        for (k, v) in headers {
            size += field_size(Some(k.as_ref()))? + field_size(v.as_ref().map(|v| v.as_ref()))?;
        }
        let size = i32::try_from(size).map_err(|_| format!("record of {size} bytes"))?;
        fn put(out: &mut Vec<u8>, b: Option<&[u8]>) {
            match b {
                None => encode_varint(-1, out),
                Some(b) => {
                    encode_varint(b.len() as i32, out);
                    out.extend_from_slice(b);
                }
            }
        }
        let out = &mut self.records;
        out.reserve(size as usize + 5);
        encode_varint(size, out);
        out.push(0); // record attributes: unused
        encode_varlong(ts_delta, out);
        encode_varint(offset_delta, out);
        put(out, key);
        put(out, value);
        encode_varint(header_count, out);
        for (k, v) in headers {
            put(out, Some(k.as_ref()));
            put(out, v.as_ref().map(|v| v.as_ref()));
        }
        self.count += 1;
        self.last_offset_delta = offset_delta;
        self.max_timestamp = self.max_timestamp.max(timestamp);
        Ok(())
    }

    /// The finished batch: header, (compressed) records, CRC.
    pub fn build(&self) -> Result<Vec<u8>> {
        if let Some(e) = &self.error {
            return Err(Error::InvalidArgument(format!("batch builder: {e}")));
        }
        let compressed;
        let payload: &[u8] = match self.codec {
            Codec::None => &self.records,
            codec => {
                compressed = compression::compress(codec, &self.records)?;
                &compressed
            }
        };
        let total = HEADER_SIZE + payload.len();
        let batch_length = i32::try_from(total - LOG_OVERHEAD)
            .map_err(|_| Error::InvalidArgument(format!("batch of {total} bytes")))?;
        let mut attributes = self.codec as i16;
        if self.log_append_time {
            attributes |= TIMESTAMP_TYPE_MASK;
        }
        if self.transactional {
            attributes |= TRANSACTIONAL_MASK;
        }
        if self.control {
            attributes |= CONTROL_MASK;
        }
        if self.delete_horizon {
            attributes |= DELETE_HORIZON_MASK;
        }
        let first_timestamp = self.first_timestamp.unwrap_or(self.timestamp);
        let max_timestamp = if self.log_append_time || self.count == 0 {
            self.timestamp
        } else {
            self.max_timestamp
        };
        let last_offset_delta = self.last_offset_delta.max(self.min_last_offset_delta);
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&batch_length.to_be_bytes());
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.push(CURRENT_MAGIC as u8);
        out.extend_from_slice(&[0; 4]); // CRC, below
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&last_offset_delta.to_be_bytes());
        out.extend_from_slice(&first_timestamp.to_be_bytes());
        out.extend_from_slice(&max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(payload);
        let crc = crc32c(&out[ATTRIBUTES..]);
        out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_batches_may_have_gaps_and_be_empty_but_not_disordered() {
        // What the cleaner writes: records 0 and 3 of 5 kept, under a
        // delete horizon; an empty batch keeping its offsets.
        let mut b = BatchBuilder::new(Codec::Lz4, 10, 1_000)
            .producer(4, 0, 0)
            .retain_last_offset_delta(4)
            .delete_horizon(9_000);
        b.push_at(0, 1_000, Some(b"a"), Some(b"1"), NO_HEADERS);
        b.push_at(3, 1_000, Some(b"b"), None::<&[u8]>, NO_HEADERS);
        let gapped = b.build().unwrap();
        assert!(validate_batch(&gapped, &ValidateOptions::default()).is_err());
        let info = check_stored_batch(&gapped, 1 << 20).unwrap();
        assert_eq!((info.records_count, info.last_offset_delta), (2, 4));
        let empty = BatchBuilder::new(Codec::None, 10, 1_000)
            .producer(4, 0, 0)
            .transactional(true)
            .control(true)
            .retain_last_offset_delta(0)
            .build()
            .unwrap();
        assert_eq!(
            check_stored_batch(&empty, 1 << 20).unwrap().records_count,
            0
        );
        // A record past lastOffsetDelta is not what a log holds.
        let mut b = BatchBuilder::new(Codec::None, 0, 1_000).retain_last_offset_delta(5);
        b.push_at(0, 1_000, Some(b"a"), Some(b"1"), NO_HEADERS);
        b.push_at(5, 1_000, Some(b"b"), Some(b"1"), NO_HEADERS);
        let mut bad = b.build().unwrap();
        assert!(check_stored_batch(&bad, 1 << 20).is_ok());
        bad[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&1i32.to_be_bytes());
        let crc = crate::crc32c::crc32c(&bad[ATTRIBUTES..]);
        bad[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let err = check_stored_batch(&bad, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("offsetDelta 5"), "{err}");
    }
    use proptest::prelude::*;

    #[test]
    fn recompress_to_every_codec_keeps_the_records() {
        let recs: Vec<Rec> = (0..50)
            .map(|i| {
                let h = vec![(b"h".to_vec(), Some(vec![i as u8; 2]))];
                let key = (i % 3 != 0).then(|| format!("key-{i}").into_bytes());
                (T0 + i, key, Some(vec![b'v'; 100 + i as usize]), h)
            })
            .collect();
        for from in Codec::ALL {
            let mut b = BatchBuilder::new(from, 0, T0)
                .producer(42, 3, 17)
                .log_append_time(from == Codec::Lz4);
            for (ts, k, v, h) in &recs {
                b.push(*ts, k.as_deref(), v.as_deref(), h);
            }
            let one = b.build().unwrap();
            let two = [one.clone(), simple(from, 3)].concat();
            let expected: Vec<_> = [&one[..], &simple(from, 3)[..]]
                .iter()
                .map(|b| decode_batch_records(b, 1 << 24).unwrap())
                .collect();
            for to in Codec::ALL {
                let out = recompress_batches(&two, to, 1 << 24, 1 << 24).unwrap();
                if to == from {
                    assert_eq!(out, two, "{from:?} is kept as it came");
                }
                let spans = split_batches(&out).unwrap();
                assert_eq!(spans.len(), 2);
                for ((pos, size), want) in spans.into_iter().zip(&expected) {
                    let batch = &out[pos..pos + size];
                    let info = validate_batch(batch, &opts()).unwrap();
                    assert_eq!(info.codec, to, "{from:?} -> {to:?}");
                    let old = BatchHeader::parse(if pos == 0 { &one } else { &two[one.len()..] })
                        .unwrap();
                    let h = BatchHeader::parse(batch).unwrap();
                    assert_eq!(
                        h.attributes & !COMPRESSION_MASK,
                        old.attributes & !COMPRESSION_MASK
                    );
                    assert_eq!(
                        (h.producer_id, h.producer_epoch, h.base_sequence),
                        (old.producer_id, old.producer_epoch, old.base_sequence)
                    );
                    assert_eq!(
                        (h.first_timestamp, h.max_timestamp, h.last_offset_delta),
                        (
                            old.first_timestamp,
                            old.max_timestamp,
                            old.last_offset_delta
                        )
                    );
                    assert_eq!(&decode_batch_records(batch, 1 << 24).unwrap(), want);
                }
            }
        }
    }

    #[test]
    fn recompress_checks_the_size_and_the_bound() {
        let big = build(
            Codec::Zstd,
            &[(T0, None, Some(vec![0u8; 100_000]), Vec::new())],
        );
        assert!(big.len() < 1000);
        match recompress_batches(&big, Codec::None, 1 << 24, 10_000) {
            Err(Error::RecordTooLarge { max: 10_000, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            recompress_batches(&big, Codec::Gzip, 50_000, 1 << 24),
            Err(Error::CorruptRecord(_))
        ));
        assert!(recompress_batches(&big, Codec::Zstd, 10, 10).is_ok());
    }

    type Headers = Vec<(Vec<u8>, Option<Vec<u8>>)>;
    type Rec = (i64, Option<Vec<u8>>, Option<Vec<u8>>, Headers);

    const T0: i64 = 1_700_000_000_000;

    fn opts() -> ValidateOptions {
        ValidateOptions {
            max_batch_bytes: 1 << 24,
            ..ValidateOptions::default()
        }
    }

    fn build(codec: Codec, recs: &[Rec]) -> Vec<u8> {
        let mut b = BatchBuilder::new(codec, 0, T0);
        for (ts, k, v, h) in recs {
            b.push(*ts, k.as_deref(), v.as_deref(), h);
        }
        b.build().unwrap()
    }

    fn simple(codec: Codec, n: usize) -> Vec<u8> {
        let recs: Vec<Rec> = (0..n)
            .map(|i| {
                let h = if i % 2 == 0 {
                    vec![(b"trace".to_vec(), Some(vec![i as u8; 3]))]
                } else {
                    vec![]
                };
                (
                    T0 + i as i64,
                    Some(format!("key-{i}").into_bytes()),
                    Some(vec![b'x'; 40 + i]),
                    h,
                )
            })
            .collect();
        build(codec, &recs)
    }

    /// A batch around a hand-made records region, with a correct CRC.
    fn raw_batch(region: &[u8], count: i32, last_offset_delta: i32, attributes: i16) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&((HEADER_SIZE - LOG_OVERHEAD + region.len()) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&attributes.to_be_bytes());
        b.extend_from_slice(&last_offset_delta.to_be_bytes());
        b.extend_from_slice(&T0.to_be_bytes());
        b.extend_from_slice(&T0.to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(region);
        refresh_crc(&mut b);
        b
    }

    fn refresh_crc(b: &mut [u8]) {
        let crc = crc32c(&b[ATTRIBUTES..]);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }

    /// One encoded record from raw field encodings (for malformed cases).
    fn raw_record(body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        encode_varint(body.len() as i32, &mut r);
        r.extend_from_slice(body);
        r
    }

    fn body(offset_delta: i32, key: Option<&[u8]>, value: Option<&[u8]>, tail: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8];
        encode_varlong(0, &mut b);
        encode_varint(offset_delta, &mut b);
        for f in [key, value] {
            match f {
                None => encode_varint(-1, &mut b),
                Some(x) => {
                    encode_varint(x.len() as i32, &mut b);
                    b.extend_from_slice(x);
                }
            }
        }
        b.extend_from_slice(tail);
        b
    }

    fn corrupt_err<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(Error::CorruptRecord(m)) => m,
            other => panic!("expected CorruptRecord, got {other:?}"),
        }
    }
    fn invalid_err<T: std::fmt::Debug>(r: Result<T>) -> String {
        match r {
            Err(Error::InvalidRecord(m)) => m,
            other => panic!("expected InvalidRecord, got {other:?}"),
        }
    }

    #[test]
    fn header_constants_add_up() {
        assert_eq!(HEADER_SIZE, 61);
        let b = simple(Codec::None, 3);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.total_size(), b.len());
        assert_eq!((h.records_count, h.last_offset_delta), (3, 2));
        assert_eq!((h.first_timestamp, h.max_timestamp), (T0, T0 + 2));
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (-1, -1, -1)
        );
        assert_eq!(h.partition_leader_epoch, -1);
    }

    #[test]
    fn round_trip_every_codec() {
        for codec in Codec::ALL {
            let b = simple(codec, 50);
            let info = validate_batch(&b, &opts()).unwrap();
            assert_eq!(info.codec, codec);
            assert_eq!(
                (info.records_count, info.last_offset_delta, info.size),
                (50, 49, b.len())
            );
            let region = records_region(&b, 1 << 20).unwrap();
            let h = BatchHeader::parse(&b).unwrap();
            for (i, r) in iter_records(&region).enumerate() {
                let r = r.unwrap();
                assert_eq!(r.offset(&h), i as i64);
                assert_eq!(r.timestamp(&h), T0 + i as i64);
                assert_eq!(r.key, Some(format!("key-{i}").as_bytes()));
                assert_eq!(r.value.unwrap().len(), 40 + i);
                assert_eq!(r.headers.len(), usize::from(i % 2 == 0));
            }
            let decoded = decode_batch_records(&b, 1 << 20).unwrap();
            assert_eq!(decoded.len(), 50);
            assert_eq!(
                decoded[4].headers,
                vec![(b"trace".to_vec(), Some(vec![4u8; 3]))]
            );
        }
    }

    #[test]
    fn null_key_value_and_header_value() {
        let recs = vec![(T0, None, None, vec![(b"h".to_vec(), None)])];
        let b = build(Codec::None, &recs);
        validate_batch(&b, &opts()).unwrap();
        let d = decode_batch_records(&b, 1 << 20).unwrap();
        assert_eq!(d[0].key, None);
        assert_eq!(d[0].value, None);
        assert_eq!(d[0].headers, vec![(b"h".to_vec(), None)]);
        let strict = ValidateOptions {
            require_keys: true,
            ..opts()
        };
        assert!(matches!(
            validate_batch(&b, &strict),
            Err(Error::RecordErrors(e)) if e == vec![RecordError {
                batch_index: 0,
                problem: RecordProblem::MissingKey,
            }]
        ));
        assert!(validate_batch(&simple(Codec::None, 3), &strict).is_ok());
    }

    /// Every refused record is named with its index, keyless ones on a
    /// compacted topic and timestamps outside the window alike, in plain
    /// and compressed batches; a keyless record is not also judged by time.
    #[test]
    fn record_errors_name_each_refused_record() {
        let hour = 3_600_000;
        let recs: Vec<Rec> = vec![
            (T0, Some(b"a".to_vec()), None, vec![]),
            (T0 - 2 * hour, None, None, vec![]),
            (T0 - 2 * hour, Some(b"c".to_vec()), None, vec![]),
            (T0 + 2 * hour, Some(b"d".to_vec()), None, vec![]),
            (-1, Some(b"e".to_vec()), None, vec![]),
            (T0 + hour, Some(b"f".to_vec()), None, vec![]),
        ];
        let strict = ValidateOptions {
            require_keys: true,
            timestamps: Some(TimestampWindow {
                now: T0,
                before_max_ms: hour,
                after_max_ms: hour,
            }),
            ..opts()
        };
        for codec in [Codec::None, Codec::Gzip] {
            let b = build(codec, &recs);
            let expected = vec![
                RecordError {
                    batch_index: 1,
                    problem: RecordProblem::MissingKey,
                },
                RecordError {
                    batch_index: 2,
                    problem: RecordProblem::TimestampOutOfRange {
                        offset: 2,
                        timestamp: T0 - 2 * hour,
                    },
                },
                RecordError {
                    batch_index: 3,
                    problem: RecordProblem::TimestampOutOfRange {
                        offset: 3,
                        timestamp: T0 + 2 * hour,
                    },
                },
            ];
            match validate_batch(&b, &strict) {
                Err(Error::RecordErrors(e)) => assert_eq!(e, expected),
                other => panic!("expected RecordErrors, got {other:?}"),
            }
            validate_batch(&b, &opts()).unwrap();
        }
        // Extreme bounds and timestamps compare without overflow.
        let wide = TimestampWindow {
            now: T0,
            before_max_ms: i64::MAX,
            after_max_ms: i64::MAX,
        };
        assert!(wide.admits(i64::MIN / 2) && wide.admits(i64::MAX) && wide.admits(0));
        let none = TimestampWindow {
            now: T0,
            before_max_ms: 0,
            after_max_ms: 0,
        };
        assert!(none.admits(T0) && none.admits(-1) && !none.admits(T0 + 1));
        assert!(!none.admits(i64::MIN) && !none.admits(i64::MAX));
    }

    #[test]
    fn framing_errors() {
        let b = simple(Codec::None, 5);
        // Stray bytes after the batch.
        let mut long = b.clone();
        long.push(0);
        assert!(corrupt_err(validate_batch(&long, &opts())).contains("stray"));
        // Too large.
        let small = ValidateOptions {
            max_batch_bytes: b.len() - 1,
            ..opts()
        };
        assert!(matches!(
            validate_batch(&b, &small),
            Err(Error::RecordTooLarge { .. })
        ));
        // Magic 1.
        let mut m = b.clone();
        m[MAGIC] = 1;
        assert!(corrupt_err(validate_batch(&m, &opts())).contains("magic"));
        // batchLength below a header.
        let mut l = b.clone();
        l[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&10i32.to_be_bytes());
        assert!(validate_batch(&l, &opts()).is_err());
        l[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(validate_batch(&l, &opts()).is_err());
    }

    #[test]
    fn header_rules() {
        let region = raw_record(&body(0, Some(b"k"), Some(b"v"), &[0]));
        // Unknown codec 5..7.
        for c in 5..8 {
            let b = raw_batch(&region, 1, 0, c);
            assert!(corrupt_err(validate_batch(&b, &opts())).contains("codec"));
        }
        // Unknown attribute bits are ignored (documented choice).
        let b = raw_batch(&region, 1, 0, 0x40 | 0x100 | i16::MIN);
        validate_batch(&b, &opts()).unwrap();
        // Negative and zero counts.
        assert!(
            corrupt_err(validate_batch(&raw_batch(&region, -1, 0, 0), &opts()))
                .contains("negative")
        );
        assert!(
            invalid_err(validate_batch(&raw_batch(&[], 0, 0, 0), &opts())).contains("no records")
        );
        // lastOffsetDelta inconsistent with the count.
        assert!(
            invalid_err(validate_batch(&raw_batch(&region, 1, 3, 0), &opts()))
                .contains("lastOffsetDelta")
        );
        // Transactional without producer id.
        let b = raw_batch(&region, 1, 0, TRANSACTIONAL_MASK);
        assert!(invalid_err(validate_batch(&b, &opts())).contains("producer id"));
        // Producer id with no sequence.
        let mut b = BatchBuilder::new(Codec::None, 0, T0).producer(7, 0, -1);
        b.push(T0, Some(b"k"), Some(b"v"), NO_HEADERS);
        assert!(invalid_err(validate_batch(&b.build().unwrap(), &opts())).contains("sequence"));
        let mut b = BatchBuilder::new(Codec::None, 0, T0)
            .producer(7, 0, 5)
            .transactional(true);
        b.push(T0, Some(b"k"), Some(b"v"), NO_HEADERS);
        let info = validate_batch(&b.build().unwrap(), &opts()).unwrap();
        assert!(info.is_transactional && info.has_producer_id());
        assert_eq!(info.last_sequence(), 5);
    }

    #[test]
    fn record_rules() {
        let ok = body(0, Some(b"k"), Some(b"a value long enough"), &[0]);
        let check = |region: Vec<u8>, count: i32| {
            validate_batch(&raw_batch(&region, count, count - 1, 0), &opts())
        };
        check(raw_record(&ok), 1).unwrap();
        // Count mismatch either way.
        assert!(corrupt_err(check(raw_record(&ok), 2)).contains("holds 1"));
        let mut two = raw_record(&ok);
        two.extend(raw_record(&body(1, Some(b"k"), None, &[0])));
        check(two.clone(), 2).unwrap();
        assert!(corrupt_err(check(two, 1)).contains("past recordsCount"));
        // offsetDelta not 0..n-1.
        assert!(
            invalid_err(check(raw_record(&body(1, None, None, &[0])), 1)).contains("offsetDelta")
        );
        let mut gap = raw_record(&ok);
        gap.extend(raw_record(&body(2, None, None, &[0])));
        assert!(invalid_err(check(gap.clone(), 2)).contains("offsetDelta"));
        // ... but the log may hold such batches (compaction).
        check_batch_integrity(&raw_batch(&gap, 2, 2, 0)).unwrap();
        // Negative key length other than -1.
        let mut bad = vec![0u8, 0, 0];
        encode_varint(-2, &mut bad);
        assert!(check(raw_record(&bad), 1).is_err());
        // Key length beyond the record.
        let mut bad = vec![0u8, 0, 0];
        encode_varint(1000, &mut bad);
        bad.extend_from_slice(b"abc");
        assert!(corrupt_err(check(raw_record(&bad), 1)).contains("key length"));
        // Record length beyond the region / negative.
        let mut r = Vec::new();
        encode_varint(500, &mut r);
        r.extend_from_slice(&ok);
        assert!(corrupt_err(check(r, 1)).contains("record length"));
        let mut r = Vec::new();
        encode_varint(-3, &mut r);
        r.extend_from_slice(&ok);
        assert!(check(r, 1).is_err());
        // A huge header count is refused before anything is reserved.
        let mut hc = Vec::new();
        encode_varint(i32::MAX, &mut hc);
        assert!(
            corrupt_err(check(raw_record(&body(0, None, None, &hc)), 1)).contains("header count")
        );
        // Negative header count, null header key.
        let mut hc = Vec::new();
        encode_varint(-1, &mut hc);
        assert!(check(raw_record(&body(0, None, None, &hc)), 1).is_err());
        let mut h = Vec::new();
        encode_varint(1, &mut h);
        encode_varint(-1, &mut h);
        encode_varint(-1, &mut h);
        assert!(corrupt_err(check(raw_record(&body(0, None, None, &h)), 1)).contains("null key"));
        // Bytes left inside a record after its headers.
        assert!(
            corrupt_err(check(raw_record(&body(0, None, None, &[0, 9])), 1))
                .contains("past its last field")
        );
        // Overlong varint inside a record is corrupt, not a varint error.
        let mut r = vec![0u8];
        r.extend_from_slice(&[0xff; 11]);
        assert!(corrupt_err(check(raw_record(&r), 1)).contains("timestampDelta"));
        // Impossible counts are refused up front.
        assert!(check(raw_record(&ok), i32::MAX).is_err());
    }

    #[test]
    fn compressed_contents_checked_only_when_asked() {
        // A gzip batch whose records have a wrong offsetDelta.
        let region = raw_record(&body(5, Some(b"k"), Some(b"v"), &[0]));
        let z = compression::compress(Codec::Gzip, &region).unwrap();
        let b = raw_batch(&z, 1, 0, Codec::Gzip as i16);
        let shallow = ValidateOptions {
            inspect_compressed: false,
            ..opts()
        };
        validate_batch(&b, &shallow).unwrap();
        assert!(invalid_err(validate_batch(&b, &opts())).contains("offsetDelta"));
        // Garbage compressed payload.
        let b = raw_batch(b"definitely not zstd", 1, 0, Codec::Zstd as i16);
        validate_batch(&b, &shallow).unwrap();
        assert!(validate_batch(&b, &opts()).is_err());
        // A payload that decompresses past the bound.
        let big = simple(Codec::Zstd, 200);
        let bounded = ValidateOptions {
            max_decompressed_bytes: 4096,
            ..opts()
        };
        assert!(corrupt_err(validate_batch(&big, &bounded)).contains("exceeds"));
    }

    #[test]
    fn control_batches() {
        let marker = |kind: i16, txn: bool, extra: bool| {
            let mut b = BatchBuilder::new(Codec::None, 0, T0)
                .producer(9, 1, -1)
                .transactional(txn)
                .control(true);
            b.push(
                T0,
                Some(&control_key(kind)),
                Some(&end_txn_marker_value(3)),
                NO_HEADERS,
            );
            if extra {
                b.push(
                    T0,
                    Some(&control_key(kind)),
                    Some(&end_txn_marker_value(3)),
                    NO_HEADERS,
                );
            }
            b.build().unwrap()
        };
        let info = validate_batch(&marker(CONTROL_COMMIT, true, false), &opts()).unwrap();
        assert!(info.is_control && info.is_transactional);
        assert!(invalid_err(validate_batch(
            &marker(CONTROL_ABORT, false, false),
            &opts()
        ))
        .contains("marker"));
        assert!(
            invalid_err(validate_batch(&marker(CONTROL_ABORT, true, true), &opts()))
                .contains("marker")
        );
        // Unknown control types pass; bad keys do not.
        validate_batch(&marker(7, false, true), &opts()).unwrap();
        let mut b = BatchBuilder::new(Codec::None, 0, T0).control(true);
        b.push(T0, Some(b"\x00"), None, NO_HEADERS);
        assert!(invalid_err(validate_batch(&b.build().unwrap(), &opts())).contains("key"));
        let mut b = BatchBuilder::new(Codec::None, 0, T0).control(true);
        b.push(T0, Some(&[0xff, 0xff, 0, 0]), None, NO_HEADERS);
        assert!(invalid_err(validate_batch(&b.build().unwrap(), &opts())).contains("version"));
        assert_eq!(
            parse_control_key(Some(&control_key(CONTROL_COMMIT))).unwrap(),
            (0, 1)
        );
    }

    #[test]
    fn end_txn_markers_round_trip() {
        for committed in [true, false] {
            let b = end_txn_marker_batch(42, 3, 17, committed, T0).unwrap();
            let info = validate_batch(&b, &opts()).unwrap();
            assert!(info.is_control && info.is_transactional);
            assert_eq!((info.producer_id, info.producer_epoch), (42, 3));
            assert_eq!(info.base_sequence, NO_SEQUENCE);
            let kind = if committed {
                CONTROL_COMMIT
            } else {
                CONTROL_ABORT
            };
            assert_eq!(end_txn_marker(&b, 1 << 20), Some((kind, 17)));
        }
        // A data batch, an unknown control type and a short value are no marker.
        assert_eq!(end_txn_marker(&simple(Codec::None, 2), 1 << 20), None);
        let mut b = BatchBuilder::new(Codec::None, 0, T0).control(true);
        b.push(T0, Some(&control_key(5)), Some(&[0u8; 6]), NO_HEADERS);
        assert_eq!(end_txn_marker(&b.build().unwrap(), 1 << 20), None);
        let mut b = BatchBuilder::new(Codec::None, 0, T0).control(true);
        b.push(
            T0,
            Some(&control_key(CONTROL_COMMIT)),
            Some(&[0u8; 5]),
            NO_HEADERS,
        );
        assert_eq!(end_txn_marker(&b.build().unwrap(), 1 << 20), None);
    }

    #[test]
    fn splitting() {
        let a = simple(Codec::None, 3);
        let b = simple(Codec::Lz4, 4);
        let mut buf = a.clone();
        buf.extend_from_slice(&b);
        let spans = split_batches(&buf).unwrap();
        assert_eq!(spans, vec![(0, a.len()), (a.len(), b.len())]);
        assert_eq!(split_batches(&[]).unwrap(), vec![]);
        for cut in 1..b.len() {
            let partial = &buf[..a.len() + cut];
            assert!(
                corrupt_err(split_batches(partial)).contains("partial"),
                "cut={cut}"
            );
            let (spans, valid) = split_batches_prefix(partial);
            assert_eq!((spans, valid), (vec![(0, a.len())], a.len()));
        }
        // A bad magic in the second batch stops the walk there.
        let mut bad = buf.clone();
        bad[a.len() + MAGIC] = 1;
        assert!(corrupt_err(split_batches(&bad)).contains("magic"));
        assert_eq!(split_batches_prefix(&bad).1, a.len());
        // Negative batchLength.
        let mut neg = buf.clone();
        neg[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&(-100i32).to_be_bytes());
        assert!(split_batches(&neg).is_err());
        assert_eq!(split_batches_prefix(&neg), (vec![], 0));
    }

    #[test]
    fn assign_offsets_keeps_crc() {
        let mut b = simple(Codec::Snappy, 10);
        assign_offsets(&mut b, 1_000_000, 42).unwrap();
        let info = validate_batch(&b, &opts()).unwrap();
        assert_eq!(
            (info.base_offset, info.partition_leader_epoch),
            (1_000_000, 42)
        );
        let d = decode_batch_records(&b, 1 << 20).unwrap();
        assert_eq!(d[9].offset, 1_000_009);
        assert!(assign_offsets(&mut [0u8; 60], 1, 1).is_err());
    }

    #[test]
    fn log_append_time_rewrite() {
        for codec in Codec::ALL {
            let mut b = simple(codec, 20);
            let now = T0 + 99_999;
            set_max_timestamp_log_append(&mut b, now).unwrap();
            // The patched CRC equals a fresh one.
            let mut fresh = b.clone();
            refresh_crc(&mut fresh);
            assert_eq!(b, fresh);
            let info = validate_batch(&b, &opts()).unwrap();
            assert!(info.is_log_append_time);
            assert_eq!((info.max_timestamp, info.first_timestamp), (now, T0));
            let d = decode_batch_records(&b, 1 << 20).unwrap();
            assert!(d.iter().all(|r| r.timestamp == now));
            // Idempotent, and matches a builder-made LogAppendTime batch.
            set_max_timestamp_log_append(&mut b, now).unwrap();
            check_crc(&b).unwrap();
        }
        // A corrupt batch stays corrupt.
        let mut b = simple(Codec::None, 5);
        let last = b.len() - 1;
        b[last] ^= 1;
        set_max_timestamp_log_append(&mut b, T0).unwrap();
        assert!(check_crc(&b).is_err());
        assert!(set_max_timestamp_log_append(&mut [0u8; 10], T0).is_err());
    }

    #[test]
    fn timestamp_search() {
        // Non-monotonic timestamps: 30, 10, 50, 20, 60 (+T0).
        let tss = [30i64, 10, 50, 20, 60];
        for codec in Codec::ALL {
            let recs: Vec<Rec> = tss
                .iter()
                .map(|t| (T0 + t, Some(b"k".to_vec()), None, vec![]))
                .collect();
            let mut b = BatchBuilder::new(codec, 100, T0);
            for (ts, k, v, h) in &recs {
                b.push(*ts, k.as_deref(), v.as_deref(), h);
            }
            let b = b.build().unwrap();
            let f = |t: i64| first_offset_with_timestamp_at_or_after(&b, T0 + t, 1 << 20).unwrap();
            assert_eq!(f(0), Some((100, T0 + 30)));
            assert_eq!(f(30), Some((100, T0 + 30)));
            assert_eq!(f(31), Some((102, T0 + 50)));
            assert_eq!(f(55), Some((104, T0 + 60)));
            assert_eq!(f(61), None);
            let mut lat = b.clone();
            set_max_timestamp_log_append(&mut lat, T0 + 500).unwrap();
            let g =
                |t: i64| first_offset_with_timestamp_at_or_after(&lat, T0 + t, 1 << 20).unwrap();
            assert_eq!(g(400), Some((100, T0 + 500)));
            assert_eq!(g(501), None);
        }
        assert!(first_offset_with_timestamp_at_or_after(&[0u8; 5], 0, 1 << 20).is_err());
    }

    #[test]
    fn builder_details() {
        // Gaps via push_at, retained lastOffsetDelta, errors surface at build.
        let mut b = BatchBuilder::new(Codec::None, 0, T0).retain_last_offset_delta(9);
        b.push_at(2, T0, Some(b"a"), None, NO_HEADERS).push_at(
            5,
            T0 + 1,
            Some(b"b"),
            None,
            NO_HEADERS,
        );
        let batch = b.build().unwrap();
        let h = check_batch_integrity(&batch).unwrap();
        assert_eq!((h.records_count, h.last_offset_delta), (2, 9));
        let offs: Vec<i64> = decode_batch_records(&batch, 1 << 20)
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(offs, vec![2, 5]);
        b.push_at(5, T0, None, None, NO_HEADERS);
        assert!(matches!(b.build(), Err(Error::InvalidArgument(_))));
        let mut b = BatchBuilder::new(Codec::None, 0, T0);
        b.push(i64::MIN + 5, None, None, NO_HEADERS)
            .push(i64::MAX, None, None, NO_HEADERS);
        assert!(b.build().is_err());
        // An empty batch: integrity ok (compaction), produce validation not.
        let e = BatchBuilder::new(Codec::Zstd, 0, T0).build().unwrap();
        check_batch_integrity(&e).unwrap();
        assert!(validate_batch(&e, &opts()).is_err());
        // String headers work (the binding layer passes those).
        let hs = vec![("a".to_string(), Some(vec![1u8]))];
        let mut b = BatchBuilder::new(Codec::None, 0, T0);
        b.push(T0, None, Some(b"v"), &hs);
        assert_eq!(
            decode_batch_records(&b.build().unwrap(), 1 << 20).unwrap()[0].headers[0].0,
            b"a"
        );
    }

    #[test]
    fn sequences_wrap() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 2), 7);
        assert_eq!(increment_sequence(-1, 2), -1);
    }

    fn arb_bytes(max: usize) -> impl Strategy<Value = Option<Vec<u8>>> {
        proptest::option::weighted(0.8, proptest::collection::vec(any::<u8>(), 0..max))
    }
    fn arb_record() -> impl Strategy<Value = Rec> {
        (
            -1_000_000i64..1_000_000,
            arb_bytes(40),
            arb_bytes(300),
            proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..10), arb_bytes(20)),
                0..3,
            ),
        )
            .prop_map(|(dt, k, v, h)| (T0 + dt, k, v, h))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn builder_validate_iterate(recs in proptest::collection::vec(arb_record(), 1..40), id in 0u8..5) {
            let codec = Codec::from_id(id).unwrap();
            let b = build(codec, &recs);
            let info = validate_batch(&b, &opts()).unwrap();
            prop_assert_eq!(info.records_count as usize, recs.len());
            prop_assert_eq!(info.first_timestamp, recs[0].0);
            prop_assert_eq!(info.max_timestamp, recs.iter().map(|r| r.0).max().unwrap());
            let d = decode_batch_records(&b, 1 << 24).unwrap();
            prop_assert_eq!(d.len(), recs.len());
            for (i, (got, want)) in d.iter().zip(&recs).enumerate() {
                prop_assert_eq!(got.offset, i as i64);
                prop_assert_eq!(got.timestamp, want.0);
                prop_assert_eq!(&got.key, &want.1);
                prop_assert_eq!(&got.value, &want.2);
                prop_assert_eq!(&got.headers, &want.3);
            }
        }

        /// Every cut of a valid batch is refused; every single-byte change
        /// is refused unless it lands in baseOffset or partitionLeaderEpoch,
        /// the two fields outside the CRC.
        #[test]
        fn every_truncation_and_flip_is_detected(
            recs in proptest::collection::vec(arb_record(), 1..6),
            id in 0u8..5,
            xor in 1u8..=255,
        ) {
            let codec = Codec::from_id(id).unwrap();
            let b = build(codec, &recs);
            for cut in 0..b.len() {
                prop_assert!(validate_batch(&b[..cut], &opts()).is_err(), "cut {}", cut);
            }
            let mut m = b.clone();
            for i in 0..b.len() {
                m[i] ^= xor;
                let outside_crc = (BASE_OFFSET..BATCH_LENGTH).contains(&i)
                    || (PARTITION_LEADER_EPOCH..MAGIC).contains(&i);
                prop_assert_eq!(validate_batch(&m, &opts()).is_ok(), outside_crc, "byte {}", i);
                m[i] ^= xor;
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400), id in 0u8..5) {
            // Raw bytes as a batch, as a region, and inside a CRC-valid batch.
            let _ = validate_batch(&data, &opts());
            let _ = split_batches_prefix(&data);
            let _ = iter_records(&data).count();
            let b = raw_batch(&data, 3, 2, id as i16);
            let _ = validate_batch(&b, &opts());
            let _ = decode_batch_records(&b, 1 << 16);
            let _ = first_offset_with_timestamp_at_or_after(&b, 0, 1 << 16);
        }
    }
}
