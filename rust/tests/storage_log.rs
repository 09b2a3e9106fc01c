//! Log behaviour: appends, rolls, reads, time lookups, truncation,
//! DeleteRecords, retention, flushing and reopening.

mod storage_util;

use std::sync::Arc;

use kbroker::log::{Log, LogConfig};
use kbroker::records::{check_crc, BatchHeader};
use kbroker::Error;
use storage_util::*;

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        ..config()
    }
}

/// Appends `n` one-batch appends of `per` records each, stamped 100, 200, ...
fn fill(log: &Log, n: usize, per: usize, value_len: usize) {
    for i in 0..n {
        log.append(
            &simple(per, 100 * (i as i64 + 1), value_len),
            0,
            None,
            1_000,
        )
        .unwrap();
    }
}

#[test]
fn append_assigns_offsets_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    let a = log.append(&simple(3, 500, 10), 7, None, 1_000).unwrap();
    assert_eq!(
        (a.first_offset, a.last_offset, a.batches, a.records),
        (0, 2, 1, 3)
    );
    assert_eq!((a.max_timestamp, a.log_append_time), (500, -1));
    // Several batches in one append, whatever base offsets they carry.
    let mut two = batch(999, &[600, 650], 5);
    two.extend(batch(-5, &[700], 5));
    let b = log.append(&two, 8, None, 1_000).unwrap();
    assert_eq!(
        (b.first_offset, b.last_offset, b.batches, b.records),
        (3, 5, 2, 3)
    );
    assert_eq!(
        (b.max_timestamp, b.offset_of_max_timestamp, b.bytes),
        (700, 5, two.len())
    );
    assert_eq!(log.log_end_offset(), 6);

    let hs = read_all(&log, 0);
    let bases: Vec<_> = hs
        .iter()
        .map(|h| (h.base_offset, h.last_offset(), h.partition_leader_epoch))
        .collect();
    assert_eq!(bases, vec![(0, 2, 7), (3, 4, 8), (5, 5, 8)]);
    assert_eq!(
        log.read(6, 100, None, true).unwrap().map(|s| s.length),
        None
    );
    assert_eq!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let n = e.unwrap().file_name().into_string().unwrap();
                n.starts_with("00000000000000000000.").then_some(n)
            })
            .count(),
        3
    );
}

#[test]
fn a_bad_batch_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    log.append(&simple(1, 1, 10), 0, None, 1_000).unwrap();
    let mut bytes = simple(2, 1, 10);
    let mut bad = simple(2, 1, 10);
    let n = bad.len();
    bad[n - 1] ^= 0xff; // CRC mismatch
    bytes.extend(&bad);
    assert!(matches!(
        log.append(&bytes, 0, None, 1_000),
        Err(Error::CorruptRecord(_))
    ));
    let torn = &simple(2, 1, 10)[..70];
    assert!(matches!(
        log.append(torn, 0, None, 1_000),
        Err(Error::CorruptRecord(_))
    ));
    assert!(log.append(&[], 0, None, 1_000).is_err());
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(log.size_bytes() as usize, simple(1, 1, 10).len());
    assert_eq!(
        log.append(&simple(1, 1, 10), 0, None, 1_000)
            .unwrap()
            .first_offset,
        1
    );
}

#[test]
fn log_append_time_rewrites_timestamp_and_crc() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    let mut bytes = batch(0, &[5, 9], 10);
    bytes.extend(batch(0, &[3], 10));
    let a = log.append(&bytes, 0, Some(123_456), 1_000).unwrap();
    assert_eq!(
        (
            a.log_append_time,
            a.max_timestamp,
            a.offset_of_max_timestamp
        ),
        (123_456, 123_456, 0)
    );
    let slice = log.read(0, 1 << 20, None, true).unwrap().unwrap();
    let data = slice.read_bytes().unwrap();
    let hs = headers(&data); // checks every CRC
    assert!(hs
        .iter()
        .all(|h| h.is_log_append_time() && h.max_timestamp == 123_456));
    assert_eq!(log.max_timestamp_and_offset(), (123_456, 0));
}

