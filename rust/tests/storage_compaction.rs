//! Log compaction: what survives a cleaning pass, what it keeps of batches
//! (offsets, producer fields, codecs), the memory bound, and crashes at
//! every step of the segment swap.

mod storage_util;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use kbroker::cleaner::{CleanerConfig, MAP_SLOT_BYTES};
use kbroker::compression::Codec;
use kbroker::log::{Log, LogConfig};
use kbroker::records::{
    check_crc, decode_batch_records, end_txn_marker, end_txn_marker_batch, BatchBuilder,
    BatchHeader, COMPRESSION_MASK, DELETE_HORIZON_MASK, NO_HEADERS,
};
use kbroker::txn_index::AbortedTxn;
use storage_util::*;

const NOW: i64 = 1_000_000;

type Rec = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

fn compacted() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 64,
        cleanup_compact: true,
        cleanup_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        ..config()
    }
}

/// A batch of keyed records (`None` value = tombstone) stamped `ts`.
fn keyed(codec: Codec, recs: &[(&str, Option<&str>)], ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(codec, 0, ts);
    for (k, v) in recs {
        b.push(ts, Some(k.as_bytes()), v.map(str::as_bytes), NO_HEADERS);
    }
    b.build().unwrap()
}

fn put(log: &Log, k: &str, v: Option<&str>) -> i64 {
    log.append(&keyed(Codec::None, &[(k, v)], NOW), 0, None, NOW)
        .unwrap()
        .first_offset
}

/// Seals the active segment so everything written so far is cleanable.
fn roll(log: &Log) {
    let cfg = log.config();
    log.set_config(LogConfig {
        segment_ms: 0,
        ..cfg.clone()
    });
    log.maybe_roll(i64::MAX / 2).unwrap();
    log.set_config(cfg);
}

/// Every batch of the log, whole.
fn all_batches(log: &Log) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while let Some(slice) = log.read(next, 1 << 20, None, true).unwrap() {
        let mut bytes = &slice.read_bytes().unwrap()[..];
        while !bytes.is_empty() {
            let h = BatchHeader::parse(bytes).unwrap();
            check_crc(&bytes[..h.total_size()]).unwrap();
            next = h.last_offset() + 1;
            out.push(bytes[..h.total_size()].to_vec());
            bytes = &bytes[h.total_size()..];
        }
    }
    out
}

fn records(log: &Log) -> Vec<Rec> {
    all_batches(log)
        .iter()
        .flat_map(|b| decode_batch_records(b, 1 << 26).unwrap())
        .map(|r| (r.offset, r.key, r.value))
        .collect()
}

/// key -> (offset, value) of the last record of each key.
fn latest(recs: &[Rec]) -> BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)> {
    let mut m = BTreeMap::new();
    for (o, k, v) in recs {
        m.insert(k.clone().unwrap(), (*o, v.clone()));
    }
    m
}

fn clean(log: &Log, now: i64) -> kbroker::cleaner::CleanStats {
    log.clean(now, &CleanerConfig::default(), None).unwrap()
}

fn s(x: &str) -> Option<Vec<u8>> {
    Some(x.as_bytes().to_vec())
}

#[test]
fn keeps_the_latest_value_of_each_key_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), compacted());
    for round in 0..10 {
        for k in 0..8 {
            put(&log, &format!("key-{k}"), Some(&format!("v{round}")));
        }
    }
    roll(&log);
    put(&log, "key-0", Some("active"));
    let before = records(&log);
    assert!(log.segment_count() > 4);
    let info = log.cleanable(NOW, None);
    assert!(info.due && info.dirty_bytes > 0 && info.clean_bytes == 0);

    let stats = clean(&log, NOW);
    assert!(stats.complete && !stats.aborted);
    assert_eq!(stats.records_removed, 72);
    let after = records(&log);
    // The latest per key, at the offsets they were written at.
    assert_eq!(latest(&after), latest(&before));
    let cleaned: Vec<_> = after.iter().filter(|r| r.0 < 80).collect();
    assert_eq!(cleaned.len(), 8);
    for (o, k, v) in &cleaned {
        assert!(*o >= 72, "{o}");
        assert_eq!(before[*o as usize], (*o, k.clone(), v.clone()));
    }
    // The active segment is not touched; the log end stays.
    assert_eq!(after.last().unwrap(), &(80, s("key-0"), s("active")));
    assert_eq!(log.log_end_offset(), 81);
    // Nothing is dirty any more, and the checkpoint survives a restart.
    assert_eq!(log.cleanable(NOW, None).dirty_bytes, 0);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), compacted());
    assert_eq!(records(&log), after);
    assert!(!log.cleanable(NOW, None).due);
}

