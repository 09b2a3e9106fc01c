//! Sparse per-segment indexes: the offset index (`.index`) and the time
//! index (`.timeindex`).
//!
//! Both are fixed-size big-endian entries, kept whole in memory (a `Vec`
//! behind an `RwLock`, searched by binary search) and mirrored to a file that
//! only ever holds a prefix of the in-memory entries. New entries are pushed
//! in memory on the append path and written to the file in one `pwrite` at
//! flush, roll or close, so an append costs no index syscall. A file is never
//! trusted on its own: the segment validates it on load and rebuilds it from
//! the log when anything looks wrong (see `segment.rs`).
//!
//! - offset index entry, 8 bytes: relative offset `u32` (batch base offset
//!   minus segment base offset), position `u32` (byte position of that batch
//!   in the `.log` file). One entry per `index.interval.bytes` of log.
//! - time index entry, 12 bytes: timestamp `i64`, relative offset `u32`.
//!   `timestamp` is the largest timestamp of every record up to and
//!   including the one at the relative offset; entries are strictly
//!   increasing in timestamp.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::Result;

/// A fixed-size index entry with its big-endian encoding.
pub trait IndexEntry: Copy + Send + Sync + 'static {
    const SIZE: usize;
    fn encode(&self, out: &mut [u8]);
    fn decode(b: &[u8]) -> Self;
}

/// Offset index entry: where the batch with this relative base offset starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

impl IndexEntry for OffsetEntry {
    const SIZE: usize = 8;
    fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..8].copy_from_slice(&self.position.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        OffsetEntry {
            relative_offset: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            position: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// Time index entry: every record up to and including `relative_offset` has
/// a timestamp <= `timestamp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

impl IndexEntry for TimeEntry {
    const SIZE: usize = 12;
    fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[0..8]);
        TimeEntry {
            timestamp: i64::from_be_bytes(ts),
            relative_offset: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        }
    }
}

/// What the index file holds: the first `persisted` in-memory entries.
/// No handle is kept: the file is opened for each write and sync (they
/// happen at flush, roll and close, never per append), so an index costs no
/// descriptor between them.
struct FileState {
    /// The file's length is known to match `persisted` (it was written or
    /// checked since the index was made or handed over).
    checked: bool,
    /// Written since the last fdatasync.
    unsynced: bool,
    persisted: usize,
    /// The file may hold entries past `persisted` (after a truncation or
    /// replacement) and must be cut back on the next write.
    stale_tail: bool,
}

/// One index: entries in memory plus their file.
pub struct Index<E: IndexEntry> {
    path: PathBuf,
    max_entries: usize,
    entries: RwLock<Vec<E>>,
    file: Mutex<FileState>,
}

pub type OffsetIndex = Index<OffsetEntry>;
pub type TimeIndex = Index<TimeEntry>;

impl<E: IndexEntry> Index<E> {
    /// An index over `entries`, of which the first `persisted` are already in
    /// the file at `path`. `max_bytes` is segment.index.bytes.
    pub fn new(path: PathBuf, max_bytes: u64, entries: Vec<E>, persisted: usize) -> Self {
        let max_entries = ((max_bytes / E::SIZE as u64) as usize).max(1);
        let persisted = persisted.min(entries.len());
        Index {
            path,
            max_entries,
            entries: RwLock::new(entries),
            file: Mutex::new(FileState {
                checked: false,
                unsynced: false,
                persisted,
                stale_tail: false,
            }),
        }
    }

