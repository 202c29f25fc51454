//! Workloads: where requests come from.
//!
//! A [`Workload`] is a stream the cluster pulls from in arrival order and
//! notifies when requests finish. It is a stream rather than a precomputed
//! list for two reasons: multi-turn sessions must react to completions (round
//! k+1 arrives after round k finished plus think time), and memory must stay
//! O(requests in flight), never O(num_requests), so that ten-million-request
//! runs cost what their percentiles need and nothing more.
//!
//! Prompts are segments, not token arrays (see [`crate::request`]): a shared
//! group prefix is the same segment in every request of the group, and a
//! session round's prompt is the previous prompt, the previous output and a
//! new segment, so block hashes of earlier rounds reappear and the KV cache
//! and the prefix-affinity router have something to find.
//!
//! The user-facing reference (TOML keys, trace format, differences from the
//! reference simulator) follows.
#![doc = include_str!("README.md")]

mod config;
mod convert;
mod generator;
pub mod inference_perf;
mod sampler;
mod trace;
mod trace_v2;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;

pub use config::{
    defaults, AdapterMix, ArrivalProcess, ArrivalSpec, ClientSpec, ContextGrowth, GaussianLengths,
    LengthDist, Preset, SessionSpec, Window, WorkloadConfig,
};
pub use convert::convert_workload_spec;
pub use generator::Footprint;
pub use inference_perf::{
    convert_inference_perf, convert_inference_perf_dir, InferencePerfSpec, SharedPrefixSpec,
    StageSpec, MAX_USERS,
};
pub use sampler::MAX_TOKENS;
pub use trace_v2::{ReplayLedger, SessionMode, SharedLedger, ThinkTime, TraceV2Spec, FOLLOW_UP};

use crate::engine::Tick;
use crate::request::{Request, Segment, SloClass};
use generator::{client_seed, prefix_seed, AdapterPick, ClientPlan, Generator, Schedule};
use sampler::{ArrivalSampler, LengthSampler};
use trace::{TraceReplay, DEFAULT_TENANT};

/// Why a workload could not be built (nothing is simulated).
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// An invalid or inconsistent `[workload]` table (the caller names the
    /// table when it prints the message).
    #[error("{0}")]
    Config(String),
    /// A malformed trace row: `file:line: column NAME: problem`.
    #[error("{file}:{line}: {message}")]
    Trace {
        /// The trace path as configured.
        file: String,
        /// 1-based line number in the file.
        line: u64,
        /// What is wrong (starts with `column NAME:` when one column is at fault).
        message: String,
    },
    /// A trace file that cannot be read as a whole.
    #[error("{file}: {message}")]
    File {
        /// The trace path as configured.
        file: String,
        /// What went wrong.
        message: String,
    },
    /// A reference workload-spec YAML that cannot be converted (the caller
    /// names the file when it prints the message).
    #[error("{0}")]
    Spec(String),
}

/// A YAML conversion's result: the TOML text and the notes for stderr.
pub type Conversion = Result<(String, Vec<String>), WorkloadError>;

fn cfg_err(msg: impl Into<String>) -> WorkloadError {
    WorkloadError::Config(msg.into())
}

#[derive(Debug, Default)]
enum Source {
    #[default]
    Empty,
    Generated(Box<Generator>),
    Trace(Box<TraceReplay>),
    TraceV2(Box<trace_v2::TraceV2Replay>),
    List(VecDeque<Request>),
    /// A real inference-perf client's dispatch.
    Client(Box<inference_perf::Driver>),
}

/// Stream of requests in arrival order.
#[derive(Debug, Default)]
pub struct Workload {
    source: Source,
    /// Global cap on requests yielded (`None` = unlimited).
    cap: Option<u64>,
    yielded: u64,
    tenants: Vec<String>,
    clients: Vec<String>,
    /// LoRA adapter names requests refer to (`Request::adapter`).
    adapters: Vec<String>,
    /// Model names requests refer to (`Request::model`).
    models: Vec<String>,
    /// Stage windows `[start, end)` of an inference-perf workload (empty otherwise).
    stages: Vec<(Tick, Tick)>,
    error: Option<WorkloadError>,
    /// Content seed of each named prefix group → its name (for the TraceV2 export).
    prefix_names: HashMap<u64, String>,
}

