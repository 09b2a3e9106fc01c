//! What a follower needs from storage: appending a leader's batches as they
//! are, the leader-epoch cache (assigned, truncated, persisted, rebuilt) and
//! truncation (to an offset, or fully to start elsewhere).

mod storage_util;

use std::fs;
use std::path::Path;

use kbroker::epoch_cache::{EpochEntry, LEADER_EPOCH_CHECKPOINT_FILE};
use kbroker::log::{Log, LogConfig, RecoveryKind};
use kbroker::records::{BatchBuilder, NO_HEADERS};
use kbroker::Error;
use proptest::prelude::*;
use storage_util::*;

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 200,
        ..config()
    }
}

fn entries(log: &Log) -> Vec<(i32, i64)> {
    log.epoch_entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect()
}

/// Every byte of `log` from `from` to its end, as a follower fetches them.
fn bytes_from(log: &Log, from: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut next = from;
    while let Some(slice) = log.read(next, 1000, None, true).unwrap() {
        let data = slice.read_bytes().unwrap();
        next = headers(&data).last().unwrap().last_offset() + 1;
        out.extend(data);
    }
    out
}

/// Appends `n` batches of 3 records as the leader in `epoch`.
fn lead(log: &Log, epoch: i32, n: usize) {
    for i in 0..n {
        log.append(&simple(3, 1_000 + i as i64, 50), epoch, None, 1_000)
            .unwrap();
    }
}

/// Copies the leader's log to the follower in fetch-sized pieces.
fn replicate(leader: &Log, follower: &Log) {
    while follower.log_end_offset() < leader.log_end_offset() {
        let slice = leader
            .read(follower.log_end_offset(), 700, None, true)
            .unwrap()
            .unwrap();
        let info = follower
            .append_as_follower(&slice.read_bytes().unwrap(), 1_000)
            .unwrap();
        assert_eq!(info.last_offset + 1, follower.log_end_offset());
    }
}

#[test]
fn a_follower_copy_is_byte_identical_with_the_same_epochs() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = open(ld.path(), small());
    let follower = open(fd.path(), small());
    lead(&leader, 0, 10);
    replicate(&leader, &follower);
    lead(&leader, 3, 10);
    leader.maybe_assign_epoch_start_offset(5, 60).unwrap(); // a leader that wrote nothing
    lead(&leader, 7, 10);
    replicate(&leader, &follower);

    assert_eq!(entries(&leader), [(0, 0), (3, 30), (7, 60)]);
    assert_eq!(entries(&follower), entries(&leader));
    assert_eq!(bytes_from(&follower, 0), bytes_from(&leader, 0));
    assert_eq!(follower.log_end_offset(), 90);
    for epoch in -1..9 {
        assert_eq!(
            follower.end_offset_for_epoch(epoch),
            leader.end_offset_for_epoch(epoch),
            "epoch {epoch}"
        );
    }
    assert_eq!(follower.end_offset_for_epoch(3), (3, 60));
    assert_eq!(follower.end_offset_for_epoch(5), (3, 60));
    assert_eq!(follower.end_offset_for_epoch(7), (7, 90));
    // Time lookups and reads by offset work on the copy.
    assert_eq!(
        follower.offset_for_timestamp(1_005).unwrap(),
        leader.offset_for_timestamp(1_005).unwrap()
    );
    let slice = follower.read(47, 100, None, true).unwrap().unwrap();
    assert_eq!(slice.first_offset, 45);
    assert!(follower.segment_count() > 1);
    // Reopened, both agree still.
    follower.close().unwrap();
    drop(follower);
    let follower = open(fd.path(), small());
    assert_eq!(entries(&follower), [(0, 0), (3, 30), (7, 60)]);
    assert_eq!(bytes_from(&follower, 0), bytes_from(&leader, 0));
}

