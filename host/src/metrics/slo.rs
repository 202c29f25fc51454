//! SLO targets per class (`[slo]`): attainment and goodput.
//!
//! A request *meets* a target when it completed and its TTFT (resp. E2E) is
//! at most the target of its class. A request meets its SLO when it
//! completed and meets every target its class has (a class without targets:
//! every completed request). Attainment is over every request of the class
//! that reached the cluster — rejected, shed, expired, dropped and
//! unfinished requests count as misses, so shedding a class never makes its
//! attainment look better. Goodput is the rate of requests (and of their
//! output tokens) that met their SLO, per second of simulated time.

use serde_json::{json, Map, Value};

use crate::engine::Tick;
use crate::request::Request;

use super::collector::class_index;

/// The targets of one class, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Targets {
    pub ttft: Option<Tick>,
    pub e2e: Option<Tick>,
}

/// Counts of one class.
#[derive(Clone, Copy, Debug, Default)]
struct ClassCounts {
    ttft_met: u64,
    e2e_met: u64,
    met: u64,
    met_output_tokens: u64,
}

/// Targets per class (in `SloClass::ALL` order) and what met them.
#[derive(Debug)]
pub struct SloRecorder {
    targets: [Targets; 5],
    counts: [ClassCounts; 5],
}

impl SloRecorder {
    /// A recorder for the given targets.
    pub fn new(targets: [Targets; 5]) -> SloRecorder {
        SloRecorder {
            targets,
            counts: Default::default(),
        }
    }

    /// A request completed at `at` (the client saw its last token).
    pub fn completed(&mut self, req: &Request, at: Tick) {
        let c = class_index(req.slo_class);
        let t = self.targets[c];
        let ttft_ok = t.ttft.is_none_or(|x| req.first_token_at - req.arrival <= x);
        let e2e_ok = t.e2e.is_none_or(|x| at - req.arrival <= x);
        let k = &mut self.counts[c];
        k.ttft_met += u64::from(ttft_ok);
        k.e2e_met += u64::from(e2e_ok);
        if ttft_ok && e2e_ok {
            k.met += 1;
            k.met_output_tokens += u64::from(req.generated);
        }
    }

    /// The `slo` object of class `c` with `arrived` requests, over
    /// `duration_s` seconds.
    pub fn class_report(&self, c: usize, arrived: u64, duration_s: f64) -> Value {
        let t = self.targets[c];
        let k = self.counts[c];
        let frac = |x: u64| {
            if arrived == 0 {
                Value::Null
            } else {
                json!(x as f64 / arrived as f64)
            }
        };
        let target = |x: Option<Tick>| x.map_or(Value::Null, |x| json!(x as f64 / 1e3));
        let mut m = Map::new();
        m.insert("ttft_target_ms".into(), target(t.ttft));
        m.insert("e2e_target_ms".into(), target(t.e2e));
        m.insert("ttft_attainment".into(), frac(k.ttft_met));
        m.insert("e2e_attainment".into(), frac(k.e2e_met));
        m.insert("attainment".into(), frac(k.met));
        put_goodput(&mut m, k.met, k.met_output_tokens, duration_s);
        Value::Object(m)
    }

    /// The cluster's `slo` object: every class together.
    pub fn total_report(&self, arrived: u64, duration_s: f64) -> Value {
        let met: u64 = self.counts.iter().map(|k| k.met).sum();
        let tokens: u64 = self.counts.iter().map(|k| k.met_output_tokens).sum();
        let mut m = Map::new();
        m.insert(
            "attainment".into(),
            if arrived == 0 {
                Value::Null
            } else {
                json!(met as f64 / arrived as f64)
            },
        );
        put_goodput(&mut m, met, tokens, duration_s);
        Value::Object(m)
    }
}

fn put_goodput(m: &mut Map<String, Value>, met: u64, tokens: u64, duration_s: f64) {
    let rate = |x: u64| {
        if duration_s > 0.0 {
            x as f64 / duration_s
        } else {
            0.0
        }
    };
    m.insert("met_requests".into(), json!(met));
    m.insert("goodput_rps".into(), json!(rate(met)));
    m.insert("goodput_tokens_per_sec".into(), json!(rate(tokens)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::SloClass;

    fn req(class: SloClass, arrival: Tick, first: Tick, generated: u32) -> Request {
        Request {
            slo_class: class,
            arrival,
            first_token_at: first,
            generated,
            ..Request::default()
        }
    }

    #[test]
    fn attainment_and_goodput_by_hand() {
        let mut targets = [Targets::default(); 5];
        targets[0] = Targets {
            ttft: Some(100),
            e2e: Some(1000),
        };
        targets[1] = Targets {
            ttft: None,
            e2e: Some(500),
        };
        let mut r = SloRecorder::new(targets);
        // critical: meets both; TTFT exactly at target; misses E2E; misses TTFT.
        r.completed(&req(SloClass::Critical, 0, 50, 10), 900);
        r.completed(&req(SloClass::Critical, 10, 110, 20), 1010);
        r.completed(&req(SloClass::Critical, 0, 50, 30), 1001);
        r.completed(&req(SloClass::Critical, 0, 101, 40), 200);
        // standard: one meets (no TTFT target), one misses.
        r.completed(&req(SloClass::Standard, 0, 400, 5), 500);
        r.completed(&req(SloClass::Standard, 0, 1, 7), 501);
        // batch has no targets: every completion meets.
        r.completed(&req(SloClass::Batch, 0, 1_000_000, 3), 9_000_000);

        // 5 critical arrived (one never completed), over 2 s.
        let c = r.class_report(0, 5, 2.0);
        assert_eq!(c["ttft_target_ms"], json!(0.1));
        assert_eq!(c["e2e_target_ms"], json!(1.0));
        assert_eq!(c["ttft_attainment"], json!(3.0 / 5.0));
        assert_eq!(c["e2e_attainment"], json!(3.0 / 5.0));
        assert_eq!(c["attainment"], json!(2.0 / 5.0));
        assert_eq!(c["met_requests"], json!(2));
        assert_eq!(c["goodput_rps"], json!(1.0));
        assert_eq!(c["goodput_tokens_per_sec"], json!(15.0));
        let s = r.class_report(1, 2, 2.0);
        assert_eq!(s["ttft_target_ms"], Value::Null);
        assert_eq!(s["attainment"], json!(0.5));
        assert_eq!(s["ttft_attainment"], json!(1.0));
        let t = r.total_report(8, 2.0);
        assert_eq!(t["met_requests"], json!(4));
        assert_eq!(t["attainment"], json!(0.5));
        assert_eq!(
            t["goodput_tokens_per_sec"],
            json!((10 + 20 + 5 + 3) as f64 / 2.0)
        );
        assert_eq!(r.total_report(0, 0.0)["attainment"], Value::Null);
        assert_eq!(r.total_report(0, 0.0)["goodput_rps"], json!(0.0));
    }
}