impl Workload {
    /// Builds the workload described by `config` (the `[workload]` table or
    /// the CLI flags written into one). `seed` is the run seed; a relative
    /// `trace` path is resolved against `base_dir` (the run file's folder).
    /// Every problem is reported here, before anything is simulated.
    pub fn new(
        config: &WorkloadConfig,
        seed: u64,
        base_dir: &Path,
    ) -> Result<Workload, WorkloadError> {
        let cap = config.num_requests.filter(|&n| n > 0);
        if let Some(spec) = &config.trace_v2 {
            if let Some(k) = other_source_keys(config, "trace_v2").first() {
                return Err(cfg_err(format!(
                    "`trace_v2` and `{k}` are both set: a TraceV2 trace gives every request; use exactly one workload source"
                )));
            }
            if config.aggregate_rate.is_some() {
                return Err(cfg_err(
                    "`aggregate_rate` is set with `trace_v2`: arrival times come from the trace; remove aggregate_rate",
                ));
            }
            let o = trace_v2::TraceV2Replay::open(spec, seed, base_dir, None)?;
            let total = o.replay.total_rows();
            return Ok(Workload {
                cap: Some(cap.map_or(total, |c| c.min(total))),
                source: Source::TraceV2(Box::new(o.replay)),
                yielded: 0,
                tenants: o.tenants,
                clients: o.clients,
                adapters: o.adapters,
                models: o.models,
                stages: Vec::new(),
                error: None,
                prefix_names: o.prefix_names.into_iter().collect(),
            });
        }
        if let Some(trace) = &config.trace {
            check_trace_exclusive(config)?;
            let (replay, tenants) = TraceReplay::open(&base_dir.join(trace), trace, seed, cap)?;
            return Ok(Workload {
                cap: Some(replay.total_rows()),
                source: Source::Trace(Box::new(replay)),
                yielded: 0,
                tenants,
                clients: vec!["trace".to_string()],
                adapters: Vec::new(),
                models: Vec::new(),
                stages: Vec::new(),
                error: None,
                prefix_names: HashMap::new(),
            });
        }
        if let Some(ip) = &config.inference_perf {
            check_inference_perf_exclusive(config)?;
            let client =
                inference_perf::client::Client::parse(ip.client.as_deref()).map_err(cfg_err)?;
            let chat = inference_perf::check_client(ip, &client)?;
            if let inference_perf::client::Client::InferencePerf { timestamps, .. } = client {
                let d = inference_perf::Driver::new(ip, (client.name(), timestamps), chat, seed);
                let total = d.total_requests();
                return Ok(Workload {
                    cap: Some(cap.map_or(total, |c| c.min(total))),
                    yielded: 0,
                    tenants: d.group_names(),
                    clients: d.stage_names(),
                    adapters: Vec::new(),
                    models: Vec::new(),
                    stages: Vec::new(),
                    error: None,
                    prefix_names: d.prefix_names(),
                    source: Source::Client(Box::new(d)),
                });
            }
            let x = inference_perf::expand(ip)?;
            let (mut plans, clients, tenants, adapters, models) =
                plan_clients(&x.clients, x.aggregate_rate, seed)?;
            for (plan, schedule) in plans.iter_mut().zip(x.schedules) {
                plan.schedule = schedule;
            }
            // The stages bound the workload: no cap or horizon is needed.
            let total = x.total_requests;
            return Ok(Workload {
                source: Source::Generated(Box::new(Generator::new(plans))),
                cap: Some(cap.map_or(total, |c| c.min(total))),
                yielded: 0,
                tenants,
                clients,
                adapters,
                models,
                stages: x.stages,
                error: None,
                prefix_names: prefix_names(&x.clients, seed),
            });
        }
        let rate = config.aggregate_rate.unwrap_or(defaults::RATE);
        if !(rate.is_finite() && rate > 0.0) {
            return Err(cfg_err(format!(
                "aggregate_rate must be a finite number > 0 (req/s), got {rate}"
            )));
        }
        let specs = client_specs(config)?;
        let (plans, clients, tenants, adapters, models) = plan_clients(&specs, rate, seed)?;
        Ok(Workload {
            source: Source::Generated(Box::new(Generator::new(plans))),
            cap,
            yielded: 0,
            tenants,
            clients,
            adapters,
            models,
            stages: Vec::new(),
            error: None,
            prefix_names: prefix_names(&specs, seed),
        })
    }