#[test]
fn follower_append_keeps_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    let a = log
        .append_as_follower(&batch(10, &[1, 2, 3], 4), 1_000)
        .unwrap();
    assert_eq!((a.first_offset, a.last_offset), (10, 12));
    assert_eq!(log.log_end_offset(), 13);
    assert!(matches!(
        log.append_as_follower(&batch(12, &[1], 4), 1_000),
        Err(Error::UnexpectedAppendOffset {
            first_offset: 12,
            last_offset: 12,
            log_end: 13
        })
    ));
    log.append_as_follower(&batch(20, &[1], 4), 1_000).unwrap();
    let hs = read_all(&log, 0);
    assert_eq!(
        hs.iter().map(|h| h.base_offset).collect::<Vec<_>>(),
        vec![10, 20]
    );
    // The leader continues after the follower's last offset.
    assert_eq!(
        log.append(&simple(1, 1, 1), 0, None, 1_000)
            .unwrap()
            .first_offset,
        21
    );
}

#[test]
fn rolls_by_size_and_reads_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    fill(&log, 60, 3, 40); // ~210-byte batches, 4 per segment
    assert!(log.segment_count() > 10, "{}", log.segment_count());
    let bases = log.segment_base_offsets();
    for b in &bases {
        let name = format!("{b:020}");
        for suffix in [".log", ".index", ".timeindex"] {
            assert!(
                dir.path().join(format!("{name}{suffix}")).exists(),
                "{name}{suffix}"
            );
        }
    }
    for s in log.segments() {
        assert!(s.size() <= 1024);
    }
    // Every offset reads back from the batch that holds it.
    for off in 0..log.log_end_offset() {
        let slice = log.read(off, 1, None, true).unwrap().unwrap();
        let h = BatchHeader::parse(&slice.read_bytes().unwrap()).unwrap();
        assert!(h.base_offset <= off && off <= h.last_offset(), "{off}");
        assert_eq!(slice.first_offset, h.base_offset);
        assert_eq!(slice.length, h.total_size());
    }
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 60);
    assert!(all
        .windows(2)
        .all(|w| w[1].base_offset == w[0].last_offset() + 1));
}

#[test]
fn rolls_by_time_and_when_the_index_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_ms: 1_000,
        ..config()
    };
    let log = Log::open(dir.path(), cfg, 0).unwrap();
    log.append(&simple(1, 1, 10), 0, None, 10).unwrap();
    log.append(&simple(1, 1, 10), 0, None, 1_000).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append(&simple(1, 1, 10), 0, None, 1_011).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 2]);
    // Idle log: maybe_roll does it; an empty active segment never rolls.
    log.maybe_roll(1_500).unwrap();
    assert_eq!(log.segment_count(), 2);
    log.maybe_roll(2_012).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 2, 3]);
    log.maybe_roll(9_000).unwrap();
    assert_eq!(log.segment_count(), 3);
    assert_eq!(read_all(&log, 0).len(), 3);

    let dir = tempfile::tempdir().unwrap();
    // Room for 3 offset entries but only 2 time entries (12 bytes each).
    let cfg = LogConfig {
        segment_index_bytes: 24,
        index_interval_bytes: 1,
        ..config()
    };
    let log = Log::open(dir.path(), cfg, 0).unwrap();
    fill(&log, 9, 1, 10);
    // The first batch of a segment gets no entry: 3 batches fill the time index.
    assert_eq!(log.segment_base_offsets(), vec![0, 3, 6]);
}

#[test]
fn read_respects_max_bytes_on_batch_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            index_interval_bytes: 64,
            ..config()
        },
    );
    fill(&log, 20, 2, 30);
    let size = simple(2, 100, 30).len();
    for max in [size, size + 1, 3 * size - 1, 3 * size, 7 * size + 5] {
        let slice = log.read(0, max, None, false).unwrap().unwrap();
        assert_eq!(slice.length, max / size * size, "max {max}");
        let hs = headers(&slice.read_bytes().unwrap());
        assert_eq!(hs.len(), max / size);
    }
    // Too small for one batch: nothing, unless the first batch is wanted whole.
    assert!(log.read(4, size - 1, None, false).unwrap().is_none());
    let slice = log.read(4, 1, None, true).unwrap().unwrap();
    assert_eq!((slice.length, slice.first_offset), (size, 4));
    assert!(log.read(4, 0, None, true).unwrap().is_some());
    let whole = log.read(0, usize::MAX, None, true).unwrap().unwrap();
    assert_eq!(whole.length, 20 * size);
}

