//! Recovery at open: torn tails, appended garbage, flipped bytes, damaged or
//! missing indexes, leftovers, clean versus unclean shutdown.

mod storage_util;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use kbroker::log::{LastWriter, Log, LogConfig, RecoveryKind};
use kbroker::verify::verify_log_dir;
use storage_util::*;

fn cfg() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 100,
        ..config()
    }
}

fn seg_file(dir: &Path, base: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base:020}{suffix}"))
}

/// A log of `n` two-record batches (offsets 2i, 2i+1, stamped 1000+i).
fn build(dir: &Path, n: i64) -> Vec<i64> {
    let log = open(dir, cfg());
    for i in 0..n {
        log.append(&batch(0, &[1_000 + i, 1_000 + i], 60), 0, None, 1_000)
            .unwrap();
    }
    let bases = log.segment_base_offsets();
    drop(log); // a crash: no close
    bases
}

/// Opens and checks the log holds exactly batches 0..n, then appends one.
fn check(dir: &Path, n: i64) {
    let log = open(dir, cfg());
    assert_eq!(log.log_end_offset(), 2 * n);
    let hs = read_all(&log, 0);
    assert_eq!(hs.len() as i64, n);
    for (i, h) in hs.iter().enumerate() {
        assert_eq!(
            (h.base_offset, h.max_timestamp),
            (2 * i as i64, 1_000 + i as i64)
        );
    }
    for i in 0..n {
        assert_eq!(
            log.offset_for_timestamp(1_000 + i).unwrap(),
            Some((2 * i, 1_000 + i))
        );
    }
    let expect_max = if n == 0 {
        (-1, -1)
    } else {
        (999 + n, 2 * (n - 1))
    };
    assert_eq!(log.max_timestamp_and_offset(), expect_max);
    let a = log.append(&batch(0, &[5, 5], 60), 0, None, 1_000).unwrap();
    assert_eq!(a.first_offset, 2 * n);
    assert_eq!(read_all(&log, 0).len() as i64, n + 1);
}

/// Copies a directory (flat) so a scenario can be replayed.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn last_log(dir: &Path) -> PathBuf {
    let mut logs: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

/// A log of 30 batches, and every length of its last batch's bytes from
/// none to all: `(cut, a copy of the log whose last segment is cut there,
/// the batches it holds whole)`.
fn torn_copies(root: &Path) -> impl Iterator<Item = (u64, PathBuf, i64)> + '_ {
    let orig = root.join("orig");
    build(&orig, 30);
    let last = last_log(&orig);
    let len = fs::metadata(&last).unwrap().len();
    let batch_len = batch(0, &[1, 1], 60).len() as u64;
    ((len - batch_len)..=len).map(move |cut| {
        let dir = root.join(format!("cut{cut}"));
        copy_dir(&orig, &dir);
        OpenOptions::new()
            .write(true)
            .open(dir.join(last.file_name().unwrap()))
            .unwrap()
            .set_len(cut)
            .unwrap();
        (cut, dir, if cut == len { 30 } else { 29 })
    })
}

#[test]
fn every_torn_tail_of_the_last_batch_is_cut() {
    let root = tempfile::tempdir().unwrap();
    for (_, dir, n) in torn_copies(root.path()) {
        check(&dir, n);
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// Cuts `bytes` off the end of the log's last segment file.
fn cut_last_log(dir: &Path, bytes: u64) {
    let last = last_log(dir);
    let len = fs::metadata(&last).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(len - bytes)
        .unwrap();
}

#[test]
fn torn_tail_after_a_clean_close_is_cut_too() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 30);
    open(dir.path(), cfg()).close().unwrap();
    cut_last_log(dir.path(), 7);
    check(dir.path(), 29);
}