    /// A workload replaying `requests` as given (sorted by arrival, stable;
    /// ids reassigned in that order). For tests and tools: it holds every
    /// request in memory. Tenant, client and adapter names are synthesised
    /// (`tenant-<i>`, `client-<i>`, `adapter-<i>`) up to the largest index
    /// used.
    pub fn from_requests(mut requests: Vec<Request>) -> Workload {
        requests.sort_by_key(|r| r.arrival);
        let tenants = requests.iter().map(|r| r.tenant + 1).max().unwrap_or(0);
        let clients = requests.iter().map(|r| r.client + 1).max().unwrap_or(0);
        let adapters = requests
            .iter()
            .filter_map(|r| r.adapter.get().map(|a| a + 1))
            .max()
            .unwrap_or(0);
        let models = requests
            .iter()
            .filter_map(|r| r.model.get().map(|a| a + 1))
            .max()
            .unwrap_or(0);
        Workload {
            cap: Some(requests.len() as u64),
            source: Source::List(requests.into()),
            yielded: 0,
            tenants: (0..tenants).map(|i| format!("tenant-{i}")).collect(),
            clients: (0..clients).map(|i| format!("client-{i}")).collect(),
            adapters: (0..adapters).map(|i| format!("adapter-{i}")).collect(),
            models: (0..models).map(|i| format!("model-{i}")).collect(),
            stages: Vec::new(),
            error: None,
            prefix_names: HashMap::new(),
        }
    }

    /// A workload fed from outside while the run goes ([`Workload::push`]:
    /// `blis serve`'s requests arrive from the network), with the names
    /// its requests' indices refer to.
    pub fn external(
        tenants: Vec<String>,
        clients: Vec<String>,
        adapters: Vec<String>,
        models: Vec<String>,
    ) -> Workload {
        Workload {
            cap: None,
            source: Source::List(VecDeque::new()),
            yielded: 0,
            tenants,
            clients,
            adapters,
            models,
            stages: Vec::new(),
            error: None,
            prefix_names: HashMap::new(),
        }
    }

    /// Add a request of an [`external`](Workload::external) workload
    /// (arrivals in order: not before the last one pushed). Its id is
    /// assigned when the cluster takes it, in push order. Returns false
    /// (and drops it) for any other workload.
    pub fn push(&mut self, req: Request) -> bool {
        match &mut self.source {
            Source::List(l) if self.cap.is_none() => {
                debug_assert!(l.back().is_none_or(|b| b.arrival <= req.arrival));
                l.push_back(req);
                true
            }
            _ => false,
        }
    }

    /// Arrival time of the next request, if any. It can move earlier after
    /// [`Workload::on_finished`] schedules a session round, but never before
    /// the `at` of that call.
    pub fn peek_time(&self) -> Option<Tick> {
        if self.cap.is_some_and(|c| self.yielded >= c) {
            return None;
        }
        match &self.source {
            Source::Empty => None,
            Source::Generated(g) => g.peek_time(),
            Source::Trace(t) => t.peek_time(),
            Source::TraceV2(t) => t.peek_time(),
            Source::List(l) => l.front().map(|r| r.arrival),
            Source::Client(d) => d.peek_time(),
        }
    }

    /// Write the next request into `req` (a recycled record: overwrite every
    /// identity/content field, reuse the `prompt` vector). Assigns `id` in
    /// arrival order. Returns false when the stream is exhausted.
    pub fn pop_into(&mut self, req: &mut Request) -> bool {
        if self.cap.is_some_and(|c| self.yielded >= c) {
            return false;
        }
        let got = match &mut self.source {
            Source::Empty => false,
            Source::Generated(g) => g.pop_into(req),
            Source::Trace(t) => {
                let got = t.pop_into(req);
                if let Some(e) = t.take_error() {
                    self.error = Some(e);
                }
                got
            }
            Source::TraceV2(t) => t.pop_into(req),
            Source::Client(d) => d.pop_into(req),
            Source::List(l) => match l.pop_front() {
                Some(r) => {
                    req.arrival = r.arrival;
                    req.input_len = r.input_len;
                    req.output_len = r.output_len;
                    req.prompt.assign(&r.prompt);
                    req.output_seed = r.output_seed;
                    req.client = r.client;
                    req.tenant = r.tenant;
                    req.slo_class = r.slo_class;
                    req.session = r.session;
                    req.adapter = r.adapter;
                    req.model = r.model;
                    true
                }
                None => false,
            },
        };
        if got {
            req.id = self.yielded;
            self.yielded += 1;
        }
        got
    }

