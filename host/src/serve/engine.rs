//! The engine thread of `blis serve`: one synchronous [`Cluster`] driven by
//! the wall clock. Simulated time is `--speed` × the wall time since the
//! start; the thread executes every event up to the simulated present,
//! hands each stream the tokens its request has been delivered (stamped
//! with their simulated time), then sleeps until the next event is due or
//! a command arrives. The HTTP side talks to it over a channel only: the
//! simulation core never sees async code or the network.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use crate::cluster::{Cancel, Cluster, ClusterOutcome, InstanceLoad, NoAudit, Progress, RunError};
use crate::engine::Tick;
use crate::request::{Request, RequestState, UNSET};

use super::faults::Injector;

/// What a stream is told.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delivery {
    /// `count` more output tokens, the last at simulated time `at`.
    Tokens { count: u32, at: Tick },
    /// The request ended: completed (with its output length) or not.
    Done { completed: bool, generated: u32 },
    /// Its instance went down (a `down` fault): the request is lost and
    /// the connection is to be cut.
    Lost,
}

/// A stream's receiving end (the HTTP side is async: tokio's channel,
/// whose sender works from this synchronous thread).
pub type DeliveryTx = tokio::sync::mpsc::UnboundedSender<Delivery>;

/// A command to the engine thread.
pub enum Command {
    /// A request arriving now, for instance `pin`'s server or the gateway.
    Submit {
        req: Box<Request>,
        pin: Option<u32>,
        tx: DeliveryTx,
        /// When the request reached the server: it arrives in the
        /// simulation then (or at the present, if that has passed), not
        /// when this thread gets to it.
        received: Instant,
    },
    /// The instances' load, for `/metrics`.
    Load {
        reply: tokio::sync::oneshot::Sender<Snapshot>,
    },
    /// Stop: end the run and return its outcome.
    Stop,
}

/// A Prometheus histogram: cumulative counts per upper bound, sum, count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    pub bounds: &'static [f64],
    /// Observations at or below each bound (not cumulative; rendered so).
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// `n` observations of `v`.
    pub fn observe(&mut self, v: f64, n: u64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.counts[i] += n;
        }
        self.sum += v * n as f64;
        self.count += n;
    }

    /// Another histogram of the same bounds added in.
    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.sum += o.sum;
        self.count += o.count;
    }
}

/// vLLM's bucket bounds, s: time to first token, inter-token latency, and
/// end-to-end latency (also the queue time's).
pub const TTFT_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
pub const ITL_BOUNDS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
pub const E2E_BOUNDS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// One instance's latency histograms.
#[derive(Clone, Debug, PartialEq)]
pub struct Latencies {
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies {
            ttft: Histogram::new(TTFT_BOUNDS),
            itl: Histogram::new(ITL_BOUNDS),
            e2e: Histogram::new(E2E_BOUNDS),
            queue: Histogram::new(E2E_BOUNDS),
        }
    }
}

/// The instances' load at a simulated time.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub at: Tick,
    pub instances: Vec<InstanceLoad>,
    /// Per instance: requests completed, prompt and generation tokens.
    pub completed: Vec<u64>,
    pub prompt_tokens: Vec<u64>,
    pub generation_tokens: Vec<u64>,
    /// Per instance: latency histograms.
    pub latencies: Vec<Latencies>,
    /// Wall time of the snapshot, s since the Unix epoch (the value of
    /// `vllm:lora_requests_info`, as vLLM sets it).
    pub wall_unix_s: f64,
}

/// One stream the engine feeds.
struct Stream {
    tx: DeliveryTx,
    /// Tokens handed over so far.
    sent: u32,
    input_len: u32,
    /// Its arrival and its latest token handed over, simulated µs.
    arrival: Tick,
    last_at: Tick,
}

/// The engine's tallies of timing: how late (wall vs simulated time) each
/// delivery was handed over, µs of simulated time.
#[derive(Debug, Default)]
pub struct Timing {
    /// Lateness of each delivery, µs (wall time converted to simulated time).
    pub lateness_us: Vec<f64>,
    /// Tokens delivered.
    pub tokens: u64,
    /// Requests cancelled in the simulation because their client went away.
    pub cancelled: u64,
    /// Requests lost because their instance went down (`down` faults).
    pub lost: u64,
}

/// What the engine thread returns.
pub struct Finished {
    pub outcome: Result<ClusterOutcome, RunError>,
    pub timing: Timing,
}

/// The engine's state besides the cluster.
struct Driver {
    start: Instant,
    speed: f64,
    streams: HashMap<u64, Stream>,
    /// Requests that ended whose last token is still to come.
    ended: Vec<crate::cluster::Ended>,
    timing: Timing,
    tallies: Tallies,
    stop: bool,
    /// The latest arrival injected, simulated µs.
    last_arrival: Tick,
    /// `[[serve.faults]]`.
    injector: Injector,
}

impl Driver {
    /// Simulated µs since the start.
    fn sim_now(&self) -> Tick {
        self.sim_at(Instant::now())
    }

