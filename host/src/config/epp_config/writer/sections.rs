//! The sections around the profiles: `[admission]` as llm-d's legacy
//! admission controller's saturation detector and its admitters,
//! `[flow_control]` as the flowControl feature gate (detector, TTL, bands,
//! fairness, usage limit, eviction), `[routing.freshness]` as the metrics
//! source's scrape interval — each the inverse of `super::super::sections`.

use serde_yaml_ng::{Mapping, Value as Y};
use toml::Value as T;

use super::{key, mapping, num, only, refuse, whole, Doc};
use crate::config::{FlowControlSection, FreshnessSection, RunFile};
use crate::request::SloClass;

/// `[admission]` (flow control off) → the saturation detector llm-d's
/// legacy admission controller reads (the controller itself is always on
/// without the flowControl gate).
pub(super) fn admission(run: &RunFile, block_size: i64, doc: &mut Doc) -> Result<(), String> {
    let a = &run.admission;
    if a.latency_us != 0 {
        return Err(refuse(
            "[admission] latency_us",
            "llm-d has no admission delay; leave it out",
        ));
    }
    let p = &a.params;
    let (qd, kv) = match a.policy.as_str() {
        "gaie-legacy" => {
            only(p, &["queue_depth_threshold", "kv_threshold"], "[admission] gaie-legacy")?;
            (
                p.get("queue_depth_threshold").and_then(num).unwrap_or(5.0),
                p.get("kv_threshold").and_then(num).unwrap_or(0.8),
            )
        }
        "always-admit" | "probabilistic" => {
            doc.notes.push(format!("[admission] {}: llm-d's legacy admission controller is always on without flow control; the file sets its utilization-detector to queueDepthThreshold 999999999 and kvCacheUtilThreshold 1.0 (llm-d's own probabilistic-admitter example does so), so it also sheds sheddable requests (priority < 0) while every instance's KV cache is full", a.policy));
            (999_999_999.0, 1.0)
        }
        "concurrency-shed" => return concurrency_shed(p, block_size, doc),
        other => {
            return Err(refuse(
                &format!("[admission] policy = \"{other}\""),
                "llm-d's admission is its legacy controller over a saturation detector (blis's gaie-legacy or concurrency-shed), then its admitters (probabilistic), or flow control ([flow_control])",
            ))
        }
    };
    let m = mapping(vec![
        ("queueDepthThreshold", Y::from(qd)),
        ("kvCacheUtilThreshold", Y::from(kv)),
    ]);
    doc.add("utilization-detector", m);
    Ok(())
}

/// `concurrency-shed` → the legacy controller over a concurrency detector.
fn concurrency_shed(p: &toml::Table, block_size: i64, doc: &mut Doc) -> Result<(), String> {
    let what = "[admission] concurrency-shed";
    only(
        p,
        &[
            "mode",
            "max_concurrency",
            "max_token_concurrency",
            "block_size",
            "capacity",
        ],
        what,
    )?;
    if p.get("block_size")
        .is_some_and(|b| b.as_integer() != Some(block_size))
    {
        return Err(refuse(&format!("{what} params.block_size"), &format!("llm-d counts blocks of the run's KV block size ({block_size}); remove the parameter")));
    }
    if p.get("capacity")
        .is_some_and(|c| c.as_integer() != Some(31_250))
    {
        return Err(refuse(&format!("{what} params.capacity"), "llm-d's in-flight token count reads its approximate prefix index at its default 31,250 blocks; remove the parameter"));
    }
    let mode = p.get("mode").and_then(T::as_str).unwrap_or("requests");
    let max = p.get("max_concurrency").and_then(num).unwrap_or(100.0);
    let tokens = p.get("max_token_concurrency").and_then(num).unwrap_or(1e6);
    let m = concurrency_detector(mode, max, tokens, what)?;
    let r = doc.add("concurrency-detector", m);
    doc.flow_control.insert(
        key("saturationDetector"),
        Y::Mapping(mapping(vec![("pluginRef", key(&r))])),
    );
    Ok(())
}

