//! What the simulation records while it runs: per-instance latency
//! populations, per-class and per-tenant counts, and per-request result lines.
//!
//! Memory per request is what exact percentiles need — TTFT, E2E and
//! scheduling delay (8 bytes each, packed with the SLO class) — not request
//! objects, and nothing with `output.percentiles = "sketch"`
//! ([`Population`]). ITL samples go into a value → count map (its size
//! follows the number of distinct step times, not requests).

use std::collections::BTreeMap;
use std::io::Write;

use crate::engine::Tick;
use crate::instance::InstanceObserver;
use crate::request::{Request, RequestState, SloClass, Slot};

use super::distribution::CountMap;
use super::population::{PercentileMode, Population};
use super::saturation::SaturationRecorder;
use super::slo::SloRecorder;
use super::stages::StageRecorder;

/// Latency populations and counters of one instance. Latency samples are
/// split by SLO class ([`Population`]).
#[derive(Debug, Default)]
pub struct InstanceRecord {
    pub ttft: Population,
    pub e2e: Population,
    pub scheduling_delay: Population,
    pub itl: CountMap,
    pub completed: u64,
    pub dropped: u64,
    pub injected: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub preemptions: u64,
    /// Time of the last event this instance executed.
    pub last_event: Tick,
}

/// Counters of one SLO class (its latencies live in the instance records).
#[derive(Debug, Default)]
pub struct ClassRecord {
    pub arrived: u64,
    pub rejected: u64,
    pub completed: u64,
}

/// Counters of one tenant.
#[derive(Debug, Default, Clone)]
pub struct TenantRecord {
    pub arrived: u64,
    pub rejected: u64,
    pub completed: u64,
    pub output_tokens: u64,
}

/// Per-request result lines, written in id order with a reorder buffer (so
/// memory follows the requests in flight).
pub struct ResultsWriter {
    out: Box<dyn Write>,
    next_id: u64,
    pending: BTreeMap<u64, String>,
}

impl std::fmt::Debug for ResultsWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultsWriter")
            .field("next_id", &self.next_id)
            .finish_non_exhaustive()
    }
}

impl ResultsWriter {
    /// Write lines to `out`.
    pub fn new(out: Box<dyn Write>) -> Self {
        ResultsWriter {
            out,
            next_id: 0,
            pending: BTreeMap::new(),
        }
    }

    fn push(&mut self, id: u64, line: String) -> std::io::Result<()> {
        self.pending.insert(id, line);
        while let Some(line) = self.pending.remove(&self.next_id) {
            self.out.write_all(line.as_bytes())?;
            self.out.write_all(b"\n")?;
            self.next_id += 1;
        }
        Ok(())
    }

    /// Write whatever is left (ids with gaps cannot happen in a run) and flush.
    pub fn finish(&mut self) -> std::io::Result<()> {
        for (_, line) in std::mem::take(&mut self.pending) {
            self.out.write_all(line.as_bytes())?;
            self.out.write_all(b"\n")?;
        }
        self.out.flush()
    }
}

/// Something that sees every request once, at its end (completed, dropped,
/// rejected) or at the end of the run (still in the system): the TraceV2
/// export of `--trace-output` and replay's SimResult array. The collector
/// calls each sink where it writes the per-request result line; a run
/// without sinks pays one empty-vector check per request.
pub trait RequestSink: std::fmt::Debug {
    /// `req` left the system (or the run ended with it inside).
    fn record(&mut self, req: &Request, tenants: &[String], clients: &[String]);
    /// The run succeeded: write what is left (files are committed by the caller).
    fn finish(&mut self) -> Result<(), String>;
}

/// Everything recorded during a run. Implements [`InstanceObserver`].
#[derive(Debug)]
pub struct Collector {
    pub instances: Vec<InstanceRecord>,
    pub classes: [ClassRecord; 5],
    pub tenants: Vec<TenantRecord>,
    /// Slots of requests that left an instance during the last event
    /// (completed or dropped); the cluster releases them.
    pub finished: Vec<(Slot, bool)>,
    pub results: Option<ResultsWriter>,
    /// Names for result lines.
    pub tenant_names: Vec<String>,
    pub client_names: Vec<String>,
    pub write_error: Option<std::io::Error>,
    /// Per-stage records when the workload has stages (see [`super::stages`]).
    pub stages: Option<StageRecorder>,
    /// A real inference-perf client's own metrics (see [`super::client`]).
    pub client: Option<super::client::ClientRecorder>,
    /// Attainment and goodput when the run has `[slo]` targets.
    pub slo: Option<SloRecorder>,
    /// The run has a gateway queue: result lines carry `gateway_queue_delay_ms`.
    pub gateway: bool,
    /// The arrival/completion stream of `[saturation]`.
    pub saturation: Option<SaturationRecorder>,
    /// Per-request sinks (TraceV2 export, SimResult array); empty by default.
    pub sinks: Vec<Box<dyn RequestSink>>,
    /// Per-adapter records of `[lora]` (result lines then carry `adapter`).
    pub adapters: Option<Box<super::adapters::AdapterRecorder>>,
    /// Per-model records of several base models (result lines then carry `model`).
    pub models: Option<Box<super::models::ModelRecorder>>,
    /// How latency populations are kept (every instance's alike).
    percentiles: PercentileMode,
}

