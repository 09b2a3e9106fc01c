//! The cleaner's files in a log directory: its checkpoint (how far the log
//! is clean, and the earliest delete horizon) and the swap files of a pass
//! in progress, with the recovery that finishes or undoes an interrupted
//! swap when the log opens (the swap protocol is described in
//! [`crate::cleaner`]).
//!
//! Below both `log`, which reads the checkpoint and recovers swaps at open
//! and lowers the checkpoint on truncation, and `cleaner`, which writes them
//! during a pass.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::records::{BatchHeader, HEADER_SIZE};
use crate::segment::{file_name, parse_file_name, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::statefile::{read_state_file, remove_if_present, sync_dir};
use crate::txn_index::TXN_INDEX_SUFFIX;

/// Files of a cleaned group still being written (dropped on open).
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Files of a committed cleaned group not yet renamed into place.
pub const SWAP_SUFFIX: &str = ".swap";
/// "<first dirty offset> <earliest delete horizon>": the cleaner's progress.
pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner-checkpoint";
/// No kept tombstone waits for a delete horizon.
pub const NO_HORIZON: i64 = i64::MAX;

/// `<base><suffix><extra>`: the path of a group file with an extra suffix.
pub(crate) fn suffixed(dir: &Path, base: i64, suffix: &str, extra: &str) -> PathBuf {
    dir.join(format!("{}{extra}", file_name(base, suffix)))
}

/// The files of a cleaned group, in the order they are renamed: the log
/// file last, as its name is what recovery goes by. A group always has a
/// transaction index file (empty when no aborted transaction is left), so
/// recovery can tell a renamed one from an old one.
pub(crate) const GROUP_SUFFIXES: [&str; 4] = [
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LOG_SUFFIX,
];

pub(crate) fn remove_group_files(dir: &Path, base: i64, extra: &str) {
    for suffix in GROUP_SUFFIXES {
        // Best effort: a leftover is dropped on the next open anyway.
        let _ = fs::remove_file(suffixed(dir, base, suffix, extra));
    }
}

/// The cleaner checkpoint: (first dirty offset, earliest delete horizon);
/// (0, NO_HORIZON) when absent (everything is dirty then), and
/// `Err(what is wrong)` when unreadable (the caller falls back to the same).
pub fn read_cleaner_checkpoint(dir: &Path) -> Result<std::result::Result<(i64, i64), String>> {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    let text = match read_state_file(&path)? {
        None => return Ok(Ok((0, NO_HORIZON))),
        Some(Ok(text)) => text,
        Some(Err(problem)) => return Ok(Err(format!("{}: {problem}", path.display()))),
    };
    let mut parts = text.split_whitespace().map(|p| p.parse::<i64>());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(offset)), Some(Ok(horizon)), None) if offset >= 0 => Ok(Ok((offset, horizon))),
        _ => Ok(Err(format!(
            "{}: not \"<first dirty offset> <delete horizon>\": {:?}",
            path.display(),
            text.trim()
        ))),
    }
}

/// Writes the checkpoint durably (temporary file, fsync, rename, fsync).
pub fn write_cleaner_checkpoint(dir: &Path, first_dirty: i64, horizon: i64) -> Result<()> {
    let tmp = dir.join(format!("{CLEANER_CHECKPOINT_FILE}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(format!("{first_dirty} {horizon}\n").as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(CLEANER_CHECKPOINT_FILE))?;
    sync_dir(dir)
}

/// The next offset after the last whole batch of a file (headers only).
fn next_offset_of_file(path: &Path) -> Result<Option<i64>> {
    let file = File::open(path).map_err(Error::at(path))?;
    let len = file.metadata().map_err(Error::at(path))?.len();
    let mut pos = 0u64;
    let mut next = None;
    let mut h = [0u8; HEADER_SIZE];
    while pos + HEADER_SIZE as u64 <= len {
        file.read_exact_at(&mut h, pos).map_err(Error::at(path))?;
        let Ok(hdr) = BatchHeader::parse(&h) else {
            break;
        };
        if pos + hdr.total_size() as u64 > len {
            break;
        }
        next = Some(hdr.last_offset() + 1);
        pos += hdr.total_size() as u64;
    }
    Ok(next)
}

/// Finishes or undoes compaction swaps a crash interrupted (see the `cleaner`
/// module's documentation). Runs at open, before the segments are listed.
pub fn recover_swaps(dir: &Path) -> Result<()> {
    let mut log_swaps = Vec::new();
    let mut index_swaps = Vec::new();
    let mut logs = Vec::new();
    let mut changed = false;
    for entry in fs::read_dir(dir).map_err(Error::at(dir))? {
        let entry = entry.map_err(Error::at(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(CLEANED_SUFFIX) {
            remove_if_present(&entry.path())?;
            changed = true;
            continue;
        }
        match parse_file_name(name) {
            Some((base, s)) if s == format!("{LOG_SUFFIX}{SWAP_SUFFIX}") => log_swaps.push(base),
            Some((base, s))
                if s == format!("{INDEX_SUFFIX}{SWAP_SUFFIX}")
                    || s == format!("{TIME_INDEX_SUFFIX}{SWAP_SUFFIX}")
                    || s == format!("{TXN_INDEX_SUFFIX}{SWAP_SUFFIX}") =>
            {
                index_swaps.push((base, entry.path()))
            }
            Some((base, LOG_SUFFIX)) => logs.push(base),
            _ => {}
        }
    }
    // An index swap without its log swap never committed.
    for (base, path) in index_swaps {
        if !log_swaps.contains(&base) {
            remove_if_present(&path)?;
            changed = true;
        }
    }
    log_swaps.sort_unstable();
    for base in log_swaps {
        changed = true;
        let swap = suffixed(dir, base, LOG_SUFFIX, SWAP_SUFFIX);
        let Some(next) = next_offset_of_file(&swap)? else {
            // Nothing usable was committed: keep the old segments.
            remove_group_files(dir, base, SWAP_SUFFIX);
            continue;
        };
        // The old group: every segment from `base` below the swap's end.
        for &old in logs.iter().filter(|&&b| b > base && b < next) {
            for suffix in GROUP_SUFFIXES {
                remove_if_present(&dir.join(file_name(old, suffix)))?;
            }
        }
        remove_if_present(&dir.join(file_name(base, LOG_SUFFIX)))?;
        // An index whose swap is gone was renamed already: it is the new one.
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
            let from = suffixed(dir, base, suffix, SWAP_SUFFIX);
            if from.exists() {
                fs::rename(&from, dir.join(file_name(base, suffix)))?;
            }
        }
        fs::rename(&swap, dir.join(file_name(base, LOG_SUFFIX)))?;
    }
    if changed {
        sync_dir(dir)?;
    }
    Ok(())
}
