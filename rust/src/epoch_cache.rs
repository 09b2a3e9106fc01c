//! The leader-epoch cache of one partition (Kafka's LeaderEpochFileCache,
//! KIP-101 and KIP-279): for every leader epoch the log holds data of, the
//! offset its first batch starts at. A follower asks the leader where one of
//! its epochs ends (OffsetForLeaderEpoch) and truncates there, instead of at
//! its high watermark, so a leader change can neither lose acknowledged data
//! nor leave two replicas with different data at the same offsets.
//!
//! The cache is plain data ([`EpochCache`]); the log owns one, changes it
//! under its writer lock and persists it after each change in
//! `leader-epoch-checkpoint`, in Kafka's text format:
//!
//! ```text
//! 0            <- version
//! 2            <- number of entries
//! 0 0          <- "epoch start-offset", epochs rising
//! 3 120
//! ```

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::Path;

use crate::error::{Error, Result};
use crate::statefile::sync_dir;

pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const CHECKPOINT_VERSION: i32 = 0;
/// Longest checkpoint read (about 100,000 entries); a longer file is damaged.
const MAX_CHECKPOINT_BYTES: u64 = 4 << 20;

/// OffsetForLeaderEpoch's "no answer": epoch and end offset both -1.
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// One leader epoch and the offset of its first batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// The entries, epochs strictly rising and start offsets never falling
/// (`assign` keeps them strictly rising: an epoch whose leader wrote
/// nothing is replaced by the next one at the same offset; older Kafka
/// checkpoints may hold equal offsets).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<EpochEntry>,
}

impl EpochCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache of `entries`, which must be in order (see [`EpochCache`])
    /// and non-negative.
    pub fn from_entries(entries: Vec<EpochEntry>) -> std::result::Result<Self, String> {
        for e in &entries {
            if e.epoch < 0 || e.start_offset < 0 {
                return Err(format!("negative entry {} {}", e.epoch, e.start_offset));
            }
        }
        for w in entries.windows(2) {
            if w[1].epoch <= w[0].epoch || w[1].start_offset < w[0].start_offset {
                return Err(format!(
                    "entry {} {} does not follow {} {}",
                    w[1].epoch, w[1].start_offset, w[0].epoch, w[0].start_offset
                ));
            }
        }
        Ok(EpochCache { entries })
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    pub fn earliest(&self) -> Option<EpochEntry> {
        self.entries.first().copied()
    }

    /// Notes that `epoch` starts at `start_offset`. Nothing changes when it
    /// is already the latest epoch from that offset or earlier; otherwise
    /// entries that would break the order (an epoch at or above `epoch`, or
    /// a start at or after `start_offset`) are dropped first, as a new
    /// leader's data replaces them. A negative epoch or offset (a batch from
    /// no leader) is ignored. Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if !self.assign_changes(epoch, start_offset) {
            return false;
        }
        while let Some(last) = self.entries.last() {
            if last.epoch >= epoch || last.start_offset >= start_offset {
                self.entries.pop();
            } else {
                break;
            }
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Whether [`EpochCache::assign`] would change the cache (cheap: appends
    /// in the latest epoch, the common case, change nothing).
    pub fn assign_changes(&self, epoch: i32, start_offset: i64) -> bool {
        epoch >= 0
            && start_offset >= 0
            && self
                .latest()
                .is_none_or(|last| last.epoch != epoch || start_offset < last.start_offset)
    }

    /// Assigns `epoch` only when it is above every epoch known (recovery
    /// and rebuilds replay batches this way, as Kafka's segment recovery
    /// does: a replay from the middle of the log must not move the start of
    /// an epoch the cache already knows).
    pub fn assign_if_newer(&mut self, epoch: i32, start_offset: i64) -> bool {
        if self.latest_epoch().is_some_and(|e| epoch <= e) {
            return false;
        }
        self.assign(epoch, start_offset)
    }

    /// The log was truncated to `end_offset`: epochs starting at or after it
    /// go. Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        if end_offset < 0 || keep == self.entries.len() {
            return false;
        }
        self.entries.truncate(keep);
        true
    }

    /// The log start moved to `start_offset`: epochs wholly below it go,
    /// and the epoch holding it now starts there. Returns whether the cache
    /// changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let below = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        if below == 0 {
            return false;
        }
        let holder = self.entries[below - 1];
        let changed = below > 1 || holder.start_offset != start_offset;
        self.entries.drain(..below - 1);
        self.entries[0].start_offset = start_offset;
        changed
    }

    /// Forgets every entry. Returns whether the cache changed.
    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    /// OffsetForLeaderEpoch as Kafka's leader answers it: for the latest
    /// epoch, (epoch, `log_end_offset`); for an earlier one, the largest
    /// epoch <= `requested` and the start of the next higher epoch; when
    /// `requested` is below every epoch known (their data was deleted),
    /// (`requested`, the first epoch's start); (-1, -1) for a negative
    /// epoch, one above the latest, or an empty cache.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        if requested < 0 {
            return UNDEFINED;
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        let Some(next) = self.entries.get(higher) else {
            return UNDEFINED;
        };
        match higher.checked_sub(1).map(|i| self.entries[i]) {
            Some(floor) => (floor.epoch, next.start_offset),
            None => (requested, next.start_offset),
        }
    }

    /// The epoch of the data at `offset` (the latest epoch starting at or
    /// before it), if the cache knows one.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        let i = self.entries.partition_point(|e| e.start_offset <= offset);
        i.checked_sub(1).map(|i| self.entries[i].epoch)
    }

    /// The checkpoint file's text.
    pub fn to_checkpoint_text(&self) -> String {
        let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        text
    }

    /// Parses a checkpoint file's text; `Err(what is wrong)` when it is not
    /// one (wrong version, count, a malformed line, entries out of order).
    pub fn parse_checkpoint(text: &str) -> std::result::Result<Self, String> {
        let mut lines = text.lines();
        let version = lines.next().ok_or("no version line")?;
        match version.trim().parse::<i32>() {
            Ok(CHECKPOINT_VERSION) => {}
            _ => return Err(format!("unknown version {:?}", version.trim())),
        }
        let count = lines.next().ok_or("no entry count line")?;
        let count: usize = count
            .trim()
            .parse()
            .map_err(|_| format!("bad entry count {:?}", count.trim()))?;
        let mut entries = Vec::new();
        for line in lines {
            let mut parts = line.split_whitespace();
            let entry = match (parts.next(), parts.next(), parts.next()) {
                (Some(epoch), Some(offset), None) => epoch
                    .parse::<i32>()
                    .ok()
                    .zip(offset.parse::<i64>().ok())
                    .map(|(epoch, start_offset)| EpochEntry {
                        epoch,
                        start_offset,
                    }),
                _ => None,
            };
            entries.push(entry.ok_or_else(|| format!("malformed line {line:?}"))?);
        }
        if entries.len() != count {
            return Err(format!(
                "{} entries where the count line says {count}",
                entries.len()
            ));
        }
        Self::from_entries(entries)
    }
}

