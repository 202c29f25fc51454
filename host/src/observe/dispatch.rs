//! The dispatch loop of `blis observe` (spec §2.5, §4.5): one thread
//! sleeps until each request's scheduled arrival, takes a concurrency
//! slot and hands the request to a worker thread (a pool grown on demand
//! up to `--max-concurrency`, each worker one blocking HTTP exchange at a
//! time). Completions come back on a channel; the workload is told of
//! each (wall-clock µs since the start), so closed-loop session rounds are
//! scheduled by the same session manager as in `blis run`.
//!
//! With `--concurrency N` the arrival times are not used: N virtual users
//! each send their next request when the previous one finished plus the
//! think time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{Call, Client, Outcome};
use crate::request::Request;
use crate::workload::Workload;

/// A request handed to a worker.
struct Job {
    index: u64,
    call: Call,
}

/// A worker's answer.
pub struct Done {
    pub index: u64,
    pub outcome: Outcome,
    /// The worker that did the exchange (idle again).
    worker: usize,
}

/// Worker threads, grown on demand, each with its own job channel (no
/// queue shared under a lock: a hand-off wakes exactly the worker it is
/// for).
struct Pool {
    jobs: Vec<Sender<Job>>,
    /// Workers not in an exchange.
    idle: Vec<usize>,
    done: Sender<Done>,
    client: Arc<Client>,
    max: usize,
}

impl Pool {
    fn new(client: Arc<Client>, max: usize, done: Sender<Done>) -> Pool {
        Pool {
            jobs: Vec::new(),
            idle: Vec::new(),
            done,
            client,
            max,
        }
    }

    /// Hand `job` to an idle worker, or to a new one while fewer than
    /// `max` run (the loop keeps at most `max` requests in flight, so one
    /// of the two is always there; else the job waits in worker 0's queue).
    fn submit(&mut self, job: Job) {
        let w = match self.idle.pop() {
            Some(w) => w,
            None if self.jobs.len() < self.max => {
                let (tx, rx) = mpsc::channel::<Job>();
                let done = self.done.clone();
                let client = Arc::clone(&self.client);
                let worker = self.jobs.len();
                self.jobs.push(tx);
                std::thread::spawn(move || {
                    while let Ok(job) = rx.recv() {
                        let outcome = client.send(&job.call);
                        let d = Done {
                            index: job.index,
                            outcome,
                            worker,
                        };
                        if done.send(d).is_err() {
                            return;
                        }
                    }
                });
                worker
            }
            None => 0,
        };
        // The worker holds its receiver as long as the pool lives.
        let _ = self.jobs[w].send(job);
    }

    /// `worker` finished its exchange.
    fn release(&mut self, worker: usize) {
        self.idle.push(worker);
    }
}

/// How requests are paced.
#[derive(Clone, Copy, Debug)]
pub enum Pacing {
    /// At their scheduled arrival times, at most `max` in flight.
    Arrivals { max: usize },
    /// `users` closed-loop virtual users, each waiting `think_us` after
    /// its previous request finished.
    Users { users: usize, think_us: i64 },
}

/// What the loop hands back for each finished request.
pub struct Finished {
    pub index: u64,
    pub request: Request,
    /// Scheduled offset from the start, µs (the arrival time, or the
    /// virtual user's ready time).
    pub scheduled_us: i64,
    /// When the loop learned of the completion, µs from the start.
    pub finished_us: i64,
    pub outcome: Outcome,
}

/// The dispatch loop's settings.
pub struct Settings {
    pub pacing: Pacing,
    /// No request scheduled after this offset (µs) is sent.
    pub horizon_us: Option<i64>,
    /// After an interrupt, how long to wait for requests in flight.
    pub drain: Duration,
}

/// How the loop ended.
pub struct Ended {
    /// Requests dispatched.
    pub dispatched: u64,
    /// Requests still in flight when the loop gave up waiting (interrupt):
    /// index, request, scheduled µs offset, in dispatch order.
    pub abandoned: Vec<(u64, Request, i64)>,
    pub interrupted: bool,
    /// Length of the measured window, µs.
    pub wall_us: i64,
}