/// A `concurrency-detector`'s parameters.
fn concurrency_detector(mode: &str, max: f64, tokens: f64, what: &str) -> Result<Mapping, String> {
    let mut m = mapping(vec![("maxConcurrency", Y::from(max))]);
    match mode {
        "requests" => {}
        "tokens" | "hybrid" => {
            m.insert(key("concurrencyMode"), key(mode));
            m.insert(
                key("maxTokenConcurrency"),
                whole(tokens, &format!("{what} max_token_concurrency"))?,
            );
        }
        other => {
            return Err(refuse(
                &format!("{what} mode = \"{other}\""),
                "llm-d's concurrency-detector counts requests, tokens or hybrid",
            ))
        }
    }
    Ok(m)
}

/// The admission steps after llm-d's controller: its admitters (the first
/// policy too when flow control replaces the legacy controller).
pub(super) fn admitters(run: &RunFile, doc: &mut Doc) -> Result<(), String> {
    let a = &run.admission;
    let first =
        (a.policy == "probabilistic").then_some((&a.policy, &a.params, "[admission]".to_string()));
    let then = a
        .then
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.policy, &s.params, format!("admission.then.{i}")));
    for (policy, p, what) in first.into_iter().chain(then) {
        if policy != "probabilistic" {
            return Err(refuse(
                &format!("{what} ({policy})"),
                "llm-d's admitter written by blis is probabilistic (llm-d's probabilistic-admitter)",
            ));
        }
        only(
            p,
            &["queue_depth_threshold", "kv_threshold", "power", "k"],
            &what,
        )?;
        let get = |k: &str, d: f64| Y::from(p.get(k).and_then(num).unwrap_or(d));
        let m = mapping(vec![
            ("queueDepthThreshold", get("queue_depth_threshold", 5.0)),
            ("kvCacheUtilThreshold", get("kv_threshold", 0.8)),
            ("power", get("power", 5.0)),
            ("k", get("k", 300.0)),
        ]);
        doc.add("probabilistic-admitter", m);
    }
    Ok(())
}

/// `[flow_control]` → llm-d's flowControl gate and section. With the gate
/// on, llm-d's legacy admission controller is off: `[admission]` can only
/// be `always-admit` or admitters.
pub(super) fn flow_control(
    run: &RunFile,
    fc: &FlowControlSection,
    doc: &mut Doc,
) -> Result<(), String> {
    if !matches!(
        run.admission.policy.as_str(),
        "always-admit" | "probabilistic"
    ) {
        return Err(refuse(
            &format!("[admission] policy = \"{}\" with [flow_control]", run.admission.policy),
            "llm-d's flowControl gate turns its legacy admission controller off; use always-admit (or probabilistic admitters) with [flow_control]",
        ));
    }
    let no = |k: &str, why: &str| Err(refuse(&format!("[flow_control] {k}"), why));
    if fc.dispatch_tick_us != 1000 {
        return no("dispatch_tick_us", "llm-d's flow controller dispatches every 1 ms; set dispatch_tick_us = 1000 (or leave it out)");
    }
    if fc.shedding {
        return no(
            "shedding",
            "llm-d rejects the newcomer when the queue is full; remove shedding",
        );
    }
    if fc.max_depth == Some(0) {
        return no(
            "max_depth = 0",
            "llm-d reads maxRequests 0 as unlimited; remove max_depth for an unlimited queue",
        );
    }
    detector(fc, doc)?;
    let f = &mut doc.flow_control;
    match fc.request_ttl_us {
        Some(60_000_000) => {}
        Some(t) if t > 0 => {
            f.insert(key("defaultRequestTTL"), Y::String(format!("{t}us")));
        }
        _ => {
            f.insert(key("defaultRequestTTL"), key("0s"));
        }
    }
    if let Some(n) = fc.max_depth {
        f.insert(key("maxRequests"), Y::from(n));
    }
    bands(fc, doc)?;
    usage_limit(fc, doc)?;
    if fc.in_flight_eviction {
        doc.flow_control
            .insert(key("enableEviction"), Y::Bool(true));
    }
    doc.gate = true;
    Ok(())
}

