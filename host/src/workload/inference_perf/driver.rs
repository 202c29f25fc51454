//! An inference-perf workload driven the way a release of the real client
//! drives a server ([`super::client`] says what each release does).
//!
//! One stage at a time: when stage `s` starts at `S`, its `T = ⌊rate ·
//! duration⌋` send times are drawn (exponential gaps normalised to the
//! duration, from `S + 1 s`), and the first `min(T, slots)` requests are
//! taken by the workers at once (`slots = num_workers ·
//! worker_max_concurrency`); each later one is taken when a taken request
//! finishes. A request is sent at the later of its time and the moment it
//! was taken — and, in a multi-turn chat, of the end of its session's
//! previous round. When all `T` have finished, at `E`, the client notices at
//! its next one-second poll (`S + ⌈(E − S) / 1 s⌉ s`) and starts stage `s +
//! 1` `interval` seconds later. Requests of stage `s` come from client
//! `stage-<s>` (so the report's stages are the client's, however late a
//! stage started), tenant `prompt-<g>` of their system prompt.
//!
//! Randomness: the prompts' order and content, each stage's send times and
//! each request's output content come from streams of the run seed, so a
//! run is deterministic; the real client draws them unseeded.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::client::{
    Timestamps, AIOHTTP_TIMEOUT_US, DEFAULT_INTERVAL_S, DEFAULT_WORKERS, DEFAULT_WORKER_CONCURRENCY,
};
use super::spec::{InferencePerfSpec, StageSpec};
use crate::engine::Tick;
use crate::request::{mix64, OptIdx, Request, Segment, SloClass};
use crate::workload::generator::prefix_seed;

const DOMAIN_TIMER: u64 = 0x7469_6d65_7200_0007;
const DOMAIN_PROMPTS: u64 = 0x7072_6f6d_7074_0008;
const DOMAIN_OUTPUT: u64 = 0x6f75_7470_7574_0009;
/// The client's poll period while it waits for a stage to drain, µs.
const POLL_US: Tick = 1_000_000;
/// The timer starts one second after the stage (`perf_counter() + 1`).
const LEAD_US: Tick = 1_000_000;

/// One multi-turn session (one per prompt).
#[derive(Debug, Default)]
struct Session {
    /// A round is waiting to be sent or in flight.
    busy: bool,
    /// Rounds taken by a worker, waiting for the one before: (n, send time).
    waiting: VecDeque<(u64, Tick)>,
    /// The context the next round's prompt starts with.
    context: Vec<Segment>,
    /// Rounds sent so far.
    rounds: u32,
}

/// The client's state; see the module documentation.
#[derive(Debug)]
pub(crate) struct Driver {
    /// The client's name and how it timestamps responses (for the report).
    client: (String, Timestamps),
    stages: Vec<StageSpec>,
    interval_us: Tick,
    slots: u64,
    timeout_us: Tick,
    chat: bool,
    /// Per prompt, in the client's (shuffled) order: its group and question seed.
    prompts: Vec<(u32, u64)>,
    /// Per group: its system prompt.
    system: Vec<Segment>,
    question_len: u32,
    output_len: u32,
    seed: u64,
    // The running stage.
    stage: usize,
    started: Tick,
    total: u64,
    taken: u64,
    finished: u64,
    /// The timer: the next request's index and position in [0, 1].
    timer_rng: ChaCha8Rng,
    position: f64,
    /// Requests ready to be sent, by (send time, index in the stage).
    ready: BinaryHeap<Reverse<(Tick, u64)>>,
    sessions: Vec<Session>,
    /// Requests sent so far (each one's output content seed).
    sent: u64,
}

/// Ticks of `s` seconds.
fn us(s: f64) -> Tick {
    (s * 1e6).round() as Tick
}

