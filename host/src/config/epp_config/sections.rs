//! The sections around the profiles: admission (llm-d's fixed legacy
//! controller and its admitters) → `[admission]`, `flowControl` → blis's
//! gateway `[flow_control]`, the data layer → `[routing.freshness]`, and
//! the plugins outside every profile (producers, parsers, sources), each
//! stated with its effect.

use toml::Value as T;

use super::catalogue::kind;
use super::loader::{param_num as num, param_str, Loaded, Plugin};
use super::routing::concurrency_mode;
use super::schema;
use super::Out;
use crate::request::SloClass;

/// `utilization-detector` thresholds (validated as llm-d does).
fn utilization(p: &Plugin) -> Result<(f64, f64), String> {
    let qd = num(&p.params, "queueDepthThreshold").unwrap_or(5.0);
    let kv = num(&p.params, "kvCacheUtilThreshold").unwrap_or(0.8);
    if qd <= 0.0 {
        return Err(format!("failed to create plugin '{}' (type: utilization-detector): queueDepthThreshold must be > 0", p.name));
    }
    if !(kv > 0.0 && kv <= 1.0) {
        return Err(format!("failed to create plugin '{}' (type: utilization-detector): kvCacheUtilThreshold must be in (0, 1]", p.name));
    }
    Ok((qd, kv))
}

/// `[admission]`: llm-d's admission controller (legacy when the gate is
/// off) and then its admitters, each a blis admission policy asked in turn
/// (`policy`, then `[[admission.then]]`).
pub fn admission(l: &Loaded, out: &mut Out) -> Result<toml::Table, String> {
    let mut steps: Vec<(String, toml::Table)> = Vec::new();
    if !l.flow_control_gate {
        steps.extend(legacy(l, out)?);
    }
    for a in l.plugins.iter().filter(|p| p.info.is(kind::ADMITTER)) {
        steps.push(match a.info.ty {
            "probabilistic-admitter" => probabilistic(a, out),
            _ => super::predicted::admitter(l, a, out)?,
        });
    }
    if steps.len() > 1 {
        out.note(format!(
            "admission: blis asks {} in turn (llm-d's order: the legacy controller, then the admitters); a request is admitted when every one admits it",
            steps.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>().join(", then ")
        ));
    }
    let mut steps = steps.into_iter().map(|(policy, params)| {
        let mut t = toml::Table::new();
        t.insert("policy".into(), T::String(policy));
        if !params.is_empty() {
            t.insert("params".into(), T::Table(params));
        }
        t
    });
    let Some(mut t) = steps.next() else {
        let mut t = toml::Table::new();
        t.insert("policy".into(), T::String("always-admit".into()));
        return Ok(t);
    };
    let then: Vec<T> = steps.map(T::Table).collect();
    if !then.is_empty() {
        t.insert("then".into(), T::Array(then));
    }
    Ok(t)
}