#[test]
fn read_respects_max_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            index_interval_bytes: 64,
            ..config()
        },
    );
    fill(&log, 10, 2, 30); // batches at 0, 2, 4, ...
    let hs = |m| {
        headers(
            &log.read(0, 1 << 20, Some(m), true)
                .unwrap()
                .unwrap()
                .read_bytes()
                .unwrap(),
        )
    };
    assert_eq!(hs(6).len(), 3);
    assert_eq!(hs(7).len(), 4); // the batch at 6 starts below 7
    assert_eq!(hs(20).len(), 10);
    assert!(log.read(6, 1 << 20, Some(6), true).unwrap().is_none());
    assert!(log.read(6, 1 << 20, Some(3), true).unwrap().is_none());
    let mid = log.read(7, 1 << 20, Some(9), true).unwrap().unwrap();
    assert_eq!(
        headers(&mid.read_bytes().unwrap())
            .iter()
            .map(|h| h.base_offset)
            .collect::<Vec<_>>(),
        vec![6, 8]
    );
}

#[test]
fn read_mid_batch_and_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), config());
    log.append(&simple(5, 1, 10), 0, None, 1_000).unwrap();
    log.append(&simple(5, 1, 10), 0, None, 1_000).unwrap();
    let s = log.read(7, 1 << 20, None, true).unwrap().unwrap();
    assert_eq!(s.first_offset, 5);
    assert_eq!(headers(&s.read_bytes().unwrap()).len(), 1);
    assert!(log.read(10, 100, None, true).unwrap().is_none());
    for bad in [-1, 11, i64::MAX] {
        match log.read(bad, 100, None, true) {
            Err(Error::OffsetOutOfRange {
                offset,
                start: 0,
                end: 10,
            }) => assert_eq!(offset, bad),
            other => panic!("{other:?}"),
        }
    }
    log.delete_records_before(5).unwrap();
    assert!(matches!(
        log.read(4, 100, None, true),
        Err(Error::OffsetOutOfRange { start: 5, .. })
    ));
}

#[test]
fn time_lookup_and_max_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            segment_bytes: 2048,
            index_interval_bytes: 100,
            ..config()
        },
    );
    assert_eq!(log.max_timestamp_and_offset(), (-1, -1));
    assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    // Batch i holds offsets 2i, 2i+1 stamped 1000 + 10i (a dip at batch 7).
    for i in 0..40i64 {
        let ts = if i == 7 { 5 } else { 1_000 + 10 * i };
        log.append(&batch(0, &[ts, ts], 50), 0, None, 1_000)
            .unwrap();
    }
    assert!(log.segment_count() > 3);
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 1_000)));
    assert_eq!(log.offset_for_timestamp(1_000).unwrap(), Some((0, 1_000)));
    assert_eq!(log.offset_for_timestamp(1_001).unwrap(), Some((2, 1_010)));
    assert_eq!(log.offset_for_timestamp(1_075).unwrap(), Some((16, 1_080)));
    assert_eq!(log.offset_for_timestamp(1_390).unwrap(), Some((78, 1_390)));
    assert_eq!(log.offset_for_timestamp(1_391).unwrap(), None);
    for i in 0..40i64 {
        let ts = 1_000 + 10 * i;
        if i != 7 {
            assert_eq!(
                log.offset_for_timestamp(ts).unwrap(),
                Some((2 * i, ts)),
                "{ts}"
            );
        }
    }
    assert_eq!(log.max_timestamp_and_offset(), (1_390, 78));
    // A later, lower maximum does not change it; a higher one does.
    log.append(&batch(0, &[2_000, 3], 50), 0, None, 1_000)
        .unwrap();
    assert_eq!(log.max_timestamp_and_offset(), (2_000, 80));
    // Inside a batch, the record that first reaches the timestamp.
    log.append(&batch(0, &[3_000, 2_500, 3_500, 3_100], 10), 0, None, 1_000)
        .unwrap();
    assert_eq!(log.offset_for_timestamp(3_200).unwrap(), Some((84, 3_500)));
    assert_eq!(log.offset_for_timestamp(2_200).unwrap(), Some((82, 3_000)));
    assert_eq!(log.max_timestamp_and_offset(), (3_500, 84));
    // Lookups never return offsets below the log start.
    log.delete_records_before(30).unwrap();
    assert_eq!(log.offset_for_timestamp(0).unwrap().unwrap().0, 30);
}