    /// A request left the system at `at`: `completed` is false when it was
    /// rejected or dropped. Multi-turn sessions schedule their next round
    /// here (arriving at `at + think_time_us`); a round that did not complete
    /// ends its session.
    pub fn on_finished(&mut self, req: &Request, at: Tick, completed: bool) {
        // Once the cap is reached no round can be yielded: end the session.
        let exhausted = self.cap.is_some_and(|c| self.yielded >= c);
        match &mut self.source {
            Source::Generated(g) => g.on_finished(req, at, completed && !exhausted),
            Source::TraceV2(t) => t.on_finished(req, at, completed && !exhausted),
            Source::Client(d) => d.on_finished(req, at, completed),
            _ => {}
        }
    }

    /// A TraceV2 replay: bound its closed-loop follow-ups by the run's
    /// `horizon_us` (the trace's own rule otherwise).
    pub fn set_horizon(&mut self, horizon_us: Option<Tick>) {
        if let (Source::TraceV2(t), Some(h)) = (&mut self.source, horizon_us) {
            t.set_session_horizon(h);
        }
    }

    /// A TraceV2 replay's ledger (blis id → trace request id).
    pub fn replay_ledger(&self) -> Option<SharedLedger> {
        match &self.source {
            Source::TraceV2(t) => Some(t.ledger()),
            _ => None,
        }
    }

    /// A TraceV2 replay: (rows injected from the file, closed-loop
    /// sessions, rows replayed with a token count raised to 1).
    pub fn replay_counts(&self) -> Option<(u64, usize, u64)> {
        match &self.source {
            Source::TraceV2(t) => Some((t.injected_rows(), t.session_count(), t.raised)),
            _ => None,
        }
    }

    /// Content seed of each named prefix group's shared prefix → its name.
    pub fn prefix_group_names(&self) -> &HashMap<u64, String> {
        &self.prefix_names
    }

    /// A real inference-perf client's request timeout, µs: the cluster
    /// aborts a request still running then (its client went away), and it
    /// counts as failed.
    pub fn client_timeout_us(&self) -> Option<Tick> {
        match &self.source {
            Source::Client(d) => Some(d.timeout_us()),
            _ => None,
        }
    }

    /// A real inference-perf client's name and how it timestamps responses.
    pub fn client_model(&self) -> Option<&(String, inference_perf::client::Timestamps)> {
        match &self.source {
            Source::Client(d) => Some(d.client()),
            _ => None,
        }
    }

    /// The number of stages when the requests' clients are the workload's
    /// stages (a real inference-perf client: a stage starts when the one
    /// before has drained, so its stages are not fixed windows of time).
    pub fn client_stages(&self) -> Option<usize> {
        match &self.source {
            Source::Client(_) => Some(self.clients.len()),
            _ => None,
        }
    }

    /// Stage windows `[start, end)` in ticks, in order, when the workload
    /// has stages (inference-perf with the reference's client); empty otherwise.
    pub fn stages(&self) -> &[(Tick, Tick)] {
        &self.stages
    }

    /// Tenant names; `Request::tenant` indexes this list.
    pub fn tenant_names(&self) -> &[String] {
        &self.tenants
    }

    /// LoRA adapter names; `Request::adapter` indexes this list (in order
    /// of first mention by the clients, or by a trace's `adapter` column).
    pub fn adapter_names(&self) -> &[String] {
        &self.adapters
    }

    /// Model names; `Request::model` indexes this list (in order of first
    /// mention by the clients, or by a trace's `model` column).
    pub fn model_names(&self) -> &[String] {
        &self.models
    }

    /// Client names in configuration order; `Request::client` indexes this list.
    pub fn client_names(&self) -> &[String] {
        &self.clients
    }

    /// The most requests this stream yields (`num_requests`, or the number
    /// of trace rows), or `None` when unbounded: the caller must then bound
    /// the run with a horizon.
    pub fn planned_requests(&self) -> Option<u64> {
        self.cap
    }

    /// Requests yielded so far.
    pub fn yielded(&self) -> u64 {
        self.yielded
    }

    /// An error met while streaming (a trace file changed during the run);
    /// the stream ended early. Check after the run.
    pub fn take_error(&mut self) -> Option<WorkloadError> {
        self.error.take()
    }

