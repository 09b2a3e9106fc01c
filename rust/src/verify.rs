//! Offline check of a partition directory (`kbroker log verify`): every
//! batch of every segment, read only, with no lock taken, so it is safe
//! beside a running broker (a segment being appended to may show a torn
//! tail that the next read would find whole).

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::log::CLEAN_SHUTDOWN_FILE;
use crate::segment::{
    check_batch_at, parse_file_name, BatchFault, Scanner, LOG_SUFFIX, MAX_SEGMENT_SIZE,
};

/// One batch that fails the checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadBatch {
    pub segment_file: PathBuf,
    /// Byte position of the batch in the segment file.
    pub position: u64,
    /// The batch's base offset as its header says, or the offset expected
    /// there when the header is unreadable.
    pub offset: i64,
    pub reason: String,
    /// Nothing after this batch in the segment could be checked (broken
    /// framing); these many bytes were skipped.
    pub unreadable_after: u64,
}

/// What a verify of one partition directory found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub segments: usize,
    pub batches: u64,
    pub bytes: u64,
    /// The directory holds the clean-shutdown marker.
    pub clean_shutdown: bool,
    pub bad: Vec<BadBatch>,
}

/// Checks every segment of the partition directory `dir`: header (magic,
/// sizes), CRC-32C, offsets rising within and across segments and not below
/// each segment's base offset. Never writes.
pub fn verify_log_dir(dir: &Path) -> Result<VerifyReport> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(Error::at(dir))? {
        let entry = entry.map_err(Error::at(dir))?;
        let name = entry.file_name();
        if let Some((base, LOG_SUFFIX)) = name.to_str().and_then(parse_file_name) {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    let mut report = VerifyReport {
        clean_shutdown: dir.join(CLEAN_SHUTDOWN_FILE).exists(),
        ..VerifyReport::default()
    };
    let mut expect = i64::MIN;
    for base in bases {
        let path = dir.join(crate::segment::file_name(base, LOG_SUFFIX));
        expect = expect.max(base);
        expect = verify_segment(&path, base, expect, &mut report)?;
        report.segments += 1;
    }
    Ok(report)
}

/// Checks one segment file; returns the offset the next segment must not
/// start below.
fn verify_segment(
    path: &Path,
    base: i64,
    mut expect: i64,
    report: &mut VerifyReport,
) -> Result<i64> {
    let file = File::open(path).map_err(Error::at(path))?;
    let file_len = file.metadata().map_err(Error::at(path))?.len();
    let mut scanner = Scanner::new(&file, file_len.min(MAX_SEGMENT_SIZE));
    let mut pos = 0u64;
    let bad = |position: u64, offset: i64, reason: String, unreadable_after: u64| BadBatch {
        segment_file: path.to_path_buf(),
        position,
        offset,
        reason,
        unreadable_after,
    };
    loop {
        match check_batch_at(&mut scanner, pos, expect, base, true).map_err(|e| match e {
            Error::Io(io) => Error::File(path.to_path_buf(), io),
            e => e,
        })? {
            None => {
                if pos < file_len {
                    let rest = file_len - pos;
                    let reason = format!("{rest} bytes past the largest segment size");
                    report.bad.push(bad(pos, expect, reason, rest));
                }
                break;
            }
            Some(Ok(h)) => {
                let size = h.total_size() as u64;
                report.batches += 1;
                report.bytes += size;
                expect = h.last_offset().saturating_add(1);
                pos += size;
            }
            Some(Err(BatchFault::Content {
                size,
                base_offset,
                next,
                reason,
            })) => {
                report.bad.push(bad(pos, base_offset, reason, 0));
                expect = expect.max(next);
                pos += size as u64;
            }
            Some(Err(BatchFault::Framing(reason) | BatchFault::Torn(reason))) => {
                let rest = file_len - pos;
                report.bad.push(bad(pos, expect, reason, rest));
                break;
            }
        }
    }
    Ok(expect)
}
