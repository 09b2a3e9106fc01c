//! Threads for blocking work whose results one consumer collects when told.
//!
//! The broker's event loop hands a job (an append to a log, say) to the pool
//! with a ticket and goes on; a pool thread runs it and queues the result
//! under its ticket, and the pool's eventfd becomes readable, which is how
//! the loop learns to collect ([`IoPool::take_done`]). The threads never
//! touch the consumer's state, so a job that blocks (a write the kernel
//! throttles, an fdatasync) holds up only itself. Results finished close
//! together make one wakeup.
//!
//! Jobs start in the order submitted but run on several threads; jobs that
//! must also run in that order (the appends to one log) take their turns
//! from one [`Turns`].

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

type Job<R> = Box<dyn FnOnce() -> R + Send>;

enum Message<R> {
    Run(u64, Job<R>),
    /// One thread ends (the pool shrinks).
    Exit,
}

struct Shared<R> {
    jobs: Mutex<Receiver<Message<R>>>,
    done: Mutex<Vec<(u64, R)>>,
    event: OwnedFd,
}

/// A job submitted to a pool that is closed.
#[derive(Debug)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the I/O pool is closed")
    }
}

impl std::error::Error for Closed {}

pub struct IoPool<R: Send + 'static> {
    shared: Arc<Shared<R>>,
    sender: Mutex<Option<Sender<Message<R>>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    count: AtomicUsize,
    name: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<R: Send + 'static> IoPool<R> {
    /// A pool of `count` threads named `name-N` (0: none until `resize`).
    pub fn new(count: usize, name: &str) -> io::Result<Self> {
        // SAFETY: eventfd has no memory arguments; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor this pool alone owns.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        let (tx, rx) = channel();
        let pool = IoPool {
            shared: Arc::new(Shared {
                jobs: Mutex::new(rx),
                done: Mutex::new(Vec::new()),
                event,
            }),
            sender: Mutex::new(Some(tx)),
            threads: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
            name: name.to_string(),
        };
        pool.resize(count)?;
        Ok(pool)
    }

    /// Readable when results are waiting (poll it, then `take_done`).
    pub fn event_fd(&self) -> RawFd {
        self.shared.event.as_raw_fd()
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Queues `job`; its result comes back under `ticket`. Jobs start in
    /// the order submitted (one thread each: they may finish in any order).
    pub fn submit(
        &self,
        ticket: u64,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Result<(), Closed> {
        let sender = lock(&self.sender);
        let Some(tx) = sender.as_ref() else {
            return Err(Closed);
        };
        tx.send(Message::Run(ticket, Box::new(job)))
            .map_err(|_| Closed)
    }

    /// Every result finished since the last call, in the order they finished.
    pub fn take_done(&self) -> Vec<(u64, R)> {
        // The event first, then the results: a result queued after this read
        // makes the event readable again, so none is left unannounced.
        let mut counter = 0u64;
        // SAFETY: reads 8 bytes into a local u64 from our own eventfd.
        unsafe {
            libc::read(
                self.shared.event.as_raw_fd(),
                &mut counter as *mut u64 as *mut libc::c_void,
                8,
            )
        };
        std::mem::take(&mut *lock(&self.shared.done))
    }

    /// `count` threads from now on: more start at once, fewer end once the
    /// jobs queued before are taken.
    pub fn resize(&self, count: usize) -> io::Result<()> {
        let sender = lock(&self.sender);
        let Some(tx) = sender.as_ref() else {
            return Ok(());
        };
        let mut threads = lock(&self.threads);
        threads.retain(|t| !t.is_finished());
        let before = self.count.swap(count, Ordering::AcqRel);
        for _ in count..before {
            let _ = tx.send(Message::Exit);
        }
        for i in before..count {
            let shared = self.shared.clone();
            let t = thread::Builder::new()
                .name(format!("{}-{i}", self.name))
                .spawn(move || work(&shared))?;
            threads.push(t);
        }
        Ok(())
    }

    /// Lets the jobs submitted run, then ends the threads; later submits
    /// fail with [`Closed`].
    pub fn close(&self) {
        let tx = lock(&self.sender).take();
        drop(tx); // the threads end when the queue is empty and closed
        self.count.store(0, Ordering::Release);
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl<R: Send + 'static> Drop for IoPool<R> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Turns handed out in order and taken in that order, whichever threads
/// take them: a job that was issued turn `n` runs only after turn `n - 1`
/// ran. A thread waiting for its turn waits for a job that was queued
/// before its own, so already running: the wait always ends.
#[derive(Default)]
pub struct Turns {
    issued: AtomicU64,
    next: Mutex<u64>,
    changed: Condvar,
}

impl Turns {
    /// The next turn (issue them in the order the jobs are submitted).
    pub fn issue(&self) -> u64 {
        self.issued.fetch_add(1, Ordering::AcqRel)
    }

    /// Runs `job` in turn `turn`, then lets the next turn go (also when
    /// `job` panics).
    pub fn take<T>(&self, turn: u64, job: impl FnOnce() -> T) -> T {
        {
            let mut next = lock(&self.next);
            while *next != turn {
                next = self.changed.wait(next).unwrap_or_else(|p| p.into_inner());
            }
        }
        struct Pass<'a>(&'a Turns);
        impl Drop for Pass<'_> {
            fn drop(&mut self) {
                *lock(&self.0.next) += 1;
                self.0.changed.notify_all();
            }
        }
        let _pass = Pass(self);
        job()
    }
}

fn work<R>(shared: &Shared<R>) {
    loop {
        let message = lock(&shared.jobs).recv();
        let (ticket, job) = match message {
            Ok(Message::Run(ticket, job)) => (ticket, job),
            Ok(Message::Exit) | Err(_) => return,
        };
        let result = job();
        let announce = {
            let mut done = lock(&shared.done);
            done.push((ticket, result));
            done.len() == 1
        };
        if announce {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a local u64 to our own eventfd.
            unsafe {
                libc::write(
                    shared.event.as_raw_fd(),
                    &one as *const u64 as *const libc::c_void,
                    8,
                )
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn readable(fd: RawFd, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) == 1 }
    }

    fn collect(pool: &IoPool<u64>, n: usize) -> Vec<(u64, u64)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while got.len() < n {
            assert!(Instant::now() < deadline, "results did not come");
            if readable(pool.event_fd(), 100) {
                got.extend(pool.take_done());
            }
        }
        got
    }

    #[test]
    fn every_result_comes_back_under_its_ticket_and_the_event_says_so() {
        let pool = IoPool::new(3, "t").unwrap();
        for t in 0..100u64 {
            pool.submit(t, move || t * 2).unwrap();
        }
        let mut got = collect(&pool, 100);
        got.sort();
        assert_eq!(got, (0..100).map(|t| (t, t * 2)).collect::<Vec<_>>());
        assert!(!readable(pool.event_fd(), 0) || pool.take_done().is_empty());
    }

    #[test]
    fn a_blocked_job_holds_up_only_itself() {
        let pool = IoPool::new(2, "t").unwrap();
        let (release, wait) = mpsc::channel::<()>();
        pool.submit(1, move || {
            wait.recv_timeout(Duration::from_secs(10)).unwrap();
            1
        })
        .unwrap();
        pool.submit(2, || 2).unwrap();
        assert_eq!(collect(&pool, 1), [(2, 2)]);
        release.send(()).unwrap();
        assert_eq!(collect(&pool, 1), [(1, 1)]);
    }

    #[test]
    fn turns_run_in_the_order_issued_on_any_thread() {
        let pool = IoPool::new(4, "t").unwrap();
        let turns = Arc::new(Turns::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        for t in 0..200u64 {
            let turn = turns.issue();
            let (turns, order) = (turns.clone(), order.clone());
            pool.submit(t, move || {
                if t % 7 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
                turns.take(turn, || order.lock().unwrap().push(t));
                t
            })
            .unwrap();
        }
        assert_eq!(collect(&pool, 200).len(), 200);
        assert_eq!(*order.lock().unwrap(), (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn resizing_and_closing() {
        let pool = IoPool::new(0, "t").unwrap();
        assert_eq!(pool.count(), 0);
        pool.resize(2).unwrap();
        pool.submit(7, || 7).unwrap();
        assert_eq!(collect(&pool, 1), [(7, 7)]);
        pool.resize(1).unwrap();
        pool.submit(8, || 8).unwrap();
        assert_eq!(collect(&pool, 1), [(8, 8)]);
        for t in 0..10 {
            pool.submit(t, move || {
                thread::sleep(Duration::from_millis(2));
                t
            })
            .unwrap();
        }
        pool.close(); // the jobs submitted run first
        assert_eq!(pool.take_done().len(), 10);
        assert!(pool.submit(99, || 99).is_err());
    }
}
