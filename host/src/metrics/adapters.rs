//! Per-adapter metrics of a run with `[lora]`: the report's `adapters`
//! section (loads and evictions summed over the instances, requests, TTFT
//! percentiles, output throughput).

use serde_json::{json, Map, Value};

use crate::engine::Tick;
use crate::instance::Instance;
use crate::request::Request;

use super::distribution::{stats_of, TickStats};

/// What the collector records for one adapter.
#[derive(Clone, Debug, Default)]
struct AdapterRecord {
    arrived: u64,
    completed: u64,
    output_tokens: u64,
    ttft: Vec<Tick>,
}

/// The collector's per-adapter records (present only with `[lora]`).
#[derive(Clone, Debug, Default)]
pub struct AdapterRecorder {
    names: Vec<String>,
    records: Vec<AdapterRecord>,
}

impl AdapterRecorder {
    /// Records for the workload's adapters (`Request::adapter` indexes `names`).
    pub fn new(names: Vec<String>) -> Self {
        AdapterRecorder {
            records: vec![AdapterRecord::default(); names.len()],
            names,
        }
    }

    fn record(&mut self, req: &Request) -> Option<&mut AdapterRecord> {
        self.records.get_mut(req.adapter.get()? as usize)
    }

    /// A request reached the cluster.
    pub fn arrived(&mut self, req: &Request) {
        if let Some(r) = self.record(req) {
            r.arrived += 1;
        }
    }

    /// The client saw the request's first token at `at`.
    pub fn first_token(&mut self, req: &Request, at: Tick) {
        if let Some(r) = self.record(req) {
            r.ttft.push(at - req.arrival);
        }
    }

    /// The request completed.
    pub fn completed(&mut self, req: &Request) {
        if let Some(r) = self.record(req) {
            r.completed += 1;
            r.output_tokens += u64::from(req.generated);
        }
    }

    /// The adapter's name of a request (for result lines).
    pub fn name_of(&self, req: &Request) -> Option<&str> {
        self.names
            .get(req.adapter.get()? as usize)
            .map(String::as_str)
    }

    /// The `adapters` section: one entry per adapter the workload names,
    /// `{num_requests, completed_requests, load_count, eviction_count,
    /// ttft_p50_ms, ttft_p99_ms, ttft_mean_ms, total_output_tokens,
    /// throughput_tok_per_s}`; throughput counts the output tokens of
    /// completed requests over the run's duration.
    pub fn report(&mut self, instances: &[Instance], duration_s: f64) -> Value {
        let mut out = Map::new();
        for (i, (name, r)) in self.names.iter().zip(&mut self.records).enumerate() {
            let (mut loads, mut evictions) = (0, 0);
            for inst in instances {
                if let Some(c) = inst.lora().and_then(|l| l.counts().get(i)) {
                    loads += c.loads;
                    evictions += c.evictions;
                }
            }
            let s: Option<TickStats> = stats_of(&mut r.ttft);
            let ms =
                |f: fn(&TickStats) -> f64| s.as_ref().map_or(Value::Null, |s| json!(f(s) / 1e3));
            out.insert(
                name.clone(),
                json!({
                    "num_requests": r.arrived,
                    "completed_requests": r.completed,
                    "load_count": loads,
                    "eviction_count": evictions,
                    "ttft_mean_ms": ms(|s| s.mean),
                    "ttft_p50_ms": ms(|s| s.p50),
                    "ttft_p99_ms": ms(|s| s.p99),
                    "total_output_tokens": r.output_tokens,
                    "throughput_tok_per_s": if duration_s > 0.0 {
                        r.output_tokens as f64 / duration_s
                    } else {
                        0.0
                    },
                }),
            );
        }
        Value::Object(out)
    }
}