#[test]
fn garbage_appended_is_cut() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let root = tempfile::tempdir().unwrap();
    let orig = root.path().join("orig");
    build(&orig, 30);
    let last = last_log(&orig).file_name().unwrap().to_owned();
    for (k, n) in [1usize, 12, 61, 200, 5_000].into_iter().enumerate() {
        let dir = root.path().join(format!("g{k}"));
        copy_dir(&orig, &dir);
        OpenOptions::new()
            .append(true)
            .open(dir.join(&last))
            .unwrap()
            .write_all(&rng.bytes(n))
            .unwrap();
        check(&dir, 30);
    }
    // Garbage that looks like a header claiming a huge batch.
    let dir = root.path().join("huge");
    copy_dir(&orig, &dir);
    let mut fake = batch(60, &[1], 1)[..61].to_vec();
    fake[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    OpenOptions::new()
        .append(true)
        .open(dir.join(&last))
        .unwrap()
        .write_all(&fake)
        .unwrap();
    check(&dir, 30);
    // Zeros, as a filesystem may leave after a crash.
    let dir = root.path().join("zeros");
    copy_dir(&orig, &dir);
    OpenOptions::new()
        .append(true)
        .open(dir.join(&last))
        .unwrap()
        .write_all(&[0u8; 4096])
        .unwrap();
    check(&dir, 30);
}

#[test]
fn flipped_bytes_in_the_last_batch_drop_it() {
    let root = tempfile::tempdir().unwrap();
    let orig = root.path().join("orig");
    build(&orig, 30);
    let last = last_log(&orig).file_name().unwrap().to_owned();
    let len = fs::metadata(orig.join(&last)).unwrap().len() as usize;
    let batch_len = batch(0, &[1, 1], 60).len();
    // Every byte the CRC or the framing covers (not baseOffset/epoch).
    for at in (len - batch_len)..len {
        let rel = at - (len - batch_len);
        if rel < 8 || (12..16).contains(&rel) {
            continue;
        }
        let dir = root.path().join(format!("f{at}"));
        copy_dir(&orig, &dir);
        let mut data = fs::read(dir.join(&last)).unwrap();
        data[at] ^= 0x5a;
        fs::write(dir.join(&last), &data).unwrap();
        check(&dir, 29);
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn corruption_in_an_earlier_segment_cuts_there_and_drops_later_segments() {
    let dir = tempfile::tempdir().unwrap();
    let bases = build(dir.path(), 80);
    assert!(bases.len() >= 3);
    // No checkpoint past 0 was written (no flush), so every segment is scanned.
    let second = seg_file(dir.path(), bases[1], ".log");
    let mut data = fs::read(&second).unwrap();
    let batch_len = batch(0, &[1, 1], 60).len();
    data[2 * batch_len + 30] ^= 1; // the third batch of the second segment
    fs::write(&second, &data).unwrap();
    let n = (bases[1] / 2) + 2;
    check(dir.path(), n);
    assert!(!seg_file(dir.path(), bases[2], ".log").exists());
}

#[test]
fn clean_shutdown_trusts_data_unclean_scans_it() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 10);
    let log = open(dir.path(), cfg());
    log.close().unwrap();
    drop(log);
    // Damage a record inside the first batch (headers intact).
    let path = seg_file(dir.path(), 0, ".log");
    let mut data = fs::read(&path).unwrap();
    data[80] ^= 0xff;
    fs::write(&path, &data).unwrap();
    // Clean: trusted as is (no CRC pass), marker consumed.
    let log = open(dir.path(), cfg());
    assert_eq!(log.log_end_offset(), 20);
    assert!(!dir.path().join(".clean-shutdown").exists());
    // The recovery point now sits at the end, so a crash scans only the
    // last segment: simulate an older recovery point instead.
    drop(log);
    fs::write(dir.path().join("recovery-point"), "0\n").unwrap();
    let log = open(dir.path(), cfg());
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.recovery_point(), 0);
}

#[test]
fn segments_below_the_recovery_point_are_not_rescanned() {
    let dir = tempfile::tempdir().unwrap();
    let bases = build(dir.path(), 80);
    {
        let log = open(dir.path(), cfg());
        log.flush().unwrap();
        assert_eq!(log.recovery_point(), 160);
    }
    // A byte flipped in an old segment's record body goes unnoticed (its
    // data was flushed), while the last segment is scanned.
    let first = seg_file(dir.path(), bases[0], ".log");
    let mut data = fs::read(&first).unwrap();
    data[80] ^= 0xff;
    fs::write(&first, &data).unwrap();
    let last = last_log(dir.path());
    OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap()
        .write_all(&[7u8; 100])
        .unwrap();
    let log = open(dir.path(), cfg());
    assert_eq!(log.log_end_offset(), 160);
    assert_eq!(
        fs::metadata(&last).unwrap().len() % batch(0, &[1, 1], 60).len() as u64,
        0
    );
}

