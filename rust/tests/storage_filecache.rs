//! The process-wide bound on open segment files: many logs stay under it,
//! and reads, writes, sendfile, flush, truncation, retention and compaction
//! stay correct when handles are closed under them.

mod storage_util;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use kbroker::cleaner::CleanerConfig;
use kbroker::compression::Codec;
use kbroker::filecache::{open_files, set_max_open_files};
use kbroker::log::{Log, LogConfig};
use kbroker::records::{decode_batch_records, BatchBuilder, NO_HEADERS};
use kbroker::sendfile::{sendfile, SendOutcome};
use storage_util::*;

/// The bound is process-wide: these tests run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial(bound: usize) -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    set_max_open_files(bound);
    g
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 100,
        ..config()
    }
}

/// Descriptors of this process open on files under `dir`.
fn fds_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

fn check_log(log: &Log, batches: i64) {
    let hs = read_all(log, 0);
    assert_eq!(hs.len() as i64, batches);
    for (i, h) in hs.iter().enumerate() {
        assert_eq!(h.base_offset, 2 * i as i64);
    }
}

#[test]
fn many_logs_stay_under_the_bound_through_writes_flushes_and_reopens() {
    let _g = serial(8);
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<_> = (0..40).map(|i| dir.path().join(format!("t-{i}"))).collect();
    let logs: Vec<Log> = paths.iter().map(|p| open(p, small_segments())).collect();
    for round in 0..30 {
        for log in &logs {
            log.append(&batch(0, &[round, round], 50), 0, None, 1_000)
                .unwrap();
        }
        assert!(open_files() <= 8);
        assert!(fds_under(dir.path()) <= 8, "{} fds", fds_under(dir.path()));
    }
    assert!(logs[0].segment_count() > 2);
    for log in &logs {
        check_log(log, 30);
        log.flush().unwrap();
        assert_eq!(log.recovery_point(), 60);
    }
    assert!(fds_under(dir.path()) <= 8);
    for log in &logs {
        log.close().unwrap();
    }
    drop(logs);
    assert_eq!(fds_under(dir.path()), 0);
    // Clean reopen, then a crash (no close) and an unclean reopen.
    let logs: Vec<Log> = paths.iter().map(|p| open(p, small_segments())).collect();
    for log in &logs {
        check_log(log, 30);
        log.append(&batch(0, &[7, 7], 50), 0, None, 1_000).unwrap();
    }
    assert!(fds_under(dir.path()) <= 8);
    drop(logs);
    for p in &paths {
        check_log(&open(p, small_segments()), 31);
    }
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (rx, _) = l.accept().unwrap();
    (tx, rx)
}

/// Opens other logs until `log`'s first segment file has been closed.
fn evict(log: &Log, scratch: &Path) {
    let others: Vec<Log> = (0..4)
        .map(|i| open(&scratch.join(format!("x-{i}")), small_segments()))
        .collect();
    for o in &others {
        o.append(&batch(0, &[1], 10), 0, None, 1_000).unwrap();
    }
    assert!(!log.segments()[0].is_file_open());
}

#[test]
fn slices_truncation_and_retention_work_across_evictions() {
    let _g = serial(2);
    let dir = tempfile::tempdir().unwrap();
    let log = open(&dir.path().join("a-0"), small_segments());
    for i in 0..40 {
        log.append(&batch(0, &[i, i], 50), 0, None, 1_000).unwrap();
    }
    let first_seg_batches = read_all(&log, 0)
        .iter()
        .filter(|h| h.base_offset < log.segment_base_offsets()[1])
        .count();
    let slice = log.read(0, 1 << 20, None, true).unwrap().unwrap();
    let bytes = slice.read_bytes().unwrap();
    assert_eq!(headers(&bytes).len(), first_seg_batches);

    // Evicted: the slice holds its own handle; new reads reopen the file.
    evict(&log, dir.path());
    assert_eq!(slice.read_bytes().unwrap(), bytes);
    let (tx, mut rx) = pair();
    assert_eq!(
        sendfile(tx.as_raw_fd(), slice.fd(), slice.position, slice.length).unwrap(),
        SendOutcome::Sent(bytes.len())
    );
    drop(tx);
    let mut got = Vec::new();
    rx.read_to_end(&mut got).unwrap();
    assert_eq!(got, bytes);
    check_log(&log, 40);

    // Retention deletes the evicted first segment: the slice still reads it.
    evict(&log, dir.path());
    let second = log.segment_base_offsets()[1];
    log.delete_records_before(second).unwrap();
    assert_eq!(log.segment_base_offsets()[0], second);
    assert_eq!(slice.read_bytes().unwrap(), bytes);

    // Truncation and appends on an evicted active segment.
    evict(&log, dir.path());
    log.truncate_to(70).unwrap();
    assert_eq!(log.log_end_offset(), 70);
    evict(&log, dir.path());
    log.append(&batch(0, &[9, 9], 50), 0, None, 1_000).unwrap();
    evict(&log, dir.path());
    log.flush().unwrap();
    let hs = read_all(&log, second);
    assert_eq!(hs.last().unwrap().base_offset, 70);
    drop(log);
    let log = open(&dir.path().join("a-0"), small_segments());
    assert_eq!(log.log_end_offset(), 72);
    assert_eq!(log.log_start_offset(), second);
}

fn keyed(k: &str, v: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new(Codec::None, 0, 1_000);
    b.push(1_000, Some(k.as_bytes()), Some(v.as_bytes()), NO_HEADERS);
    b.build().unwrap()
}

fn latest(log: &Log) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    let mut next = log.log_start_offset();
    while let Some(slice) = log.read(next, 1 << 20, None, true).unwrap() {
        let bytes = slice.read_bytes().unwrap();
        for h in headers(&bytes) {
            next = h.last_offset() + 1;
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let h = kbroker::records::BatchHeader::parse(rest).unwrap();
            for r in decode_batch_records(&rest[..h.total_size()], 1 << 20).unwrap() {
                m.insert(r.key.unwrap(), r.value.unwrap());
            }
            rest = &rest[h.total_size()..];
        }
    }
    m
}

#[test]
fn compaction_works_with_one_open_file() {
    let _g = serial(1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 64,
        cleanup_compact: true,
        cleanup_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        ..config()
    };
    let path = dir.path().join("c-0");
    let log = open(&path, cfg.clone());
    for round in 0..10 {
        for k in 0..6 {
            log.append(
                &keyed(&format!("k{k}"), &format!("v{round}")),
                0,
                None,
                1_000,
            )
            .unwrap();
        }
    }
    let before = latest(&log);
    let stats = log
        .clean(1_000_000, &CleanerConfig::default(), None)
        .unwrap();
    assert!(stats.complete && stats.records_removed > 0 && stats.segments_written > 0);
    evict(&log, dir.path());
    assert_eq!(latest(&log), before);
    log.close().unwrap();
    drop(log);
    assert_eq!(latest(&open(&path, cfg)), before);
}