    /// Simulated µs of wall instant `t`.
    fn sim_at(&self, t: Instant) -> Tick {
        let since = t.saturating_duration_since(self.start);
        (since.as_secs_f64() * 1e6 * self.speed) as Tick
    }

    fn handle(&mut self, c: Command, cluster: &mut Cluster) {
        match c {
            Command::Submit {
                req,
                pin,
                tx,
                received,
            } => {
                let input_len = req.input_len;
                // Arrivals stay in order (handlers may send out of order).
                let arrival = self
                    .sim_at(received)
                    .max(cluster.now())
                    .max(self.last_arrival);
                self.last_arrival = arrival;
                if let Some(id) = cluster.inject(*req, arrival, pin) {
                    self.streams.insert(
                        id,
                        Stream {
                            tx,
                            sent: 0,
                            input_len,
                            arrival,
                            last_at: arrival,
                        },
                    );
                }
            }
            Command::Load { reply } => {
                let _ = reply.send(self.tallies.snapshot(cluster));
            }
            Command::Stop => self.stop = true,
        }
    }
}

/// Run the engine until [`Command::Stop`] (or every sender is gone).
pub fn run(
    mut cluster: Cluster,
    speed: f64,
    commands: Receiver<Command>,
    injector: Injector,
) -> Finished {
    cluster.drive_externally();
    cluster.begin();
    let mut d = Driver {
        injector,
        start: Instant::now(),
        speed,
        streams: HashMap::new(),
        ended: Vec::new(),
        timing: Timing::default(),
        tallies: Tallies::new(cluster.instance_count()),
        stop: false,
        last_arrival: 0,
    };
    let mut peak = 0usize;
    let mut progress = |_: Tick, _: u64| {};
    while !d.stop {
        // Commands first: a request arrives at the present.
        loop {
            match commands.try_recv() {
                Ok(c) => d.handle(c, &mut cluster),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    d.stop = true;
                    break;
                }
            }
        }
        // Every event up to the present.
        let now = d.sim_now();
        while cluster.next_time().is_some_and(|t| t <= now) {
            if let Err(e) = cluster.step(&mut progress, &mut NoAudit, &mut peak) {
                return Finished {
                    outcome: Err(e),
                    timing: d.timing,
                };
            }
        }
        let now = d.sim_now();
        d.injector.apply(now as f64 / 1e6, &mut cluster);
        if d.injector.any_down() {
            if let Err(e) = lose_on_down(&mut cluster, &mut d) {
                return Finished {
                    outcome: Err(e),
                    timing: d.timing,
                };
            }
        }
        let due = match deliver(&mut cluster, &mut d, now) {
            Ok(due) => due,
            Err(e) => {
                return Finished {
                    outcome: Err(e),
                    timing: d.timing,
                }
            }
        };
        if d.stop {
            break;
        }
        // Sleep until the next event, token or fault is due, or a command
        // comes.
        let fault = d.injector.next_change().map(|s| (s * 1e6).ceil() as Tick);
        let next = [cluster.next_time(), due, fault]
            .into_iter()
            .flatten()
            .min();
        let wait = match next {
            Some(t) => {
                let ahead = (t - d.sim_now()).max(0) as f64 / speed;
                Duration::from_micros(ahead as u64).min(Duration::from_millis(50))
            }
            None => Duration::from_millis(50),
        };
        if wait.is_zero() {
            continue;
        }
        match commands.recv_timeout(wait) {
            Ok(c) => d.handle(c, &mut cluster),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => d.stop = true,
        }
    }
    Finished {
        outcome: cluster.end(peak),
        timing: d.timing,
    }
}

/// Lose every request on an instance that is down: cancelled in the
/// simulation, its stream told to cut the connection.
fn lose_on_down(cluster: &mut Cluster, d: &mut Driver) -> Result<(), RunError> {
    let on_down: Vec<u64> = d
        .streams
        .keys()
        .copied()
        .filter(|&id| {
            cluster
                .progress(id)
                .is_some_and(|p| p.instance != u32::MAX && d.injector.is_down(p.instance))
        })
        .collect();
    for id in on_down {
        if cluster.cancel(id).map_err(RunError::from)? == Cancel::Later {
            continue;
        }
        if let Some(s) = d.streams.remove(&id) {
            let _ = s.tx.send(Delivery::Lost);
            d.timing.lost += 1;
        }
    }
    Ok(())
}

/// Cancel the requests whose client went away (its receiver dropped: the
/// connection closed); one still on its way to an instance is tried again
/// on the next pass.
fn cancel_abandoned(
    cluster: &mut Cluster,
    streams: &mut HashMap<u64, Stream>,
    timing: &mut Timing,
) -> Result<(), RunError> {
    let gone: Vec<u64> = streams
        .iter()
        .filter(|(_, s)| s.tx.is_closed())
        .map(|(&id, _)| id)
        .collect();
    for id in gone {
        match cluster.cancel(id).map_err(RunError::from)? {
            Cancel::Done => {
                timing.cancelled += 1;
                streams.remove(&id);
            }
            Cancel::Gone => {
                streams.remove(&id);
            }
            Cancel::Later => {}
        }
    }
    Ok(())
}