fn damage_indexes(dir: &Path, how: &dyn Fn(&Path)) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let ext = p
            .extension()
            .map(|x| x.to_string_lossy().into_owned())
            .unwrap_or_default();
        if ext == "index" || ext == "timeindex" {
            how(&p);
        }
    }
}

#[test]
fn damaged_or_missing_indexes_are_rebuilt() {
    type Damage = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Damage)> = vec![
        ("deleted", Box::new(|p: &Path| fs::remove_file(p).unwrap())),
        ("emptied", Box::new(|p: &Path| fs::write(p, b"").unwrap())),
        (
            "odd size",
            Box::new(|p: &Path| {
                let mut d = fs::read(p).unwrap();
                d.push(1);
                fs::write(p, d).unwrap()
            }),
        ),
        (
            "random",
            Box::new(|p: &Path| {
                let n = fs::metadata(p).unwrap().len() as usize;
                let seed = p
                    .to_string_lossy()
                    .bytes()
                    .fold(7919u64, |a, b| a.wrapping_mul(31).wrapping_add(b as u64));
                fs::write(p, Rng(seed | 1).bytes(n.max(24))).unwrap()
            }),
        ),
        (
            "reversed",
            Box::new(|p: &Path| {
                let d = fs::read(p).unwrap();
                let size = if p.extension().unwrap() == "index" {
                    8
                } else {
                    12
                };
                let rev: Vec<u8> = d.chunks(size).rev().flatten().copied().collect();
                fs::write(p, rev).unwrap()
            }),
        ),
        (
            "pointing elsewhere",
            Box::new(|p: &Path| {
                let mut d = fs::read(p).unwrap();
                if p.extension().unwrap() == "index" && d.len() >= 8 {
                    let n = d.len();
                    let pos = u32::from_be_bytes(d[n - 4..].try_into().unwrap()) + 1;
                    d[n - 4..].copy_from_slice(&pos.to_be_bytes());
                }
                fs::write(p, d).unwrap()
            }),
        ),
    ];
    for clean in [true, false] {
        for (name, how) in &cases {
            let dir = tempfile::tempdir().unwrap();
            build(dir.path(), 80);
            let log = open(dir.path(), cfg());
            if clean {
                log.close().unwrap();
            } else {
                log.flush().unwrap(); // so old segments load as trusted
            }
            drop(log);
            let sizes: Vec<_> = ["index", "timeindex"]
                .iter()
                .map(|x| {
                    fs::metadata(seg_file(dir.path(), 0, &format!(".{x}")))
                        .unwrap()
                        .len()
                })
                .collect();
            assert!(sizes[0] > 0 && sizes[1] > 0, "{sizes:?}");
            damage_indexes(dir.path(), how.as_ref());
            check(dir.path(), 80);
            // Rebuilt on disk as well.
            let after: Vec<_> = ["index", "timeindex"]
                .iter()
                .map(|x| {
                    fs::metadata(seg_file(dir.path(), 0, &format!(".{x}")))
                        .unwrap()
                        .len()
                })
                .collect();
            assert_eq!(after, sizes, "{name} clean={clean}");
        }
    }
}