#[test]
fn batches_keep_their_offset_range_and_offsets_never_move() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), compacted());
    let batch = keyed(
        Codec::None,
        &[("a", Some("1")), ("b", Some("1")), ("c", Some("1"))],
        NOW,
    );
    log.append(&batch, 0, None, NOW).unwrap();
    put(&log, "a", Some("2"));
    put(&log, "c", Some("2"));
    roll(&log);
    put(&log, "z", Some("active"));
    clean(&log, NOW);
    let batches = all_batches(&log);
    let h = BatchHeader::parse(&batches[0]).unwrap();
    // Only "b" is left, at offset 1, in a batch still spanning 0..=2.
    assert_eq!((h.base_offset, h.last_offset(), h.records_count), (0, 2, 1));
    let recs = decode_batch_records(&batches[0], 1 << 20).unwrap();
    assert_eq!(
        (recs[0].offset, recs[0].key.as_deref()),
        (1, Some(&b"b"[..]))
    );
    let offsets: Vec<_> = records(&log).iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![1, 3, 4, 5]);
}

#[test]
fn tombstones_stay_for_delete_retention_then_go() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            delete_retention_ms: 1_000,
            ..compacted()
        },
    );
    put(&log, "gone", Some("v"));
    put(&log, "kept", Some("v"));
    put(&log, "gone", None);
    roll(&log);
    put(&log, "other", Some("active"));

    // First pass: the older value goes, the tombstone gets its horizon.
    let first = clean(&log, NOW);
    assert_eq!((first.records_removed, first.tombstones_dropped), (1, 0));
    let batches = all_batches(&log);
    let tomb = batches
        .iter()
        .find(|b| BatchHeader::parse(b).unwrap().base_offset == 2)
        .unwrap();
    let h = BatchHeader::parse(tomb).unwrap();
    assert_ne!(h.attributes & DELETE_HORIZON_MASK, 0);
    assert_eq!(h.first_timestamp, NOW + 1_000);
    // The record keeps its own timestamp under the horizon.
    assert_eq!(
        decode_batch_records(tomb, 1 << 20).unwrap()[0].timestamp,
        NOW
    );
    assert_eq!(
        records(&log)[..2],
        [(1, s("kept"), s("v")), (2, s("gone"), None)]
    );

    // Not yet due before the horizon; a pass then keeps it still.
    assert!(!log.cleanable(NOW + 999, None).due);
    assert_eq!(clean(&log, NOW + 999).tombstones_dropped, 0);
    // Due at the horizon even with nothing dirty: the tombstone goes.
    let info = log.cleanable(NOW + 1_000, None);
    assert!(info.due && info.delete_horizon_due && info.dirty_bytes == 0);
    assert_eq!(clean(&log, NOW + 1_000).tombstones_dropped, 1);
    assert_eq!(
        records(&log),
        vec![(1, s("kept"), s("v")), (3, s("other"), s("active"))]
    );
    assert!(!log.cleanable(NOW + 5_000, None).due);
}

#[test]
fn emptied_batches_keep_the_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), compacted());
    let produced = |pid: i64, seq: i32, recs: &[(&str, Option<&str>)]| {
        let mut b = BatchBuilder::new(Codec::Gzip, 0, NOW).producer(pid, 3, seq);
        for (k, v) in recs {
            b.push(NOW, Some(k.as_bytes()), v.map(str::as_bytes), NO_HEADERS);
        }
        log.append(&b.build().unwrap(), 0, None, NOW).unwrap();
    };
    // Producer 7's first batch is wholly superseded by its second: it goes.
    produced(7, 0, &[("a", Some("1")), ("b", Some("1"))]);
    produced(7, 2, &[("a", Some("2")), ("b", Some("2"))]);
    // Producer 8's only batch is superseded by producer 9's: it stays, empty.
    produced(
        8,
        41,
        &[("x", Some("1")), ("y", Some("1")), ("x", Some("2"))],
    );
    produced(9, 0, &[("x", Some("3")), ("y", Some("3"))]);
    roll(&log);
    put(&log, "z", Some("active"));
    let stats = clean(&log, NOW);
    assert_eq!(stats.empty_batches, 1);
    let hs: Vec<_> = all_batches(&log)
        .iter()
        .map(|b| BatchHeader::parse(b).unwrap())
        .collect();
    let summary: Vec<_> = hs
        .iter()
        .map(|h| {
            (
                h.base_offset,
                h.last_offset(),
                h.records_count,
                h.producer_id,
                h.base_sequence,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (2, 3, 2, 7, 2),
            (4, 6, 0, 8, 41),
            (7, 8, 2, 9, 0),
            (9, 9, 1, -1, -1)
        ]
    );
    let empty = &hs[1];
    assert_eq!(empty.producer_epoch, 3);
    // An empty batch carries no compressed payload.
    assert_eq!(empty.attributes & COMPRESSION_MASK, 0);
    assert_eq!(empty.total_size(), kbroker::records::HEADER_SIZE);
}