/// Index of a class in [`SloClass::ALL`] (also the class tag of packed samples).
pub fn class_index(c: SloClass) -> usize {
    SloClass::ALL.iter().position(|&x| x == c).unwrap_or(1)
}

impl Collector {
    /// A collector for `instances` instances.
    pub fn new(instances: usize, tenant_names: Vec<String>, client_names: Vec<String>) -> Self {
        Collector {
            instances: (0..instances).map(|_| InstanceRecord::default()).collect(),
            classes: Default::default(),
            tenants: vec![TenantRecord::default(); tenant_names.len().max(1)],
            finished: Vec::new(),
            results: None,
            tenant_names,
            client_names,
            write_error: None,
            stages: None,
            client: None,
            slo: None,
            gateway: false,
            saturation: None,
            sinks: Vec::new(),
            adapters: None,
            models: None,
            percentiles: PercentileMode::Exact,
        }
    }

    /// Keep the latency populations as `mode` says (call before the run).
    pub fn set_percentiles(&mut self, mode: PercentileMode) {
        self.percentiles = mode;
        for rec in &mut self.instances {
            rec.ttft = Population::new(mode);
            rec.e2e = Population::new(mode);
            rec.scheduling_delay = Population::new(mode);
        }
    }

    /// The record of an instance added during the run (an autoscaler's):
    /// its populations kept as every other instance's.
    pub fn add_instance(&mut self) {
        let mode = self.percentiles;
        self.instances.push(InstanceRecord {
            ttft: Population::new(mode),
            e2e: Population::new(mode),
            scheduling_delay: Population::new(mode),
            ..InstanceRecord::default()
        });
    }

    fn tenant(&mut self, t: u32) -> &mut TenantRecord {
        let t = t as usize;
        if t >= self.tenants.len() {
            self.tenants.resize(t + 1, TenantRecord::default());
        }
        &mut self.tenants[t]
    }

    /// A request reached the cluster.
    pub fn arrived(&mut self, req: &Request) {
        self.classes[class_index(req.slo_class)].arrived += 1;
        self.tenant(req.tenant).arrived += 1;
        if let Some(s) = &mut self.stages {
            s.arrived(req);
        }
        if let Some(c) = &mut self.client {
            c.arrived();
        }
        if let Some(s) = &mut self.saturation {
            s.arrived(req.id, req.arrival);
        }
        if let Some(a) = &mut self.adapters {
            a.arrived(req);
        }
        if let Some(m) = &mut self.models {
            m.arrived(req);
        }
    }

    /// The admission policy rejected a request.
    pub fn rejected(&mut self, req: &Request) {
        self.classes[class_index(req.slo_class)].rejected += 1;
        self.tenant(req.tenant).rejected += 1;
        if let Some(s) = &mut self.stages {
            s.rejected(req);
        }
        if let Some(s) = &mut self.saturation {
            s.removed(req.id);
        }
        self.result_line(req);
    }

    /// A request reached an instance's wait queue (it is now "injected"),
    /// or was dropped there as unservable (injected too, INV-1).
    pub fn queued(&mut self, instance: u32, req: &Request) {
        let rec = &mut self.instances[instance as usize];
        rec.injected += 1;
        let counted = req.state != RequestState::Dropped;
        if counted {
            rec.input_tokens += u64::from(req.input_len);
        }
        if let Some(s) = &mut self.stages {
            s.injected(req, counted);
        }
    }

    /// A queued request left `instance` to be routed again (a `redirect`
    /// drain): undo [`Collector::queued`], so it is injected once, where it
    /// is served.
    pub fn unqueued(&mut self, instance: u32, req: &Request) {
        let rec = &mut self.instances[instance as usize];
        rec.injected -= 1;
        rec.input_tokens -= u64::from(req.input_len);
        if let Some(s) = &mut self.stages {
            s.uninjected(req);
        }
    }

    /// Note that an instance executed an event at `t`.
    #[inline]
    pub fn instance_event(&mut self, instance: u32, t: Tick) {
        self.instances[instance as usize].last_event = t;
    }

    /// Write the result line of a request (at its end, or at the end of the run).
    pub fn result_line(&mut self, req: &Request) {
        for s in &mut self.sinks {
            s.record(req, &self.tenant_names, &self.client_names);
        }
        let Some(w) = self.results.as_mut() else {
            return;
        };
        let mut line = result_json(req, &self.tenant_names, &self.client_names, self.gateway);
        if let Some(a) = &self.adapters {
            // `"adapter"` last: the id, or null for the base model.
            line.pop();
            line.push_str(",\"adapter\":");
            line.push_str(&serde_json::Value::from(a.name_of(req)).to_string());
            line.push('}');
        }
        if let Some(m) = &self.models {
            // `"model"` last: the fleet model the request asked for.
            line.pop();
            line.push_str(",\"model\":");
            line.push_str(&serde_json::Value::from(m.name_of(req)).to_string());
            line.push('}');
        }
        if let Err(e) = w.push(req.id, line) {
            self.write_error.get_or_insert(e);
        }
    }
}

