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
//! jobs take turns, one job each: a key whose jobs each block holds up its
//! own jobs and one thread, never the jobs of the other keys queued behind
//! it.
//!
//! A job may end in a second step ([`Step::Then`]: the fdatasync that
//! `flush.messages` asks after an append), which runs on the pool's other
//! lane: threads of their own, one key's second steps in order, its result
//! under the first step's ticket. So the appends of every log go on while
//! some logs wait for their disk, and a thread never waits for a sync that
//! one before it is doing (the log coalesces them).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

/// What a job's run gives: its result, or a second step to run on the
/// sync lane whose result is the job's.
pub enum Step<R> {
    Done(R),
    Then(Box<dyn FnOnce() -> R + Send>),
}

type Job<R> = Box<dyn FnOnce() -> Step<R> + Send>;

/// The lanes: first steps, and the second steps they leave.
const FIRST: usize = 0;
const SECOND: usize = 1;
const LANES: [usize; 2] = [FIRST, SECOND];

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

/// One lane's jobs and threads.
struct Lane<R> {
    queues: HashMap<u64, Queue<R>>,
    /// Keys with a job to run, in turn.
    ready: VecDeque<u64>,
    threads: usize,
    /// Threads still to end (the pool shrank).
    to_end: usize,
    /// Jobs being run now.
    running: usize,
    /// Threads waiting for a job (only those need waking: a busy thread
    /// looks for the next job itself before it waits).
    idle: usize,
}

impl<R> Lane<R> {
    fn new() -> Self {
        Lane {
            queues: HashMap::new(),
            ready: VecDeque::new(),
            threads: 0,
            to_end: 0,
            running: 0,
            idle: 0,
        }
    }

    fn push(&mut self, key: u64, ticket: u64, job: Job<R>) -> bool {
        let queue = self.queues.entry(key).or_insert_with(|| Queue {
            jobs: VecDeque::new(),
            scheduled: false,
        });
        queue.jobs.push_back((ticket, job));
        if queue.scheduled {
            return false;
        }
        queue.scheduled = true;
        self.ready.push_back(key);
        true
    }

    fn live(&self) -> usize {
        self.threads - self.to_end
    }
}

struct State<R> {
    lanes: [Lane<R>; 2],
    closed: bool,
}

impl<R> State<R> {
    /// A closed pool's thread of `lane` ends once nothing more can come to
    /// it: no job queued there, and for the second lane none queued or
    /// running on the first.
    fn drained(&self, lane: usize) -> bool {
        let first = &self.lanes[FIRST];
        let mine = &self.lanes[lane];
        mine.ready.is_empty() && (lane == FIRST || (first.ready.is_empty() && first.running == 0))
    }
}