    /// Sizes of the generator's internal structures (zero for other sources).
    pub fn footprint(&self) -> Footprint {
        match &self.source {
            Source::Generated(g) => g.footprint(),
            _ => Footprint {
                client_heap: 0,
                client_heap_capacity: 0,
                pending_rounds: 0,
                active_sessions: 0,
            },
        }
    }
}

/// Content seed → name of every prefix group of `specs`.
fn prefix_names(specs: &[ClientSpec], seed: u64) -> HashMap<u64, String> {
    specs
        .iter()
        .filter_map(|s| s.prefix_group.as_ref())
        .map(|g| (prefix_seed(seed, g), g.clone()))
        .collect()
}

/// Each client's prefix group and its length (`None` for a client without
/// one), in client order (`Request::client` indexes it): what `blis
/// observe` records in a trace's `prefix_group` / `prefix_length` columns.
/// A group's length is set by its first client (default 50), as the
/// generator does. Empty for a CSV trace source.
pub fn client_prefix_groups(
    config: &WorkloadConfig,
) -> Result<Vec<Option<(String, u32)>>, WorkloadError> {
    let specs = if config.trace.is_some() || config.trace_v2.is_some() {
        return Ok(Vec::new());
    } else if let Some(ip) = &config.inference_perf {
        inference_perf::expand(ip)?.clients
    } else {
        client_specs(config)?
    };
    let mut lengths: HashMap<&str, u32> = HashMap::new();
    Ok(specs
        .iter()
        .map(|s| {
            s.prefix_group.as_deref().map(|g| {
                let len = *lengths
                    .entry(g)
                    .or_insert(s.prefix_length.unwrap_or(defaults::PREFIX_LENGTH));
                (g.to_string(), len)
            })
        })
        .collect())
}

/// The workload-source keys of `c` that are set, other than `source`
/// (`trace` or `inference_perf`), in a fixed order.
fn other_source_keys(c: &WorkloadConfig, source: &str) -> Vec<&'static str> {
    let mut others: Vec<&'static str> = Vec::new();
    for (key, set) in [
        ("trace", c.trace.is_some()),
        ("trace_v2", c.trace_v2.is_some()),
        ("inference_perf", c.inference_perf.is_some()),
        ("clients", c.clients.is_some()),
        ("preset", c.preset.is_some()),
    ] {
        if set && key != source {
            others.push(key);
        }
    }
    others.extend(c.length_keys_set());
    if c.prefix_tokens.is_some() {
        others.push("prefix_tokens");
    }
    if c.arrival.is_some() {
        others.push("arrival");
    }
    others
}

/// `trace` excludes every other source key and `aggregate_rate`.
fn check_trace_exclusive(c: &WorkloadConfig) -> Result<(), WorkloadError> {
    let mut others = other_source_keys(c, "trace");
    if c.aggregate_rate.is_some() {
        others.push("aggregate_rate");
    }
    if let Some(k) = others.first() {
        return Err(cfg_err(format!(
            "`trace` and `{k}` are both set: a trace gives every request's arrival time and lengths; \
             use exactly one workload source (trace, clients, preset, or the distribution keys)"
        )));
    }
    Ok(())
}

/// `inference_perf` excludes every other source key and `aggregate_rate`
/// (its rates are the stages' rates).
fn check_inference_perf_exclusive(c: &WorkloadConfig) -> Result<(), WorkloadError> {
    if let Some(k) = other_source_keys(c, "inference_perf").first() {
        return Err(cfg_err(format!(
            "`inference_perf` and `{k}` are both set: use exactly one workload source (trace, clients, preset, inference_perf, or the distribution keys)"
        )));
    }
    if c.aggregate_rate.is_some() {
        return Err(cfg_err(
            "`aggregate_rate` is set with `inference_perf`: the stages' rates give the load; remove aggregate_rate",
        ));
    }
    Ok(())
}