fn ms(t: Tick) -> f64 {
    t as f64 / 1000.0
}

/// One per-request result as a JSON line (field order fixed). With
/// `gateway`, the line ends with `gateway_queue_delay_ms` (dispatch −
/// enqueue; null for a request that was never dispatched).
pub fn result_json(req: &Request, tenants: &[String], clients: &[String], gateway: bool) -> String {
    let opt = |cond: bool, v: f64| {
        if cond {
            serde_json::json!(v)
        } else {
            serde_json::Value::Null
        }
    };
    let has_first = req.first_token_at >= 0;
    let done = req.state == RequestState::Completed;
    let itl = if done && req.generated > 1 {
        Some(ms(req.completed_at - req.first_token_at) / f64::from(req.generated - 1))
    } else {
        None
    };
    let mut v = serde_json::json!({
        "id": req.id,
        "client_id": clients.get(req.client as usize).map(String::as_str).unwrap_or(""),
        "tenant_id": tenants.get(req.tenant as usize).map(String::as_str).unwrap_or(""),
        "slo_class": req.slo_class.name(),
        "instance": if req.instance == u32::MAX { serde_json::Value::Null } else { serde_json::json!(req.instance) },
        "arrival_us": req.arrival,
        "input_tokens": req.input_len,
        "output_tokens": req.output_len,
        "status": req.state.name(),
        "ttft_ms": opt(has_first, ms(req.first_token_at - req.arrival)),
        "e2e_ms": opt(done, ms(req.completed_at - req.arrival)),
        "itl_mean_ms": itl.map_or(serde_json::Value::Null, |x| serde_json::json!(x)),
        "scheduling_delay_ms": opt(req.scheduled_at >= 0, ms(req.scheduled_at - req.arrival)),
        "cached_tokens": req.cached_tokens,
        "preemptions": req.preemptions,
    });
    if gateway {
        v["gateway_queue_delay_ms"] = opt(
            req.gateway_dispatched_at >= 0 && req.gateway_queued_at >= 0,
            ms(req.gateway_dispatched_at - req.gateway_queued_at),
        );
    }
    v.to_string()
}

impl InstanceObserver for Collector {
    #[inline]
    fn first_token(&mut self, instance: u32, req: &Request, at: Tick) {
        let rec = &mut self.instances[instance as usize];
        rec.ttft
            .push(at - req.arrival, class_index(req.slo_class) as u8);
        rec.output_tokens += 1;
        if let Some(s) = &mut self.stages {
            s.first_token(req, at);
        }
        if let Some(a) = &mut self.adapters {
            a.first_token(req, at);
        }
    }

    #[inline]
    fn token_gap(&mut self, instance: u32, gap: Tick) {
        let rec = &mut self.instances[instance as usize];
        rec.itl.add(gap);
        rec.output_tokens += 1;
    }

    #[inline]
    fn token_gaps(&mut self, instance: u32, gap: Tick, count: u64) {
        let rec = &mut self.instances[instance as usize];
        rec.itl.add_n(gap, count);
        rec.output_tokens += count;
    }

    fn completed(&mut self, instance: u32, slot: Slot, req: &Request, at: Tick) {
        let c = class_index(req.slo_class);
        let rec = &mut self.instances[instance as usize];
        rec.completed += 1;
        rec.e2e.push(at - req.arrival, c as u8);
        if req.scheduled_at >= 0 {
            rec.scheduling_delay
                .push(req.scheduled_at - req.arrival, c as u8);
        }
        self.classes[c].completed += 1;
        let out = u64::from(req.generated);
        let t = self.tenant(req.tenant);
        t.completed += 1;
        t.output_tokens += out;
        if let Some(s) = &mut self.stages {
            s.completed(req, at);
        }
        if let Some(c) = &mut self.client {
            c.completed(req, at);
        }
        if let Some(s) = &mut self.slo {
            s.completed(req, at);
        }
        if let Some(s) = &mut self.saturation {
            s.completed(req.id, at, at - req.arrival);
        }
        if let Some(a) = &mut self.adapters {
            a.completed(req);
        }
        self.finished.push((slot, true));
    }

    fn dropped(&mut self, instance: u32, slot: Slot, req: &Request, _at: Tick) {
        self.instances[instance as usize].dropped += 1;
        if let Some(s) = &mut self.stages {
            s.dropped(req);
        }
        if let Some(s) = &mut self.saturation {
            s.removed(req.id);
        }
        self.finished.push((slot, false));
    }

    fn preempted(&mut self, instance: u32, _req: &Request, _at: Tick) {
        self.instances[instance as usize].preemptions += 1;
    }
}