/// Hand every stream the tokens its request has been delivered, and its
/// end; record how late each delivery is against its simulated time.
fn deliver(cluster: &mut Cluster, d: &mut Driver, now: Tick) -> Result<Option<Tick>, RunError> {
    let Driver {
        streams,
        ended,
        timing,
        tallies,
        ..
    } = d;
    cancel_abandoned(cluster, streams, timing)?;
    cluster.sync_progress();
    // The earliest token not handed over yet because its time is still to
    // come (a token reaches the client α2 after its step ends).
    let mut due: Option<Tick> = None;
    for (&id, s) in streams.iter_mut() {
        let Some(p) = cluster.progress(id) else {
            continue;
        };
        if p.generated > s.sent && p.last_token_at != UNSET {
            if p.last_token_at > now {
                earliest(&mut due, p.last_token_at);
                continue;
            }
            hand_over(s, &p, now, timing, tallies);
        }
    }
    ended.extend(cluster.take_ended());
    // An ended request's last tokens go out at their time too.
    let mut k = 0;
    while k < ended.len() {
        let at = ended[k].progress.last_token_at;
        if at > now {
            earliest(&mut due, at);
            k += 1;
            continue;
        }
        let e = ended.swap_remove(k);
        let Some(mut s) = streams.remove(&e.id) else {
            continue;
        };
        let p = e.progress;
        if p.generated > s.sent {
            hand_over(&mut s, &p, now, timing, tallies);
        }
        let completed = p.state == RequestState::Completed;
        if completed {
            tallies.completed(p.instance, s.input_len, p.generated);
            tallies.e2e(p.instance, (p.last_token_at - s.arrival) as f64 / 1e6);
        }
        let _ = s.tx.send(Delivery::Done {
            completed,
            generated: p.generated,
        });
    }
    Ok(due)
}

/// `due` moved to `t` if that is earlier.
fn earliest(due: &mut Option<Tick>, t: Tick) {
    *due = Some(due.map_or(t, |d| d.min(t)));
}

/// Send stream `s` the tokens its request's progress `p` has beyond what
/// it was sent (at simulated time `now`, not before their time), with
/// their latencies and lateness tallied.
fn hand_over(s: &mut Stream, p: &Progress, now: Tick, timing: &mut Timing, tallies: &mut Tallies) {
    tallies.tokens(s, p);
    let count = p.generated - s.sent;
    s.sent = p.generated;
    timing.tokens += u64::from(count);
    timing.lateness_us.push((now - p.last_token_at) as f64);
    let _ = s.tx.send(Delivery::Tokens {
        count,
        at: p.last_token_at,
    });
}

/// Counters of `/metrics` the cluster does not keep per instance.
struct Tallies {
    completed: Vec<u64>,
    prompt_tokens: Vec<u64>,
    generation_tokens: Vec<u64>,
    latencies: Vec<Latencies>,
}

impl Tallies {
    fn new(n: usize) -> Tallies {
        Tallies {
            completed: vec![0; n],
            prompt_tokens: vec![0; n],
            generation_tokens: vec![0; n],
            latencies: vec![Latencies::default(); n],
        }
    }

    /// Tokens about to be handed to stream `s` (its progress `p`): the
    /// first one's TTFT and queue time, the others' inter-token gaps.
    fn tokens(&mut self, s: &mut Stream, p: &Progress) {
        let Some(l) = self.latencies.get_mut(p.instance as usize) else {
            return;
        };
        let mut count = p.generated - s.sent;
        if s.sent == 0 {
            l.ttft
                .observe((p.first_token_at - s.arrival) as f64 / 1e6, 1);
            if p.scheduled_at != UNSET {
                l.queue
                    .observe((p.scheduled_at - s.arrival).max(0) as f64 / 1e6, 1);
            }
            s.last_at = p.first_token_at;
            count -= 1;
        }
        if count > 0 {
            let gap = (p.last_token_at - s.last_at) as f64 / 1e6 / f64::from(count);
            l.itl.observe(gap, u64::from(count));
        }
        s.last_at = p.last_token_at;
    }

    fn e2e(&mut self, instance: u32, seconds: f64) {
        if let Some(l) = self.latencies.get_mut(instance as usize) {
            l.e2e.observe(seconds, 1);
        }
    }

    fn completed(&mut self, instance: u32, input: u32, output: u32) {
        let i = instance as usize;
        if i < self.completed.len() {
            self.completed[i] += 1;
            self.prompt_tokens[i] += u64::from(input);
            self.generation_tokens[i] += u64::from(output);
        }
    }

    fn snapshot(&self, cluster: &Cluster) -> Snapshot {
        Snapshot {
            at: cluster.now(),
            instances: (0..cluster.instance_count())
                .filter_map(|i| cluster.instance_load(i))
                .collect(),
            completed: self.completed.clone(),
            prompt_tokens: self.prompt_tokens.clone(),
            generation_tokens: self.generation_tokens.clone(),
            latencies: self.latencies.clone(),
            wall_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }
    }
}