#[test]
fn leftovers_strays_and_empty_segments() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 10);
    fs::write(dir.path().join("recovery-point.tmp"), "garbage").unwrap();
    fs::write(dir.path().join("00000000000000000000.index.tmp"), "x").unwrap();
    fs::write(seg_file(dir.path(), 500, ".index"), [0u8; 16]).unwrap();
    fs::write(seg_file(dir.path(), 500, ".timeindex"), [0u8; 12]).unwrap();
    fs::write(seg_file(dir.path(), 7, ".log"), b"").unwrap(); // empty, in the middle
    fs::write(dir.path().join("log-start-offset"), "not a number").unwrap();
    fs::write(dir.path().join("unrelated.txt"), "keep me").unwrap();
    check(dir.path(), 10);
    let names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        !names.iter().any(|n| n.ends_with(".tmp")
            || n.starts_with("00000000000000000500")
            || n.starts_with("00000000000000000007")),
        "{names:?}"
    );
    assert!(names.contains(&"unrelated.txt".to_string()));

    // An empty last segment keeps its base offset as the log end.
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 3);
    fs::write(seg_file(dir.path(), 6, ".log"), b"").unwrap();
    let log = open(dir.path(), cfg());
    assert_eq!(
        (log.log_end_offset(), log.segment_base_offsets()),
        (6, vec![0, 6])
    );
    drop(log);
    // A log that is nothing but stray files starts empty.
    let dir = tempfile::tempdir().unwrap();
    fs::write(seg_file(dir.path(), 0, ".index"), [1u8; 8]).unwrap();
    check(dir.path(), 0);
}

#[test]
fn log_start_and_max_timestamp_survive_crashes() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 80);
    let log = open(dir.path(), cfg());
    log.delete_records_before(33).unwrap();
    log.append(&batch(0, &[9_999, 1], 60), 0, None, 1_000)
        .unwrap();
    let before = (log.segment_base_offsets(), log.max_timestamp_and_offset());
    drop(log);
    let log = open(dir.path(), cfg());
    assert_eq!(log.log_start_offset(), 33);
    assert_eq!(
        (log.segment_base_offsets(), log.max_timestamp_and_offset()),
        before
    );
    assert_eq!(log.max_timestamp_and_offset(), (9_999, 160));
    assert_eq!(log.offset_for_timestamp(0).unwrap().unwrap().0, 33);
    // Losing data the log start points past restarts the log at the start.
    drop(log);
    fs::write(dir.path().join("log-start-offset"), "500\n").unwrap();
    let log = open(dir.path(), cfg());
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.segment_count()
        ),
        (500, 500, 1)
    );
}

#[test]
fn a_crash_right_after_open_is_seen_as_unclean() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 5);
    open(dir.path(), cfg()).close().unwrap();
    let log = open(dir.path(), cfg());
    log.append(&batch(0, &[1, 1], 60), 0, None, 1_000).unwrap();
    drop(log);
    assert!(!dir.path().join(".clean-shutdown").exists());
    let last = last_log(dir.path());
    OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap()
        .write_all(&[3u8; 50])
        .unwrap();
    let log = Log::open(dir.path(), cfg(), 0).unwrap();
    assert_eq!(log.log_end_offset(), 12);
}

// -- what recovery reports ------------------------------------------------------

#[test]
fn recovery_reports_each_cut_and_each_deleted_segment() {
    let dir = tempfile::tempdir().unwrap();
    let bases = build(dir.path(), 80);
    let second = seg_file(dir.path(), bases[1], ".log");
    let mut data = fs::read(&second).unwrap();
    let batch_len = batch(0, &[1, 1], 60).len();
    data[2 * batch_len + 30] ^= 1;
    fs::write(&second, &data).unwrap();
    let later: Vec<(i64, u64)> = bases[2..]
        .iter()
        .map(|&b| {
            (
                b,
                fs::metadata(seg_file(dir.path(), b, ".log")).unwrap().len(),
            )
        })
        .collect();
    let log = open(dir.path(), cfg());
    let notes = log.recovery_notes();
    assert_eq!(notes[0].kind, RecoveryKind::Truncated);
    assert_eq!(notes[0].segment, bases[1]);
    assert_eq!(notes[0].position, 2 * batch_len as u64);
    assert_eq!(notes[0].offset, bases[1] + 4);
    assert_eq!(notes[0].bytes, (data.len() - 2 * batch_len) as u64);
    assert!(notes[0].detail.contains("CRC"), "{}", notes[0].detail);
    let deleted: Vec<(i64, u64)> = notes[1..]
        .iter()
        .map(|n| {
            assert_eq!(n.kind, RecoveryKind::DeletedSegment);
            (n.segment, n.bytes)
        })
        .collect();
    assert_eq!(deleted, later);
    // A clean reopen has nothing to report.
    log.close().unwrap();
    drop(log);
    assert!(open(dir.path(), cfg()).recovery_notes().is_empty());
}

