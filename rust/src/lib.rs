//! kbroker's storage hot path.
//!
//! The core modules are plain Rust with no knowledge of Python; `py` is the
//! thin pyo3 layer, compiled only with the `python` feature (maturin).

pub mod cleaner;
pub mod cleaner_state;
pub mod compression;
pub mod crc32c;
pub mod epoch_cache;
pub mod error;
pub mod filecache;
pub mod index;
pub mod io_pool;
pub mod log;
pub mod new_logs;
pub mod records;
pub mod segment;
pub mod sendfile;
pub mod statefile;
pub mod txn_index;
pub mod varint;
pub mod verify;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};
