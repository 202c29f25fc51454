//! llm-d's predicted-latency family (llm-d-router.md §5) → blis-std's
//! `latency` scorer, `slo-headroom-tier` and `prefix-cache-affinity`
//! filters and `latency-slo` admission. Each of those owns a predictor
//! (blis policies keep their own state) configured alike from the
//! `predicted-latency-producer` it reads: its `predictor` table.

use serde_yaml_ng::Value;
use toml::Value as T;

use super::loader::{param_num as num, Loaded, Plugin};
use super::Out;

/// The `predicted-latency-producer` `p` reads: the one a string parameter
/// of `p` names, else the config's first, else `None` (llm-d creates one
/// with the defaults).
fn producer<'a>(l: &'a Loaded, p: &Plugin) -> Option<&'a Plugin> {
    let is_producer = |q: &&Plugin| q.info.ty == "predicted-latency-producer";
    let named = p.params.as_mapping().and_then(|m| {
        m.values()
            .filter_map(Value::as_str)
            .find_map(|n| l.plugins.iter().filter(is_producer).find(|q| q.name == n))
    });
    named.or_else(|| l.plugins.iter().find(is_producer))
}

/// The `predictor` table of a policy reading `p`'s producer (`block_size`
/// is written in from the run file when the config is applied).
fn predictor(l: &Loaded, p: &Plugin) -> Result<toml::Table, String> {
    let mut t = toml::Table::new();
    if let Some(q) = producer(l, p) {
        if q.params.get("streamingMode").and_then(Value::as_bool) == Some(true) {
            t.insert("streaming".into(), T::Boolean(true));
        }
        if let Some(b) = num(&q.params, "sloBufferFactor") {
            if !(b.is_finite() && b > 0.0) {
                return Err(format!(
                    "plugin '{}' (predicted-latency-producer): sloBufferFactor {b} must be > 0",
                    q.name
                ));
            }
            t.insert("slo_buffer".into(), T::Float(b));
        }
    }
    if let Some(lru) = l
        .plugins
        .iter()
        .find(|q| q.info.ty == "approx-prefix-cache-producer")
        .and_then(|q| q.params.get("lruCapacityPerServer").and_then(Value::as_i64))
    {
        t.insert("capacity".into(), T::Integer(lru.max(1)));
    }
    if !l.sees_prompt() {
        // passthrough-parser alone: no prompt length, prefix or tokens.
        t.insert("prompt".into(), T::Boolean(false));
    }
    Ok(t)
}

/// The common part of every note: what blis's predictor is.
const PREDICTOR: &str = "its own latency predictor, trained online on the requests it routes over llm-d's features (KV utilisation, waiting queue, router in-flight requests and prompt tokens, prompt length, prefix ratio): a ridge regression refitted every 10 s of simulated time after 100 completions where llm-d's sidecar fits XGBoost; no prediction before the first fit; SLOs from the clients' x-llm-d-slo-ttft-ms / x-llm-d-slo-tpot-ms headers";

/// Copy the numeric parameters `keys` (llm-d name → blis name) of `p`.
fn copy_nums(p: &Plugin, keys: &[(&str, &str)], t: &mut toml::Table) {
    for (from, to) in keys {
        if let Some(v) = num(&p.params, from) {
            t.insert((*to).into(), T::Float(v));
        }
    }
}

/// `latency-scorer` → blis's `latency`.
pub fn scorer(l: &Loaded, p: &Plugin, out: &mut Out) -> Result<toml::Table, String> {
    let mut t = toml::Table::new();
    copy_nums(
        p,
        &[
            ("ttftWeight", "ttft_weight"),
            ("tpotWeight", "tpot_weight"),
            ("compositeKVWeight", "composite_kv_weight"),
            ("compositeQueueWeight", "composite_queue_weight"),
            ("compositePrefixWeight", "composite_prefix_weight"),
        ],
        &mut t,
    );
    if let Some(s) = p.params.get("headroomSelectionStrategy") {
        let s = s.as_str().unwrap_or("");
        if s != "least" && s != "most" {
            return Err(format!(
                "plugin '{}' (latency-scorer): headroomSelectionStrategy '{s}' is not one of least, most",
                p.name
            ));
        }
        t.insert("strategy".into(), T::String(s.into()));
    }
    t.insert("predictor".into(), T::Table(predictor(l, p)?));
    out.note(format!(
        "plugin '{}' (latency-scorer): blis's latency scorer (llm-d's headroom tiers and bucket scores; its composite score before the first prediction), with {PREDICTOR}",
        p.name
    ));
    Ok(t)
}