#[test]
fn truncate_within_and_across_segments_then_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    fill(&log, 40, 2, 40); // batches at even offsets
    let bases_before = log.segment_base_offsets();
    log.truncate_to(100).unwrap(); // past the end: nothing
    assert_eq!(log.log_end_offset(), 80);
    log.truncate_to(70).unwrap();
    assert_eq!(log.log_end_offset(), 70);
    // The segments after the cut go.
    let kept: Vec<i64> = bases_before.into_iter().filter(|b| *b < 70).collect();
    assert_eq!(log.segment_base_offsets(), kept);
    assert_eq!(read_all(&log, 0).last().unwrap().last_offset(), 69);
    assert!(matches!(log.read(70, 10, None, true), Ok(None)));
    // Mid-batch: the batch holding the offset goes whole.
    log.truncate_to(35).unwrap();
    assert_eq!(log.log_end_offset(), 34);
    // Back to a segment boundary.
    let base = log.segment_base_offsets()[2];
    log.truncate_to(base).unwrap();
    assert_eq!(log.log_end_offset(), base);
    assert_eq!(
        *log.segment_base_offsets().last().unwrap(),
        log.segment_base_offsets()[log.segment_count() - 1]
    );
    for b in log.segment_base_offsets() {
        assert!(b < base || log.segments().last().unwrap().is_empty());
    }
    let a = log.append(&simple(2, 5, 40), 0, None, 1_000).unwrap();
    assert_eq!(a.first_offset, base);
    let all = read_all(&log, 0);
    assert!(all
        .windows(2)
        .all(|w| w[1].base_offset == w[0].last_offset() + 1));
    assert_eq!(all.last().unwrap().last_offset(), base + 1);
    // Time lookups and max timestamp forget the dropped data.
    assert_eq!(log.offset_for_timestamp(4_000).unwrap(), None);
    // Reopen: the same state.
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), small_segments());
    assert_eq!(log.log_end_offset(), base + 2);
    assert_eq!(read_all(&log, 0).len(), all.len());
    // Truncating to the start empties the log.
    log.truncate_to(0).unwrap();
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.segment_count()
        ),
        (0, 0, 1)
    );
    assert_eq!(
        log.append(&simple(1, 1, 1), 0, None, 1_000)
            .unwrap()
            .first_offset,
        0
    );
}

#[test]
fn delete_records_before_raises_start_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    fill(&log, 40, 2, 40);
    let n = log.segment_count();
    assert_eq!(log.delete_records_before(0).unwrap(), 0);
    let target = log.segment_base_offsets()[3] + 1;
    assert_eq!(log.delete_records_before(target).unwrap(), target);
    assert_eq!(log.log_start_offset(), target);
    assert_eq!(log.segment_count(), n - 3);
    assert_eq!(log.segment_base_offsets()[0], target - 1);
    assert!(!dir.path().join("00000000000000000000.log").exists());
    assert!(log.read(target - 1, 10, None, true).is_err());
    assert!(log.read(target, 10, None, true).unwrap().is_some());
    assert!(log.delete_records_before(81).is_err());
    drop(log); // unclean
    let log = open(dir.path(), small_segments());
    assert_eq!(log.log_start_offset(), target);
    // Up to the log end: every older segment goes, the active one stays.
    assert_eq!(log.delete_records_before(80).unwrap(), 80);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(
        log.read(80, 10, None, true).unwrap().map(|s| s.length),
        None
    );
    assert_eq!(
        log.append(&simple(1, 1, 1), 0, None, 1_000)
            .unwrap()
            .first_offset,
        80
    );
}

