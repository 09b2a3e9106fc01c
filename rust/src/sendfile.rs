//! sendfile(2): file bytes to a socket without passing through user space.

use std::io;
use std::os::fd::RawFd;

use crate::error::Result;

/// What one `sendfile` call achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// Bytes sent (fewer than asked when the socket buffer filled up or the
    /// file ended).
    Sent(usize),
    /// A non-blocking socket had no room before anything was sent.
    WouldBlock,
}

/// Sends up to `count` bytes of `in_fd` starting at `offset` to `out_fd`.
/// Retries on EINTR and keeps going after partial sends until `count` bytes
/// went, the socket would block, or the file ended. Errors keep their errno.
pub fn sendfile(out_fd: RawFd, in_fd: RawFd, offset: u64, count: usize) -> Result<SendOutcome> {
    let mut sent = 0usize;
    while sent < count {
        let mut off = (offset + sent as u64) as libc::off_t;
        // Linux sends at most 0x7ffff000 bytes per call.
        let chunk = (count - sent).min(0x7fff_f000);
        // SAFETY: plain syscall on caller-provided descriptors; `off` is a
        // valid local the kernel updates.
        let n = unsafe { libc::sendfile(out_fd, in_fd, &mut off, chunk) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock if sent == 0 => return Ok(SendOutcome::WouldBlock),
                io::ErrorKind::WouldBlock => break,
                _ => return Err(e.into()),
            }
        }
        if n == 0 {
            break; // end of file
        }
        sent += n as usize;
    }
    Ok(SendOutcome::Sent(sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_count_sends_nothing() {
        assert_eq!(sendfile(-1, -1, 0, 0).unwrap(), SendOutcome::Sent(0));
    }
}