#[test]
fn follower_append_reports_epoch_and_producer_batches() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    let mut two = BatchBuilder::new(kbroker::compression::Codec::None, 0, 500)
        .producer(42, 3, 7)
        .build_with(|b| {
            b.push(500, None, Some(b"a"), NO_HEADERS);
        });
    set_epoch(&mut two, 4);
    let mut plain = batch(1, &[600, 700], 5);
    set_epoch(&mut plain, 6);
    two.extend(plain);
    let info = log.append_as_follower(&two, 1_000).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 2));
    assert_eq!((info.last_leader_epoch, info.max_timestamp), (6, 700));
    assert_eq!(info.producer_batches.len(), 1);
    let p = info.producer_batches[0];
    assert_eq!(
        (
            p.base_offset,
            p.last_offset,
            p.producer_id,
            p.producer_epoch
        ),
        (0, 0, 42, 3)
    );
    assert_eq!((p.base_sequence, p.max_timestamp), (7, 500));
    assert_eq!(entries(&log), [(4, 0), (6, 1)]);
}

/// Sets a batch's partition leader epoch (not covered by the CRC).
fn set_epoch(batch: &mut [u8], epoch: i32) {
    batch[12..16].copy_from_slice(&epoch.to_be_bytes());
}

trait BuildWith {
    fn build_with(self, f: impl FnOnce(&mut BatchBuilder)) -> Vec<u8>;
}
impl BuildWith for BatchBuilder {
    fn build_with(mut self, f: impl FnOnce(&mut BatchBuilder)) -> Vec<u8> {
        f(&mut self);
        self.build().unwrap()
    }
}

#[test]
fn follower_append_checks_offsets_and_crc_and_changes_nothing_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    log.append_as_follower(&batch(0, &[1, 2], 4), 1_000)
        .unwrap();
    let before = bytes_from(&log, 0);
    // Behind the log end: a stale answer, or a mid-batch leader log start.
    match log.append_as_follower(&batch(1, &[1, 2, 3], 4), 1_000) {
        Err(Error::UnexpectedAppendOffset {
            first_offset,
            last_offset,
            log_end,
        }) => assert_eq!((first_offset, last_offset, log_end), (1, 3, 2)),
        other => panic!("{other:?}"),
    }
    // Out of order inside one append.
    let mut two = batch(2, &[1, 2], 4);
    two.extend(batch(3, &[1], 4));
    assert!(matches!(
        log.append_as_follower(&two, 1_000),
        Err(Error::InvalidRecord(_))
    ));
    // A flipped byte.
    let mut bad = batch(2, &[1], 4);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        log.append_as_follower(&bad, 1_000),
        Err(Error::CorruptRecord(_))
    ));
    // A torn batch.
    let whole = batch(2, &[1], 4);
    assert!(matches!(
        log.append_as_follower(&whole[..whole.len() - 1], 1_000),
        Err(Error::CorruptRecord(_))
    ));
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(bytes_from(&log, 0), before);
    // A gap (batches the leader's cleaner removed) is kept as it is.
    let mut gap = batch(5, &[1], 4);
    gap.extend(batch(9, &[1, 2], 4));
    log.append_as_follower(&gap, 1_000).unwrap();
    assert_eq!(log.log_end_offset(), 11);
    let bases: Vec<i64> = read_all(&log, 0).iter().map(|h| h.base_offset).collect();
    assert_eq!(bases, [0, 5, 9]);
}

#[test]
fn leader_appends_assign_epochs_and_truncation_drops_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small());
    lead(&log, 1, 5);
    lead(&log, 2, 5);
    lead(&log, 4, 5);
    assert_eq!(entries(&log), [(1, 0), (2, 15), (4, 30)]);
    assert_eq!(log.latest_epoch(), Some(4));
    // Inside epoch 2: epoch 4 goes, the log ends at the cut batch.
    log.truncate_to(20).unwrap();
    assert_eq!(log.log_end_offset(), 18);
    assert_eq!(entries(&log), [(1, 0), (2, 15)]);
    assert_eq!(log.end_offset_for_epoch(2), (2, 18));
    assert_eq!(log.end_offset_for_epoch(4), (-1, -1));
    // A new leader epoch after the cut starts at the new end.
    lead(&log, 5, 1);
    assert_eq!(entries(&log), [(1, 0), (2, 15), (5, 18)]);
    assert_eq!(log.end_offset_for_epoch(3), (2, 18));
    // Never below the log start.
    assert_eq!(log.delete_records_before(4).unwrap(), 4);
    assert_eq!(entries(&log), [(1, 4), (2, 15), (5, 18)]);
    assert!(matches!(
        log.truncate_to(3),
        Err(Error::OffsetOutOfRange { offset: 3, .. })
    ));
    assert_eq!(log.log_end_offset(), 21);
    // The epoch cache survives a clean and an unclean reopen.
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), small());
    assert_eq!(entries(&log), [(1, 4), (2, 15), (5, 18)]);
    drop(log);
    let log = open(dir.path(), small());
    assert_eq!(entries(&log), [(1, 4), (2, 15), (5, 18)]);
    assert_eq!(log.log_start_offset(), 4);
}