/// The client list of a config: explicit, or synthesised from a preset or
/// the distribution keys.
fn client_specs(c: &WorkloadConfig) -> Result<Vec<ClientSpec>, WorkloadError> {
    let conflict = |a: &str, b: &str| {
        cfg_err(format!(
            "`{a}` and `{b}` are both set; use exactly one workload source (trace, clients, preset, or the distribution keys)"
        ))
    };
    if let Some(clients) = &c.clients {
        if c.preset.is_some() {
            return Err(conflict("clients", "preset"));
        }
        if let Some(k) = c
            .length_keys_set()
            .into_iter()
            .chain(c.prefix_tokens.map(|_| "prefix_tokens"))
            .chain(c.arrival.map(|_| "arrival"))
            .next()
        {
            return Err(conflict("clients", k));
        }
        if clients.is_empty() {
            return Err(cfg_err("`clients` is empty: give at least one client"));
        }
        return Ok(clients.clone());
    }
    let (id, prompt, output) = if let Some(p) = c.preset {
        if let Some(k) = c.length_keys_set().first() {
            return Err(conflict("preset", k));
        }
        let (i, o) = p.lengths();
        (p.name(), i, o)
    } else {
        let g = |mean: Option<u32>,
                 sd: Option<u32>,
                 min: Option<u32>,
                 max: Option<u32>,
                 d: [u32; 4]| GaussianLengths {
            mean: mean.unwrap_or(d[0]),
            stdev: sd.unwrap_or(d[1]),
            min: min.unwrap_or(d[2]),
            max: max.unwrap_or(d[3]),
        };
        use defaults::*;
        let i = g(
            c.prompt_tokens,
            c.prompt_tokens_stdev,
            c.prompt_tokens_min,
            c.prompt_tokens_max,
            [
                PROMPT_TOKENS,
                PROMPT_TOKENS_STDEV,
                PROMPT_TOKENS_MIN,
                PROMPT_TOKENS_MAX,
            ],
        );
        let o = g(
            c.output_tokens,
            c.output_tokens_stdev,
            c.output_tokens_min,
            c.output_tokens_max,
            [
                OUTPUT_TOKENS,
                OUTPUT_TOKENS_STDEV,
                OUTPUT_TOKENS_MIN,
                OUTPUT_TOKENS_MAX,
            ],
        );
        for (name, l) in [("prompt_tokens", i), ("output_tokens", o)] {
            if l.min > l.max {
                return Err(cfg_err(format!(
                    "{name}_min {} is greater than {name}_max {}",
                    l.min, l.max
                )));
            }
            if l.mean < l.min || l.mean > l.max {
                return Err(cfg_err(format!(
                    "{name} {} lies outside [{name}_min {}, {name}_max {}]",
                    l.mean, l.min, l.max
                )));
            }
        }
        ("distribution", i, o)
    };
    let prefix = c.prefix_tokens.filter(|&p| p > 0);
    Ok(vec![ClientSpec {
        id: id.to_string(),
        rate_fraction: None,
        arrival: Some(
            c.arrival
                .unwrap_or(ArrivalSpec::new(ArrivalProcess::Constant)),
        ),
        input: LengthDist::gaussian(prompt),
        output: LengthDist::gaussian(output),
        prefix_group: prefix.map(|_| "shared".to_string()),
        prefix_length: prefix,
        slo_class: None,
        tenant_id: None,
        windows: None,
        session: None,
        adapter: None,
        adapter_mix: None,
        model: None,
        headers: Default::default(),
        multimodal: None,
    }])
}

/// Plans, client names, tenant names, adapter names, model names.
type Planned = (
    Vec<ClientPlan>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
);

/// Names given indices in order of first appearance (tenants, adapters,
/// models).
#[derive(Default)]
struct Interner {
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Interner {
    fn intern(&mut self, name: &str) -> u32 {
        match self.index.get(name) {
            Some(&k) => k,
            None => {
                let k = self.names.len() as u32;
                self.names.push(name.to_string());
                self.index.insert(name.to_string(), k);
                k
            }
        }
    }
}

/// One client's plan before its rate is known (it depends on every
/// client's `rate_fraction`).
struct PartialPlan {
    fraction: f64,
    arrival: ArrivalSpec,
    input: LengthSampler,
    output: LengthSampler,
    prefix: Option<Segment>,
    slo: SloClass,
    tenant: u32,
    windows: Vec<(Tick, Tick)>,
    session: Option<SessionSpec>,
    seed: u64,
    adapter: AdapterPick,
    model: Option<u32>,
    multimodal: Option<f64>,
}

/// What the clients share while they are checked one by one.
struct ClientIndex<'a> {
    // A set, not a list: an inference-perf expansion has tens of thousands
    // of clients, and a linear duplicate check made validation quadratic.
    seen: HashSet<&'a str>,
    tenants: Interner,
    adapters: Interner,
    models: Interner,
    /// prefix group → (segment, id of the client that set it)
    groups: HashMap<&'a str, (Segment, &'a str)>,
}