#[test]
fn compressed_batches_stay_valid_and_keep_their_codec() {
    for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let log = open(dir.path(), compacted());
        for round in 0..3 {
            let v = format!("{round}");
            let recs: Vec<(String, Option<&str>)> = (0..5)
                .map(|k| (format!("k{k}"), Some(v.as_str())))
                .collect();
            let recs: Vec<(&str, Option<&str>)> =
                recs.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            // Round 2 updates only half the keys: its batch and round 1's
            // are both partly superseded and get rewritten.
            let recs = if round == 2 { &recs[..3] } else { &recs[..] };
            log.append(&keyed(codec, recs, NOW + round), 0, None, NOW)
                .unwrap();
        }
        roll(&log);
        put(&log, "z", Some("active"));
        let stats = clean(&log, NOW);
        assert_eq!(stats.records_removed, 8, "{codec:?}");
        let batches = all_batches(&log);
        for b in &batches[..batches.len() - 1] {
            let h = BatchHeader::parse(b).unwrap();
            assert_eq!(h.compression_codec(), codec as u8, "{codec:?}");
            kbroker::records::check_batch_integrity(b).unwrap();
        }
        let got: Vec<_> = records(&log)
            .into_iter()
            .map(|(o, k, v)| (o, String::from_utf8(k.unwrap()).unwrap(), v))
            .collect();
        let want: Vec<_> = [
            (8, "k3", "1"),
            (9, "k4", "1"),
            (10, "k0", "2"),
            (11, "k1", "2"),
            (12, "k2", "2"),
        ]
        .iter()
        .map(|(o, k, v)| (*o, k.to_string(), s(v)))
        .chain([(13, "z".to_string(), s("active"))])
        .collect();
        assert_eq!(got, want, "{codec:?}");
    }
}

#[test]
fn keyless_records_are_kept_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), compacted());
    let mut keyless = BatchBuilder::new(Codec::None, 0, NOW);
    keyless.push(NOW, None, Some(b"no key"), NO_HEADERS);
    let keyless = keyless.build().unwrap();
    log.append(&keyless, 0, None, NOW).unwrap();
    put(&log, "a", Some("1"));
    put(&log, "a", Some("2"));
    roll(&log);
    put(&log, "z", Some("active"));
    clean(&log, NOW);
    let batches = all_batches(&log);
    // Byte for byte, past the partition leader epoch the append stamped.
    assert_eq!(batches[0][16..], keyless[16..]);
    let offsets: Vec<_> = records(&log).iter().map(|r| (r.0, r.1.clone())).collect();
    assert_eq!(offsets, vec![(0, None), (2, s("a")), (3, s("z"))]);
}

// -- transactions ---------------------------------------------------------------

/// A transactional data batch of producer `pid` (epoch 0).
fn txn_put(log: &Log, pid: i64, seq: i32, recs: &[(&str, Option<&str>)]) -> i64 {
    let mut b = BatchBuilder::new(Codec::Lz4, 0, NOW)
        .producer(pid, 0, seq)
        .transactional(true);
    for (k, v) in recs {
        b.push(NOW, Some(k.as_bytes()), v.map(str::as_bytes), NO_HEADERS);
    }
    log.append(&b.build().unwrap(), 0, None, NOW)
        .unwrap()
        .first_offset
}

/// Ends producer `pid`'s transaction that started at `first`: writes its
/// marker and, for an abort, the .txnindex entry the partition would add.
fn end_txn(log: &Log, pid: i64, first: i64, commit: bool) -> i64 {
    let marker = end_txn_marker_batch(pid, 0, 0, commit, NOW).unwrap();
    let at = log.append(&marker, 0, None, NOW).unwrap().first_offset;
    if !commit {
        log.add_aborted_txn(AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: at,
            last_stable_offset: at + 1,
        })
        .unwrap();
    }
    at
}

/// (offset, producer id, control, records) of every batch.
fn batch_summary(log: &Log) -> Vec<(i64, i64, bool, i32)> {
    all_batches(log)
        .iter()
        .map(|b| {
            let h = BatchHeader::parse(b).unwrap();
            assert!(h.producer_id < 0 || h.is_transactional(), "{h:?}");
            (
                h.base_offset,
                h.producer_id,
                h.is_control(),
                h.records_count,
            )
        })
        .collect()
}

/// What a read_committed reader sees: records outside aborted transactions
/// (by the log's .txnindex), markers left out.
fn committed_view(log: &Log) -> Vec<Rec> {
    let aborted = log.aborted_txns();
    all_batches(log)
        .iter()
        .filter(|b| {
            let h = BatchHeader::parse(b).unwrap();
            !h.is_control()
                && !aborted.iter().any(|t| {
                    t.producer_id == h.producer_id
                        && t.first_offset <= h.base_offset
                        && h.base_offset <= t.last_offset
                })
        })
        .flat_map(|b| decode_batch_records(b, 1 << 26).unwrap())
        .map(|r| (r.offset, r.key, r.value))
        .collect()
}

