//! Threads for blocking work whose results one consumer collects when told.
//!
//! The broker's event loop hands a job (an append to a log, say) to the pool
//! under a key (the log) and a ticket, and goes on; a pool thread runs it and
//! queues the result under its ticket, and the pool's eventfd becomes
//! readable, which is how the loop learns to collect ([`IoPool::take_done`]).
//! The threads never touch the consumer's state. Results finished close
//! together make one wakeup.
//!
//! One key's jobs run one at a time, in the order submitted. The keys with
//! jobs take turns, one job each: a key whose jobs each block (a log with
//! `flush.messages=1` fsyncing every append) holds up its own jobs and one
//! thread, never the jobs of the other keys queued behind it.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

type Job<R> = Box<dyn FnOnce() -> R + Send>;

/// A job submitted to a pool that is closed.
#[derive(Debug)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the I/O pool is closed")
    }
}

impl std::error::Error for Closed {}

struct Queue<R> {
    jobs: VecDeque<(u64, Job<R>)>,
    /// In `ready` or running now: not to be made ready again.
    scheduled: bool,
}

struct State<R> {
    queues: HashMap<u64, Queue<R>>,
    /// Keys with a job to run, in turn.
    ready: VecDeque<u64>,
    threads: usize,
    /// Threads still to end (the pool shrank).
    to_end: usize,
    closed: bool,
}

struct Shared<R> {
    state: Mutex<State<R>>,
    work: Condvar,
    done: Mutex<Vec<(u64, R)>>,
    event: OwnedFd,
}

pub struct IoPool<R: Send + 'static> {
    shared: Arc<Shared<R>>,
    handles: Mutex<Vec<JoinHandle<()>>>,
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
        let pool = IoPool {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queues: HashMap::new(),
                    ready: VecDeque::new(),
                    threads: 0,
                    to_end: 0,
                    closed: false,
                }),
                work: Condvar::new(),
                done: Mutex::new(Vec::new()),
                event,
            }),
            handles: Mutex::new(Vec::new()),
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
        let state = lock(&self.shared.state);
        if state.closed {
            0
        } else {
            state.threads - state.to_end
        }
    }

    /// Queues `job` behind `key`'s earlier jobs; its result comes back under
    /// `ticket`.
    pub fn submit(
        &self,
        key: u64,
        ticket: u64,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Result<(), Closed> {
        let mut state = lock(&self.shared.state);
        if state.closed {
            return Err(Closed);
        }
        let queue = state.queues.entry(key).or_insert_with(|| Queue {
            jobs: VecDeque::new(),
            scheduled: false,
        });
        queue.jobs.push_back((ticket, Box::new(job)));
        if !queue.scheduled {
            queue.scheduled = true;
            state.ready.push_back(key);
            self.shared.work.notify_one();
        }
        Ok(())
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

    /// `count` threads from now on: more start at once, fewer end as they
    /// finish the job in hand.
    pub fn resize(&self, count: usize) -> io::Result<()> {
        let mut handles = lock(&self.handles);
        let start = {
            let mut state = lock(&self.shared.state);
            if state.closed {
                return Ok(());
            }
            let live = state.threads - state.to_end;
            if count < live {
                state.to_end += live - count;
                self.shared.work.notify_all();
                0
            } else {
                // Threads asked to end that have not yet are kept instead.
                let kept = state.to_end.min(count - live);
                state.to_end -= kept;
                let start = count - live - kept;
                state.threads += start;
                start
            }
        };
        handles.retain(|t| !t.is_finished());
        for _ in 0..start {
            let shared = self.shared.clone();
            let t = thread::Builder::new()
                .name(format!("{}-{}", self.name, handles.len()))
                .spawn(move || work(&shared))?;
            handles.push(t);
        }
        Ok(())
    }

    /// Lets the jobs submitted run, then ends the threads; later submits
    /// fail with [`Closed`]. With no thread left, the jobs still queued run
    /// here.
    pub fn close(&self) {
        let threads = {
            let mut state = lock(&self.shared.state);
            state.closed = true;
            self.shared.work.notify_all();
            state.threads - state.to_end
        };
        if threads == 0 {
            let mut state = lock(&self.shared.state);
            loop {
                let ran;
                (state, ran) = run_one(&self.shared, state);
                if !ran {
                    break;
                }
            }
        }
        let handles = std::mem::take(&mut *lock(&self.handles));
        for t in handles {
            let _ = t.join();
        }
    }
}

impl<R: Send + 'static> Drop for IoPool<R> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Runs the next ready key's next job, the state unlocked meanwhile;
/// false when no key is ready.
fn run_one<'a, R>(
    shared: &'a Shared<R>,
    mut state: MutexGuard<'a, State<R>>,
) -> (MutexGuard<'a, State<R>>, bool) {
    let Some(key) = state.ready.pop_front() else {
        return (state, false);
    };
    let queue = state.queues.get_mut(&key).expect("a ready key has a queue");
    let (ticket, job) = queue.jobs.pop_front().expect("a ready key has a job");
    drop(state);
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
    let mut state = lock(&shared.state);
    let queue = state
        .queues
        .get_mut(&key)
        .expect("a running key keeps its queue");
    if queue.jobs.is_empty() {
        state.queues.remove(&key);
    } else {
        state.ready.push_back(key); // its next job waits for the other keys' turns
        shared.work.notify_one();
    }
    (state, true)
}