/// A fetch answer holds a slice of a segment file and the broker reads it
/// later (sendfile). Whatever truncation and appends come in between, the
/// slice reads the bytes it was taken with, or fewer (the file was cut; the
/// broker then closes the connection), never bytes written since: a client
/// would get a batch that does not start where its header says it does.
#[test]
fn a_slice_never_reads_bytes_written_after_a_truncation() {
    let end = {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), small());
        lead(&log, 1, 24);
        assert!(log.segment_count() > 2);
        log.log_end_offset()
    };
    // Every cut: the whole log, inside a batch, at a batch or segment start,
    // in the first batch of a segment (which empties it).
    for cut in 0..end {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), small());
        lead(&log, 1, 24);
        let slices: Vec<_> = (0..end)
            .filter_map(|o| log.read(o, 600, None, true).unwrap())
            .collect();
        let taken: Vec<Vec<u8>> = slices.iter().map(|s| s.read_bytes().unwrap()).collect();
        log.truncate_to(cut).unwrap();
        // A new leader's batches, of another size, at the offsets cut away.
        let mut next = log.log_end_offset();
        while next < end + 10 {
            let mut b = batch(next, &[7; 5], 31);
            set_epoch(&mut b, 2);
            log.append_as_follower(&b, 1_000).unwrap();
            next += 5;
        }
        for (slice, before) in slices.iter().zip(&taken) {
            let now = slice.read_bytes().unwrap();
            assert!(
                before.starts_with(&now),
                "cut at {cut}: the slice at offset {} ({} bytes at {}) changed",
                slice.first_offset,
                slice.length,
                slice.position
            );
        }
    }
}

#[test]
fn retention_moves_the_first_epoch_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small());
    lead(&log, 1, 20);
    lead(&log, 2, 20);
    assert_eq!(entries(&log), [(1, 0), (2, 60)]);
    let cfg = LogConfig {
        retention_bytes: 2048,
        ..small()
    };
    log.set_config(cfg);
    assert!(log.apply_retention(1_000).unwrap() > 0);
    let start = log.log_start_offset();
    assert!(start > 60, "{start}");
    assert_eq!(entries(&log), [(2, start)]);
    assert_eq!(log.end_offset_for_epoch(1), (1, start));
}

#[test]
fn truncate_fully_and_start_at_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small());
    lead(&log, 1, 20);
    // Past the end (a follower out of the leader's range).
    log.truncate_fully_and_start_at(500).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 500));
    assert_eq!(log.recovery_point(), 500);
    assert_eq!((log.segment_count(), log.size_bytes()), (1, 0));
    assert!(entries(&log).is_empty());
    assert!(matches!(
        log.read(499, 100, None, true),
        Err(Error::OffsetOutOfRange { .. })
    ));
    // The first batch starts before the log start: the follower starts there.
    let first = batch(498, &[1, 2, 3], 4);
    assert!(matches!(
        log.append_as_follower(&first, 1_000),
        Err(Error::UnexpectedAppendOffset {
            first_offset: 498,
            ..
        })
    ));
    log.truncate_fully_and_start_at(498).unwrap();
    let mut first = first;
    set_epoch(&mut first, 9);
    log.append_as_follower(&first, 1_000).unwrap();
    assert_eq!(entries(&log), [(9, 498)]);
    assert_eq!(log.log_end_offset(), 501);
    drop(log);
    let log = open(dir.path(), small());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (498, 501));
    assert_eq!(entries(&log), [(9, 498)]);
    assert!(matches!(
        log.truncate_fully_and_start_at(-1),
        Err(Error::InvalidArgument(_))
    ));
}