    /// Reads the raw entries of an index file. `Ok(None)` when the file is
    /// missing, not a whole number of entries, or holds more than
    /// `max_entries` entries (the caller bounds that by the log size, so no
    /// allocation is sized by an unchecked length).
    pub fn read_file(path: &Path, max_entries: usize) -> Result<Option<Vec<E>>> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let len = file.metadata()?.len();
        if len % E::SIZE as u64 != 0 || len / E::SIZE as u64 > max_entries as u64 {
            return Ok(None);
        }
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, 0)?;
        Ok(Some(buf.chunks_exact(E::SIZE).map(E::decode).collect()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<E>> {
        self.entries.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write(&self) -> RwLockWriteGuard<'_, Vec<E>> {
        self.entries.write().unwrap_or_else(|p| p.into_inner())
    }
    fn file_state(&self) -> MutexGuard<'_, FileState> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
    pub fn is_full(&self) -> bool {
        self.read().len() >= self.max_entries
    }
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }
    pub fn last(&self) -> Option<E> {
        self.read().last().copied()
    }
    pub fn entries(&self) -> Vec<E> {
        self.read().clone()
    }

    /// Entries the file does not hold yet.
    pub fn has_pending(&self) -> bool {
        let len = self.read().len();
        let st = self.file_state();
        st.persisted < len || st.stale_tail
    }

    /// Appends entries in memory (the caller keeps them ordered).
    pub fn push_all(&self, new: &[E]) {
        if !new.is_empty() {
            self.write().extend_from_slice(new);
        }
    }

    /// The last entry whose key is <= `key`, if any (`key_of` must be
    /// monotonic over the entries).
    pub fn floor_by<K: Ord>(&self, key: K, key_of: impl Fn(&E) -> K) -> Option<E> {
        let entries = self.read();
        let i = entries.partition_point(|e| key_of(e) <= key);
        if i == 0 {
            None
        } else {
            Some(entries[i - 1])
        }
    }

    /// The last entry whose key is < `key`, if any.
    pub fn lower_by<K: Ord>(&self, key: K, key_of: impl Fn(&E) -> K) -> Option<E> {
        let entries = self.read();
        let i = entries.partition_point(|e| key_of(e) < key);
        if i == 0 {
            None
        } else {
            Some(entries[i - 1])
        }
    }

    /// Keeps only the entries before the first one for which `drop_from`
    /// holds (entries are ordered, so the rest go too).
    pub fn truncate_from(&self, drop_from: impl Fn(&E) -> bool) {
        let mut entries = self.write();
        let keep = entries.iter().position(drop_from).unwrap_or(entries.len());
        entries.truncate(keep);
        let mut st = self.file_state();
        // The file is cut back to `persisted` entries on the next write.
        if st.persisted > keep {
            st.persisted = keep;
            st.stale_tail = true;
        }
    }

    /// Replaces every entry (after a rebuild); the file is rewritten on the
    /// next `write_pending`.
    pub fn replace(&self, new: Vec<E>) {
        *self.write() = new;
        let mut st = self.file_state();
        st.persisted = 0;
        st.stale_tail = true;
    }

    /// Writes the entries the file does not hold yet (one pwrite).
    pub fn write_pending(&self) -> Result<()> {
        let entries = self.read();
        let mut st = self.file_state();
        self.write_locked(&entries, &mut st).map(drop)
    }

    /// Returns the file when it had to be opened.
    fn write_locked(&self, entries: &[E], st: &mut FileState) -> Result<Option<File>> {
        if st.persisted == entries.len() && st.checked && !st.stale_tail {
            return Ok(None);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)?;
        let from = st.persisted.min(entries.len());
        if file.metadata()?.len() != (from * E::SIZE) as u64 {
            file.set_len((from * E::SIZE) as u64)?;
            st.unsynced = true;
        }
        if from < entries.len() {
            let mut buf = vec![0u8; (entries.len() - from) * E::SIZE];
            for (e, out) in entries[from..].iter().zip(buf.chunks_exact_mut(E::SIZE)) {
                e.encode(out);
            }
            file.write_all_at(&buf, (from * E::SIZE) as u64)?;
            st.unsynced = true;
        }
        st.persisted = entries.len();
        st.stale_tail = false;
        st.checked = true;
        Ok(Some(file))
    }

    /// Writes every entry to `path` (not this index's own path) and
    /// fdatasyncs it, then counts them as persisted: the compaction swap
    /// writes an index under a temporary name and renames it into place.
    pub fn write_copy(&self, path: &Path) -> Result<()> {
        let entries = self.read();
        let mut buf = vec![0u8; entries.len() * E::SIZE];
        for (e, out) in entries.iter().zip(buf.chunks_exact_mut(E::SIZE)) {
            e.encode(out);
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.write_all_at(&buf, 0)?;
        file.sync_data()?;
        let mut st = self.file_state();
        st.checked = false;
        st.unsynced = false;
        st.persisted = entries.len();
        st.stale_tail = false;
        Ok(())
    }

    /// Writes pending entries and fdatasyncs the file if it changed.
    pub fn sync(&self) -> Result<()> {
        let entries = self.read();
        let mut st = self.file_state();
        let opened = self.write_locked(&entries, &mut st)?;
        if st.unsynced {
            let file = match opened {
                Some(f) => f,
                None => OpenOptions::new().write(true).open(&self.path)?,
            };
            file.sync_data()?;
            st.unsynced = false;
        }
        Ok(())
    }

    /// Forgets what is known of the file: the next write checks its length
    /// again (the segment is no longer appended to).
    pub fn close_file(&self) {
        self.file_state().checked = false;
    }
}

/// Checks offset index entries read from disk against their segment:
/// strictly increasing relative offsets and positions, every position inside
/// a log of `log_len` bytes.
pub fn offset_entries_look_valid(entries: &[OffsetEntry], log_len: u64) -> bool {
    let mut prev: Option<OffsetEntry> = None;
    for e in entries {
        if e.position as u64 >= log_len {
            return false;
        }
        if let Some(p) = prev {
            if e.relative_offset <= p.relative_offset || e.position <= p.position {
                return false;
            }
        }
        prev = Some(*e);
    }
    true
}

/// Checks time index entries read from disk: strictly increasing timestamps,
/// non-decreasing relative offsets, none past `max_relative_offset`.
pub fn time_entries_look_valid(entries: &[TimeEntry], max_relative_offset: Option<u32>) -> bool {
    let Some(max_rel) = max_relative_offset else {
        return entries.is_empty();
    };
    let mut prev: Option<TimeEntry> = None;
    for e in entries {
        if e.relative_offset > max_rel {
            return false;
        }
        if let Some(p) = prev {
            if e.timestamp <= p.timestamp || e.relative_offset < p.relative_offset {
                return false;
            }
        }
        prev = Some(*e);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_big_endian() {
        let mut b = [0u8; 12];
        OffsetEntry {
            relative_offset: 0x01020304,
            position: 0x05060708,
        }
        .encode(&mut b[..8]);
        assert_eq!(&b[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let t = TimeEntry {
            timestamp: -2,
            relative_offset: 7,
        };
        t.encode(&mut b);
        assert_eq!(TimeEntry::decode(&b), t);
    }

    #[test]
    fn floor_lower_truncate_and_persist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.index");
        let idx = OffsetIndex::new(path.clone(), 1024, Vec::new(), 0);
        let es: Vec<_> = (0..10u32)
            .map(|i| OffsetEntry {
                relative_offset: i * 10,
                position: i * 100,
            })
            .collect();
        idx.push_all(&es);
        assert_eq!(
            idx.floor_by(25, |e| e.relative_offset)
                .unwrap()
                .relative_offset,
            20
        );
        assert_eq!(
            idx.lower_by(20, |e| e.relative_offset)
                .unwrap()
                .relative_offset,
            10
        );
        assert!(idx.lower_by(0, |e| e.relative_offset).is_none());
        idx.write_pending().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 80);
        idx.truncate_from(|e| e.relative_offset >= 50);
        idx.write_pending().unwrap();
        let back = OffsetIndex::read_file(&path, 100).unwrap().unwrap();
        assert_eq!(back, es[..5].to_vec());
        assert!(offset_entries_look_valid(&back, 1000));
        assert!(!offset_entries_look_valid(&back, 400));
        // Wrong size or too many entries are refused.
        std::fs::write(&path, [0u8; 7]).unwrap();
        assert!(OffsetIndex::read_file(&path, 100).unwrap().is_none());
        std::fs::write(&path, [0u8; 80]).unwrap();
        assert!(OffsetIndex::read_file(&path, 9).unwrap().is_none());
    }

    #[test]
    fn time_entry_validation() {
        let ok = [
            TimeEntry {
                timestamp: 5,
                relative_offset: 1,
            },
            TimeEntry {
                timestamp: 9,
                relative_offset: 1,
            },
        ];
        assert!(time_entries_look_valid(&ok, Some(1)));
        assert!(!time_entries_look_valid(&ok, Some(0)));
        assert!(!time_entries_look_valid(&ok, None));
        let bad = [ok[1], ok[0]];
        assert!(!time_entries_look_valid(&bad, Some(10)));
    }
}