/// `slo-headroom-tier-filter` → blis's `slo-headroom-tier`.
pub fn tier_filter(l: &Loaded, p: &Plugin, out: &mut Out) -> Result<toml::Table, String> {
    let mut t = toml::Table::new();
    let eps = num(&p.params, "epsilonExploreNeg").unwrap_or(0.01);
    if !(0.0..=1.0).contains(&eps) {
        return Err(format!(
            "plugin '{}' (slo-headroom-tier-filter): epsilonExploreNeg {eps} must be in [0, 1]",
            p.name
        ));
    }
    t.insert("epsilon_explore_neg".into(), T::Float(eps));
    t.insert("predictor".into(), T::Table(predictor(l, p)?));
    out.note(format!(
        "plugin '{}' (slo-headroom-tier-filter): blis's slo-headroom-tier filter, with {PREDICTOR}",
        p.name
    ));
    Ok(t)
}

/// `prefix-cache-affinity-filter` → blis's `prefix-cache-affinity`.
pub fn affinity_filter(l: &Loaded, p: &Plugin, out: &mut Out) -> Result<toml::Table, String> {
    let bad = |m: String| format!("plugin '{}' (prefix-cache-affinity-filter): {m}", p.name);
    let mut t = toml::Table::new();
    let threshold = num(&p.params, "affinityThreshold").unwrap_or(0.8);
    if threshold > 1.0 {
        return Err(bad(format!("affinityThreshold {threshold} must be ≤ 1")));
    }
    let explore = num(&p.params, "explorationProbability").unwrap_or(0.0);
    if !(0.0..=1.0).contains(&explore) {
        return Err(bad(format!(
            "explorationProbability {explore} must be in [0, 1]"
        )));
    }
    let penalty = num(&p.params, "maxTTFTPenaltyMs").unwrap_or(18_000.0);
    if penalty < 0.0 {
        return Err(bad(format!("maxTTFTPenaltyMs {penalty} must be ≥ 0")));
    }
    t.insert("affinity_threshold".into(), T::Float(threshold));
    t.insert("exploration_probability".into(), T::Float(explore));
    t.insert("max_ttft_penalty_ms".into(), T::Float(penalty));
    let source = p
        .params
        .get("ttftSource")
        .and_then(Value::as_str)
        .unwrap_or("prefillThroughput");
    let how = match source {
        "prefillThroughput" => {
            let peak = num(&p.params, "peakPrefillThroughput").unwrap_or(15_928.0);
            if !(peak.is_finite() && peak > 0.0) {
                return Err(bad(format!("peakPrefillThroughput {peak} must be > 0")));
            }
            t.insert("peak_prefill_throughput".into(), T::Float(peak));
            format!("TTFT = router in-flight prompt tokens / {peak} tok/s")
        }
        "latencyPredictor" => {
            t.insert("ttft_source".into(), T::String("predictor".into()));
            "TTFT from the predictor".to_string()
        }
        other => {
            return Err(bad(format!(
                "ttftSource '{other}' is not one of prefillThroughput, latencyPredictor"
            )))
        }
    };
    t.insert("predictor".into(), T::Table(predictor(l, p)?));
    out.note(format!(
        "plugin '{}' (prefix-cache-affinity-filter): blis's prefix-cache-affinity filter (prefix ratio from a router-side index in blocks of the run's KV block size; {how}), with {PREDICTOR}",
        p.name
    ));
    Ok(t)
}

/// `latency-slo-admitter` → blis's `latency-slo` admission (policy name
/// and params).
pub fn admitter(l: &Loaded, p: &Plugin, out: &mut Out) -> Result<(String, toml::Table), String> {
    let mut params = toml::Table::new();
    params.insert("predictor".into(), T::Table(predictor(l, p)?));
    out.note(format!(
        "plugin '{}' (latency-slo-admitter): blis's latency-slo admission, with {PREDICTOR}",
        p.name
    ));
    Ok(("latency-slo".into(), params))
}