/// llm-d's legacy admission controller (gate off) over the saturation
/// detector, or none when it can never reject.
fn legacy(l: &Loaded, out: &mut Out) -> Result<Option<(String, toml::Table)>, String> {
    let det = &l.plugins[l.detector];
    let mut p = toml::Table::new();
    if det.info.ty == "utilization-detector" {
        let (qd, kv) = utilization(det)?;
        out.note(format!(
            "admission: llm-d's legacy admission controller (gate flowControl off) over '{}': blis's gaie-legacy, rejecting sheddable requests (priority < 0: batch, sheddable, background) while the mean of max(queue/{qd}, kv/{kv}) is ≥ 1",
            det.name
        ));
        p.insert("queue_depth_threshold".into(), T::Float(qd));
        p.insert("kv_threshold".into(), T::Float(kv));
        return Ok(Some(("gaie-legacy".into(), p)));
    }
    let (mode, max, tokens) = concurrency(det)?;
    let mode = match mode {
        "tokens" | "hybrid" if !l.sees_prompt() => {
            if mode == "tokens" {
                out.note(format!("admission: llm-d's legacy admission controller over '{}' (concurrency-detector, tokens): llm-d's only parser is passthrough-parser, so the router counts no tokens and the controller never rejects", det.name));
                return Ok(None);
            }
            out.note(format!("admission: '{}' (concurrency-detector, hybrid): llm-d's only parser is passthrough-parser, so the router counts no tokens and the requests in flight alone decide", det.name));
            "requests"
        }
        m => m,
    };
    out.note(format!(
        "admission: llm-d's legacy admission controller (gate flowControl off) over '{}' (concurrency-detector, {mode}): blis's concurrency-shed, rejecting sheddable requests (priority < 0: batch, sheddable, background) while the router's in-flight {} is ≥ 1{}",
        det.name,
        match mode {
            "requests" => format!("requests over {max} per instance"),
            "tokens" => format!("tokens over {tokens} per instance"),
            _ => format!("load, the mean over instances of max(requests/{max}, tokens/{tokens}),"),
        },
        if mode == "requests" { "" } else { " (tokens: uncached prompt tokens until the first token, uncached as the router-side prefix index in blocks of the run's KV block size says)" }
    ));
    p.insert("mode".into(), T::String(mode.into()));
    p.insert("max_concurrency".into(), T::Float(max));
    if mode != "requests" {
        p.insert("max_token_concurrency".into(), T::Float(tokens));
    }
    Ok(Some(("concurrency-shed".into(), p)))
}

/// A `concurrency-detector`'s mode, maxConcurrency and maxTokenConcurrency
/// (validated as llm-d does).
fn concurrency(det: &Plugin) -> Result<(&str, f64, f64), String> {
    let mode = concurrency_mode(det)?;
    let max = num(&det.params, "maxConcurrency").unwrap_or(100.0);
    let tokens = num(&det.params, "maxTokenConcurrency").unwrap_or(1e6);
    if mode != "requests" && !(tokens.is_finite() && tokens > 0.0) {
        return Err(format!("failed to create plugin '{}' (type: concurrency-detector): maxTokenConcurrency must be > 0", det.name));
    }
    Ok((mode, max, tokens))
}

/// `probabilistic-admitter` → blis's `probabilistic`.
fn probabilistic(a: &Plugin, out: &mut Out) -> (String, toml::Table) {
    let qd = num(&a.params, "queueDepthThreshold").unwrap_or(5.0);
    let kv = num(&a.params, "kvCacheUtilThreshold").unwrap_or(0.8);
    let power = num(&a.params, "power").unwrap_or(5.0);
    let k = num(&a.params, "k").unwrap_or(300.0);
    out.note(format!(
        "plugin '{}' (probabilistic-admitter): blis's probabilistic admission, rejecting a sheddable request with probability min(sat^{power}·{k}, 1), sat the mean of max(queue/{qd}, kv/{kv})",
        a.name
    ));
    let mut p = toml::Table::new();
    p.insert("queue_depth_threshold".into(), T::Float(qd));
    p.insert("kv_threshold".into(), T::Float(kv));
    p.insert("power".into(), T::Float(power));
    p.insert("k".into(), T::Float(k));
    ("probabilistic".into(), p)
}