#[test]
fn a_torn_tail_is_reported_with_its_position_and_size() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 3);
    let last = last_log(dir.path());
    let len = fs::metadata(&last).unwrap().len();
    OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap()
        .write_all(&[0u8; 20])
        .unwrap();
    let log = open(dir.path(), cfg());
    let n = &log.recovery_notes()[0];
    assert_eq!(
        (n.kind, n.position, n.offset, n.bytes),
        (RecoveryKind::Truncated, len, 6, 20)
    );
    assert!(n.detail.contains("torn"), "{}", n.detail);
}

/// Every way a small state file can be damaged.
fn damaged_contents() -> Vec<(&'static str, Option<Vec<u8>>)> {
    vec![
        ("empty", Some(Vec::new())),
        ("binary garbage", Some(vec![0xff, 0x00, 0x9c, 0x13, 0x80])),
        ("not a number", Some(b"12x\n".to_vec())),
        ("negative", Some(b"-5\n".to_vec())),
        ("too long", Some(vec![b'1'; 4096])),
        ("a directory", None),
    ]
}

fn put_state_file(path: &Path, content: &Option<Vec<u8>>) {
    let _ = fs::remove_file(path);
    match content {
        Some(bytes) => fs::write(path, bytes).unwrap(),
        None => fs::create_dir(path).unwrap(),
    }
}

#[test]
fn a_damaged_recovery_point_means_a_full_scan() {
    for (what, content) in damaged_contents() {
        let dir = tempfile::tempdir().unwrap();
        let bases = build(dir.path(), 80);
        open(dir.path(), cfg()).flush().unwrap();
        // Below the recovery point: only a full scan finds this.
        let first = seg_file(dir.path(), bases[0], ".log");
        let mut data = fs::read(&first).unwrap();
        data[80] ^= 0xff;
        fs::write(&first, &data).unwrap();
        let rp = dir.path().join("recovery-point");
        put_state_file(&rp, &content);
        if content.is_none() {
            // Not a file: it cannot be replaced, so the open fails naming it.
            let Err(err) = Log::open(dir.path(), cfg(), 1_000) else {
                panic!("{what}: opened");
            };
            let err = err.to_string();
            assert!(err.contains("recovery-point"), "{what}: {err}");
            continue;
        }
        let log = open(dir.path(), cfg());
        let notes = log.recovery_notes();
        assert_eq!(notes[0].kind, RecoveryKind::BadCheckpoint, "{what}");
        assert!(notes[0].detail.contains("recovery-point"), "{what}");
        assert_eq!(notes[1].kind, RecoveryKind::Truncated, "{what}");
        assert_eq!((notes[1].segment, notes[1].position), (0, 0), "{what}");
        assert_eq!(log.log_end_offset(), 0, "{what}");
        // The checkpoint is rewritten: the next open is quiet.
        drop(log);
        assert!(
            open(dir.path(), cfg()).recovery_notes().is_empty(),
            "{what}"
        );
    }
}

#[test]
fn a_damaged_log_start_or_cleaner_checkpoint_is_treated_as_missing() {
    for name in ["log-start-offset", "cleaner-checkpoint"] {
        for (what, content) in damaged_contents() {
            if content.is_none() {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let bases = build(dir.path(), 80);
            {
                let log = open(dir.path(), cfg());
                log.delete_records_before(bases[1] + 2).unwrap();
                log.close().unwrap();
            }
            put_state_file(&dir.path().join(name), &content);
            let log = open(dir.path(), cfg());
            let notes = log.recovery_notes();
            assert_eq!(notes.len(), 1, "{name} {what}: {notes:?}");
            assert_eq!(notes[0].kind, RecoveryKind::BadCheckpoint);
            assert!(notes[0].detail.contains(name), "{name} {what}");
            assert_eq!(log.log_end_offset(), 160, "{name} {what}");
            let start = if name == "log-start-offset" {
                bases[1]
            } else {
                bases[1] + 2
            };
            assert_eq!(log.log_start_offset(), start, "{name} {what}");
        }
    }
}

// -- offline verify ---------------------------------------------------------------

fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, std::time::SystemTime)> {
    let mut out: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let m = fs::metadata(&p).unwrap();
            (p.clone(), fs::read(&p).unwrap(), m.modified().unwrap())
        })
        .collect();
    out.sort();
    out
}