/// The gateway's saturation detector as llm-d's.
fn detector(fc: &FlowControlSection, doc: &mut Doc) -> Result<(), String> {
    match fc.saturation_detector.as_str() {
        "utilization" => {
            let m = mapping(vec![
                ("queueDepthThreshold", Y::from(fc.queue_depth_threshold)),
                ("kvCacheUtilThreshold", Y::from(fc.kv_cache_util_threshold)),
            ]);
            doc.add("utilization-detector", m);
        }
        "concurrency" => {
            let mode = fc.concurrency_mode.as_deref().unwrap_or("requests");
            let tokens = fc.max_token_concurrency.unwrap_or(1e6);
            let m = concurrency_detector(
                mode,
                fc.max_concurrency,
                tokens,
                "[flow_control] concurrency_mode",
            )?;
            let r = doc.add("concurrency-detector", m);
            doc.flow_control.insert(
                key("saturationDetector"),
                Y::Mapping(mapping(vec![("pluginRef", key(&r))])),
            );
        }
        other => {
            return Err(refuse(
                &format!("[flow_control] saturation_detector = \"{other}\""),
                "llm-d's saturation detectors are utilization and concurrency",
            ))
        }
    }
    Ok(())
}

/// llm-d's band capacity for blis's (`None`: unlimited, which llm-d has
/// not: the largest quantity, which no run reaches).
fn capacity(c: Option<u64>) -> i64 {
    c.map_or(i64::MAX, |c| i64::try_from(c).unwrap_or(i64::MAX))
}

/// The bands: llm-d's default band takes the standard class's capacity
/// and fairness, and a `priorityBands` entry (at the class's priority)
/// each class that differs.
fn bands(fc: &FlowControlSection, doc: &mut Doc) -> Result<(), String> {
    if fc.fairness != "program-aware"
        && !fc.band_fairness.values().any(|f| f == "program-aware")
        && (fc.las_weight_service.is_some()
            || fc.las_weight_head_wait.is_some()
            || fc.las_half_life_s.is_some())
    {
        return Err(refuse(
            "[flow_control] las_*",
            "the program-aware settings have no effect without a program-aware band; remove them",
        ));
    }
    for k in fc.band_capacity.keys().chain(fc.band_fairness.keys()) {
        if SloClass::parse(k).is_none_or(|c| c.name() != k) {
            return Err(refuse(
                &format!("[flow_control] band_capacity / band_fairness key \"{k}\""),
                "bands are the SLO classes critical, standard, batch, sheddable, background",
            ));
        }
    }
    let band =
        |doc: &mut Doc, cap: i64, fair: &str, priority: Option<i32>| -> Result<Mapping, String> {
            let mut m = Mapping::new();
            if let Some(p) = priority {
                m.insert(key("priority"), Y::from(p));
            }
            if cap != 5000 || priority.is_some() {
                m.insert(key("maxRequests"), Y::from(cap));
            }
            if fair != "global-strict" || priority.is_some() {
                let r = fairness(fc, fair, doc)?;
                m.insert(key("fairnessPolicyRef"), key(&r));
            }
            Ok(m)
        };
    let std_cap = capacity(fc.per_band_capacity);
    let default = band(doc, std_cap, &fc.fairness, None)?;
    let mut entries = Vec::new();
    for class in SloClass::ALL {
        let cap = capacity(
            fc.band_capacity
                .get(class.name())
                .copied()
                .or(fc.per_band_capacity),
        );
        let fair = fc.band_fairness.get(class.name()).unwrap_or(&fc.fairness);
        if cap != std_cap || fair != &fc.fairness {
            entries.push(Y::Mapping(band(doc, cap, fair, Some(class.priority()))?));
        }
    }
    if !default.is_empty() {
        doc.flow_control
            .insert(key("defaultPriorityBand"), Y::Mapping(default));
    }
    if !entries.is_empty() {
        doc.flow_control
            .insert(key("priorityBands"), Y::Sequence(entries));
    }
    Ok(())
}

