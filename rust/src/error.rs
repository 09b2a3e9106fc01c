//! The one error type of the core. The binding layer maps it to Python
//! exceptions in one place (`py.rs`).

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum Error {
    /// An operating-system error (kept whole so the errno survives).
    Io(io::Error),
    /// An operating-system error on a named file (kept whole as well).
    File(std::path::PathBuf, io::Error),
    /// A state file (checkpoint) whose content cannot be used and cannot
    /// safely be ignored.
    BadStateFile(std::path::PathBuf, String),
    /// Bytes that are not a valid record batch: bad CRC, sizes, magic...
    CorruptRecord(String),
    /// A well-formed batch whose content breaks a rule (e.g. offsets,
    /// attribute bits, keyless record on a compacted log).
    InvalidRecord(String),
    /// A well-formed batch with records that break a rule of the topic
    /// (no key on a compacted topic, a timestamp out of range): each one.
    RecordErrors(Vec<RecordError>),
    /// A batch larger than the configured limit.
    RecordTooLarge { size: usize, max: usize },
    /// A requested offset outside [log start, log end].
    OffsetOutOfRange { offset: i64, start: i64, end: i64 },
    /// A follower append whose first batch does not start at the log end
    /// (Kafka's UnexpectedAppendOffsetException): the fetch answered for
    /// another offset, or the leader's log start falls inside the batch.
    /// `first_offset`/`last_offset` are the first batch's.
    UnexpectedAppendOffset {
        first_offset: i64,
        last_offset: i64,
        log_end: i64,
    },
    /// A varint/varlong longer than its type allows or cut short.
    Varint(&'static str),
    /// A caller passed an argument the operation cannot accept.
    InvalidArgument(String),
    /// A leader append in an epoch below the latest the log knows.
    StaleLeaderEpoch { epoch: i32, latest: i32 },
    /// A write prepared before its log's owner moved the log's fence.
    Fenced { prepared: u64, now: u64 },
}

pub type Result<T> = std::result::Result<T, Error>;

/// Why `records::validate_batch` refused one record of a well-formed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordProblem {
    /// No key, on a topic that requires keys (compacted).
    MissingKey,
    /// A timestamp outside the topic's `records::TimestampWindow`; `offset` is
    /// the record's offset as the producer sent it (baseOffset + delta).
    TimestampOutOfRange { offset: i64, timestamp: i64 },
}

/// One refused record: its index in its batch and the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: usize,
    pub problem: RecordProblem,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::File(p, e) => write!(f, "{}: {e}", p.display()),
            Error::BadStateFile(p, m) => write!(f, "{}: {m}", p.display()),
            Error::CorruptRecord(m) => write!(f, "corrupt record: {m}"),
            Error::InvalidRecord(m) => write!(f, "invalid record: {m}"),
            Error::RecordErrors(errors) => {
                write!(f, "invalid record: {} records refused:", errors.len())?;
                for e in errors.iter().take(3) {
                    match e.problem {
                        RecordProblem::MissingKey => {
                            write!(f, " record {} has no key;", e.batch_index)?
                        }
                        RecordProblem::TimestampOutOfRange { timestamp, .. } => {
                            write!(
                                f,
                                " record {} has timestamp {timestamp} out of range;",
                                e.batch_index
                            )?
                        }
                    }
                }
                Ok(())
            }
            Error::RecordTooLarge { size, max } => {
                write!(f, "record batch of {size} bytes exceeds the limit of {max}")
            }
            Error::OffsetOutOfRange { offset, start, end } => {
                write!(f, "offset {offset} is out of range [{start}, {end}]")
            }
            Error::UnexpectedAppendOffset {
                first_offset,
                last_offset,
                log_end,
            } => write!(
                f,
                "the first batch appended as follower holds offsets {first_offset}..={last_offset}, \
                 not starting at the log end offset {log_end}"
            ),
            Error::Varint(m) => write!(f, "bad varint: {m}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Fenced { prepared, now } => write!(
                f,
                "the write was prepared under fence {prepared}, the log's is {now} (its \
                 partition changed hands or was truncated meanwhile)"
            ),
            Error::StaleLeaderEpoch { epoch, latest } => write!(
                f,
                "leader epoch {epoch} is below the log's latest epoch {latest}"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) | Error::File(_, e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl Error {
    /// Names the file an I/O error happened on.
    pub fn at(path: &std::path::Path) -> impl FnOnce(io::Error) -> Error + '_ {
        move |e| Error::File(path.to_path_buf(), e)
    }
}

/// Shorthand for `Err(Error::CorruptRecord(..))` with a formatted message.
#[macro_export]
macro_rules! corrupt {
    ($($arg:tt)*) => { Err($crate::error::Error::CorruptRecord(format!($($arg)*))) };
}
