//! Small state files of a log directory (checkpoints), read with care and
//! made durable, and the directory operations around them.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;

use crate::error::{Error, Result};

/// Makes a directory's entries durable (after a create, rename or remove).
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// Longest checkpoint file read (a decimal i64 and a newline, with room).
const MAX_CHECKPOINT_BYTES: u64 = 128;

/// The text of a small state file; None when it is missing. A file that
/// cannot be read as short UTF-8 text yields `Err(what is wrong)`.
pub(crate) fn read_state_file(path: &Path) -> Result<Option<std::result::Result<String, String>>> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::File(path.to_path_buf(), e)),
    };
    let mut bytes = Vec::new();
    match f.take(MAX_CHECKPOINT_BYTES + 1).read_to_end(&mut bytes) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Ok(Some(Err("is a directory".into())))
        }
        Err(e) => return Err(Error::File(path.to_path_buf(), e)),
    }
    if bytes.is_empty() {
        return Ok(Some(Err("empty".into())));
    }
    if bytes.len() as u64 > MAX_CHECKPOINT_BYTES {
        return Ok(Some(Err(format!(
            "longer than {MAX_CHECKPOINT_BYTES} bytes"
        ))));
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some(Ok(text))),
        Err(e) => Ok(Some(Err(format!(
            "not text (byte {:#04x} at {})",
            e.as_bytes()[e.utf8_error().valid_up_to()],
            e.utf8_error().valid_up_to()
        )))),
    }
}

/// Removes a file; one that is not there is fine.
pub(crate) fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}