#[test]
fn aborted_data_goes_committed_data_is_compacted_and_markers_wait_for_their_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        delete_retention_ms: 1_000,
        ..compacted()
    };
    let log = open(dir.path(), cfg.clone());
    put(&log, "a", Some("plain")); // 0
    put(&log, "b", Some("plain")); // 1
                                   // Producer 7 commits a=t1 (wholly superseded later), then a=t2, c=t2.
    let t1 = txn_put(&log, 7, 0, &[("a", Some("t1"))]); // 2
    assert_eq!(end_txn(&log, 7, t1, true), 3);
    // Producer 8 aborts b and d (spread over two batches), then commits e.
    let t2 = txn_put(&log, 8, 0, &[("b", Some("aborted"))]); // 4
    txn_put(&log, 8, 1, &[("d", Some("aborted"))]); // 5
                                                    // The abort's data and marker in different segments.
    roll(&log);
    assert_eq!(end_txn(&log, 8, t2, false), 6);
    let t3 = txn_put(&log, 7, 1, &[("a", Some("t2")), ("c", Some("t2"))]); // 7-8
    assert_eq!(end_txn(&log, 7, t3, true), 9);
    roll(&log);
    let t4 = txn_put(&log, 8, 2, &[("e", Some("t3"))]); // 10
    assert_eq!(end_txn(&log, 8, t4, true), 11);
    roll(&log);
    put(&log, "z", Some("active")); // 12
    assert!(log.segment_count() > 3);
    let view = committed_view(&log);
    let latest_committed = latest(&view);
    assert_eq!(log.aborted_txns().len(), 1);

    // Pass 1: the aborted records and the superseded committed ones go;
    // every marker whose transaction had data in the log stays, and so
    // does the abort's index entry.
    let first = clean(&log, NOW);
    assert_eq!(first.aborted_records_removed, 2);
    assert_eq!(first.markers_removed, 0);
    assert_eq!(
        batch_summary(&log),
        vec![
            (1, -1, false, 1),
            (3, 7, true, 1),
            // The abort's last batch pins its group's end offset, as an
            // empty batch of no producer.
            (5, -1, false, 0),
            (6, 8, true, 1),
            (7, 7, false, 2),
            (9, 7, true, 1),
            (10, 8, false, 1),
            (11, 8, true, 1),
            (12, -1, false, 1),
        ]
    );
    assert_eq!(log.aborted_txns().len(), 1);
    assert_eq!(latest(&committed_view(&log)), latest_committed);

    // Pass 2, due at once though nothing is dirty: markers 3 and 6 have no
    // data left, so their entry goes and they get a delete horizon (the log
    // is due for a pass at that time).
    let info = log.cleanable(NOW + 10, None);
    assert!(info.due && info.dirty_bytes == 0);
    let second = clean(&log, NOW + 10);
    assert_eq!(second.markers_removed, 0);
    assert!(log.aborted_txns().is_empty());
    let horizons: Vec<_> = all_batches(&log)
        .iter()
        .map(|b| BatchHeader::parse(b).unwrap())
        .filter(|h| h.is_control())
        .map(|h| {
            (
                h.base_offset,
                h.attributes & DELETE_HORIZON_MASK != 0,
                h.first_timestamp,
            )
        })
        .collect();
    assert_eq!(
        horizons,
        vec![
            (3, true, NOW + 10 + 1_000),
            (6, true, NOW + 10 + 1_000),
            (9, false, NOW),
            (11, false, NOW)
        ]
    );
    // The markers still read as markers.
    for b in all_batches(&log) {
        let h = BatchHeader::parse(&b).unwrap();
        if h.is_control() {
            assert!(end_txn_marker(&b, 1 << 20).is_some(), "{h:?}");
        }
    }
    assert!(!log.cleanable(NOW + 1_009, None).due);
    assert!(log.cleanable(NOW + 1_010, None).delete_horizon_due);
    // Before the horizon they stay.
    let before_horizon = batch_summary(&log);
    assert_eq!(clean(&log, NOW + 1_009).markers_removed, 0);
    assert_eq!(batch_summary(&log), before_horizon);

    // After it they go, in a pass with nothing dirty (the producers' last
    // batches are known from the clean head); the last batches of each
    // producer stay.
    let third = clean(&log, NOW + 1_010);
    assert_eq!(third.markers_removed, 2);
    assert_eq!(
        batch_summary(&log),
        vec![
            (1, -1, false, 1),
            (5, -1, false, 0),
            (7, 7, false, 2),
            (9, 7, true, 1),
            (10, 8, false, 1),
            (11, 8, true, 1),
            (12, -1, false, 1),
        ]
    );
    let after = committed_view(&log);
    assert_eq!(latest(&after), latest_committed);
    assert_eq!(
        after,
        vec![
            (1, s("b"), s("plain")),
            (7, s("a"), s("t2")),
            (8, s("c"), s("t2")),
            (10, s("e"), s("t3")),
            (12, s("z"), s("active")),
        ]
    );
    // What the cleaner wrote reopens the same (the .txnindex files too).
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), cfg);
    assert_eq!(committed_view(&log), after);
    assert!(log.aborted_txns().is_empty());
}