fn work<R>(shared: &Shared<R>) {
    let mut state = lock(&shared.state);
    loop {
        if state.to_end > 0 {
            state.to_end -= 1;
            state.threads -= 1;
            return;
        }
        let ran;
        (state, ran) = run_one(shared, state);
        if ran {
            continue;
        }
        if state.closed {
            state.threads -= 1;
            return;
        }
        state = shared.work.wait(state).unwrap_or_else(|p| p.into_inner());
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
            pool.submit(t % 7, t, move || t * 2).unwrap();
        }
        let mut got = collect(&pool, 100);
        got.sort();
        assert_eq!(got, (0..100).map(|t| (t, t * 2)).collect::<Vec<_>>());
        assert!(!readable(pool.event_fd(), 0) || pool.take_done().is_empty());
    }

    #[test]
    fn a_keys_jobs_run_one_at_a_time_in_order_on_any_thread() {
        let pool = IoPool::new(4, "t").unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        for t in 0..200u64 {
            let order = order.clone();
            pool.submit(t % 2, t, move || {
                order.lock().unwrap().push((t % 2, t, true));
                if t % 7 == 0 {
                    thread::sleep(Duration::from_millis(1));
                }
                order.lock().unwrap().push((t % 2, t, false));
                t
            })
            .unwrap();
        }
        assert_eq!(collect(&pool, 200).len(), 200);
        let order = order.lock().unwrap();
        for key in 0..2 {
            let mine: Vec<_> = order.iter().filter(|(k, ..)| *k == key).collect();
            // start, end, start, end... in ticket order: never two at once.
            for (i, pair) in mine.chunks(2).enumerate() {
                let t = key + 2 * i as u64;
                assert_eq!(pair, [&(key, t, true), &(key, t, false)]);
            }
        }
    }

    #[test]
    fn a_blocked_key_holds_up_only_its_own_jobs() {
        let pool = IoPool::new(2, "t").unwrap();
        let (release, wait) = mpsc::channel::<()>();
        pool.submit(1, 1, move || {
            wait.recv_timeout(Duration::from_secs(10)).unwrap();
            1
        })
        .unwrap();
        for t in 2..20 {
            pool.submit(1, t, move || t).unwrap(); // behind the blocked one
        }
        pool.submit(2, 100, || 100).unwrap();
        assert_eq!(collect(&pool, 1), [(100, 100)]);
        assert!(pool.take_done().is_empty());
        release.send(()).unwrap();
        let got = collect(&pool, 19);
        assert_eq!(got, (1..20).map(|t| (t, t)).collect::<Vec<_>>());
    }

    #[test]
    fn resizing_and_closing() {
        let pool = IoPool::new(0, "t").unwrap();
        assert_eq!(pool.count(), 0);
        pool.resize(2).unwrap();
        assert_eq!(pool.count(), 2);
        pool.submit(0, 7, || 7).unwrap();
        assert_eq!(collect(&pool, 1), [(7, 7)]);
        pool.resize(1).unwrap();
        assert_eq!(pool.count(), 1);
        pool.submit(0, 8, || 8).unwrap();
        assert_eq!(collect(&pool, 1), [(8, 8)]);
        for t in 0..10 {
            pool.submit(t % 3, t, move || {
                thread::sleep(Duration::from_millis(2));
                t
            })
            .unwrap();
        }
        pool.close(); // the jobs submitted run first
        assert_eq!(pool.take_done().len(), 10);
        assert!(pool.submit(0, 99, || 99).is_err());
        assert_eq!(pool.count(), 0);
    }

    #[test]
    fn a_pool_shrunk_to_nothing_runs_what_is_left_when_closed() {
        let pool = IoPool::new(1, "t").unwrap();
        pool.resize(0).unwrap();
        for t in 0..5 {
            pool.submit(t, t, move || t).unwrap();
        }
        pool.close();
        assert_eq!(pool.take_done().len(), 5);
    }
}