fn checkpoint(dir: &Path) -> String {
    fs::read_to_string(dir.join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap()
}

#[test]
fn the_checkpoint_is_kafkas_file_and_is_rebuilt_when_missing_or_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small());
    // A new, empty log writes nothing.
    assert!(!dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE).exists());
    lead(&log, 0, 10);
    lead(&log, 2, 10);
    log.close().unwrap();
    drop(log);
    assert_eq!(checkpoint(dir.path()), "0\n2\n0 0\n2 30\n");

    for damage in [
        None,
        Some(&b"0\n3\n0 0\n2 30\n"[..]),
        Some(&b"garbage"[..]),
        Some(&[0xff, 0, 1][..]),
    ] {
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE);
        match damage {
            None => fs::remove_file(&path).unwrap(),
            Some(bytes) => fs::write(&path, bytes).unwrap(),
        }
        let log = open(dir.path(), small());
        assert_eq!(entries(&log), [(0, 0), (2, 30)]);
        let noted = log
            .recovery_notes()
            .iter()
            .any(|n| n.kind == RecoveryKind::BadCheckpoint);
        assert_eq!(noted, damage.is_some());
        assert_eq!(checkpoint(dir.path()), "0\n2\n0 0\n2 30\n");
        log.close().unwrap();
    }
}

#[test]
fn an_unclean_open_adds_epochs_the_checkpoint_missed_and_drops_those_past_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small());
    lead(&log, 1, 10);
    log.flush().unwrap();
    let old = checkpoint(dir.path());
    lead(&log, 3, 3);
    log.maybe_assign_epoch_start_offset(4, 39).unwrap();
    drop(log); // a crash: no close
               // As if the crash came before the epoch 3 checkpoint was written.
    fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE), &old).unwrap();
    let log = open(dir.path(), small());
    assert_eq!(entries(&log), [(1, 0), (3, 30)]);

    // An entry at or past the log end (a leader that wrote nothing before
    // a restart) is dropped at open, as Kafka does.
    log.maybe_assign_epoch_start_offset(4, 39).unwrap();
    assert_eq!(entries(&log), [(1, 0), (3, 30), (4, 39)]);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), small());
    assert_eq!(entries(&log), [(1, 0), (3, 30)]);
    assert!(log.maybe_assign_epoch_start_offset(5, 40).is_err());
}

#[test]
fn truncating_at_the_log_end_drops_an_epoch_that_wrote_nothing() {
    // A replica led epoch 4 from its log end and lost the leadership before
    // it wrote a record; the new leader never had epoch 4 and tells it that
    // its epoch 3 ends at 39, where its log already ends.
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small());
    lead(&log, 1, 10);
    lead(&log, 3, 3);
    log.maybe_assign_epoch_start_offset(4, 39).unwrap();
    assert_eq!(log.latest_epoch(), Some(4));
    log.truncate_to(39).unwrap();
    // No record went, epoch 4 did: the next fetch says its last epoch is 3.
    assert_eq!(log.log_end_offset(), 39);
    assert_eq!(entries(&log), [(1, 0), (3, 30)]);
    assert_eq!(log.latest_epoch(), Some(3));
    // Past the end, likewise; and the cache on disk says the same.
    log.maybe_assign_epoch_start_offset(5, 39).unwrap();
    log.truncate_to(100).unwrap();
    assert_eq!(entries(&log), [(1, 0), (3, 30)]);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), small());
    assert_eq!(entries(&log), [(1, 0), (3, 30)]);
    assert_eq!(log.log_end_offset(), 39);
}