/// The fairness policy plugin for blis's `fair`.
fn fairness(fc: &FlowControlSection, fair: &str, doc: &mut Doc) -> Result<String, String> {
    Ok(match fair {
        "global-strict" => doc.add("global-strict-fairness-policy", Mapping::new()),
        "round-robin" => doc.add("round-robin-fairness-policy", Mapping::new()),
        "program-aware" => {
            let mut m = Mapping::new();
            for (k, v) in [
                ("lasWeightService", fc.las_weight_service),
                ("lasWeightHeadWait", fc.las_weight_head_wait),
                ("lasHalfLifeSeconds", fc.las_half_life_s),
            ] {
                if let Some(v) = v {
                    m.insert(key(k), Y::from(v));
                }
            }
            doc.add("program-aware-fairness", m)
        }
        other => {
            return Err(refuse(
                &format!("[flow_control] fairness \"{other}\""),
                "llm-d's fairness policies are global-strict, round-robin and program-aware",
            ))
        }
    })
}

/// The bands' ceilings as llm-d's usage-limit policy.
fn usage_limit(fc: &FlowControlSection, doc: &mut Doc) -> Result<(), String> {
    let t = fc.usage_limit_threshold;
    let top = fc.usage_limit_max.unwrap_or(1.0);
    let (ty, m): (&'static str, Mapping) = match fc.usage_limit.as_deref() {
        None | Some("linear") if t == 1.0 && top == 1.0 => return Ok(()),
        None | Some("linear") | Some("by-priority") => {
            if t >= top {
                return Err(refuse("[flow_control] usage_limit_threshold", "llm-d's priority-holdback-policy needs its lowest ceiling below its highest (usage_limit_max, default 1); for one ceiling for every band use usage_limit = \"static\""));
            }
            let mut m = mapping(vec![("minCeiling", Y::from(t))]);
            if top != 1.0 {
                m.insert(key("maxCeiling"), Y::from(top));
            }
            if fc.usage_limit.as_deref() == Some("by-priority") {
                m.insert(key("domain"), key("value"));
            }
            ("priority-holdback-policy", m)
        }
        Some("static") => ("static-usage-limit-policy", mapping(vec![("threshold", Y::from(t))])),
        Some("soft-reflective") => {
            if t != 1.0 {
                return Err(refuse("[flow_control] usage_limit_threshold with usage_limit = \"soft-reflective\"", "llm-d's soft-reflective-ceiling-policy has no parameters; remove usage_limit_threshold"));
            }
            ("soft-reflective-ceiling-policy", Mapping::new())
        }
        Some(other) => {
            return Err(refuse(
                &format!("[flow_control] usage_limit = \"{other}\""),
                "llm-d's usage limits are static, priority-holdback (linear, by-priority) and soft-reflective",
            ))
        }
    };
    let r = doc.add(ty, m);
    doc.flow_control
        .insert(key("usageLimitPolicyPluginRef"), key(&r));
    Ok(())
}

/// `[routing.freshness]` → the metrics source's scrape interval (µs), or
/// the default 50 ms with a note when blis reads live.
pub(super) fn freshness(f: Option<&FreshnessSection>, doc: &mut Doc) -> Result<i64, String> {
    let vals = f.map(|f| {
        [
            f.queue_depth_us,
            f.batch_size_us,
            f.kv_utilization_us,
            f.resident_adapters_us,
        ]
    });
    match vals {
        Some([Some(a), Some(b), Some(c), Some(d)])
            if a == b && b == c && c == d && a >= 50_000 && a % 50_000 == 0 =>
        {
            Ok(a)
        }
        Some(v) if v.iter().any(Option::is_some) => Err(refuse(
            "[routing.freshness]",
            "llm-d scrapes every metric at one interval, a multiple of 50 ms: give queue_depth_us = batch_size_us = kv_utilization_us = resident_adapters_us = 50000 (or 100000, …)",
        )),
        _ => {
            doc.notes.push("[routing.freshness]: the run reads instance state live; llm-d scrapes model-server metrics every 50 ms, so the written file runs with 50 ms old queue and KV figures (add [routing.freshness] with every interval 50000 to the run file to compare like with like)".into());
            Ok(50_000)
        }
    }
}