#[test]
fn verify_finds_every_bad_batch_and_never_writes() {
    let dir = tempfile::tempdir().unwrap();
    let bases = build(dir.path(), 80);
    {
        let log = open(dir.path(), cfg());
        log.close().unwrap();
    }
    let clean = verify_log_dir(dir.path()).unwrap();
    assert!(clean.bad.is_empty() && clean.clean_shutdown);
    assert_eq!((clean.segments, clean.batches), (bases.len(), 80));

    let batch_len = batch(0, &[1, 1], 60).len();
    // A record body byte in the second segment (CRC), a header byte in the
    // first (base offset), garbage after the last.
    let second = seg_file(dir.path(), bases[1], ".log");
    let mut data = fs::read(&second).unwrap();
    data[2 * batch_len + 70] ^= 1;
    fs::write(&second, &data).unwrap();
    let first = seg_file(dir.path(), bases[0], ".log");
    let mut data = fs::read(&first).unwrap();
    data[batch_len + 7] ^= 0x02; // base offset of the second batch: 2 -> 0
    fs::write(&first, &data).unwrap();
    let last = last_log(dir.path());
    let last_len = fs::metadata(&last).unwrap().len();
    OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap()
        .write_all(&[3u8; 10])
        .unwrap();

    let before = snapshot(dir.path());
    let report = verify_log_dir(dir.path()).unwrap();
    assert_eq!(snapshot(dir.path()), before);
    let found: Vec<_> = report
        .bad
        .iter()
        .map(|b| (b.segment_file.clone(), b.position, b.unreadable_after))
        .collect();
    assert_eq!(
        found,
        vec![
            (first, batch_len as u64, 0),
            (second, 2 * batch_len as u64, 0),
            (last, last_len, 10),
        ]
    );
    assert!(
        report.bad[0].reason.contains("below"),
        "{:?}",
        report.bad[0]
    );
    assert_eq!(report.bad[0].offset, 0);
    assert_eq!(report.bad[1].offset, bases[1] + 4);
    assert!(report.bad[1].reason.contains("CRC"));
    assert!(report.bad[2].reason.contains("torn"));
    // Every other batch was still checked.
    assert_eq!(report.batches, 78);
}

#[test]
fn a_swap_file_that_is_empty_or_garbage_leaves_the_old_segments() {
    for content in [Vec::new(), vec![0xa5u8; 37], vec![0u8; 200]] {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), 80);
        {
            let log = open(dir.path(), cfg());
            log.close().unwrap();
        }
        for sfx in [".log.swap", ".index.swap", ".timeindex.swap"] {
            fs::write(seg_file(dir.path(), 0, sfx), &content).unwrap();
        }
        check(dir.path(), 80);
        for sfx in [".log.swap", ".index.swap", ".timeindex.swap"] {
            assert!(!seg_file(dir.path(), 0, sfx).exists());
        }
    }
}

// -- a kill under the same kernel -------------------------------------------------

fn open_same_kernel(dir: &Path) -> Log {
    Log::open_after(dir, cfg(), 1_000, LastWriter::SameKernel).unwrap()
}