impl Driver {
    /// The driver of `spec` (checked by [`super::expand::check`]) for `chat`
    /// (the release has multi-turn chat and the table asks for it).
    pub(crate) fn new(
        spec: &InferencePerfSpec,
        client: (String, Timestamps),
        chat: bool,
        seed: u64,
    ) -> Driver {
        let sp = &spec.shared_prefix;
        let groups = sp.num_unique_system_prompts;
        let per_group = sp.num_users_per_system_prompt;
        let system: Vec<Segment> = (0..groups)
            .map(|g| Segment {
                seed: prefix_seed(seed, &format!("prompt-{g}")),
                len: sp.system_prompt_len,
            })
            .collect();
        let mut prompts: Vec<(u32, u64)> = (0..groups)
            .flat_map(|g| (0..per_group).map(move |q| (g, q)))
            .map(|(g, q)| {
                let s = mix64(mix64(mix64(seed ^ DOMAIN_PROMPTS) ^ u64::from(g)) ^ u64::from(q));
                (g, s)
            })
            .collect();
        // The client shuffles its prompts once (Fisher–Yates).
        let mut rng = ChaCha8Rng::seed_from_u64(mix64(seed ^ DOMAIN_PROMPTS));
        for i in (1..prompts.len()).rev() {
            let j = rng.random_range(0..=i);
            prompts.swap(i, j);
        }
        let sessions = if chat {
            (0..prompts.len())
                .map(|k| Session {
                    context: system_of(&system, prompts[k].0),
                    ..Session::default()
                })
                .collect()
        } else {
            Vec::new()
        };
        let workers = u64::from(spec.num_workers.unwrap_or(DEFAULT_WORKERS));
        let per_worker = u64::from(
            spec.worker_max_concurrency
                .unwrap_or(DEFAULT_WORKER_CONCURRENCY),
        );
        let mut d = Driver {
            client,
            stages: spec.stages.clone(),
            interval_us: us(spec.interval.unwrap_or(DEFAULT_INTERVAL_S)),
            slots: workers.saturating_mul(per_worker).max(1),
            timeout_us: spec.request_timeout.map_or(AIOHTTP_TIMEOUT_US, us),
            chat,
            prompts,
            system,
            question_len: sp.question_len,
            output_len: sp.output_len.max(1),
            seed,
            stage: 0,
            started: 0,
            total: 0,
            taken: 0,
            finished: 0,
            timer_rng: ChaCha8Rng::seed_from_u64(0),
            position: 0.0,
            ready: BinaryHeap::new(),
            sessions,
            sent: 0,
        };
        d.open_stage(0, 0);
        d
    }

    /// The client's name and how it timestamps responses.
    pub(crate) fn client(&self) -> &(String, Timestamps) {
        &self.client
    }

    /// The client's request timeout, µs.
    pub(crate) fn timeout_us(&self) -> Tick {
        self.timeout_us
    }

    /// Stage `s` starts at `at`: draw its timer and take the first requests.
    fn open_stage(&mut self, s: usize, at: Tick) {
        self.stage = s;
        self.started = at;
        self.total = self.stages[s].requests() as u64;
        self.taken = 0;
        self.finished = 0;
        self.position = 0.0;
        self.timer_rng =
            ChaCha8Rng::seed_from_u64(mix64(mix64(self.seed ^ DOMAIN_TIMER) ^ s as u64));
        for _ in 0..self.slots.min(self.total) {
            self.take(at);
        }
    }

    /// The next send time of the running stage's timer: the `n`-th of `T`
    /// normalised partial sums of exponential gaps is the `n`-th order
    /// statistic of `T − 1` uniforms, and the last one is the stage's end.
    fn next_time(&mut self, n: u64) -> Tick {
        let duration = self.stages[self.stage].duration;
        let remaining = self.total - 1 - n;
        if remaining == 0 {
            self.position = 1.0;
        } else {
            let u: f64 = self.timer_rng.random();
            let step = 1.0 - (1.0 - u).powf(1.0 / remaining as f64);
            self.position += (1.0 - self.position) * step;
        }
        self.started + LEAD_US + (self.position * duration as f64 * 1e6) as Tick
    }

    /// A worker takes the stage's next request at `at`.
    fn take(&mut self, at: Tick) {
        let n = self.taken;
        self.taken += 1;
        let due = self.next_time(n).max(at);
        if self.chat {
            let k = (n % self.sessions.len() as u64) as usize;
            let s = &mut self.sessions[k];
            if s.busy {
                s.waiting.push_back((n, due));
                return;
            }
            s.busy = true;
        }
        self.ready.push(Reverse((due, n)));
    }

