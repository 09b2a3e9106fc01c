//! The aborted-transaction index of one segment (`.txnindex`), in Kafka's
//! file format, so that a read_committed fetch learns which transactions
//! were aborted in the range it returns without reading the log.
//!
//! One entry per aborted transaction whose ABORT marker is in the segment,
//! 34 big-endian bytes: version (int16, 0), producer id (int64), first
//! offset of the transaction (int64), last offset (the marker's, int64),
//! and the last stable offset when the transaction completed (int64): the
//! first offset of the earliest transaction of another producer still open
//! then, or the marker's offset + 1. Entries are in marker order, so their
//! last offsets rise; a reader stops at the first entry whose last stable
//! offset reaches its upper bound (no later segment can hold a transaction
//! that started below it).
//!
//! The entries are kept in memory (a `Vec` behind an `RwLock`: aborts are
//! rare, and a fetch searches them without a syscall) and mirrored to the
//! file, which is created with the first entry and written at once with
//! each new one; `flush` fsyncs it with the segment. Loading trusts the
//! file only as far as it holds well-formed entries inside the segment's
//! offsets: a torn tail or anything after the first bad entry is cut, and
//! the segment reports it, so the partition replays its transaction markers
//! from the log to restore what was cut.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use crate::error::{Error, Result};

pub const TXN_INDEX_SUFFIX: &str = ".txnindex";
/// Bytes of one entry.
pub const ENTRY_SIZE: usize = 34;
/// The only entry version Kafka writes.
pub const ENTRY_VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        b[0..2].copy_from_slice(&ENTRY_VERSION.to_be_bytes());
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        b
    }

    /// The entry in `b` (at least ENTRY_SIZE bytes), or what is wrong with it.
    pub fn decode(b: &[u8]) -> std::result::Result<AbortedTxn, String> {
        let i64_at =
            |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().expect("an 8-byte slice"));
        let version = i16::from_be_bytes([b[0], b[1]]);
        if version != ENTRY_VERSION {
            return Err(format!("entry version {version}"));
        }
        let txn = AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        };
        if txn.producer_id < 0 || txn.first_offset < 0 || txn.first_offset > txn.last_offset {
            return Err(format!("impossible entry {txn:?}"));
        }
        Ok(txn)
    }
}

/// Aborted transactions a search found, and whether it is complete (a later
/// segment can hold nothing more below the upper bound).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    pub txns: Vec<AbortedTxn>,
    pub complete: bool,
}

/// The index of one segment.
#[derive(Debug)]
pub struct TxnIndex {
    path: PathBuf,
    entries: RwLock<Vec<AbortedTxn>>,
    /// Entries written to the file and not fsync'ed yet.
    dirty: AtomicBool,
}

impl TxnIndex {
    /// An empty index at `path`; a file already there is removed (a segment
    /// created anew must not inherit another's entries).
    pub fn create(path: PathBuf) -> Result<TxnIndex> {
        remove_file_if_present(&path)?;
        Ok(Self::with_entries(path, Vec::new()))
    }

    /// An index over `entries` (rising last offsets), written elsewhere (the
    /// cleaner's copy, renamed into place later).
    pub fn with_entries(path: PathBuf, entries: Vec<AbortedTxn>) -> TxnIndex {
        TxnIndex {
            path,
            entries: RwLock::new(entries),
            dirty: AtomicBool::new(false),
        }
    }

