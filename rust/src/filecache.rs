//! A process-wide bound on open segment log files.
//!
//! Every segment's `.log` file is reached through a [`FileSlot`]: the slot
//! opens the file on demand and the one global cache closes the least
//! recently used slots' handles when more than [`max_open_files`] are open,
//! so the number of partitions is limited by disk, not by descriptors.
//!
//! Users take an `Arc<File>` from the slot for the length of one operation
//! (a read, a write, a sendfile held by a `LogSlice`): eviction only drops the
//! slot's reference, so it never closes a descriptor in use. Closing a
//! descriptor loses nothing written (the data is in the page cache) and
//! fdatasync works on the inode, so a flush after an eviction re-opens the
//! file and syncs everything written through the earlier handle.
//!
//! A pinned slot keeps its handle and is not counted: a deleted segment (its
//! file can no longer be opened by name, readers may still hold it) and a
//! cleaned segment before its file is renamed into place.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// Default bound until the broker sets one (half a typical 1024 soft limit
/// would be too low for tests that open a few hundred logs, so a generous
/// value; the broker always sets it from `log.max.open.files`).
const DEFAULT_MAX_OPEN_FILES: usize = 4096;

static MAX_OPEN: AtomicUsize = AtomicUsize::new(DEFAULT_MAX_OPEN_FILES);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The cache's use counter, readable without its lock.
static TICK: AtomicU64 = AtomicU64::new(0);

/// The bound on open segment files (at least 1).
pub fn max_open_files() -> usize {
    MAX_OPEN.load(Ordering::Relaxed)
}

/// Sets the bound; handles above it are closed now.
pub fn set_max_open_files(n: usize) {
    MAX_OPEN.store(n.max(1), Ordering::Relaxed);
    cache().evict_over_bound();
}

/// Segment files the cache holds open now (pinned ones not included).
pub fn open_files() -> usize {
    cache().lock().by_id.len()
}

struct Entry {
    tick: u64,
    slot: Weak<FileSlot>,
}

#[derive(Default)]
struct Inner {
    tick: u64,
    by_id: HashMap<u64, Entry>,
    by_tick: BTreeMap<u64, u64>,
}

struct Cache {
    inner: Mutex<Inner>,
}

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Cache {
        inner: Mutex::new(Inner::default()),
    })
}

impl Cache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `slot` most recently used (adding it if absent) and returns the
    /// slots to close to get back under the bound.
    fn touch(&self, slot: &Arc<FileSlot>) -> Vec<Weak<FileSlot>> {
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        TICK.store(tick, Ordering::Relaxed);
        slot.touched_at.store(tick, Ordering::Relaxed);
        let inner = &mut *g;
        match inner.by_id.get_mut(&slot.id) {
            Some(e) => {
                inner.by_tick.remove(&e.tick);
                e.tick = tick;
            }
            None => {
                inner.by_id.insert(
                    slot.id,
                    Entry {
                        tick,
                        slot: Arc::downgrade(slot),
                    },
                );
            }
        }
        inner.by_tick.insert(tick, slot.id);
        Self::over_bound(inner)
    }

    fn over_bound(inner: &mut Inner) -> Vec<Weak<FileSlot>> {
        let max = max_open_files();
        let mut victims = Vec::new();
        while inner.by_id.len() > max {
            let Some((_, id)) = inner.by_tick.pop_first() else {
                break;
            };
            if let Some(e) = inner.by_id.remove(&id) {
                victims.push(e.slot);
            }
        }
        victims
    }

    fn remove(&self, id: u64) {
        let mut g = self.lock();
        if let Some(e) = g.by_id.remove(&id) {
            g.by_tick.remove(&e.tick);
        }
    }

    fn evict_over_bound(&self) {
        let victims = Self::over_bound(&mut self.lock());
        close_all(victims);
    }
}

/// Closes the victims' handles, outside the cache lock (slot locks are
/// never taken while holding it).
fn close_all(victims: Vec<Weak<FileSlot>>) {
    for v in victims {
        if let Some(slot) = v.upgrade() {
            // Checked under the slot lock: `pin` sets the flag before it
            // takes the lock, and re-opens what was closed before.
            let mut g = slot.lock();
            if !slot.pinned.load(Ordering::Acquire) {
                g.take();
            }
        }
    }
}

/// One segment log file, opened on demand (read-write, never created).
pub struct FileSlot {
    id: u64,
    path: PathBuf,
    file: Mutex<Option<Arc<File>>>,
    pinned: AtomicBool,
    /// Cache tick of the last touch.
    touched_at: AtomicU64,
}

impl FileSlot {
    /// A slot over `path` holding `file`, an open handle to it, counted by
    /// the cache (and possibly closed at once if the cache is full).
    pub fn new(path: PathBuf, file: File) -> Arc<FileSlot> {
        let slot = Self::unregistered(path, Some(file));
        close_all(cache().touch(&slot));
        slot
    }

    /// A slot holding `file` (open on a file that will be renamed to `path`)
    /// that is never closed until [`FileSlot::unpin`].
    pub fn pinned(path: PathBuf, file: File) -> Arc<FileSlot> {
        let slot = Self::unregistered(path, Some(file));
        slot.pinned.store(true, Ordering::Release);
        slot
    }

    fn unregistered(path: PathBuf, file: Option<File>) -> Arc<FileSlot> {
        Arc::new(FileSlot {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path,
            file: Mutex::new(file.map(Arc::new)),
            pinned: AtomicBool::new(false),
            touched_at: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<Arc<File>>> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file, opening it if the cache closed it.
    pub fn get(self: &Arc<Self>) -> io::Result<Arc<File>> {
        let (file, opened) = {
            let mut g = self.lock();
            match g.as_ref() {
                Some(f) => (f.clone(), false),
                None => {
                    let f = self.open()?;
                    *g = Some(f.clone());
                    (f, true)
                }
            }
        };
        // A slot among the most recently used half is not near eviction:
        // skip the cache lock (reads touch a segment many times each).
        let age = TICK
            .load(Ordering::Relaxed)
            .saturating_sub(self.touched_at.load(Ordering::Relaxed));
        let recent = !opened && age < (max_open_files() / 2) as u64;
        if !recent && !self.pinned.load(Ordering::Acquire) {
            close_all(cache().touch(self));
        }
        Ok(file)
    }

    /// Keeps the handle open for the slot's life (opening it first): the
    /// file is about to lose its name.
    pub fn pin(self: &Arc<Self>) -> io::Result<()> {
        self.pinned.store(true, Ordering::Release);
        cache().remove(self.id);
        let mut g = self.lock();
        if g.is_none() {
            *g = Some(self.open()?);
        }
        Ok(())
    }

    fn open(&self) -> io::Result<Arc<File>> {
        let f = OpenOptions::new().read(true).write(true).open(&self.path)?;
        Ok(Arc::new(f))
    }

    /// Lets the cache count and close the handle again (the file is at its
    /// path now).
    pub fn unpin(self: &Arc<Self>) {
        if self.pinned.swap(false, Ordering::AcqRel) && self.lock().is_some() {
            close_all(cache().touch(self));
        }
    }

    /// Whether the handle is open now.
    pub fn is_open(&self) -> bool {
        self.lock().is_some()
    }
}

impl Drop for FileSlot {
    fn drop(&mut self) {
        cache().remove(self.id);
    }
}