#[test]
fn the_index_keeps_aborts_whose_data_stays_and_the_producers_last_batches_stay() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        delete_retention_ms: 0,
        ..compacted()
    };
    let log = open(dir.path(), cfg.clone());
    // Producer 5's only transaction is aborted: its last data batch stays,
    // empty, so its marker and index entry stay too.
    let first = txn_put(&log, 5, 0, &[("k", Some("x")), ("k2", Some("y"))]); // 0-1
    for i in 0..6 {
        put(&log, &format!("filler-{i}"), Some("v")); // 2-7
    }
    let marker = end_txn(&log, 5, first, false); // 8
                                                 // Producer 6's only batch is a marker without data (a transaction that
                                                 // wrote nothing here): it is its producer's last batch, so it stays,
                                                 // emptied once its horizon (0 ms) has passed.
    let lone = end_txn_marker_batch(6, 2, 0, true, NOW).unwrap();
    log.append(&lone, 0, None, NOW).unwrap(); // 9
    roll(&log);
    put(&log, "z", Some("active")); // 10
    let entries = log.aborted_txns();
    for now in [NOW, NOW + 1, NOW + 2] {
        let stats = clean(&log, now);
        assert!(stats.complete && !stats.aborted);
        let summary = batch_summary(&log);
        assert_eq!(summary[0], (0, 5, false, 0), "{now}");
        assert_eq!(summary[summary.len() - 3], (8, 5, true, 1), "{now}");
        assert_eq!(summary[summary.len() - 2], (9, 6, true, 0), "{now}");
        assert_eq!(log.aborted_txns(), entries, "{now}");
    }
    // The emptied marker keeps producer 6's epoch.
    let hs: Vec<_> = all_batches(&log)
        .iter()
        .map(|b| BatchHeader::parse(b).unwrap())
        .collect();
    let emptied = hs.iter().find(|h| h.base_offset == 9).unwrap();
    assert_eq!((emptied.producer_epoch, emptied.last_offset()), (2, 9));
    assert!(emptied.is_transactional() && emptied.is_control());
    assert_eq!(marker, 8);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), cfg);
    assert_eq!(log.aborted_txns(), entries);
}

#[test]
fn nothing_past_the_bound_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), compacted());
    put(&log, "a", Some("1")); // 0
    put(&log, "a", Some("2")); // 1
    roll(&log);
    // An open transaction: the caller's bound (the LSO) is its first offset.
    let open_at = txn_put(&log, 9, 0, &[("a", Some("open"))]); // 2
    roll(&log);
    put(&log, "a", Some("3")); // 3
    roll(&log);
    put(&log, "z", Some("active"));
    let stats = log
        .clean(NOW, &CleanerConfig::default(), Some(open_at))
        .unwrap();
    assert_eq!(stats.records_removed, 1);
    let offsets: Vec<_> = records(&log).iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![1, 2, 3, 4]);
}

#[test]
fn more_keys_than_the_map_holds_are_cleaned_in_passes() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            segment_bytes: 4096,
            ..compacted()
        },
    );
    for round in 0..3 {
        for k in 0..100 {
            put(&log, &format!("key-{k:03}"), Some(&format!("r{round}")));
        }
    }
    roll(&log);
    put(&log, "z", Some("active"));
    let before = records(&log);
    // Room for 64 slots filled to 0.5: 32 keys per pass.
    let cfg = CleanerConfig {
        dedupe_buffer_bytes: 64 * MAP_SLOT_BYTES,
        load_factor: 0.5,
        ..CleanerConfig::default()
    };
    let mut passes = 0;
    loop {
        let stats = log.clean(NOW, &cfg, None).unwrap();
        passes += 1;
        assert!(stats.map_entries <= 32 && stats.map_capacity == 32);
        // Whatever a pass leaves, every key's latest value is there.
        assert_eq!(latest(&records(&log)), latest(&before));
        if stats.complete {
            break;
        }
        assert!(passes < 20);
    }
    // 300 records of 100 keys, 32 new keys per pass.
    assert_eq!(passes, 10);
    let after = records(&log);
    assert_eq!(after.len(), 101);
    assert!(after[..100].iter().all(|r| r.2 == s("r2")));
}