    /// Loads the index of a segment holding offsets [base, next). Returns it
    /// and, when the file had to be cut at a damaged entry, why. Entries of
    /// markers at or past `next` (lost with a torn log tail) are cut too,
    /// silently: nothing needs restoring for them.
    pub fn load(path: PathBuf, base: i64, next: i64) -> Result<(TxnIndex, Option<String>)> {
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok((Self::with_entries(path, Vec::new()), None))
            }
            Err(e) => return Err(Error::File(path, e)),
        };
        let len = file.metadata().map_err(Error::at(&path))?.len();
        // Rising last offsets inside the segment: at most one entry per offset.
        let most = (next - base).max(0) as u64;
        let cap = most.saturating_mul(ENTRY_SIZE as u64).min(len);
        let mut bytes = Vec::with_capacity(cap as usize);
        (&mut file)
            .take(cap)
            .read_to_end(&mut bytes)
            .map_err(Error::at(&path))?;
        drop(file);
        let mut entries: Vec<AbortedTxn> = Vec::with_capacity(bytes.len() / ENTRY_SIZE);
        let mut problem = None;
        let mut cut = false;
        for chunk in bytes.chunks(ENTRY_SIZE) {
            if chunk.len() < ENTRY_SIZE {
                problem = Some(format!("a torn entry of {} bytes at the end", chunk.len()));
                break;
            }
            let txn = match AbortedTxn::decode(chunk) {
                Ok(t) => t,
                Err(e) => {
                    problem = Some(e);
                    break;
                }
            };
            if txn.last_offset >= next
                && entries
                    .last()
                    .is_none_or(|p: &AbortedTxn| p.last_offset < txn.last_offset)
            {
                cut = true;
                break;
            }
            if txn.last_offset < base || txn.last_offset >= next {
                problem = Some(format!(
                    "entry for marker offset {} outside the segment's offsets [{base}, {next})",
                    txn.last_offset
                ));
                break;
            }
            if entries
                .last()
                .is_some_and(|p: &AbortedTxn| p.last_offset >= txn.last_offset)
            {
                problem = Some(format!(
                    "entry for marker offset {} out of order",
                    txn.last_offset
                ));
                break;
            }
            entries.push(txn);
        }
        if problem.is_none() && !cut && len > cap {
            problem = Some(format!(
                "{} bytes more than the segment can have",
                len - cap
            ));
        }
        let index = Self::with_entries(path, entries);
        if problem.is_some() || cut {
            index.rewrite()?;
        }
        Ok((index, problem))
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<AbortedTxn>> {
        self.entries.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// A copy of the entries, in marker order.
    pub fn entries(&self) -> Vec<AbortedTxn> {
        self.read().clone()
    }

    /// Adds `txn` (the log's writer only). An entry for the same marker
    /// offset already there is kept as it is (a replay after a restart adds
    /// what the log holds again); one that belongs before the last entry is
    /// put in its place and the file rewritten. Returns whether it added.
    pub fn add(&self, txn: AbortedTxn) -> Result<bool> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let at = entries.partition_point(|e| e.last_offset < txn.last_offset);
        if entries
            .get(at)
            .is_some_and(|e| e.last_offset == txn.last_offset)
        {
            return Ok(false);
        }
        entries.insert(at, txn);
        let written = if at + 1 == entries.len() {
            self.write_at(at, &txn.encode())
        } else {
            let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
            self.write_whole(&bytes)
        };
        if let Err(e) = written {
            entries.remove(at);
            return Err(e);
        }
        Ok(true)
    }

    fn write_at(&self, index: usize, bytes: &[u8]) -> Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(Error::at(&self.path))?;
        f.write_all_at(bytes, (index * ENTRY_SIZE) as u64)
            .map_err(Error::at(&self.path))?;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    fn write_whole(&self, bytes: &[u8]) -> Result<()> {
        self.write_at(0, bytes)?;
        let f = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(Error::at(&self.path))?;
        f.set_len(bytes.len() as u64).map_err(Error::at(&self.path))
    }

    /// Writes the file anew from the entries in memory (none: no file).
    fn rewrite(&self) -> Result<()> {
        let bytes: Vec<u8> = self.read().iter().flat_map(|e| e.encode()).collect();
        if bytes.is_empty() {
            return remove_file_if_present(&self.path);
        }
        self.write_whole(&bytes)
    }

    /// Drops the entries of markers at or after `offset` (the log was cut
    /// there).
    pub fn truncate_from(&self, offset: i64) -> Result<()> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let keep = entries.partition_point(|e| e.last_offset < offset);
        if keep == entries.len() {
            return Ok(());
        }
        entries.truncate(keep);
        if keep == 0 {
            return remove_file_if_present(&self.path);
        }
        let f = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(Error::at(&self.path))?;
        f.set_len((keep * ENTRY_SIZE) as u64)
            .map_err(Error::at(&self.path))?;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// fsync of the file when entries were written since the last one.
    pub fn flush(&self) -> Result<()> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let synced = match File::open(&self.path) {
            Ok(f) => f.sync_data().map_err(Error::at(&self.path)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::File(self.path.clone(), e)),
        };
        if synced.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        synced
    }

    /// Writes the entries to `<path><suffix>` (fsync'ed), an empty file when
    /// there are none: the cleaner's copy, renamed into place with its
    /// segment (see `cleaner_state::GROUP_SUFFIXES`).
    pub fn write_copy(&self, suffix: &str) -> Result<()> {
        let entries = self.read();
        let mut name = self.path.as_os_str().to_owned();
        name.push(suffix);
        let path = PathBuf::from(name);
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
        let f = File::create(&path).map_err(Error::at(&path))?;
        f.write_all_at(&bytes, 0).map_err(Error::at(&path))?;
        f.sync_data().map_err(Error::at(&path))
    }

    /// Removes the file.
    pub fn delete_file(&self) -> Result<()> {
        remove_file_if_present(&self.path)
    }

    /// Kafka's search of one segment's index: the transactions aborted after
    /// `fetch_offset` (marker at or after it) that started below `upper`;
    /// complete once an entry's last stable offset reaches `upper`.
    pub fn collect(&self, fetch_offset: i64, upper: i64, out: &mut Collected) {
        let entries = self.read();
        let from = entries.partition_point(|e| e.last_offset < fetch_offset);
        for e in &entries[from..] {
            if e.first_offset < upper {
                out.txns.push(*e);
            }
            if e.last_stable_offset >= upper {
                out.complete = true;
                return;
            }
        }
    }
}