/// Run the loop: `make_call(index, request)` builds each request's call
/// (in the dispatch thread); `finished` receives each completion in
/// completion order.
pub fn run(
    workload: &mut Workload,
    client: Arc<Client>,
    settings: &Settings,
    mut make_call: impl FnMut(u64, &Request) -> Call,
    mut finished: impl FnMut(Finished),
) -> Ended {
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    let max = match settings.pacing {
        Pacing::Arrivals { max } => max,
        Pacing::Users { users, .. } => users,
    }
    .max(1);
    let mut pool = Pool::new(client, max, done_tx);
    let start = Instant::now();
    let now = |start: &Instant| start.elapsed().as_micros() as i64;
    // Virtual users' ready times (µs offsets), earliest first.
    let mut ready: BinaryHeap<Reverse<i64>> = BinaryHeap::new();
    if let Pacing::Users { users, .. } = settings.pacing {
        ready.extend(std::iter::repeat_n(Reverse(0), users.max(1)));
    }
    let mut dispatched = 0u64;
    let mut req = Request::default();
    let tick = Duration::from_millis(50);
    type InFlight = HashMap<u64, (Request, i64)>;
    let mut handle = |d: Done,
                      workload: &mut Workload,
                      ready: &mut BinaryHeap<Reverse<i64>>,
                      in_flight: &mut InFlight,
                      pool: &mut Pool| {
        pool.release(d.worker);
        let at = now(&start);
        if let Some((request, scheduled_us)) = in_flight.remove(&d.index) {
            workload.on_finished(&request, at, d.outcome.status == super::client::Status::Ok);
            if let Pacing::Users { think_us, .. } = settings.pacing {
                ready.push(Reverse(at.saturating_add(think_us)));
            }
            finished(Finished {
                index: d.index,
                request,
                scheduled_us,
                finished_us: at,
                outcome: d.outcome,
            });
        }
    };
    let wait = |rx: &Receiver<Done>, d: Duration| rx.recv_timeout(d).ok();
    let mut in_flight: InFlight = HashMap::new();
    let mut interrupted = false;
    loop {
        while let Ok(d) = done_rx.try_recv() {
            handle(d, workload, &mut ready, &mut in_flight, &mut pool);
        }
        if crate::output::stop_requested() {
            interrupted = true;
            break;
        }
        let next = match settings.pacing {
            Pacing::Arrivals { .. } => workload.peek_time(),
            Pacing::Users { .. } => match (workload.peek_time(), ready.peek()) {
                (Some(_), Some(Reverse(t))) => Some(*t),
                _ => None,
            },
        }
        .filter(|&t| settings.horizon_us.is_none_or(|h| t <= h));
        let Some(t) = next else {
            if in_flight.is_empty() {
                break;
            }
            if let Some(d) = wait(&done_rx, tick) {
                handle(d, workload, &mut ready, &mut in_flight, &mut pool);
            }
            continue;
        };
        if in_flight.len() >= max {
            if let Some(d) = wait(&done_rx, tick) {
                handle(d, workload, &mut ready, &mut in_flight, &mut pool);
            }
            continue;
        }
        let n = now(&start);
        if t > n {
            let d = Duration::from_micros((t - n) as u64).min(tick);
            if let Some(d) = wait(&done_rx, d) {
                handle(d, workload, &mut ready, &mut in_flight, &mut pool);
            }
            continue;
        }
        if !workload.pop_into(&mut req) {
            // The stream ended between peek and pop (a cap): wait out the rest.
            if in_flight.is_empty() {
                break;
            }
            if let Some(d) = wait(&done_rx, tick) {
                handle(d, workload, &mut ready, &mut in_flight, &mut pool);
            }
            continue;
        }
        if matches!(settings.pacing, Pacing::Users { .. }) {
            ready.pop();
        }
        let index = dispatched;
        dispatched += 1;
        let call = make_call(index, &req);
        in_flight.insert(index, (req.clone(), t));
        pool.submit(Job { index, call });
    }
    if interrupted {
        let deadline = Instant::now() + settings.drain;
        while !in_flight.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || crate::output::hurry_requested() {
                break;
            }
            if let Some(d) = wait(&done_rx, left.min(tick)) {
                handle(d, workload, &mut ready, &mut in_flight, &mut pool);
            }
        }
    }
    let wall_us = now(&start);
    let mut abandoned: Vec<(u64, Request, i64)> =
        in_flight.into_iter().map(|(i, (r, t))| (i, r, t)).collect();
    abandoned.sort_unstable_by_key(|a| a.0);
    Ended {
        dispatched,
        abandoned,
        interrupted,
        wall_us,
    }
}