/// Validates every client and resolves rates, prefixes, tenants and streams.
fn plan_clients(
    specs: &[ClientSpec],
    aggregate_rate: f64,
    seed: u64,
) -> Result<Planned, WorkloadError> {
    let mut index = ClientIndex {
        seen: HashSet::with_capacity(specs.len()),
        tenants: Interner::default(),
        adapters: Interner::default(),
        models: Interner::default(),
        groups: HashMap::new(),
    };
    let names: Vec<String> = specs.iter().map(|s| s.id.clone()).collect();
    let partial = specs
        .iter()
        .enumerate()
        .map(|(i, s)| plan_client(i, s, seed, &mut index))
        .collect::<Result<Vec<PartialPlan>, WorkloadError>>()?;
    let total: f64 = partial.iter().map(|p| p.fraction).sum();
    let mut plans = Vec::with_capacity(specs.len());
    for (i, p) in partial.into_iter().enumerate() {
        let rate_per_us = aggregate_rate * (p.fraction / total) / 1e6;
        let arrival = ArrivalSampler::new(&p.arrival, rate_per_us).map_err(|e| {
            cfg_err(format!(
                "clients[{i}] (id \"{}\"): arrival: {e}",
                specs[i].id
            ))
        })?;
        plans.push(ClientPlan {
            seed: p.seed,
            arrival,
            input: p.input,
            output: p.output,
            prefix: p.prefix,
            tenant: p.tenant,
            slo: p.slo,
            windows: p.windows,
            session: p.session,
            schedule: Schedule::Unlimited,
            adapter: p.adapter,
            model: p.model,
            multimodal: p.multimodal,
        });
    }
    Ok((
        plans,
        names,
        index.tenants.names,
        index.adapters.names,
        index.models.names,
    ))
}

/// Client `i` checked, its names interned.
fn plan_client<'a>(
    i: usize,
    s: &'a ClientSpec,
    seed: u64,
    index: &mut ClientIndex<'a>,
) -> Result<PartialPlan, WorkloadError> {
    let at = |msg: String| cfg_err(format!("clients[{i}] (id \"{}\"): {msg}", s.id));
    if s.id.is_empty() {
        return Err(cfg_err(format!(
            "clients[{i}]: id is empty (every client needs a unique id)"
        )));
    }
    if !index.seen.insert(s.id.as_str()) {
        return Err(at(
            "duplicate id (ids must be unique: they seed each client's random stream)".into(),
        ));
    }
    let fraction = s.rate_fraction.unwrap_or(1.0);
    if !(fraction.is_finite() && fraction > 0.0) {
        return Err(at(format!(
            "rate_fraction must be a finite number > 0, got {fraction}"
        )));
    }
    let arrival = s
        .arrival
        .unwrap_or(ArrivalSpec::new(ArrivalProcess::Poisson));
    sampler::validate_arrival(&arrival).map_err(|e| at(format!("arrival: {e}")))?;
    let input = LengthSampler::new(&s.input).map_err(|e| at(format!("input: {e}")))?;
    let output = LengthSampler::new(&s.output).map_err(|e| at(format!("output: {e}")))?;
    let multimodal = match &s.multimodal {
        None => None,
        Some(m) => {
            let share = m.fraction.unwrap_or(1.0);
            if !(0.0..=1.0).contains(&share) {
                return Err(at(format!(
                    "multimodal.fraction must lie in [0, 1], got {share}"
                )));
            }
            Some(share)
        }
    };
    let prefix = client_prefix(s, seed, &mut index.groups).map_err(at)?;
    let slo = match &s.slo_class {
        None => SloClass::Standard,
        Some(c) => SloClass::parse(c).ok_or_else(|| {
            at(format!(
                "unknown slo_class \"{c}\" (accepted: critical, standard, batch, sheddable, background)"
            ))
        })?,
    };
    let tenant_name = s.tenant_id.as_deref().unwrap_or(DEFAULT_TENANT);
    if tenant_name.is_empty() {
        return Err(at("tenant_id is empty".into()));
    }
    let tenant = index.tenants.intern(tenant_name);
    let windows = client_windows(s).map_err(at)?;
    if let Some(sess) = s.session {
        if sess.max_rounds == 0 {
            return Err(at("session max_rounds must be ≥ 1".into()));
        }
    }
    let adapter = adapter_pick(s, &mut index.adapters).map_err(at)?;
    let model = match s.model.as_deref() {
        None => None,
        Some("") => return Err(at("model is empty: name a served model, or omit it".into())),
        Some(m) => Some(index.models.intern(m)),
    };
    Ok(PartialPlan {
        fraction,
        arrival,
        input,
        output,
        prefix,
        slo,
        tenant,
        windows,
        session: s.session,
        seed: client_seed(seed, &s.id),
        adapter,
        model,
        multimodal,
    })
}

