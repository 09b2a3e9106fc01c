//! Test-only helpers for the storage tests: valid v2 batches, a log
//! opener, a reader of whole logs, a deterministic byte generator.
#![allow(dead_code)]

use std::path::Path;

use kbroker::compression::Codec;
use kbroker::log::{Log, LogConfig};
use kbroker::records::{BatchBuilder, BatchHeader, NO_HEADERS};

/// One uncompressed batch at `base_offset`, one record per timestamp, each
/// with a `value_len`-byte value (built with the records module's builder).
pub fn batch(base_offset: i64, timestamps: &[i64], value_len: usize) -> Vec<u8> {
    assert!(!timestamps.is_empty());
    let mut b = BatchBuilder::new(Codec::None, base_offset, timestamps[0]);
    for (i, ts) in timestamps.iter().enumerate() {
        let value: Vec<u8> = (0..value_len)
            .map(|j| (j as u8).wrapping_add(i as u8))
            .collect();
        b.push(*ts, None, Some(&value), NO_HEADERS);
    }
    b.build().unwrap()
}

/// A batch of `n` records all stamped `ts`.
pub fn simple(n: usize, ts: i64, value_len: usize) -> Vec<u8> {
    batch(0, &vec![ts; n], value_len)
}

/// Splits concatenated batches into their headers.
pub fn headers(mut bytes: &[u8]) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let h = BatchHeader::parse(bytes).unwrap();
        kbroker::records::check_crc(&bytes[..h.total_size()]).unwrap();
        bytes = &bytes[h.total_size()..];
        out.push(h);
    }
    out
}

pub fn config() -> LogConfig {
    LogConfig {
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// Opens a log. Every storage test runs with at most two segment files
/// open process-wide, so handles are closed and reopened under every
/// operation the tests exercise.
pub fn open(dir: &Path, cfg: LogConfig) -> Log {
    kbroker::filecache::set_max_open_files(2);
    Log::open(dir, cfg, 1_000).unwrap()
}

/// Reads the whole log from `from` and returns the batch headers.
pub fn read_all(log: &Log, from: i64) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    let mut next = from;
    while let Some(slice) = log.read(next, 1 << 20, None, true).unwrap() {
        let hs = headers(&slice.read_bytes().unwrap());
        next = hs.last().unwrap().last_offset() + 1;
        out.extend(hs);
    }
    out
}

/// A cheap deterministic byte generator (xorshift).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