#[test]
fn a_new_leadership_starts_after_appends_in_progress_and_fences_older_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small());
    // An empty log records nothing: its first append records the epoch.
    assert_eq!(log.start_epoch_at_log_end(2).unwrap(), 0);
    assert_eq!(entries(&log), []);
    lead(&log, 2, 4);
    assert_eq!(log.start_epoch_at_log_end(5).unwrap(), 12);
    assert_eq!(entries(&log), [(2, 0), (5, 12)]);
    // An append prepared in epoch 2 (on another thread) that comes after epoch 5
    // began must not land in epoch 5's offsets.
    match log.append(&simple(3, 2_000, 50), 2, None, 2_000) {
        Err(Error::StaleLeaderEpoch {
            epoch: 2,
            latest: 5,
        }) => {}
        other => panic!("expected StaleLeaderEpoch, got {other:?}"),
    }
    assert_eq!(log.log_end_offset(), 12);
    lead(&log, 5, 1);
    assert_eq!(entries(&log), [(2, 0), (5, 12)]);
    assert_eq!(log.log_end_offset(), 15);
    log.close().unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Lead { epoch_step: i32, batches: usize },
    Follow { epoch_step: i32, batches: usize },
    Truncate { back: i64 },
    DeleteRecords { forward: i64 },
    Reopen { clean: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3i32, 1..4usize).prop_map(|(epoch_step, batches)| Op::Lead { epoch_step, batches }),
        3 => (0..3i32, 1..4usize).prop_map(|(epoch_step, batches)| Op::Follow { epoch_step, batches }),
        2 => (0..30i64).prop_map(|back| Op::Truncate { back }),
        1 => (0..20i64).prop_map(|forward| Op::DeleteRecords { forward }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

/// The cache is what a rebuild from the log's batches gives (Kafka's
/// recovery); a log emptied by DeleteRecords may keep its latest epoch,
/// starting at the log start.
fn check_cache(log: &Log) -> Result<(), TestCaseError> {
    let want = rebuilt(log);
    let have = entries(log);
    if want.is_empty() && have.len() == 1 {
        prop_assert_eq!(have[0].1, log.log_start_offset());
        prop_assert_eq!(log.log_start_offset(), log.log_end_offset());
    } else {
        prop_assert_eq!(have, want);
    }
    Ok(())
}

/// The epochs a rebuild from the log's batches gives.
fn rebuilt(log: &Log) -> Vec<(i32, i64)> {
    let mut cache = kbroker::epoch_cache::EpochCache::new();
    for h in read_all(log, log.log_start_offset()) {
        cache.assign_if_newer(h.partition_leader_epoch, h.base_offset);
    }
    cache.truncate_from_start(log.log_start_offset());
    cache
        .entries()
        .iter()
        .map(|e: &EpochEntry| (e.epoch, e.start_offset))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Whatever mix of leader and follower appends, truncations, record
    /// deletions and reopens, the cache is what a rebuild from the batches
    /// gives, and it survives a reopen.
    #[test]
    fn the_cache_always_matches_the_batches(ops in proptest::collection::vec(op(), 1..25)) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path(), small());
        let mut epoch = 0;
        for op in ops {
            match op {
                Op::Lead { epoch_step, batches } => {
                    epoch += epoch_step;
                    lead(&log, epoch, batches);
                }
                Op::Follow { epoch_step, batches } => {
                    epoch += epoch_step;
                    let mut data = Vec::new();
                    let mut next = log.log_end_offset();
                    for _ in 0..batches {
                        let mut b = batch(next, &[5, 6], 20);
                        set_epoch(&mut b, epoch);
                        next += 2;
                        data.extend(b);
                    }
                    log.append_as_follower(&data, 1_000).unwrap();
                }
                Op::Truncate { back } => {
                    let to = (log.log_end_offset() - back).max(log.log_start_offset());
                    log.truncate_to(to).unwrap();
                }
                Op::DeleteRecords { forward } => {
                    let to = (log.log_start_offset() + forward).min(log.log_end_offset());
                    log.delete_records_before(to).unwrap();
                }
                Op::Reopen { clean } => {
                    if clean {
                        log.close().unwrap();
                    }
                    drop(log);
                    log = open(dir.path(), small());
                }
            }
            check_cache(&log)?;
        }
        drop(log);
        fs::remove_file(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).ok();
        let log = open(dir.path(), small());
        check_cache(&log)?;
    }
}

#[test]
fn retention_never_deletes_above_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small());
    lead(&log, 1, 40);
    let bases = log.segment_base_offsets();
    assert!(bases.len() > 3, "{bases:?}");
    log.set_config(LogConfig {
        retention_ms: 1,
        ..small()
    });
    // Everything expired, but only segments ending at or below bases[2] may go.
    assert_eq!(
        log.apply_retention_below(100_000, Some(bases[2])).unwrap(),
        2
    );
    assert_eq!(log.log_start_offset(), bases[2]);
    // A bound inside the active segment keeps it, though it expired too.
    let end = log.log_end_offset();
    log.apply_retention_below(100_000, Some(end - 1)).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert!(log.log_start_offset() < end);
    // At the log end, everything goes (the active segment rolls first).
    log.apply_retention_below(100_000, Some(end)).unwrap();
    assert_eq!(log.log_start_offset(), end);
}