struct Shared<R> {
    state: Mutex<State<R>>,
    work: [Condvar; 2],
    /// Told when a job ends in a closed pool (for a close with no thread).
    ended: Condvar,
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
    /// A pool of `count` threads on each lane, named `name-N` and
    /// `name-fN` (0: none until `resize`).
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
                    lanes: [Lane::new(), Lane::new()],
                    closed: false,
                }),
                work: [Condvar::new(), Condvar::new()],
                ended: Condvar::new(),
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
            state.lanes[FIRST].live()
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
        self.submit_steps(key, ticket, move || Step::Done(job()))
    }

    /// [`IoPool::submit`] for a job that may leave a second step.
    pub fn submit_steps(
        &self,
        key: u64,
        ticket: u64,
        job: impl FnOnce() -> Step<R> + Send + 'static,
    ) -> Result<(), Closed> {
        self.queue_steps(key, ticket, job)?;
        self.wake();
        Ok(())
    }

    /// [`IoPool::submit_steps`] without waking a thread: for a submitter
    /// that queues several jobs and then calls [`IoPool::wake`] once (a
    /// wakeup is a system call, and a context switch on a small machine).
    pub fn queue_steps(
        &self,
        key: u64,
        ticket: u64,
        job: impl FnOnce() -> Step<R> + Send + 'static,
    ) -> Result<(), Closed> {
        let mut state = lock(&self.shared.state);
        if state.closed {
            return Err(Closed);
        }
        state.lanes[FIRST].push(key, ticket, Box::new(job));
        Ok(())
    }

    /// Wakes a waiting thread if jobs are ready; a thread that takes a job
    /// while more are ready wakes the next.
    pub fn wake(&self) {
        let wake = {
            let state = lock(&self.shared.state);
            let first = &state.lanes[FIRST];
            !first.ready.is_empty() && first.idle > 0
        };
        // After the lock is let go, so that the thread does not wake only to
        // wait for it.
        if wake {
            self.shared.work[FIRST].notify_one();
        }
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

    /// `count` threads on each lane from now on: more start at once, fewer
    /// end as they finish the job in hand.
    pub fn resize(&self, count: usize) -> io::Result<()> {
        let mut handles = lock(&self.handles);
        let starts = {
            let mut state = lock(&self.shared.state);
            if state.closed {
                return Ok(());
            }
            LANES.map(|lane| {
                let l = &mut state.lanes[lane];
                let live = l.live();
                if count < live {
                    l.to_end += live - count;
                    self.shared.work[lane].notify_all();
                    0
                } else {
                    // Threads asked to end that have not yet are kept instead.
                    let kept = l.to_end.min(count - live);
                    l.to_end -= kept;
                    let start = count - live - kept;
                    l.threads += start;
                    start
                }
            })
        };
        handles.retain(|t| !t.is_finished());
        for lane in LANES {
            for n in 0..starts[lane] {
                let shared = self.shared.clone();
                let name = match lane {
                    FIRST => format!("{}-{}", self.name, handles.len()),
                    _ => format!("{}-f{}", self.name, n),
                };
                let t = thread::Builder::new()
                    .name(name)
                    .spawn(move || work(&shared, lane))?;
                handles.push(t);
            }
        }
        Ok(())
    }

    /// Lets the jobs submitted run (and their second steps), then ends the
    /// threads; later submits fail with [`Closed`]. With no thread left,
    /// the jobs still queued run here.
    pub fn close(&self) {
        let threads = {
            let mut state = lock(&self.shared.state);
            state.closed = true;
            for lane in LANES {
                self.shared.work[lane].notify_all();
            }
            state.lanes[FIRST].live() + state.lanes[SECOND].live()
        };
        if threads == 0 {
            // A thread that was asked to end may still be finishing a job
            // (and its key's jobs queued meanwhile wait for it): wait for it.
            let mut state = lock(&self.shared.state);
            loop {
                let ran;
                (state, ran) = run_one(&self.shared, state, FIRST);
                if ran {
                    continue;
                }
                let ran;
                (state, ran) = run_one(&self.shared, state, SECOND);
                if ran {
                    continue;
                }
                if state.lanes.iter().all(|l| l.running == 0) {
                    break;
                }
                state = self
                    .shared
                    .ended
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
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

/// Runs the next ready key's next job on `lane`, the state unlocked
/// meanwhile; false when no key is ready there.
fn run_one<'a, R: 'static>(
    shared: &'a Shared<R>,
    mut state: MutexGuard<'a, State<R>>,
    lane: usize,
) -> (MutexGuard<'a, State<R>>, bool) {
    let l = &mut state.lanes[lane];
    let Some(key) = l.ready.pop_front() else {
        return (state, false);
    };
    let queue = l.queues.get_mut(&key).expect("a ready key has a queue");
    let (ticket, job) = queue.jobs.pop_front().expect("a ready key has a job");
    l.running += 1;
    let wake_next = !l.ready.is_empty() && l.idle > 0;
    drop(state);
    if wake_next {
        shared.work[lane].notify_one();
    }
    let step = job();
    let then = match step {
        Step::Done(result) => {
            announce(shared, ticket, result);
            None
        }
        Step::Then(next) => Some(next),
    };
    let mut state = lock(&shared.state);
    if let Some(next) = then {
        let next: Job<R> = Box::new(move || Step::Done(next()));
        let second = &mut state.lanes[SECOND];
        if second.push(key, ticket, next) && second.idle > 0 {
            shared.work[SECOND].notify_one();
        }
    }
    let l = &mut state.lanes[lane];
    l.running -= 1;
    let queue = l
        .queues
        .get_mut(&key)
        .expect("a running key keeps its queue");
    if queue.jobs.is_empty() {
        l.queues.remove(&key);
    } else {
        // Its next job waits for the other keys' turns (this thread goes on
        // with the next ready key: no other needs waking).
        l.ready.push_back(key);
    }
    if state.closed {
        shared.ended.notify_all();
    }
    if lane == FIRST && (state.closed || state.lanes[SECOND].to_end > 0) && state.drained(FIRST) {
        // Nothing more can come to the second lane: those of its threads
        // that are to end may.
        shared.work[SECOND].notify_all();
    }
    (state, true)
}

/// Queues a finished job's result and makes the eventfd readable if it
/// was not already.
fn announce<R>(shared: &Shared<R>, ticket: u64, result: R) {
    let first = {
        let mut done = lock(&shared.done);
        done.push((ticket, result));
        done.len() == 1
    };
    if first {
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

fn work<R: 'static>(shared: &Shared<R>, lane: usize) {
    let mut state = lock(&shared.state);
    loop {
        // The last thread of a lane shrunk to none ends only once the jobs
        // already queued for it are done: nothing else would run them.
        let last_with_work = state.lanes[lane].threads == 1 && !state.drained(lane);
        let l = &mut state.lanes[lane];
        if l.to_end > 0 && !last_with_work {
            l.to_end -= 1;
            l.threads -= 1;
            return;
        }
        let ran;
        (state, ran) = run_one(shared, state, lane);
        if ran {
            continue;
        }
        if state.closed && state.drained(lane) {
            state.lanes[lane].threads -= 1;
            return;
        }
        state.lanes[lane].idle += 1;
        state = shared.work[lane]
            .wait(state)
            .unwrap_or_else(|p| p.into_inner());
        state.lanes[lane].idle -= 1;
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

    #[test]
    fn the_last_thread_of_a_pool_shrunk_to_nothing_finishes_the_queued_jobs() {
        let pool = IoPool::new(1, "t").unwrap();
        let (release, wait) = mpsc::channel::<()>();
        pool.submit_steps(1, 0, move || {
            wait.recv_timeout(Duration::from_secs(10)).unwrap();
            Step::Then(Box::new(|| 0))
        })
        .unwrap();
        for t in 1..4 {
            pool.submit(1, t, move || t).unwrap(); // behind the running one
        }
        pool.resize(0).unwrap();
        release.send(()).unwrap();
        // Not left for close: the threads asked to end run them first.
        let mut got = collect(&pool, 4);
        got.sort();
        assert_eq!(got, [(0, 0), (1, 1), (2, 2), (3, 3)]);
        assert_eq!(pool.count(), 0);
    }

    #[test]
    fn a_second_step_waits_on_its_own_lane_and_holds_up_no_first_step() {
        let pool = IoPool::new(1, "t").unwrap();
        let (release, wait) = mpsc::channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        let w = wait.clone();
        pool.submit_steps(1, 1, move || {
            Step::Then(Box::new(move || {
                w.lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(10))
                    .unwrap();
                1
            }))
        })
        .unwrap();
        // The same key's next job and another key's run while the first one's
        // second step waits (one thread on each lane).
        pool.submit(1, 2, || 2).unwrap();
        pool.submit(2, 3, || 3).unwrap();
        let mut got = collect(&pool, 2);
        got.sort();
        assert_eq!(got, [(2, 2), (3, 3)]);
        release.send(()).unwrap();
        assert_eq!(collect(&pool, 1), [(1, 1)]);
    }

    #[test]
    fn one_keys_second_steps_run_in_order_and_close_waits_for_them() {
        let pool = IoPool::new(3, "t").unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        for t in 0..50u64 {
            let order = order.clone();
            pool.submit_steps(7, t, move || {
                Step::Then(Box::new(move || {
                    thread::sleep(Duration::from_micros(200));
                    order.lock().unwrap().push(t);
                    t
                }))
            })
            .unwrap();
        }
        pool.close();
        assert_eq!(*order.lock().unwrap(), (0..50).collect::<Vec<_>>());
        assert_eq!(pool.take_done().len(), 50);
    }

    #[test]
    fn a_pool_with_no_thread_runs_second_steps_when_closed() {
        let pool = IoPool::new(0, "t").unwrap();
        for t in 0..4u64 {
            pool.submit_steps(t % 2, t, move || Step::Then(Box::new(move || t + 10)))
                .unwrap();
        }
        pool.close();
        let mut got = pool.take_done();
        got.sort();
        assert_eq!(got, [(0, 10), (1, 11), (2, 12), (3, 13)]);
    }

    #[test]
    fn shrunk_to_nothing_after_running_then_closed() {
        let pool = IoPool::new(0, "t").unwrap();
        pool.submit(0, 0, || 0).unwrap();
        pool.resize(1).unwrap();
        assert_eq!(collect(&pool, 1), [(0, 0)]);
        pool.resize(0).unwrap();
        for t in 1..6 {
            pool.submit(0, t, move || t).unwrap();
        }
        pool.close();
        assert_eq!(pool.take_done().len(), 5);
    }

    #[test]
    fn queued_jobs_wait_for_one_wake_and_the_woken_thread_wakes_the_next() {
        let pool = IoPool::new(2, "t").unwrap();
        thread::sleep(Duration::from_millis(50)); // both threads waiting
        let (release, wait) = mpsc::channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        let (started, starts) = mpsc::channel::<u64>();
        for key in 0..2u64 {
            let (wait, started) = (wait.clone(), started.clone());
            pool.queue_steps(key, key, move || {
                started.send(key).unwrap();
                if key == 0 {
                    // Holds its thread: key 1 needs the other one.
                    let w = wait.lock().unwrap();
                    w.recv_timeout(Duration::from_secs(10)).unwrap();
                }
                Step::Done(key)
            })
            .unwrap();
        }
        assert!(
            starts.recv_timeout(Duration::from_millis(200)).is_err(),
            "a queued job ran before wake"
        );
        pool.wake();
        let mut began = vec![
            starts.recv_timeout(Duration::from_secs(10)).unwrap(),
            starts.recv_timeout(Duration::from_secs(10)).unwrap(),
        ];
        began.sort();
        assert_eq!(began, [0, 1]);
        assert_eq!(collect(&pool, 1), [(1, 1)]);
        release.send(()).unwrap();
        assert_eq!(collect(&pool, 1), [(0, 0)]);
    }
}