fn remove_file_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::File(path.to_path_buf(), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_are_kafkas_34_bytes() {
        let t = txn(7, 100, 105, 101);
        let b = t.encode();
        assert_eq!(b.len(), 34);
        assert_eq!(&b[0..2], &[0, 0]);
        assert_eq!(&b[2..10], &7i64.to_be_bytes());
        assert_eq!(&b[26..34], &101i64.to_be_bytes());
        assert_eq!(AbortedTxn::decode(&b), Ok(t));
        let mut bad = b;
        bad[1] = 1;
        assert!(AbortedTxn::decode(&bad).is_err());
    }

    #[test]
    fn adds_persist_and_load_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.txnindex");
        let idx = TxnIndex::create(path.clone()).unwrap();
        assert!(!path.exists(), "no file before the first entry");
        assert!(idx.add(txn(1, 100, 110, 111)).unwrap());
        assert!(idx.add(txn(2, 105, 120, 121)).unwrap());
        // The same marker again: kept once.
        assert!(!idx.add(txn(2, 105, 120, 121)).unwrap());
        // Out of order: put in its place.
        assert!(idx.add(txn(3, 101, 115, 105)).unwrap());
        assert_eq!(fs::metadata(&path).unwrap().len(), 3 * 34);
        idx.flush().unwrap();
        let (loaded, problem) = TxnIndex::load(path.clone(), 100, 200).unwrap();
        assert_eq!(problem, None);
        assert_eq!(
            loaded
                .entries()
                .iter()
                .map(|e| e.last_offset)
                .collect::<Vec<_>>(),
            vec![110, 115, 120]
        );
        loaded.truncate_from(115).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 34);
        loaded.truncate_from(100).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn load_cuts_torn_and_foreign_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&txn(1, 0, 5, 6).encode());
        bytes.extend_from_slice(&txn(1, 7, 9, 10).encode());
        bytes.extend_from_slice(&[0u8; 10]);
        fs::write(&path, &bytes).unwrap();
        let (idx, problem) = TxnIndex::load(path.clone(), 0, 100).unwrap();
        assert!(problem.unwrap().contains("torn"));
        assert_eq!(idx.len(), 2);
        assert_eq!(fs::metadata(&path).unwrap().len(), 68);
        // A marker past the segment's data (lost in a crash) goes, no damage.
        let (idx, problem) = TxnIndex::load(path.clone(), 0, 8).unwrap();
        assert_eq!(problem, None);
        assert_eq!(idx.len(), 1);
        assert_eq!(fs::metadata(&path).unwrap().len(), 34);
        // One below the segment's base is damage.
        let (idx, problem) = TxnIndex::load(path.clone(), 6, 100).unwrap();
        assert!(problem.unwrap().contains("outside"));
        assert_eq!(idx.len(), 0);
        assert!(!path.exists());
    }

    #[test]
    fn collect_stops_at_the_last_stable_offset() {
        let dir = tempfile::tempdir().unwrap();
        let idx = TxnIndex::create(dir.path().join("x.txnindex")).unwrap();
        idx.add(txn(1, 0, 10, 3)).unwrap();
        idx.add(txn(2, 3, 20, 21)).unwrap();
        idx.add(txn(3, 25, 30, 31)).unwrap();
        let mut out = Collected::default();
        idx.collect(11, 22, &mut out);
        assert_eq!(out.txns, vec![txn(2, 3, 20, 21)]);
        assert!(out.complete);
        let mut out = Collected::default();
        idx.collect(0, 2, &mut out);
        assert_eq!(out.txns.len(), 1);
        assert!(out.complete, "an entry's LSO of 3 passes the bound 2");
        let mut out = Collected::default();
        idx.collect(0, 100, &mut out);
        assert_eq!(out.txns.len(), 3);
        assert!(!out.complete);
    }
}