#[test]
fn retention_by_time_and_size_keeps_slices_readable() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        retention_ms: 1_000,
        ..small_segments()
    };
    let log = open(dir.path(), cfg.clone());
    for i in 0..20 {
        log.append(&simple(2, 10_000 + 100 * i, 40), 0, None, 1_000)
            .unwrap();
    }
    let n = log.segment_count();
    let held = log.read(0, 1 << 20, None, true).unwrap().unwrap();
    let before = held.read_bytes().unwrap();
    assert_eq!(log.apply_retention(10_000).unwrap(), 0);
    // Segments whose newest record is older than now - 1000 go.
    let deleted = log.apply_retention(11_700).unwrap();
    assert!(deleted > 0 && deleted < n);
    let first = log.segments()[0].clone();
    assert!(first.max_timestamp() >= 11_700 - 1_000);
    assert_eq!(log.log_start_offset(), first.base_offset());
    assert!(!dir.path().join("00000000000000000000.log").exists());
    // The slice taken before still reads the deleted file.
    assert_eq!(held.read_bytes().unwrap(), before);
    let mut buf = vec![0u8; 16];
    let n = unsafe { libc::pread(held.fd(), buf.as_mut_ptr().cast(), 16, 0) };
    assert_eq!(n, 16);

    // Everything expired: the active segment is rolled and deleted too.
    let end = log.log_end_offset();
    log.apply_retention(100_000).unwrap();
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.segment_count()
        ),
        (end, end, 1)
    );
    assert_eq!(
        log.append(&simple(1, 1, 1), 0, None, 1_000)
            .unwrap()
            .first_offset,
        end
    );

    // By size, never the active segment.
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            retention_bytes: 2_000,
            ..small_segments()
        },
    );
    fill(&log, 40, 2, 40);
    let deleted = log.apply_retention(0).unwrap();
    assert!(deleted > 0);
    // As Kafka: drop the oldest while what remains stays >= retention.bytes.
    assert!(log.size_bytes() >= 2_000, "{}", log.size_bytes());
    assert!(log.size_bytes() - log.segments()[0].size() < 2_000);
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    log.set_config(LogConfig {
        retention_bytes: 0,
        ..small_segments()
    });
    log.apply_retention(0).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert!(log.segments()[0].size() > 0);
}

#[test]
fn flush_messages_and_flush_ms_move_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            flush_messages: 5,
            ..config()
        },
    );
    assert_eq!(log.recovery_point(), 0);
    log.append(&simple(3, 1, 10), 0, None, 1_000).unwrap();
    assert_eq!(log.recovery_point(), 0);
    log.append(&simple(3, 1, 10), 0, None, 1_000).unwrap();
    assert_eq!(log.recovery_point(), 6);
    let checkpoint = || {
        let text = std::fs::read_to_string(dir.path().join("recovery-point")).unwrap();
        text.trim().parse::<i64>().unwrap()
    };
    // A flush that flush.messages asks for writes the file at most once a
    // second (the log was opened at 1_000).
    assert_eq!(checkpoint(), 0);
    log.append(&simple(5, 1, 10), 0, None, 2_000).unwrap();
    assert_eq!((log.recovery_point(), checkpoint()), (11, 11));
    log.set_config(LogConfig {
        flush_ms: 100,
        ..config()
    });
    log.append(&simple(1, 1, 10), 0, None, 2_000).unwrap();
    assert!(!log.maybe_flush(2_050).unwrap());
    assert!(log.maybe_flush(2_100).unwrap());
    assert_eq!((log.recovery_point(), checkpoint()), (12, 12));
    assert!(!log.maybe_flush(5_000).unwrap()); // nothing new
    log.append(&simple(1, 1, 10), 0, None, 5_000).unwrap();
    log.flush().unwrap();
    assert_eq!((log.recovery_point(), checkpoint()), (13, 13));
}