/// The cache persisted in `dir`: None when the file is missing,
/// `Some(Err(what is wrong))` when it cannot be used.
pub(crate) fn read_checkpoint(
    dir: &Path,
) -> Result<Option<std::result::Result<EpochCache, String>>> {
    let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::File(path, e)),
    };
    let mut bytes = Vec::new();
    match f.take(MAX_CHECKPOINT_BYTES + 1).read_to_end(&mut bytes) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Ok(Some(Err("is a directory".into())))
        }
        Err(e) => return Err(Error::File(path, e)),
    }
    if bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
        return Ok(Some(Err(format!(
            "longer than {MAX_CHECKPOINT_BYTES} bytes"
        ))));
    }
    Ok(Some(match String::from_utf8(bytes) {
        Ok(text) => EpochCache::parse_checkpoint(&text),
        Err(_) => Err("not text".into()),
    }))
}

/// Writes the cache to `dir` durably: a temporary file, fsync'ed, renamed
/// over the checkpoint, and the directory fsync'ed.
pub(crate) fn write_checkpoint(dir: &Path, cache: &EpochCache) -> Result<()> {
    let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
    let tmp = dir.join(format!("{LEADER_EPOCH_CHECKPOINT_FILE}.tmp"));
    (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(cache.to_checkpoint_text().as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &path)
    })()
    .map_err(Error::at(&path))?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cache(entries: &[(i32, i64)]) -> EpochCache {
        EpochCache::from_entries(
            entries
                .iter()
                .map(|&(epoch, start_offset)| EpochEntry {
                    epoch,
                    start_offset,
                })
                .collect(),
        )
        .unwrap()
    }

    fn pairs(c: &EpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_adds_new_epochs_and_ignores_repeats() {
        let mut c = EpochCache::new();
        assert!(c.assign(2, 10));
        assert!(!c.assign(2, 10));
        // The same epoch again later in the log: nothing new.
        assert!(!c.assign(2, 15));
        assert!(c.assign(3, 20));
        assert_eq!(pairs(&c), [(2, 10), (3, 20)]);
        // A leader that wrote nothing gives way to the next at its offset.
        assert!(c.assign(5, 20));
        assert_eq!(pairs(&c), [(2, 10), (5, 20)]);
        // Negative epochs or offsets are no leader's.
        assert!(!c.assign(-1, 30));
        assert!(!c.assign(6, -1));
        assert_eq!(c.latest_epoch(), Some(5));
    }

    #[test]
    fn assign_drops_entries_a_new_leader_replaced() {
        // The latest epoch again, from an earlier offset: it starts there.
        let mut c = cache(&[(1, 0), (2, 10)]);
        assert!(c.assign(2, 5));
        assert_eq!(pairs(&c), [(1, 0), (2, 5)]);
        // A lower epoch: every entry at or above it goes.
        let mut c = cache(&[(1, 0), (2, 10), (4, 20)]);
        assert!(c.assign(3, 25));
        assert_eq!(pairs(&c), [(1, 0), (2, 10), (3, 25)]);
        // A higher epoch starting before the latest's start.
        let mut c = cache(&[(1, 0), (2, 10), (4, 20)]);
        assert!(c.assign(5, 15));
        assert_eq!(pairs(&c), [(1, 0), (2, 10), (5, 15)]);
    }

    #[test]
    fn assign_if_newer_never_moves_a_known_epoch() {
        let mut c = cache(&[(1, 0), (2, 10)]);
        assert!(!c.assign_if_newer(1, 5));
        assert!(!c.assign_if_newer(2, 12));
        assert!(c.assign_if_newer(3, 14));
        assert_eq!(pairs(&c), [(1, 0), (2, 10), (3, 14)]);
    }

    #[test]
    fn end_offset_for_answers_like_kafka() {
        let c = cache(&[(2, 6), (4, 10), (6, 12)]);
        let leo = 20;
        // The latest epoch ends at the log end.
        assert_eq!(c.end_offset_for(6, leo), (6, 20));
        // A known earlier epoch ends where the next starts.
        assert_eq!(c.end_offset_for(2, leo), (2, 10));
        assert_eq!(c.end_offset_for(4, leo), (4, 12));
        // An unknown epoch between two: the floor epoch and the next's start.
        assert_eq!(c.end_offset_for(3, leo), (2, 10));
        assert_eq!(c.end_offset_for(5, leo), (4, 12));
        // Below every epoch known: the requested epoch, the first start.
        assert_eq!(c.end_offset_for(1, leo), (1, 6));
        assert_eq!(c.end_offset_for(0, leo), (0, 6));
        // Above the latest, undefined or an empty cache: (-1, -1).
        assert_eq!(c.end_offset_for(7, leo), (-1, -1));
        assert_eq!(c.end_offset_for(-1, leo), (-1, -1));
        assert_eq!(EpochCache::new().end_offset_for(0, leo), (-1, -1));
    }

    #[test]
    fn truncate_from_end_drops_epochs_at_or_after_the_end() {
        let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
        assert!(!c.truncate_from_end(12));
        assert!(!c.truncate_from_end(-1));
        assert!(c.truncate_from_end(11));
        assert_eq!(pairs(&c), [(2, 6), (3, 8)]);
        assert!(c.truncate_from_end(7));
        assert_eq!(pairs(&c), [(2, 6)]);
        assert!(c.truncate_from_end(0));
        assert!(c.is_empty());
    }

    #[test]
    fn truncate_from_start_moves_the_first_epoch_start() {
        let mut c = cache(&[(2, 6), (3, 8), (4, 11)]);
        assert!(!c.truncate_from_start(5));
        assert_eq!(pairs(&c), [(2, 6), (3, 8), (4, 11)]);
        assert!(!c.truncate_from_start(6));
        assert!(c.truncate_from_start(7));
        assert_eq!(pairs(&c), [(2, 7), (3, 8), (4, 11)]);
        assert!(c.truncate_from_start(9));
        assert_eq!(pairs(&c), [(3, 9), (4, 11)]);
        // Past the last start: the latest epoch alone, starting there.
        assert!(c.truncate_from_start(50));
        assert_eq!(pairs(&c), [(4, 50)]);
        assert!(c.clear());
        assert!(!c.truncate_from_start(60));
    }

    #[test]
    fn epoch_for_offset_finds_the_holder() {
        let c = cache(&[(2, 6), (3, 8)]);
        assert_eq!(c.epoch_for_offset(5), None);
        assert_eq!(c.epoch_for_offset(6), Some(2));
        assert_eq!(c.epoch_for_offset(7), Some(2));
        assert_eq!(c.epoch_for_offset(100), Some(3));
    }

    #[test]
    fn checkpoint_text_is_kafkas() {
        let c = cache(&[(0, 0), (3, 120)]);
        assert_eq!(c.to_checkpoint_text(), "0\n2\n0 0\n3 120\n");
        assert_eq!(EpochCache::new().to_checkpoint_text(), "0\n0\n");
        assert_eq!(EpochCache::parse_checkpoint("0\n2\n0 0\n3 120\n"), Ok(c));
    }

    #[test]
    fn damaged_checkpoints_are_refused() {
        for text in [
            "",
            "1\n0\n",
            "0\n",
            "0\n2\n0 0\n",
            "0\n1\n0 0\n1 5\n",
            "0\n1\n0\n",
            "0\n1\n0 0 0\n",
            "0\n1\nx 0\n",
            "0\n2\n3 10\n2 20\n",
            "0\n2\n2 10\n3 5\n",
            "0\n1\n-1 5\n",
            "0\nlots\n",
        ] {
            assert!(EpochCache::parse_checkpoint(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn checkpoint_file_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_checkpoint(dir.path()).unwrap(), None);
        let c = cache(&[(0, 0), (1, 10), (7, 99)]);
        write_checkpoint(dir.path(), &c).unwrap();
        assert_eq!(read_checkpoint(dir.path()).unwrap(), Some(Ok(c)));
        assert!(!dir
            .path()
            .join(format!("{LEADER_EPOCH_CHECKPOINT_FILE}.tmp"))
            .exists());
        fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE), [0xff, 0xfe]).unwrap();
        assert!(matches!(read_checkpoint(dir.path()).unwrap(), Some(Err(_))));
    }

    /// A cache as a log builds it: epochs appended in rising order.
    fn arb_cache() -> impl Strategy<Value = EpochCache> {
        proptest::collection::vec((1..4i32, 0..20i64), 0..8).prop_map(|steps| {
            let (mut epoch, mut offset) = (0, 0);
            let mut c = EpochCache::new();
            for (de, doff) in steps {
                epoch += de;
                offset += doff;
                c.assign(epoch, offset);
            }
            c
        })
    }

    proptest! {
        #[test]
        fn any_assign_sequence_keeps_the_order(
            steps in proptest::collection::vec((-1..10i32, -1..100i64), 0..40)
        ) {
            let mut c = EpochCache::new();
            for (epoch, offset) in steps {
                let would = c.assign_changes(epoch, offset);
                let before = c.clone();
                prop_assert_eq!(c.assign(epoch, offset), would);
                prop_assert_eq!(would, c != before);
                prop_assert!(EpochCache::from_entries(c.entries().to_vec()).is_ok());
                if epoch >= 0 && offset >= 0 {
                    prop_assert_eq!(c.latest_epoch(), Some(epoch));
                }
                let e = c.entries();
                prop_assert!(e.windows(2).all(|w| w[0].start_offset < w[1].start_offset));
            }
        }

        #[test]
        fn checkpoint_text_round_trips(c in arb_cache()) {
            prop_assert_eq!(EpochCache::parse_checkpoint(&c.to_checkpoint_text()), Ok(c));
        }

        /// The end offset of an epoch is where data of a later epoch begins:
        /// every offset in [start of the answer's epoch, end) belongs to an
        /// epoch <= the one asked for, the end itself to a later one.
        #[test]
        fn end_offset_for_bounds_the_epoch(c in arb_cache(), requested in 0..30i32, extra in 0..10i64) {
            let leo = c.latest().map_or(0, |e| e.start_offset) + extra;
            let (epoch, end) = c.end_offset_for(requested, leo);
            if epoch == UNDEFINED_EPOCH {
                prop_assert!(c.latest_epoch().is_none_or(|l| requested > l));
                prop_assert_eq!(end, UNDEFINED_EPOCH_OFFSET);
            } else {
                prop_assert!(epoch <= requested);
                for offset in 0..end {
                    prop_assert!(c.epoch_for_offset(offset).is_none_or(|e| e <= requested));
                }
                if end < leo {
                    prop_assert!(c.epoch_for_offset(end).is_some_and(|e| e > requested));
                }
            }
        }

        #[test]
        fn truncations_keep_the_order(c in arb_cache(), at in 0..100i64, from_start in any::<bool>()) {
            let mut t = c.clone();
            if from_start {
                t.truncate_from_start(at);
                prop_assert!(t.entries().iter().all(|e| e.start_offset >= at));
                prop_assert_eq!(t.latest_epoch(), c.latest_epoch());
                for offset in at..at + 50 {
                    prop_assert_eq!(t.epoch_for_offset(offset), c.epoch_for_offset(offset));
                }
            } else {
                t.truncate_from_end(at);
                prop_assert!(t.entries().iter().all(|e| e.start_offset < at));
                for offset in 0..at {
                    prop_assert_eq!(t.epoch_for_offset(offset), c.epoch_for_offset(offset));
                }
            }
            prop_assert!(EpochCache::from_entries(t.entries().to_vec()).is_ok());
        }
    }
}