#[test]
fn a_kill_under_the_same_kernel_checks_only_the_tail() {
    let root = tempfile::tempdir().unwrap();
    let orig = root.path().join("orig");
    let bases = build(&orig, 80);
    assert!(bases.len() > 2);
    // Nothing known flushed, and a byte flipped in the first segment's
    // record body: a kill cannot do that (only a machine crash can).
    fs::write(orig.join("recovery-point"), "0\n").unwrap();
    let first = seg_file(&orig, bases[0], ".log");
    let mut data = fs::read(&first).unwrap();
    data[80] ^= 0xff;
    fs::write(&first, &data).unwrap();
    let torn = root.path().join("torn");
    copy_dir(&orig, &torn);

    // Not known to be the same kernel: everything past the recovery point
    // is checked, and the flipped batch cuts the log there.
    let unknown = root.path().join("unknown");
    copy_dir(&orig, &unknown);
    assert_eq!(open(&unknown, cfg()).log_end_offset(), 0);

    // The same kernel: the tail only, and nothing to cut there. The
    // recovery point stays where the checkpoint had it until a flush has
    // synced what is past it.
    let log = open_same_kernel(&orig);
    // (The last segment's index lacked the entries not yet written.)
    let notes = log.recovery_notes();
    assert!(
        notes.iter().all(|n| n.kind == RecoveryKind::RebuiltIndexes),
        "{notes:?}"
    );
    assert_eq!(log.log_end_offset(), 160);
    assert_eq!(log.segment_base_offsets(), bases);
    assert_eq!(log.recovery_point(), 0);
    assert_eq!(
        fs::read_to_string(orig.join("recovery-point")).unwrap(),
        "0\n"
    );
    assert_eq!(read_all(&log, 2).len(), 79); // (the flipped one is batch 0)
    let a = log.append(&batch(0, &[5, 5], 60), 0, None, 1_000).unwrap();
    assert_eq!(a.first_offset, 160);
    log.flush().unwrap();
    assert_eq!(log.recovery_point(), 162);
    assert_eq!(
        fs::read_to_string(orig.join("recovery-point")).unwrap(),
        "162\n"
    );

    // A torn batch at the end, which a kill can leave, is cut, and the log
    // as kept is synced at once (its recovery point moves to the end).
    OpenOptions::new()
        .append(true)
        .open(last_log(&torn))
        .unwrap()
        .write_all(&batch(0, &[1, 1], 60)[..50])
        .unwrap();
    let log = open_same_kernel(&torn);
    let cuts: Vec<_> = log
        .recovery_notes()
        .iter()
        .filter(|n| n.kind != RecoveryKind::RebuiltIndexes)
        .map(|n| n.kind)
        .collect();
    assert_eq!(cuts, [RecoveryKind::Truncated]);
    assert_eq!(log.log_end_offset(), 160);
    assert_eq!(log.recovery_point(), 160);
    assert_eq!(read_all(&log, 2).len(), 79); // (the flipped one is batch 0)
}

#[test]
fn every_torn_tail_under_the_same_kernel_is_cut() {
    let root = tempfile::tempdir().unwrap();
    for (cut, dir, n) in torn_copies(root.path()) {
        let log = open_same_kernel(&dir);
        assert_eq!(log.log_end_offset(), 2 * n, "cut at {cut}");
        let hs = read_all(&log, 0);
        assert_eq!(hs.len() as i64, n);
        for i in 0..n {
            assert_eq!(
                log.offset_for_timestamp(1_000 + i).unwrap(),
                Some((2 * i, 1_000 + i))
            );
        }
        let a = log.append(&batch(0, &[5, 5], 60), 0, None, 1_000).unwrap();
        assert_eq!(a.first_offset, 2 * n);
        drop(log);
        // Killed again: the same tail check finds the log as it was left.
        assert_eq!(open_same_kernel(&dir).log_end_offset(), 2 * n + 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn epochs_survive_a_kill_under_the_same_kernel_without_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), cfg());
    for epoch in [0, 0, 3, 3, 7] {
        log.append(&batch(0, &[1, 1], 60), epoch, None, 1_000)
            .unwrap();
    }
    let before = log.epoch_entries();
    drop(log); // a kill
    let log = open_same_kernel(dir.path());
    assert_eq!(log.epoch_entries(), before);
    assert_eq!(log.latest_epoch(), Some(7));
    assert_eq!(log.end_offset_for_epoch(3), (3, 8));
    drop(log);
    // A torn last batch takes its epoch with it.
    cut_last_log(dir.path(), 10);
    let log = open_same_kernel(dir.path());
    assert_eq!(log.log_end_offset(), 8);
    assert_eq!(log.latest_epoch(), Some(3));
}
