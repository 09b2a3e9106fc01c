//! `libkbf_clock.so`: clock jumps for the fault harness (`bench/faults`), one process at
//! a time.
//!
//! Preloaded into a broker (`LD_PRELOAD`), it adds an offset to every reading of the
//! wall clock the process makes (`clock_gettime` of the realtime clocks, `gettimeofday`,
//! `time`) and leaves every other clock alone: the monotonic clock, which timers and
//! timeouts ought to use, runs on undisturbed, as it does when NTP steps a machine's
//! clock. Nothing else about the process changes, and no other process sees the jump
//! (setting the machine's clock would move the harness's and every other process's
//! with it; a time namespace offsets only the monotonic and boot clocks).
//!
//! The offset, in milliseconds (a signed decimal integer, surrounding whitespace
//! allowed), is read from the file named by `KBF_CLOCK_FILE`, again whenever 100 ms of
//! monotonic time have passed since the last read. A missing, unreadable or malformed
//! file is an offset of 0, and so is a process without `KBF_CLOCK_FILE`.
//!
//! Written for 64-bit Linux (`time_t` and `tv_nsec` are `i64`).

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use libc::{c_int, c_void, clockid_t, time_t, timespec, timeval};

const RECHECK_NS: i64 = 100_000_000;
const NS: i64 = 1_000_000_000;

type ClockGettime = unsafe extern "C" fn(clockid_t, *mut timespec) -> c_int;
type Gettimeofday = unsafe extern "C" fn(*mut timeval, *mut c_void) -> c_int;

static REAL_CLOCK_GETTIME: AtomicUsize = AtomicUsize::new(0);
static REAL_GETTIMEOFDAY: AtomicUsize = AtomicUsize::new(0);
static OFFSET_NS: AtomicI64 = AtomicI64::new(0);
/// Monotonic time (ns) at which the file is read again; `i64::MIN`: at the next call.
static NEXT_READ_NS: AtomicI64 = AtomicI64::new(i64::MIN);
static READING: AtomicBool = AtomicBool::new(false);

/// The next definition of `name` after this library (libc's), looked up once.
fn next_symbol(cache: &AtomicUsize, name: &CStr) -> usize {
    let mut f = cache.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: `name` is NUL-terminated; dlsym is thread-safe.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, Ordering::Relaxed);
    }
    f
}

unsafe fn real_clock_gettime(clock: clockid_t, ts: *mut timespec) -> c_int {
    let f = next_symbol(&REAL_CLOCK_GETTIME, c"clock_gettime");
    if f == 0 {
        return libc::syscall(libc::SYS_clock_gettime, clock, ts) as c_int;
    }
    // SAFETY: the symbol is libc's clock_gettime, of this type.
    let f: ClockGettime = std::mem::transmute(f);
    f(clock, ts)
}

fn is_wall_clock(clock: clockid_t) -> bool {
    matches!(
        clock,
        libc::CLOCK_REALTIME
            | libc::CLOCK_REALTIME_COARSE
            | libc::CLOCK_REALTIME_ALARM
            | libc::CLOCK_TAI
    )
}

/// The offset to add, re-read from the file when it is due (by one thread at a time;
/// the others use the value read before).
fn offset_ns() -> i64 {
    let mut now = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    if unsafe { real_clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) } != 0 {
        return OFFSET_NS.load(Ordering::Relaxed);
    }
    let now = now.tv_sec * NS + now.tv_nsec;
    if now >= NEXT_READ_NS.load(Ordering::Relaxed)
        && READING
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    {
        OFFSET_NS.store(
            read_offset_ms().saturating_mul(1_000_000),
            Ordering::Relaxed,
        );
        NEXT_READ_NS.store(now + RECHECK_NS, Ordering::Relaxed);
        READING.store(false, Ordering::Release);
    }
    OFFSET_NS.load(Ordering::Relaxed)
}

/// The file's offset in ms; 0 when there is none. No allocation: this runs inside
/// every clock reading, from any thread, possibly before the process's main.
fn read_offset_ms() -> i64 {
    // SAFETY: getenv's result is either null or a NUL-terminated string.
    let path = unsafe { libc::getenv(c"KBF_CLOCK_FILE".as_ptr()) };
    if path.is_null() {
        return 0;
    }
    let mut buf = [0u8; 32];
    // SAFETY: `path` is NUL-terminated; `buf` is writable for its length.
    let n = unsafe {
        let fd = libc::open(path, libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast::<c_void>(), buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return 0;
    }
    parse_ms(&buf[..n as usize]).unwrap_or(0)
}

fn parse_ms(text: &[u8]) -> Option<i64> {
    let text = text.trim_ascii();
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        value = value * 10 + i64::from(d - b'0');
    }
    Some(if negative { -value } else { value })
}

fn shift(ts: &mut timespec, offset: i64) {
    let total = ts
        .tv_sec
        .saturating_mul(NS)
        .saturating_add(ts.tv_nsec)
        .saturating_add(offset);
    ts.tv_sec = total.div_euclid(NS);
    ts.tv_nsec = total.rem_euclid(NS);
}

/// # Safety
/// As libc's `clock_gettime`.
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(clock: clockid_t, ts: *mut timespec) -> c_int {
    let rc = real_clock_gettime(clock, ts);
    if rc == 0 && !ts.is_null() && is_wall_clock(clock) {
        let offset = offset_ns();
        if offset != 0 {
            shift(&mut *ts, offset);
        }
    }
    rc
}

/// # Safety
/// As libc's `gettimeofday`.
#[no_mangle]
pub unsafe extern "C" fn gettimeofday(tv: *mut timeval, tz: *mut c_void) -> c_int {
    let f = next_symbol(&REAL_GETTIMEOFDAY, c"gettimeofday");
    let rc = if f == 0 {
        libc::syscall(libc::SYS_gettimeofday, tv, tz) as c_int
    } else {
        // SAFETY: the symbol is libc's gettimeofday, of this type.
        let f: Gettimeofday = std::mem::transmute(f);
        f(tv, tz)
    };
    if rc == 0 && !tv.is_null() {
        let offset = offset_ns();
        if offset != 0 {
            let tv = &mut *tv;
            let mut ts = timespec {
                tv_sec: tv.tv_sec,
                tv_nsec: (tv.tv_usec * 1000) as _,
            };
            shift(&mut ts, offset);
            tv.tv_sec = ts.tv_sec;
            tv.tv_usec = (ts.tv_nsec / 1000) as _;
        }
    }
    rc
}

/// # Safety
/// As libc's `time`.
#[no_mangle]
pub unsafe extern "C" fn time(out: *mut time_t) -> time_t {
    let mut ts = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if clock_gettime(libc::CLOCK_REALTIME, &mut ts) != 0 {
        return -1;
    }
    if !out.is_null() {
        *out = ts.tv_sec;
    }
    ts.tv_sec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_or_are_refused() {
        assert_eq!(parse_ms(b"0"), Some(0));
        assert_eq!(parse_ms(b" -120000\n"), Some(-120_000));
        assert_eq!(parse_ms(b"+5"), Some(5));
        for bad in [&b""[..], b"-", b"12s", b"1 2", b"9999999999999999"] {
            assert_eq!(parse_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn shifts_carry_across_seconds_both_ways() {
        let mut ts = timespec {
            tv_sec: 10,
            tv_nsec: 900_000_000,
        };
        shift(&mut ts, 200_000_000);
        assert_eq!((ts.tv_sec, ts.tv_nsec), (11, 100_000_000));
        shift(&mut ts, -1_200_000_000);
        assert_eq!((ts.tv_sec, ts.tv_nsec), (9, 900_000_000));
    }
}