#[test]
fn a_fenced_append_leaves_the_flush_it_asks_for_to_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            flush_messages: 5,
            ..config()
        },
    );
    log.set_fence(1);
    let (_, due) = log
        .append_fenced(&simple(3, 1, 10), Some((0, None)), 1_000, 1)
        .unwrap();
    assert_eq!(due, None);
    let (_, due) = log
        .append_fenced(&simple(3, 1, 10), Some((0, None)), 1_000, 1)
        .unwrap();
    assert_eq!(due, Some(6));
    assert_eq!(log.recovery_point(), 0); // not synced by the append
                                         // Appended meanwhile, and also due: one flush serves both.
    let (_, later) = log
        .append_fenced(&simple(2, 1, 10), Some((0, None)), 1_000, 1)
        .unwrap();
    assert_eq!(later, Some(8));
    let checkpoint = || {
        std::fs::read_to_string(dir.path().join("recovery-point"))
            .map(|t| t.trim().to_string())
            .unwrap_or_default()
    };
    log.flush_through(6, 1_500).unwrap();
    assert_eq!(log.recovery_point(), 8);
    // The file is written at most once a second (opened at 1_000).
    assert_eq!(checkpoint(), "0");
    log.flush_through(8, 1_500).unwrap(); // nothing left to sync
    assert_eq!(log.recovery_point(), 8);
    let (_, due) = log
        .append_fenced(&simple(5, 1, 10), Some((0, None)), 2_000, 1)
        .unwrap();
    log.flush_through(due.unwrap(), 2_000).unwrap();
    assert_eq!((log.recovery_point(), checkpoint().as_str()), (13, "13"));
    let (_, due) = log
        .append_fenced(&simple(5, 1, 10), Some((0, None)), 2_100, 1)
        .unwrap();
    log.flush_through(due.unwrap(), 2_100).unwrap();
    assert_eq!((log.recovery_point(), checkpoint().as_str()), (18, "13"));
    // The background pass writes what lags, once it may.
    assert!(!log.maybe_flush(2_500).unwrap());
    assert_eq!(checkpoint(), "13");
    assert!(!log.maybe_flush(3_000).unwrap());
    assert_eq!(checkpoint(), "18");
    // A write prepared under another fence appends nothing.
    assert!(matches!(
        log.append_fenced(&simple(1, 1, 10), Some((0, None)), 1_000, 2),
        Err(Error::Fenced { .. })
    ));
    assert_eq!(log.log_end_offset(), 18);
}

#[test]
fn a_crash_with_the_recovery_point_file_lagging_recovers_everything() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(
            dir.path(),
            LogConfig {
                flush_messages: 1,
                ..config()
            },
        );
        log.set_fence(1);
        for i in 0..20 {
            let (_, due) = log
                .append_fenced(&simple(2, i, 10), Some((0, None)), 1_000 + i, 1)
                .unwrap();
            log.flush_through(due.unwrap(), 1_000 + i).unwrap();
        }
        assert_eq!(log.recovery_point(), 40);
        // Dropped without close: no clean-shutdown marker, as after kill -9.
    }
    let text = std::fs::read_to_string(dir.path().join("recovery-point")).unwrap_or_default();
    assert_ne!(text.trim(), "40", "the file should lag for this test");
    let log = open(dir.path(), config());
    assert_eq!(log.log_end_offset(), 40);
    assert_eq!(read_all(&log, 0).len(), 20);
}

#[test]
fn reopen_after_close_continues() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    fill(&log, 30, 2, 40);
    let (end, segs, max) = (
        log.log_end_offset(),
        log.segment_base_offsets(),
        log.max_timestamp_and_offset(),
    );
    log.close().unwrap();
    assert!(dir.path().join(".clean-shutdown").exists());
    assert!(log.append(&simple(1, 1, 1), 0, None, 1_000).is_err());
    assert!(log.read(0, 100, None, true).unwrap().is_some());
    drop(log);
    let log = open(dir.path(), small_segments());
    assert!(!dir.path().join(".clean-shutdown").exists());
    assert_eq!(
        (log.log_end_offset(), log.segment_base_offsets()),
        (end, segs)
    );
    assert_eq!(log.recovery_point(), end);
    assert_eq!(log.max_timestamp_and_offset(), max);
    assert_eq!(
        log.append(&simple(2, 1, 40), 0, None, 1_000)
            .unwrap()
            .first_offset,
        end
    );
    assert_eq!(read_all(&log, 0).len(), 31);
    log.delete().unwrap();
    assert!(!dir.path().exists());
}

#[test]
fn readers_run_beside_appends_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open(
        dir.path(),
        LogConfig {
            retention_bytes: 20_000,
            ..small_segments()
        },
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let off = log.log_start_offset();
                    match log.read(off, 4096, None, true) {
                        Ok(Some(s)) => {
                            let data = s.read_bytes().unwrap();
                            let mut rest = &data[..];
                            while !rest.is_empty() {
                                let h = BatchHeader::parse(rest).unwrap();
                                check_crc(&rest[..h.total_size()]).unwrap();
                                rest = &rest[h.total_size()..];
                            }
                            reads += 1;
                        }
                        Ok(None) | Err(Error::OffsetOutOfRange { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                reads
            })
        })
        .collect();
    for i in 0..2_000 {
        log.append(&simple(2, i, 40), 0, None, 1_000).unwrap();
        if i % 50 == 0 {
            log.apply_retention(0).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert_eq!(log.log_end_offset(), 4_000);
}