/// The saturation detector as `[flow_control]` keys.
fn detector_keys(l: &Loaded, fc: &mut toml::Table, out: &mut Out) -> Result<(), String> {
    let det = &l.plugins[l.detector];
    match det.info.ty {
        "utilization-detector" => {
            let (qd, kv) = utilization(det)?;
            fc.insert(
                "saturation_detector".into(),
                T::String("utilization".into()),
            );
            fc.insert("queue_depth_threshold".into(), T::Float(qd));
            fc.insert("kv_cache_util_threshold".into(), T::Float(kv));
        }
        _ => {
            let (mode, max, tokens) = concurrency(det)?;
            fc.insert(
                "saturation_detector".into(),
                T::String("concurrency".into()),
            );
            fc.insert("max_concurrency".into(), T::Float(max));
            match mode {
                "requests" => {}
                "tokens" | "hybrid" if !l.sees_prompt() => {
                    out.note(format!("plugin '{}' (concurrency-detector, {mode}): llm-d's only parser is passthrough-parser, so the router counts no tokens: {}", det.name, if mode == "tokens" { "the gateway is never saturated (saturation_detector = \"never\")" } else { "the requests in flight alone decide (concurrency_mode = \"requests\")" }));
                    if mode == "tokens" {
                        fc.insert("saturation_detector".into(), T::String("never".into()));
                        fc.remove("max_concurrency");
                    }
                }
                _ => {
                    fc.insert("concurrency_mode".into(), T::String(mode.into()));
                    fc.insert("max_token_concurrency".into(), T::Float(tokens));
                    out.note(format!(
                        "plugin '{}' (concurrency-detector, {mode}): the gateway's saturation counts the router's in-flight tokens per instance (uncached prompt tokens until the first token, over maxTokenConcurrency {tokens}{}); blis deducts the prompt blocks the chosen instance's KV cache holds at routing, where llm-d asks its approximate prefix index",
                        det.name,
                        if mode == "hybrid" { format!("; per instance the larger of that and requests over {max}") } else { String::new() }
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `flowControl` (gate on) → `[flow_control]`.
pub fn flow_control(l: &Loaded, out: &mut Out) -> Result<Option<toml::Table>, String> {
    if !l.flow_control_gate {
        return Ok(None);
    }
    let f = &l.flow_control;
    let mut fc = toml::Table::new();
    detector_keys(l, &mut fc, out)?;
    fc.insert("dispatch_tick_us".into(), T::Integer(1000));
    // TTL: 60 s by default, "0s" = none.
    let ttl = match &f.default_request_ttl {
        Some(d) => schema::duration_us(d, "flowControl.defaultRequestTTL")?,
        None => 60_000_000,
    };
    if ttl > 0 {
        fc.insert("request_ttl_us".into(), T::Integer(ttl));
    }
    if f.no_endpoint_request_ttl.is_some() {
        out.note("flowControl.noEndpointRequestTTL: no simulated effect: a blis pool is never empty of endpoints".into());
    }
    if let Some(v) = &f.max_requests {
        let n = schema::quantity(v, "flowControl.maxRequests")?;
        if n > 0 {
            fc.insert("max_depth".into(), T::Integer(n));
        }
    }
    if f.max_bytes.is_some() {
        out.note(
            "flowControl.maxBytes: no simulated effect: blis requests have no body size".into(),
        );
    }
    bands(l, ttl, &mut fc, out)?;
    // Usage limit.
    let ul = policy_type(
        l,
        f.usage_limit_policy_plugin_ref.as_deref(),
        "static-usage-limit-policy",
    );
    let ul_plugin = f
        .usage_limit_policy_plugin_ref
        .as_deref()
        .and_then(|n| l.plugin(n))
        .map(|i| &l.plugins[i]);
    match ul {
        "static-usage-limit-policy" => {
            let t = ul_plugin
                .and_then(|p| num(&p.params, "threshold"))
                .unwrap_or(1.0);
            if !(t > 0.0 && t <= 1.0) {
                return Err("static-usage-limit-policy: threshold must be in (0, 1]".into());
            }
            if t != 1.0 {
                fc.insert("usage_limit".into(), T::String("static".into()));
                fc.insert("usage_limit_threshold".into(), T::Float(t));
                out.note(format!("static-usage-limit-policy threshold {t}: usage_limit = \"static\": every band (critical included) dispatches only while the saturation is below {t}"));
            }
        }
        "priority-holdback-policy" => {
            let p = ul_plugin.expect("a named usage-limit policy");
            let min = num(&p.params, "minCeiling").ok_or_else(|| format!("failed to create plugin '{}' (type: priority-holdback-policy): minCeiling is required", p.name))?;
            let max = num(&p.params, "maxCeiling").unwrap_or(1.0);
            let shape = param_str(&p.params, "shape").unwrap_or("linear");
            let domain = param_str(&p.params, "domain").unwrap_or("rank");
            if !((0.0..1.0).contains(&min) && max > 0.0 && max <= 1.0) || min >= max {
                return Err(format!("failed to create plugin '{}' (type: priority-holdback-policy): need 0 ≤ minCeiling < maxCeiling ≤ 1", p.name));
            }
            if shape != "linear" {
                return Err(format!("failed to create plugin '{}' (type: priority-holdback-policy): shape '{shape}' is not one of linear", p.name));
            }
            let by = match domain {
                "rank" => "linear",
                "value" => "by-priority",
                other => return Err(format!("failed to create plugin '{}' (type: priority-holdback-policy): domain '{other}' is not one of rank, value", p.name)),
            };
            if by != "linear" {
                fc.insert("usage_limit".into(), T::String(by.into()));
            }
            fc.insert("usage_limit_threshold".into(), T::Float(min));
            if max != 1.0 {
                fc.insert("usage_limit_max".into(), T::Float(max));
            }
            let how = if by == "linear" {
                "by band rank"
            } else {
                "by band priority (blis's SLO-class priorities 4, 3, −1, −2, −3)"
            };
            out.note(format!("plugin '{}' (priority-holdback-policy): blis's band ceilings, linear {how} from {max} down to {min} over its five SLO-class bands (usage_limit_max, usage_limit_threshold)", p.name));
        }
        "soft-reflective-ceiling-policy" => {
            fc.insert("usage_limit".into(), T::String("soft-reflective".into()));
            out.note("soft-reflective-ceiling-policy: blis's soft-reflective band ceilings over its five SLO-class bands".into());
        }
        other => {
            return Err(format!(
                "flowControl.usageLimitPolicyPluginRef: {other} is not simulated yet"
            ))
        }
    }
    if f.enable_eviction == Some(true) {
        fc.insert("in_flight_eviction".into(), T::Boolean(true));
    }
    out.note("flowControl (gate on): blis's gateway queue, dispatching at most one request per 1 ms cycle while the saturation is below the band's ceiling".into());
    Ok(Some(fc))
}

/// The llm-d band the requests of priority `p` land in: the
/// `priorityBands` entry of that priority, else the band templated from
/// `defaultNegativePriorityBand` (p < 0, when set) or
/// `defaultPriorityBand`; `None`: the built-in defaults.
fn band_of(f: &schema::FlowControl, p: i64) -> Option<&schema::Band> {
    f.priority_bands
        .iter()
        .find(|b| b.priority.unwrap_or(0) == p)
        .or(if p < 0 {
            f.default_negative_priority_band
                .as_ref()
                .or(f.default_priority_band.as_ref())
        } else {
            f.default_priority_band.as_ref()
        })
}

/// The bands (llm-d's integer priorities) as blis's: one band per SLO
/// class, with the capacity and fairness of the llm-d band its priority
/// lands in (`per_band_capacity` / `fairness` for the standard class's,
/// `band_capacity` / `band_fairness` for each class that differs).
fn bands(l: &Loaded, ttl: i64, fc: &mut toml::Table, out: &mut Out) -> Result<(), String> {
    let f = &l.flow_control;
    let mut orders = std::collections::BTreeSet::new();
    let declared = f
        .priority_bands
        .iter()
        .chain(f.default_priority_band.iter())
        .chain(f.default_negative_priority_band.iter());
    for b in declared {
        orders.insert(policy_type(
            l,
            b.ordering_policy_ref.as_deref(),
            "fcfs-ordering-policy",
        ));
        if b.max_bytes.is_some() {
            out.note(
                "flowControl band maxBytes: no simulated effect: blis requests have no body size"
                    .into(),
            );
        }
    }
    ordering_note(&orders, ttl, out)?;
    // Each class's (capacity, fairness policy plugin or type).
    let mut per_class = Vec::new();
    for class in SloClass::ALL {
        let band = band_of(f, i64::from(class.priority()));
        let cap = match band.and_then(|b| b.max_requests.as_ref()) {
            Some(v) => schema::quantity(v, "flowControl band maxRequests")?,
            None => 0,
        };
        let cap = if cap == 0 { 5000 } else { cap };
        let fair_ref = band.and_then(|b| b.fairness_policy_ref.as_deref());
        let fair = policy_type(l, fair_ref, "global-strict-fairness-policy");
        per_class.push((class.name(), cap, fair, fair_ref));
    }
    let (_, cap, fair, _) = per_class[SloClass::Standard as usize];
    fc.insert("per_band_capacity".into(), T::Integer(cap));
    fc.insert("fairness".into(), T::String(blis_fairness(fair)?.into()));
    let mut caps = toml::Table::new();
    let mut fairs = toml::Table::new();
    for &(class, c, f2, _) in &per_class {
        if c != cap {
            caps.insert(class.into(), T::Integer(c));
        }
        if f2 != fair {
            fairs.insert(class.into(), T::String(blis_fairness(f2)?.into()));
        }
    }
    if !caps.is_empty() || !fairs.is_empty() {
        out.note(format!(
            "flowControl bands: each blis SLO class takes the llm-d band of its priority (a priorityBands entry, else the default band it is templated from): {}",
            per_class
                .iter()
                .map(|(class, c, f2, _)| format!("{class}: capacity {c}, {}", blis_fairness(f2).unwrap_or("?")))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    if !caps.is_empty() {
        fc.insert("band_capacity".into(), T::Table(caps));
    }
    if !fairs.is_empty() {
        fc.insert("band_fairness".into(), T::Table(fairs));
    }
    program_aware(l, &per_class, fc, out)?;
    if !f.priority_bands.is_empty() {
        out.note(format!(
            "flowControl.priorityBands (priorities {}): blis's gateway has one band per SLO class of the workload (critical 4, standard 3, batch −1, sheddable −2, background −3), so requests are banded by their class's priority",
            f.priority_bands.iter().map(|b| b.priority.unwrap_or(0).to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(())
}

/// blis's name of an llm-d fairness policy type.
fn blis_fairness(ty: &str) -> Result<&'static str, String> {
    Ok(match ty {
        "global-strict-fairness-policy" => "global-strict",
        "round-robin-fairness-policy" => "round-robin",
        "program-aware-fairness" => "program-aware",
        other => {
            return Err(format!(
                "flowControl: {other} is not an llm-d fairness policy"
            ))
        }
    })
}

/// The `program-aware-fairness` plugin the classes' bands use → blis's
/// `las_*` keys (one set: blis's gateway has one).
fn program_aware(
    l: &Loaded,
    per_class: &[(&str, i64, &str, Option<&str>)],
    fc: &mut toml::Table,
    out: &mut Out,
) -> Result<(), String> {
    let mut plugins: Vec<&Plugin> = per_class
        .iter()
        .filter(|c| c.2 == "program-aware-fairness")
        .filter_map(|c| c.3.and_then(|r| l.plugin(r)).map(|i| &l.plugins[i]))
        .collect();
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    plugins.dedup_by(|a, b| a.name == b.name);
    let Some(p) = plugins.first() else {
        return Ok(());
    };
    if let Some(q) = plugins.iter().find(|q| q.params != p.params) {
        return Err(format!(
            "flowControl: bands use program-aware-fairness plugins '{}' and '{}' with different parameters; blis's gateway has one set of program-aware settings, so give the bands one plugin",
            p.name, q.name
        ));
    }
    for (k, key) in [
        ("lasWeightService", "las_weight_service"),
        ("lasWeightHeadWait", "las_weight_head_wait"),
        ("lasHalfLifeSeconds", "las_half_life_s"),
    ] {
        if let Some(v) = num(&p.params, k) {
            fc.insert(key.into(), T::Float(v));
        }
    }
    out.note(format!("plugin '{}' (program-aware-fairness): blis's program-aware fairness: per tenant (llm-d's fairness ID), attained service = input + 2 × output tokens of completed requests, halved every lasHalfLifeSeconds; evictionTtlSeconds/evictionSweepSeconds (idle-flow clean-up) have no simulated effect", p.name));
    Ok(())
}

/// The bands' ordering policies, as blis simulates them: within a flow
/// blis's gateway serves first come, first served, and each of llm-d's
/// orderings reduces to that here. `edf` orders by enqueue time + TTL, and
/// every request has the same TTL (`defaultRequestTTL`, or none, which
/// llm-d puts last, ties first come first served). `slo-deadline` orders
/// by receipt + the request's TTFT SLO (`x-llm-d-slo-ttft-ms`); a blis
/// flow lives in one band, a band is one SLO class and a class has one
/// TTFT target (`[slo]`), so every request of a flow has the same offset
/// (or none: last, ties first come first served).
fn ordering_note(
    orders: &std::collections::BTreeSet<&str>,
    ttl_us: i64,
    out: &mut Out,
) -> Result<(), String> {
    for &order in orders {
        match order {
            "fcfs-ordering-policy" => {}
            "edf-ordering-policy" => out.note(format!(
                "edf-ordering-policy: first come, first served within each flow, exactly: the deadline is enqueue time + the TTL, and every request has the same TTL ({})",
                if ttl_us > 0 { format!("{} s", ttl_us as f64 / 1e6) } else { "none: all last, ties first come first served".into() }
            )),
            "slo-deadline-ordering-policy" => out.note("slo-deadline-ordering-policy: first come, first served within each flow, exactly: the deadline is receipt + the request's TTFT SLO (x-llm-d-slo-ttft-ms, blis's [slo] target of its class), and a flow holds requests of one class, so one offset (or none)".into()),
            other => {
                return Err(format!(
                    "flowControl: ordering policy {other} is not an llm-d ordering policy"
                ))
            }
        }
    }
    Ok(())
}

/// The type of the flow-control policy `r` names (default `dflt`).
fn policy_type<'a>(l: &'a Loaded, r: Option<&str>, dflt: &'a str) -> &'a str {
    match r.and_then(|n| l.plugin(n)) {
        Some(i) => l.plugins[i].info.ty,
        None => dflt,
    }
}

/// The data layer's scrape interval → `[routing.freshness]` (µs).
pub fn scrape_interval_us(
    l: &Loaded,
    refresh_flag: Option<&str>,
    out: &mut Out,
) -> Result<i64, String> {
    let base = match refresh_flag {
        Some(s) => schema::duration_us(s, "router.epp.flags.refresh-metrics-interval")?.max(50_000),
        None => 50_000,
    };
    // A metrics source's own `interval` runs every max(1, round(I/base)) ticks.
    let mut interval = base;
    if let Some(src) = l
        .plugins
        .iter()
        .find(|p| p.info.ty == "metrics-data-source")
    {
        if let Some(s) = param_str(&src.params, "interval") {
            let i = schema::duration_us(s, &format!("plugin '{}' interval", src.name))?;
            let ticks = ((i as f64 / base as f64).round() as i64).max(1);
            interval = ticks * base.min(i.max(50_000));
        }
    }
    let opt_out = l
        .data_layer
        .as_ref()
        .is_some_and(|d| d.inject_defaults == Some(false))
        && !l
            .plugins
            .iter()
            .any(|p| matches!(p.info.ty, "metrics-data-source" | "mock-metrics-source"));
    if let Some(i) = l
        .data_layer
        .as_ref()
        .and_then(|d| d.cross_replica_sync_interval.as_deref())
    {
        out.note(format!("dataLayer.crossReplicaSyncInterval {i}: no simulated effect: blis runs one EPP replica"));
    }
    if opt_out {
        out.note("dataLayer.injectDefaults false without a metrics-data-source: llm-d scrapes no model-server metrics, so its queue and KV scores see zeros; blis keeps the 50 ms scrape (it has no metric-less mode)".into());
    }
    out.note(format!(
        "dataLayer: model-server metrics scraped every {} ms: blis's [routing.freshness] queue_depth_us = batch_size_us = kv_utilization_us = resident_adapters_us = {interval}",
        interval / 1000
    ));
    Ok(interval)
}

/// Notes for every plugin no profile slot or section reads.
pub fn other_plugins(l: &Loaded, out: &mut Out) -> Result<(), String> {
    // Plugins a profile uses (one pass: linear in the config's size).
    let mut used = std::collections::HashSet::new();
    for pr in &l.profiles {
        used.extend(pr.filters.iter().copied());
        used.extend(pr.scorers.iter().map(|s| s.0));
        used.insert(pr.picker);
    }
    for (i, p) in l.plugins.iter().enumerate() {
        if p.auto {
            continue;
        }
        let note = match p.info.ty {
            "approx-prefix-cache-producer" => "its index feeds prefix-cache-scorer (blis's prefix-affinity keeps its own)",
            "precise-prefix-cache-producer" => "its KV-event index is blis's live prefix-cache query of each instance's KV cache (KV events arrive as the engine emits them: routing.cache_signal_delay_us = 0)",
            "burst-prefix-cache-producer" => "no simulated effect: its co-location window (its scorer is blis's prefix index)",
            "token-producer" | "tokenizer" => "no simulated effect: blis requests carry their true token counts",
            "predicted-latency-producer" => "each policy that reads its predictions (blis's latency, slo-headroom-tier, prefix-cache-affinity, latency-slo) trains its own predictor with its parameters, on the same requests",
            "inflight-load-producer" => "its request counts are blis's exact in-flight counts; its token counts (and output estimate) are token-load's",
            "mm-embeddings-cache-producer" => "no simulated effect: blis workloads have no multimodal items",
            "session-id-producer" => "no simulated effect on its own: blis requests carry their workload session (read by session-affinity)",
            "metrics-data-source" | "core-metrics-extractor" => "the model-server metrics: the scrape interval of [routing.freshness]",
            "mock-metrics-source" => "llm-d's test source of fixed metrics; in a simulator every metrics source is the simulated instances, so blis scrapes them (every 50 ms, or the metrics-data-source's interval)",
            "models-data-source" | "models-data-extractor" => "no simulated effect: no plugin reads the model list",
            "endpoint-notification-source" | "k8s-notification-source" => "no simulated effect: blis's endpoints are the run file's instances",
            "dcgm-data-source" | "dcgm-extractor" => "no simulated effect: blis simulates no DCGM GPU metrics",
            "topology-extractor" => "no simulated effect: blis instances have no topology labels",
            "file-discovery" => "no simulated effect: blis's endpoints are the run file's instances (and no InferenceObjectives: priorities come from the workload's SLO classes)",
            "disagg-headers-handler" | "prefill-header-handler" => "no simulated effect: it writes routing headers (the disagg handler does so itself)",
            "request-attribute-reporter" | "destination-endpoint-served-verifier" => "no simulated effect: response metadata only",
            "agent-identity" => "no simulated effect: blis requests carry no agent headers (the fairness ID is the workload's tenant)",
            "disaggregatedset-rollout-screener" => "no simulated effect: blis instances have no DisaggregatedSet revision",
            "p2p-source-producer" => "no simulated effect: it only writes a header naming a better-cached peer; routing is unchanged",
            "sheddable-eviction-filter" | "priority-then-time-eviction-order-policy" => "built into the gateway's in-flight eviction (flowControl.enableEviction)",
            "single-profile-handler" | "data-parallel-profile-handler" | "header-profile-handler" | "disagg-profile-handler" | "pd-profile-handler" => continue,
            _ if p.info.is(kind::PARSER) => "no simulated effect: parsers move request bytes (blis requests are already parsed)",
            _ if p.info.is(kind::DECIDER | kind::ADMITTER | kind::FAIRNESS | kind::ORDERING | kind::USAGE_LIMIT | kind::DETECTOR) => continue,
            _ if p.info.is(kind::FILTER | kind::SCORER | kind::PICKER) => {
                if !used.contains(&i) {
                    "no simulated effect: no scheduling profile uses it"
                } else {
                    continue;
                }
            }
            _ => "no simulated effect",
        };
        out.note(format!("plugin '{}' ({}): {note}", p.name, p.info.ty));
    }
    if !l.sees_prompt() {
        out.note("requestHandler.parsers is passthrough-parser alone: the router sees no prompt, so every plugin that reads one sees none (prefix scores 0, no token counts, no multimodal content; stated per plugin); the instances still serve the whole request".into());
    }
    Ok(())
}