#[test]
fn compact_only_logs_ignore_time_and_size_retention() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(
        dir.path(),
        LogConfig {
            retention_ms: 1,
            retention_bytes: 1,
            ..compacted()
        },
    );
    for k in 0..50 {
        put(&log, &format!("k{k}"), Some("v"));
    }
    assert_eq!(log.apply_retention(NOW * 10).unwrap(), 0);
    log.set_config(LogConfig {
        cleanup_delete: true,
        ..log.config()
    });
    assert!(log.apply_retention(NOW * 10).unwrap() > 0);
}

#[test]
fn readers_keep_their_snapshot_across_a_swap() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), compacted());
    for round in 0..5 {
        for k in 0..4 {
            put(&log, &format!("k{k}"), Some(&format!("{round}")));
        }
    }
    roll(&log);
    put(&log, "z", Some("active"));
    let slice = log.read(0, 1 << 20, None, true).unwrap().unwrap();
    let bytes_before = slice.read_bytes().unwrap();
    clean(&log, NOW);
    // The old segment's file is gone from the directory, not from the slice.
    assert_eq!(slice.read_bytes().unwrap(), bytes_before);
    assert_eq!(headers(&bytes_before)[0].base_offset, 0);
    // New reads see the cleaned log.
    let offsets: Vec<_> = records(&log).iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![16, 17, 18, 19, 20]);
}

#[test]
fn a_second_clean_merges_small_cleaned_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), compacted());
    for round in 0..10 {
        for k in 0..3 {
            put(&log, &format!("k{k}"), Some(&format!("{round}")));
        }
        roll(&log);
    }
    put(&log, "z", Some("active"));
    assert_eq!(log.segment_count(), 11);
    // Groups are made from the segments' sizes before cleaning (as Kafka
    // does), so the first pass merges some and later passes the rest.
    clean(&log, NOW);
    let after_first = log.segment_count();
    assert!(after_first < 11);
    put(&log, "k0", Some("again"));
    roll(&log);
    put(&log, "z", Some("active"));
    clean(&log, NOW);
    assert!(log.segment_count() < after_first);
    assert_eq!(records(&log).len(), 5);
}

/// Whether `bytes` (whole batches) hold no record at all.
fn holds_no_record(bytes: &[u8]) -> bool {
    headers(bytes).iter().all(|h| h.records_count == 0)
}

#[test]
fn reads_pass_over_segments_left_with_only_their_end_pin() {
    // A first pass cleans full segments one by one (groups go by the sizes
    // before cleaning): each one whose records were all overwritten keeps
    // only an empty batch pinning its end offset. Those pins are no data:
    // a read from the start must get the first surviving records, as Kafka
    // reads past a segment its cleaner emptied. (librdkafka doubles its
    // fetch size on every answer without a record and gives up with
    // MSG_SIZE_TOO_LARGE after ten.)
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), compacted());
    for round in 0..20 {
        for k in 0..8 {
            put(&log, &format!("key-{k}"), Some(&format!("v{round}")));
        }
    }
    roll(&log);
    let active = put(&log, "z", Some("active"));
    clean(&log, NOW);
    // Segments holding one empty batch (61 bytes) and nothing else.
    let pinned: Vec<_> = log
        .segments()
        .iter()
        .filter(|s| s.size() == 61)
        .map(|s| s.base_offset())
        .collect();
    assert!(pinned.len() > 10, "{pinned:?}");
    let first_kept = records(&log)[0].0;
    assert_eq!(first_kept, 152);
    for offset in (0..first_kept).step_by(7) {
        for max_bytes in [1, 1 << 20] {
            let slice = log.read(offset, max_bytes, None, true).unwrap().unwrap();
            let bytes = slice.read_bytes().unwrap();
            assert!(!holds_no_record(&bytes), "read at {offset}: no record");
            let recs = decode_batch_records(&bytes, 1 << 26).unwrap();
            assert_eq!(recs[0].offset, first_kept, "read at {offset}");
        }
    }
    // With nothing readable after them (below the bound the reader gives),
    // the pins are what a read gets: the reader moves past them.
    let pin = log
        .read(0, 1 << 20, Some(first_kept), true)
        .unwrap()
        .unwrap();
    let bytes = pin.read_bytes().unwrap();
    assert!(holds_no_record(&bytes));
    assert!(headers(&bytes)[0].last_offset() < first_kept);
    // A read without min_one_batch and no room gets nothing, as before.
    assert!(log.read(0, 1, None, false).unwrap().is_none());
    assert_eq!(records(&log).last().unwrap().0, active);
}