/// A client's shared prefix: its group's segment (the group's first client
/// sets its length).
fn client_prefix<'a>(
    s: &'a ClientSpec,
    seed: u64,
    groups: &mut HashMap<&'a str, (Segment, &'a str)>,
) -> Result<Option<Segment>, String> {
    match (&s.prefix_group, s.prefix_length) {
        (None, Some(_)) => Err("prefix_length is set without a prefix_group".into()),
        (None, None) => Ok(None),
        (Some(g), len) => {
            if g.is_empty() {
                return Err("prefix_group is empty".into());
            }
            if len == Some(0) || len.is_some_and(|l| l > MAX_TOKENS) {
                return Err(format!(
                    "prefix_length must lie in [1, {MAX_TOKENS}], got {}",
                    len.unwrap_or(0)
                ));
            }
            match groups.get(g.as_str()) {
                Some((seg, owner)) => {
                    if len.is_some_and(|l| l != seg.len) {
                        return Err(format!(
                            "prefix_length {} differs from the length {} of prefix group \"{g}\", set by its first client \"{owner}\" (a group has one prefix)",
                            len.unwrap_or(0),
                            seg.len
                        ));
                    }
                    Ok(Some(*seg))
                }
                None => {
                    let seg = Segment {
                        seed: prefix_seed(seed, g),
                        len: len.unwrap_or(defaults::PREFIX_LENGTH),
                    };
                    groups.insert(g, (seg, &s.id));
                    Ok(Some(seg))
                }
            }
        }
    }
}

/// A client's active windows, sorted and merged (none: always active).
fn client_windows(s: &ClientSpec) -> Result<Vec<(Tick, Tick)>, String> {
    let Some(ws) = &s.windows else {
        return Ok(Vec::new());
    };
    if ws.is_empty() {
        return Err("windows is empty (omit it for an always-active client)".into());
    }
    let mut v: Vec<(Tick, Tick)> = Vec::with_capacity(ws.len());
    for w in ws {
        if w.start_us >= w.end_us || w.end_us > i64::MAX as u64 {
            return Err(format!(
                "window [{}, {}) is empty or out of range (need start_us < end_us)",
                w.start_us, w.end_us
            ));
        }
        v.push((w.start_us as Tick, w.end_us as Tick));
    }
    Ok(merge_windows(v))
}

/// Which LoRA adapter a client's requests use: none, one, or a Zipf mix.
fn adapter_pick(s: &ClientSpec, adapters: &mut Interner) -> Result<AdapterPick, String> {
    let mut intern = |name: &str| -> Result<u32, String> {
        if name.is_empty() {
            return Err("an adapter id is empty".into());
        }
        Ok(adapters.intern(name))
    };
    match (&s.adapter, &s.adapter_mix) {
        (Some(_), Some(_)) => {
            Err("adapter and adapter_mix are both given: give one adapter, or a mix".into())
        }
        (None, None) => Ok(AdapterPick::Base),
        (Some(a), None) => Ok(AdapterPick::One(intern(a)?)),
        (None, Some(m)) => {
            let zs = m.zipf_s.unwrap_or(1.0);
            if !(zs.is_finite() && zs >= 0.0) {
                return Err(format!(
                    "adapter_mix.zipf_s must be a finite number ≥ 0, got {zs}"
                ));
            }
            if m.ids.is_empty() {
                return Err("adapter_mix.ids is empty: list the adapters to draw from".into());
            }
            let mut ids = Vec::with_capacity(m.ids.len());
            for id in &m.ids {
                let a = intern(id)?;
                if ids.contains(&a) {
                    return Err(format!("adapter_mix.ids lists \"{id}\" twice"));
                }
                ids.push(a);
            }
            Ok(AdapterPick::zipf(ids, zs))
        }
    }
}

/// Sorts windows and merges overlapping or touching ones.
fn merge_windows(mut v: Vec<(Tick, Tick)>) -> Vec<(Tick, Tick)> {
    v.sort_unstable();
    let mut out: Vec<(Tick, Tick)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}