    /// Send time of the next request.
    pub(crate) fn peek_time(&self) -> Option<Tick> {
        self.ready.peek().map(|r| r.0 .0)
    }

    /// The next request, sent now.
    pub(crate) fn pop_into(&mut self, req: &mut Request) -> bool {
        let Some(Reverse((at, n))) = self.ready.pop() else {
            return false;
        };
        let i = (n % self.prompts.len() as u64) as usize;
        let (group, question) = self.prompts[i];
        req.arrival = at;
        req.client = self.stage as u32;
        req.tenant = group;
        req.slo_class = SloClass::default();
        req.adapter = OptIdx::NONE;
        req.model = OptIdx::NONE;
        req.multimodal = false;
        req.private_from = OptIdx::NONE;
        req.output_len = self.output_len;
        req.output_seed = mix64(mix64(self.seed ^ DOMAIN_OUTPUT) ^ self.sent);
        self.sent += 1;
        req.prompt.clear();
        if self.chat {
            let s = &mut self.sessions[i];
            req.prompt.extend_from_slice(&s.context);
            req.session = Some((i as u32, s.rounds));
            s.rounds += 1;
        } else {
            req.session = None;
        }
        let sys = self.system[group as usize];
        for seg in [
            sys,
            Segment {
                seed: question,
                len: self.question_len,
            },
        ] {
            if seg.len > 0 {
                req.prompt.push(seg);
            }
        }
        let len: u64 = req.prompt.iter().map(|s| u64::from(s.len)).sum();
        req.input_len = len.clamp(1, u64::from(u32::MAX / 2)) as u32;
        if req.prompt.is_empty() {
            req.prompt.push(Segment {
                seed: question,
                len: 1,
            });
        }
        true
    }

    /// A request of the running stage finished at `at` (`completed`: it
    /// returned its answer; otherwise it failed).
    pub(crate) fn on_finished(&mut self, req: &Request, at: Tick, completed: bool) {
        if req.client as usize != self.stage {
            return;
        }
        self.finished += 1;
        if let (true, Some((k, _))) = (self.chat, req.session) {
            let s = &mut self.sessions[k as usize];
            if completed {
                // The next context: this round's prompt and its answer.
                s.context.clear();
                s.context.extend_from_slice(&req.prompt);
                s.context.push(Segment {
                    seed: req.output_seed,
                    len: req.generated,
                });
            }
            match s.waiting.pop_front() {
                Some((n, due)) => self.ready.push(Reverse((due.max(at), n))),
                None => s.busy = false,
            }
        }
        if self.taken < self.total {
            self.take(at);
        }
        if self.finished == self.total && self.stage + 1 < self.stages.len() {
            let polls = (at - self.started + POLL_US - 1) / POLL_US;
            let next = self.started + polls * POLL_US + self.interval_us;
            self.open_stage(self.stage + 1, next);
        }
    }

    /// Every request the client will send.
    pub(crate) fn total_requests(&self) -> u64 {
        self.stages.iter().map(|s| s.requests() as u64).sum()
    }

    /// Prefix groups' content seeds → names (for the TraceV2 export).
    pub(crate) fn prefix_names(&self) -> HashMap<u64, String> {
        self.system
            .iter()
            .enumerate()
            .filter(|(_, s)| s.len > 0)
            .map(|(g, s)| (s.seed, format!("prompt-{g}")))
            .collect()
    }

    /// Client names: one per stage.
    pub(crate) fn stage_names(&self) -> Vec<String> {
        (0..self.stages.len())
            .map(|s| format!("stage-{s}"))
            .collect()
    }

    /// Tenant names: one per system prompt.
    pub(crate) fn group_names(&self) -> Vec<String> {
        (0..self.system.len())
            .map(|g| format!("prompt-{g}"))
            .collect()
    }
}

fn system_of(system: &[Segment], group: u32) -> Vec<Segment> {
    let s = system[group as usize];
    if s.len > 0 {
        vec![s]
    } else {
        Vec::new()
    }
}