// -- crashes during the swap ------------------------------------------------

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// Opens a copy of `dir` as after a crash (no clean-shutdown marker) and
/// returns what a reader sees.
fn reopen_copy(dir: &Path, scratch: &Path) -> (Vec<Rec>, i64) {
    let copy = scratch.join("reopen");
    let _ = fs::remove_dir_all(&copy);
    copy_dir(dir, &copy);
    let _ = fs::remove_file(copy.join(kbroker::log::CLEAN_SHUTDOWN_FILE));
    let log = open(
        &copy,
        LogConfig {
            segment_bytes: 1 << 20,
            ..compacted()
        },
    );
    let out = (records(&log), log.log_end_offset());
    let leftovers: Vec<_> = names(&copy)
        .into_iter()
        .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    out
}

#[test]
fn a_crash_at_any_step_of_the_swap_leaves_old_or_new() {
    let tmp = tempfile::tempdir().unwrap();
    let old_dir = tmp.path().join("old");
    let new_dir = tmp.path().join("new");
    // Several small segments, cleaned into one group.
    {
        let log = open(&old_dir, compacted());
        for round in 0..6 {
            for k in 0..5 {
                put(&log, &format!("k{k}"), Some(&format!("{round}")));
            }
        }
        put(&log, "k0", None);
        roll(&log);
        put(&log, "z", Some("active"));
        log.close().unwrap();
    }
    copy_dir(&old_dir, &new_dir);
    {
        let log = open(
            &new_dir,
            LogConfig {
                segment_bytes: 1 << 20,
                ..compacted()
            },
        );
        let stats = clean(&log, NOW);
        assert_eq!(stats.segments_written, 1);
        log.close().unwrap();
    }
    let scratch = tmp.path().join("scratch");
    fs::create_dir_all(&scratch).unwrap();
    let old = reopen_copy(&old_dir, &scratch);
    let new = reopen_copy(&new_dir, &scratch);
    assert_ne!(old.0, new.0);
    assert_eq!(latest(&old.0), latest(&new.0));
    assert_eq!(old.1, new.1);

    let seg = |base: i64, suffix: &str| format!("{base:020}{suffix}");
    let old_bases: Vec<i64> = names(&old_dir)
        .iter()
        .filter_map(|n| n.strip_suffix(".log").map(|b| b.parse().unwrap()))
        .collect();
    let active = *old_bases.last().unwrap();
    let group: Vec<i64> = old_bases[..old_bases.len() - 1].to_vec();
    assert!(group.len() > 2);
    let b = group[0];
    let cleaned = |suffix: &str| fs::read(new_dir.join(seg(b, suffix))).unwrap();

    // Builds a state: the old directory, with `edit` applied.
    let state = |edit: &dyn Fn(&Path)| {
        let d = scratch.join("state");
        let _ = fs::remove_dir_all(&d);
        copy_dir(&old_dir, &d);
        edit(&d);
        reopen_copy(&d, &scratch)
    };
    let write = |d: &Path, name: String, bytes: Vec<u8>| fs::write(d.join(name), bytes).unwrap();
    let drop_old = |d: &Path, bases: &[i64]| {
        for &x in bases {
            for sfx in [".log", ".index", ".timeindex"] {
                let _ = fs::remove_file(d.join(seg(x, sfx)));
            }
        }
    };

    // 1. The cleaned log half written.
    let half = cleaned(".log")[..100].to_vec();
    assert_eq!(
        state(&|d| write(d, seg(b, ".log.cleaned"), half.clone())),
        old
    );
    // 2. Everything written, nothing renamed.
    let all_cleaned = |d: &Path| {
        for sfx in [".log", ".index", ".timeindex"] {
            write(d, seg(b, &format!("{sfx}.cleaned")), cleaned(sfx));
        }
    };
    assert_eq!(state(&all_cleaned), old);
    // 3. Indexes renamed to .swap, the log not yet: not committed.
    let indexes_swapped = |d: &Path| {
        write(d, seg(b, ".log.cleaned"), cleaned(".log"));
        write(d, seg(b, ".index.swap"), cleaned(".index"));
        write(d, seg(b, ".timeindex.swap"), cleaned(".timeindex"));
    };
    assert_eq!(state(&indexes_swapped), old);
    // 4. Committed: all three .swap, old files untouched.
    let committed = |d: &Path| {
        for sfx in [".log", ".index", ".timeindex"] {
            write(d, seg(b, &format!("{sfx}.swap")), cleaned(sfx));
        }
    };
    assert_eq!(state(&committed), new);
    // 5. Some old segments deleted, others not (first, middle, last).
    for cut in [1, group.len() / 2, group.len()] {
        assert_eq!(
            state(&|d| {
                committed(d);
                drop_old(d, &group[..cut]);
            }),
            new,
            "cut {cut}"
        );
    }
    // 6. Old segments deleted, the index swaps renamed, the log not yet.
    assert_eq!(
        state(&|d| {
            committed(d);
            drop_old(d, &group);
            for sfx in [".index", ".timeindex"] {
                fs::rename(d.join(seg(b, &format!("{sfx}.swap"))), d.join(seg(b, sfx))).unwrap();
            }
        }),
        new
    );
    // 7. Done.
    assert_eq!(
        state(&|d| {
            drop_old(d, &group);
            for sfx in [".log", ".index", ".timeindex"] {
                write(d, seg(b, sfx), cleaned(sfx));
            }
        }),
        new
    );
    // The active segment was never part of it.
    assert!(!group.contains(&active));
}

#[test]
fn a_crash_mid_swap_leaves_the_old_or_the_new_txn_index() {
    let tmp = tempfile::tempdir().unwrap();
    let old_dir = tmp.path().join("old");
    let new_dir = tmp.path().join("new");
    let big = LogConfig {
        segment_bytes: 1 << 20,
        delete_retention_ms: 1_000,
        ..compacted()
    };
    let (group, entries) = {
        let log = open(&old_dir, compacted());
        // An aborted transaction whose data went with the log start: its
        // marker, in a later segment, is all that is left, and its entry.
        let first = txn_put(&log, 3, 0, &[("gone", Some("aborted"))]); // 0
        roll(&log);
        put(&log, "a", Some("1")); // 1
        put(&log, "a", Some("2")); // 2
        roll(&log);
        end_txn(&log, 3, first, false); // 3
        put(&log, "b", Some("1")); // 4
        roll(&log);
        put(&log, "z", Some("active"));
        log.delete_records_before(1).unwrap();
        let entries = log.aborted_txns();
        assert_eq!(entries.len(), 1);
        let bases: Vec<i64> = names(&old_dir)
            .iter()
            .filter_map(|n| n.strip_suffix(".log").map(|b| b.parse().unwrap()))
            .collect();
        log.close().unwrap();
        (bases[..bases.len() - 1].to_vec(), entries)
    };
    assert_eq!(group, vec![1, 3]);
    copy_dir(&old_dir, &new_dir);
    {
        let log = open(&new_dir, big.clone());
        assert_eq!(clean(&log, NOW).segments_written, 1);
        // No data left: the entry goes and the marker waits for its horizon.
        assert!(log.aborted_txns().is_empty());
        log.close().unwrap();
    }
    let seg = |base: i64, suffix: &str| format!("{base:020}{suffix}");
    let cleaned = |suffix: &str| fs::read(new_dir.join(seg(1, suffix))).unwrap();
    assert!(cleaned(".txnindex").is_empty());
    let scratch = tmp.path().join("scratch");
    fs::create_dir_all(&scratch).unwrap();
    // The aborted transactions of the old directory with `edit` applied, as
    // a restart after a crash finds them.
    let state = |edit: &dyn Fn(&Path)| {
        let d = scratch.join("state");
        let _ = fs::remove_dir_all(&d);
        copy_dir(&old_dir, &d);
        edit(&d);
        let _ = fs::remove_file(d.join(kbroker::log::CLEAN_SHUTDOWN_FILE));
        let log = open(&d, big.clone());
        let leftovers: Vec<_> = names(&d)
            .into_iter()
            .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        let out = (log.aborted_txns(), records(&log));
        log.close().unwrap();
        out
    };
    let write = |d: &Path, name: String, bytes: Vec<u8>| fs::write(d.join(name), bytes).unwrap();
    let old = state(&|_| {});
    assert_eq!(old.0, entries);
    assert!(old_dir.join(seg(3, ".txnindex")).exists());
    let suffixes = [".index", ".timeindex", ".txnindex"];
    // Written, not committed: the old index.
    let not_committed = state(&|d| {
        write(d, seg(1, ".log.cleaned"), cleaned(".log"));
        for sfx in suffixes {
            write(d, seg(1, &format!("{sfx}.swap")), cleaned(sfx));
        }
    });
    assert_eq!(not_committed, old);
    // Committed: the new one; the old segment 3 goes, and its entry with it.
    let committed = |d: &Path| {
        write(d, seg(1, ".log.swap"), cleaned(".log"));
        for sfx in suffixes {
            write(d, seg(1, &format!("{sfx}.swap")), cleaned(sfx));
        }
    };
    let new = state(&committed);
    assert!(new.0.is_empty());
    assert_eq!(latest(&new.1), latest(&old.1));
    // The new .txnindex renamed into place, the log not yet.
    let renamed = state(&|d| {
        committed(d);
        fs::rename(
            d.join(seg(1, ".txnindex.swap")),
            d.join(seg(1, ".txnindex")),
        )
        .unwrap();
    });
    assert_eq!(renamed, new);
}
