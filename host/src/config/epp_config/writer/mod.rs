//! blis's routing, admission, flow control and P/D stages → an llm-d
//! `EndpointPickerConfig` (`blis convert to-epp-config`, and `blis tune`'s
//! tuned llm-d file): the inverse of [`super::plan`] for what llm-d can
//! express.
//!
//! The rule is exactness: every part written is one that [`super::plan`]
//! maps back to the same blis section, so `blis run RUN --epp-config
//! WRITTEN` runs what `blis run RUN` runs. What llm-d cannot express is
//! refused by name (a routing policy that is not a scheduling profile, a
//! scorer without an llm-d type, a plugin decider, an encode stage); what
//! it expresses only approximately is written with a note saying so (a run
//! that reads instance state live: llm-d scrapes every 50 ms at best).
//!
//! Covered: `[routing]` `weighted` (tie break `random`, llm-d's
//! max-score-picker) or `pipeline` with one profile (picker `max-score`
//! with random ties, or `random`; filters `utilization`, `unsaturated`,
//! `session-affinity`), over the scorers `waiting-queue`, `kv-utilization`,
//! `running-requests`, `load-aware`, `active-requests`, `prefix-affinity`
//! (its index size as `approx-prefix-cache-producer`'s
//! `lruCapacityPerServer`, its match-length term), `precise-prefix-cache`
//! (normalise `total`, over a `precise-prefix-cache-producer`),
//! `no-hit-lru`, `lora-affinity` (graded), `session-affinity`;
//! `[pd]` (deciders `always`, `prefix-threshold`, `multimodal`) as the
//! disagg profile handler over a prefill and a decode profile;
//! `[routing.freshness]` as the metrics source's scrape interval; and, in
//! [`sections`], `[admission]` (`gaie-legacy`, `concurrency-shed`, then
//! `probabilistic` admitters) and `[flow_control]` (the flowControl gate).

mod sections;

use serde_yaml_ng::{Mapping, Value as Y};
use toml::Value as T;

use crate::config::{PdSection, RoutingSection, RunFile};

/// The written file and what the caller should know about it.
pub struct Written {
    pub yaml: String,
    pub notes: Vec<String>,
}

/// One llm-d plugin instance of the file.
struct Plugin {
    ty: &'static str,
    name: Option<String>,
    params: Mapping,
}

impl Plugin {
    fn reference(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.ty.to_string())
    }
}

/// A profile's plugin references: (pluginRef, weight).
type Refs = Vec<(String, Option<f64>)>;

/// The file, built up in order.
#[derive(Default)]
struct Doc {
    plugins: Vec<Plugin>,
    /// The finished scheduling profiles.
    profiles: Vec<(String, Refs)>,
    /// The profile being built.
    current: Refs,
    /// `flowControl` (with the feature gate when `gate`).
    flow_control: Mapping,
    gate: bool,
    notes: Vec<String>,
}

impl Doc {
    /// The plugin of type `ty` with these parameters: an identical one
    /// already in the file (and not in the profile being built) is shared,
    /// else a new one is added (a second instance of a type gets a
    /// numbered name). Returns its reference name.
    fn add(&mut self, ty: &'static str, params: Mapping) -> String {
        if let Some(p) = self.plugins.iter().find(|p| {
            p.ty == ty && p.params == params && !self.current.iter().any(|r| r.0 == p.reference())
        }) {
            return p.reference();
        }
        let same = self.plugins.iter().filter(|p| p.ty == ty).count();
        let name = (same > 0).then(|| format!("{ty}-{}", same + 1));
        let plugin = Plugin { ty, name, params };
        let r = plugin.reference();
        self.plugins.push(plugin);
        r
    }

    /// Add a plugin to the profile being built.
    fn slot(&mut self, ty: &'static str, params: Mapping, weight: Option<f64>) {
        let r = self.add(ty, params);
        self.current.push((r, weight));
    }

    fn finish_profile(&mut self, name: &str) {
        let refs = std::mem::take(&mut self.current);
        self.profiles.push((name.to_string(), refs));
    }
}

fn key(s: &str) -> Y {
    Y::String(s.to_string())
}

fn mapping(pairs: Vec<(&str, Y)>) -> Mapping {
    pairs.into_iter().map(|(k, v)| (key(k), v)).collect()
}

fn refuse(what: &str, why: &str) -> String {
    format!("{what}: llm-d cannot express this: {why}")
}

/// `run`'s routing, admission, flow control and P/D stages as an llm-d
/// EndpointPickerConfig.
pub fn to_epp_config(run: &RunFile) -> Result<Written, String> {
    if run.routing.epp_config.is_some() {
        return Err("routing.epp_config: the run file already reads an llm-d file; convert the run file without it, or use that file".into());
    }
    let mut doc = Doc::default();
    let block_size = i64::from(run.instance.block_size);
    // The saturation detector first: llm-d's admission and flow control
    // read the plugin named `utilization-detector` unless told otherwise.
    match &run.flow_control {
        Some(fc) => sections::flow_control(run, fc, &mut doc)?,
        None => sections::admission(run, block_size, &mut doc)?,
    }
    sections::admitters(run, &mut doc)?;
    check_delays(&run.routing, "[routing]")?;
    let staged = |pd: &&PdSection| {
        pd.decider != "never" || pd.decode_routing.is_some() || pd.prefill_routing.is_some()
    };
    match run.pd.as_ref().filter(staged) {
        Some(pd) => stages(run, pd, block_size, &mut doc)?,
        None => {
            let name = profile(&run.routing, "routing", block_size, &mut doc)?;
            doc.finish_profile(name.as_deref().unwrap_or("default"));
        }
    }
    let interval = sections::freshness(run.routing.freshness.as_ref(), &mut doc)?;
    Ok(Written {
        yaml: render(&doc, interval)?,
        notes: doc.notes,
    })
}

/// A routing section's delays: llm-d has none.
fn check_delays(r: &RoutingSection, label: &str) -> Result<(), String> {
    if r.latency_us != 0 || r.cache_signal_delay_us != 0 || r.snapshot_refresh_interval_us != 0 {
        return Err(refuse(
            &format!("{label} latency_us / cache_signal_delay_us / snapshot_refresh_interval_us"),
            "llm-d has no such delay; set them to 0 (or leave them out)",
        ));
    }
    Ok(())
}

/// `[pd]` → llm-d's disagg profile handler over a `prefill` and a `decode`
/// profile (each with its role filter, as llm-d's own P/D files have it)
/// and the prefill decider.
fn stages(run: &RunFile, pd: &PdSection, block_size: i64, doc: &mut Doc) -> Result<(), String> {
    if pd.encode_decider.as_deref().is_some_and(|d| d != "never") || pd.encode_routing.is_some() {
        return Err(refuse(
            "[pd] encode_decider / encode_routing",
            "the encode stage is not written yet; remove it to convert the prefill/decode stages",
        ));
    }
    if !pd.decider_params.is_empty() {
        return Err(refuse(
            "[pd] decider_params",
            "llm-d's deciders are its own plugins (always, prefix-threshold, multimodal)",
        ));
    }
    let decider = match pd.decider.as_str() {
        // Stage routings without a decider: llm-d runs no prefill stage.
        "never" => None,
        "always" => Some(doc.add("always-disagg-pd-decider", Mapping::new())),
        "multimodal" => Some(doc.add("always-disagg-multimodal-decider", Mapping::new())),
        "prefix-threshold" => {
            // blis disaggregates when more than `t` tokens are uncached,
            // llm-d when at least nonCachedTokens are.
            let n = pd.prefix_threshold.unwrap_or(16) + 1;
            let mut m = mapping(vec![("nonCachedTokens", Y::from(n))]);
            // A floor at or below n is implied by n uncached tokens.
            if let Some(pt) = pd.prefix_min_prompt_tokens.filter(|&pt| pt > n) {
                m.insert(key("promptTokens"), Y::from(pt));
            }
            Some(doc.add("prefix-based-pd-decider", m))
        }
        other => {
            return Err(refuse(
                &format!("[pd] decider = \"{other}\""),
                "llm-d's prefill deciders are always, prefix-threshold and multimodal; a decider plugin has no llm-d type",
            ))
        }
    };
    let prefill = match &pd.prefill_routing {
        Some(r) => Some((r, "pd.prefill_routing")),
        None if decider.is_some() => Some((&run.routing, "routing")),
        None => None,
    };
    if let Some((prefill, label)) = prefill {
        doc.slot("prefill-filter", Mapping::new(), None);
        let name = profile(prefill, label, block_size, doc)?;
        doc.finish_profile(name.as_deref().unwrap_or("prefill"));
    }
    let (decode, label) = match &pd.decode_routing {
        Some(r) => (r, "pd.decode_routing"),
        None => {
            doc.notes.push("[pd]: the decode stage routes by [routing]; llm-d's decode profile is read back as [pd.decode_routing], whose random tie breaks draw from the decode stage's own stream: the same policy, not the same draws (give [pd.decode_routing] to compare run for run)".into());
            (&run.routing, "routing")
        }
    };
    doc.slot("decode-filter", Mapping::new(), None);
    let name = profile(decode, label, block_size, doc)?;
    doc.finish_profile(name.as_deref().unwrap_or("decode"));
    let mut params = Mapping::new();
    // A pipeline profile keeps its name (blis seeds its draws by it): the
    // handler is told the stages' names when they are not the defaults.
    let names: Vec<&str> = doc.profiles.iter().map(|p| p.0.as_str()).collect();
    let stage_names: Vec<&str> = if prefill.is_some() {
        vec!["prefill", "decode"]
    } else {
        vec!["decode"]
    };
    if names != stage_names {
        if names.len() == 2 && names[0] == names[1] {
            return Err(refuse("[pd] stage routings", &format!("both stages' profiles are named '{}'; llm-d names each profile once: rename one", names[0])));
        }
        let m = stage_names
            .iter()
            .zip(&names)
            .map(|(s, n)| (key(s), key(n)))
            .collect();
        params.insert(key("profiles"), Y::Mapping(m));
    }
    if let Some(d) = decider {
        let deciders = mapping(vec![("prefill", Y::String(d))]);
        params.insert(key("deciders"), Y::Mapping(deciders));
    }
    doc.add("disagg-profile-handler", params);
    Ok(())
}

/// One blis routing section (`label`: where it is in the run file) as the
/// plugins of the profile being built; returns the name the profile must
/// keep (a pipeline profile's: blis seeds its draws by it).
fn profile(
    r: &RoutingSection,
    label: &str,
    block_size: i64,
    doc: &mut Doc,
) -> Result<Option<String>, String> {
    // `[routing]` itself is checked once by the caller.
    if label != "routing" {
        if r.freshness.is_some() || r.epp_config.is_some() {
            return Err(refuse(
                &format!("[{label}] freshness / epp_config"),
                "llm-d scrapes one interval for every stage; give [routing.freshness] only",
            ));
        }
        check_delays(r, &format!("[{label}]"))?;
    }
    match r.policy.as_str() {
        "weighted" => {
            match r.tie_break.as_deref() {
                Some("random") => {}
                other => {
                    return Err(refuse(
                        &format!("[{label}] tie_break = \"{}\"", other.unwrap_or("lowest-index")),
                        "llm-d's max-score-picker breaks ties uniformly at random; set tie_break = \"random\"",
                    ))
                }
            }
            if r.scorers.is_empty() {
                return Err(refuse(&format!("[{label}] policy = \"weighted\" without scorers"), "list its scorers (blis's default profile is not written implicitly)"));
            }
            for (i, s) in r.scorers.iter().enumerate() {
                let what = format!("{label}.scorers.{i} ({})", s.name);
                scorer(&s.name, &s.params, s.weight, block_size, &what, doc)?;
            }
            doc.slot("max-score-picker", Mapping::new(), None);
            Ok(None)
        }
        "pipeline" => pipeline(r, label, block_size, doc).map(Some),
        other => Err(refuse(
            &format!("[{label}] policy = \"{other}\""),
            "llm-d routes by a scheduling profile (filters, weighted scorers, a picker); express the policy as policy = \"weighted\" with scorers (e.g. waiting-queue for least-queue routing)",
        )),
    }
}

/// `pipeline` with one profile of filters, scorers and a picker.
fn pipeline(
    r: &RoutingSection,
    label: &str,
    block_size: i64,
    doc: &mut Doc,
) -> Result<String, String> {
    if r.profile_handler
        .as_deref()
        .is_some_and(|h| h != "single-profile")
        || r.profiles.len() != 1
    {
        return Err(refuse(
            &format!("[{label}] profiles"),
            "only one profile (single-profile handler) is written yet",
        ));
    }
    let p = &r.profiles[0];
    for (i, f) in p.filters.iter().enumerate() {
        let what = format!("{label}.profiles.0.filters.{i} ({})", f.name);
        filter(&f.name, &f.params, &what, doc)?;
    }
    for (i, s) in p.scorers.iter().enumerate() {
        let what = format!("{label}.profiles.0.scorers.{i} ({})", s.name);
        scorer(&s.name, &s.params, s.weight, block_size, &what, doc)?;
    }
    let Some(pk) = &p.picker else {
        return Err(refuse(
            &format!("{label}.profiles.0.picker"),
            "blis's default picker breaks ties by lowest index, llm-d's max-score-picker at random; give picker = { name = \"max-score\", params = { tie_break = \"random\" } }",
        ));
    };
    let picker = match pk.name.as_str() {
        "max-score"
            if pk.params.get("tie_break").and_then(T::as_str) == Some("random")
                && pk.params.len() == 1 =>
        {
            "max-score-picker"
        }
        "random" if pk.params.is_empty() => "random-picker",
        other => return Err(refuse(
            &format!("{label}.profiles.0.picker ({other})"),
            "llm-d's pickers are max-score (random ties: params tie_break = \"random\") and random",
        )),
    };
    if p.filters.is_empty()
        && picker == "max-score-picker"
        && p.scorers.iter().any(|s| s.weight > 0.0)
    {
        doc.notes.push(format!("[{label}] profile '{}': a max-score profile without filters reads back as blis's weighted policy (llm-d's raw weights rank as normalised ones): the same policy, whose random tie breaks draw from the weighted policy's own stream, so not the same draws (write the run file as policy = \"weighted\" to compare run for run)", p.name));
    }
    doc.slot(picker, Mapping::new(), None);
    Ok(p.name.clone())
}

/// A blis filter as an llm-d filter plugin in the profile being built.
fn filter(name: &str, p: &toml::Table, what: &str, doc: &mut Doc) -> Result<(), String> {
    match name {
        "utilization" => {
            only(p, &["conditions", "fallback_on_empty"], what)?;
            let mut conds = Vec::new();
            for c in p.get("conditions").and_then(T::as_array).into_iter().flatten() {
                let metric = c.get("metric").and_then(T::as_str).unwrap_or("");
                let max = c.get("max").and_then(num);
                match (metric, max) {
                    ("active-requests" | "running-requests" | "waiting-queue" | "kv-cache-utilization", Some(max)) if c.as_table().is_some_and(|t| t.len() == 2) => {
                        conds.push(Y::Mapping(mapping(vec![("metric", key(metric)), ("maxValue", Y::from(max))])));
                    }
                    _ => return Err(refuse(what, "llm-d's utilization-filter conditions are { metric, max } over active-requests, running-requests, waiting-queue, kv-cache-utilization")),
                }
            }
            if conds.is_empty() {
                return Err(refuse(what, "llm-d's utilization-filter needs at least one condition"));
            }
            let mut m = mapping(vec![("conditions", Y::Sequence(conds))]);
            if p.get("fallback_on_empty").and_then(T::as_bool) == Some(true) {
                m.insert(key("fallbackOnEmpty"), Y::Bool(true));
            }
            doc.slot("utilization-filter", m, None);
        }
        "unsaturated" => {
            only(p, &["queue_depth_threshold", "kv_threshold", "headroom"], what)?;
            let m = mapping(vec![
                ("queueDepthThreshold", Y::from(p.get("queue_depth_threshold").and_then(num).unwrap_or(5.0))),
                ("kvCacheUtilThreshold", Y::from(p.get("kv_threshold").and_then(num).unwrap_or(0.8))),
                ("headroom", Y::from(p.get("headroom").and_then(num).unwrap_or(0.0))),
            ]);
            doc.slot("utilization-detector", m, None);
        }
        "session-affinity" => {
            let m = session_affinity(p, what)?;
            doc.slot("session-affinity-filter", m, None);
        }
        other => {
            return Err(refuse(
                what,
                &format!("blis's filter '{other}' has no llm-d filter written by blis (utilization, unsaturated and session-affinity are)"),
            ))
        }
    }
    Ok(())
}

/// `session-affinity` params as the llm-d plugin's.
fn session_affinity(p: &toml::Table, what: &str) -> Result<Mapping, String> {
    match (p.len(), p.get("ttl_us").and_then(T::as_integer)) {
        (0, _) => Ok(Mapping::new()),
        (1, Some(300_000_000)) => Ok(mapping(vec![("strategy", key("session_id"))])),
        _ => Err(refuse(what, "llm-d's session affinity binds by the echoed endpoint (no params) or by session id for 300 s (ttl_us = 300000000)")),
    }
}
/// Parameters of a blis scorer, minus `block_size` when it is the run's KV
/// block size (llm-d's loader sets it from the run when applied).
fn params_without_block_size(
    params: &toml::Table,
    block_size: i64,
    what: &str,
) -> Result<toml::Table, String> {
    let mut p = params.clone();
    if let Some(b) = p.remove("block_size") {
        if b.as_integer() != Some(block_size) {
            return Err(refuse(
                &format!("{what} params.block_size"),
                &format!("llm-d counts blocks of the run's KV block size ({block_size}); remove the parameter"),
            ));
        }
    }
    Ok(p)
}

/// Only these parameter keys (else refused, naming the first other).
fn only(p: &toml::Table, keys: &[&str], what: &str) -> Result<(), String> {
    match p.keys().find(|k| !keys.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(refuse(
            &format!("{what} params.{k}"),
            "this parameter has no llm-d counterpart; remove it to convert",
        )),
    }
}

fn num(v: &T) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

/// `v` as the integer an llm-d parameter takes (refused when fractional).
fn whole(v: f64, what: &str) -> Result<Y, String> {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        Ok(Y::from(v as i64))
    } else {
        Err(refuse(
            what,
            &format!("{v}: llm-d takes a whole number here"),
        ))
    }
}

/// A blis scorer as llm-d plugins, slotted with its weight.
fn scorer(
    name: &str,
    params: &toml::Table,
    weight: f64,
    block_size: i64,
    what: &str,
    doc: &mut Doc,
) -> Result<(), String> {
    let p = params_without_block_size(params, block_size, what)?;
    let mut m = Mapping::new();
    let ty = match name {
        "waiting-queue" | "kv-utilization" | "running-requests" | "no-hit-lru" => {
            only(&p, &[], what)?;
            match name {
                "waiting-queue" => "queue-scorer",
                "kv-utilization" => "kv-cache-utilization-scorer",
                "running-requests" => "running-requests-size-scorer",
                _ => "no-hit-lru-scorer",
            }
        }
        "load-aware" => {
            only(&p, &["threshold"], what)?;
            let t = p.get("threshold").and_then(T::as_integer).unwrap_or(128);
            m.insert(key("threshold"), Y::from(t));
            "load-aware-scorer"
        }
        "active-requests" => {
            only(&p, &["idle_threshold", "max_busy_score"], what)?;
            if let Some(i) = p.get("idle_threshold").and_then(T::as_integer) {
                m.insert(key("idleThreshold"), Y::from(i));
            }
            if let Some(b) = p.get("max_busy_score").and_then(num) {
                m.insert(key("maxBusyScore"), Y::from(b));
            }
            "active-request-scorer"
        }
        "prefix-affinity" => {
            m = prefix_affinity(&p, what, doc)?;
            "prefix-cache-scorer"
        }
        "precise-prefix-cache" => {
            if p.get("normalise").and_then(T::as_str) != Some("total") || p.len() != 1 {
                return Err(refuse(what, "llm-d's prefix-cache-scorer over a precise producer scores the matched fraction of the prompt's blocks: params must be exactly normalise = \"total\""));
            }
            let producer = doc.add("precise-prefix-cache-producer", Mapping::new());
            m.insert(key("prefixMatchInfoProducerName"), Y::String(producer));
            "prefix-cache-scorer"
        }
        "lora-affinity" => {
            if p.get("graded").and_then(T::as_bool) != Some(true) || p.len() != 1 {
                return Err(refuse(what, "llm-d's lora-affinity-scorer is blis's lora-affinity with graded = true"));
            }
            "lora-affinity-scorer"
        }
        "session-affinity" => {
            m = session_affinity(&p, what)?;
            "session-affinity-scorer"
        }
        other => {
            return Err(refuse(
                what,
                &format!("blis's scorer '{other}' has no llm-d scorer type written by blis (see the table in docs/src/llm-d.md)"),
            ))
        }
    };
    doc.slot(ty, m, Some(weight));
    Ok(())
}

/// `prefix-affinity` → the parameters of llm-d's prefix-cache-scorer over
/// the default approximate producer, whose LRU is the index size.
fn prefix_affinity(p: &toml::Table, what: &str, doc: &mut Doc) -> Result<Mapping, String> {
    only(
        p,
        &[
            "capacity",
            "match_length_weight",
            "match_length_scale_tokens",
        ],
        what,
    )?;
    // blis's own default index size is 10,000 block hashes per instance;
    // llm-d's producer defaults to 31,250, so the size is always written.
    let capacity = p.get("capacity").and_then(T::as_integer).unwrap_or(10_000);
    if let Some(q) = doc
        .plugins
        .iter()
        .find(|q| q.ty == "approx-prefix-cache-producer")
    {
        if q.params.get("lruCapacityPerServer") != Some(&Y::from(capacity)) {
            return Err(refuse(
                what,
                "llm-d has one approximate prefix producer, so one prefix-affinity index size for every profile",
            ));
        }
    } else {
        let prod = mapping(vec![("lruCapacityPerServer", Y::from(capacity))]);
        doc.add("approx-prefix-cache-producer", prod);
    }
    let mut m = Mapping::new();
    if let Some(w) = p.get("match_length_weight").and_then(num) {
        m.insert(key("matchLengthWeight"), Y::from(w));
        let scale = p
            .get("match_length_scale_tokens")
            .and_then(num)
            .unwrap_or(8192.0);
        m.insert(
            key("matchLengthScaleTokens"),
            whole(scale, &format!("{what} params.match_length_scale_tokens"))?,
        );
    } else if p.contains_key("match_length_scale_tokens") {
        return Err(refuse(
            what,
            "match_length_scale_tokens without match_length_weight",
        ));
    }
    Ok(m)
}

/// The YAML text.
fn render(doc: &Doc, interval_us: i64) -> Result<String, String> {
    let mut root = Mapping::new();
    root.insert(key("apiVersion"), key("llm-d.ai/v1alpha1"));
    root.insert(key("kind"), key("EndpointPickerConfig"));
    if doc.gate {
        root.insert(key("featureGates"), Y::Sequence(vec![key("flowControl")]));
    }
    let mut plugins: Vec<Y> = Vec::new();
    let mut source = mapping(vec![("type", key("metrics-data-source"))]);
    if interval_us != 50_000 {
        let p = mapping(vec![(
            "interval",
            Y::String(format!("{}ms", interval_us / 1000)),
        )]);
        source.insert(key("parameters"), Y::Mapping(p));
    }
    plugins.push(Y::Mapping(source));
    plugins.push(Y::Mapping(mapping(vec![(
        "type",
        key("core-metrics-extractor"),
    )])));
    for p in &doc.plugins {
        let mut m = mapping(vec![("type", key(p.ty))]);
        if let Some(n) = &p.name {
            m.insert(key("name"), key(n));
        }
        if !p.params.is_empty() {
            m.insert(key("parameters"), Y::Mapping(p.params.clone()));
        }
        plugins.push(Y::Mapping(m));
    }
    root.insert(key("plugins"), Y::Sequence(plugins));
    let profiles = doc
        .profiles
        .iter()
        .map(|(name, refs)| {
            let refs = refs
                .iter()
                .map(|(r, w)| {
                    let mut m = mapping(vec![("pluginRef", key(r))]);
                    if let Some(w) = w {
                        m.insert(key("weight"), Y::from(*w));
                    }
                    Y::Mapping(m)
                })
                .collect();
            Y::Mapping(mapping(vec![
                ("name", key(name)),
                ("plugins", Y::Sequence(refs)),
            ]))
        })
        .collect();
    root.insert(key("schedulingProfiles"), Y::Sequence(profiles));
    if !doc.flow_control.is_empty() {
        root.insert(key("flowControl"), Y::Mapping(doc.flow_control.clone()));
    }
    let ex = mapping(vec![("pluginRef", key("core-metrics-extractor"))]);
    let src = mapping(vec![
        ("pluginRef", key("metrics-data-source")),
        ("extractors", Y::Sequence(vec![Y::Mapping(ex)])),
    ]);
    let dl = mapping(vec![("sources", Y::Sequence(vec![Y::Mapping(src)]))]);
    root.insert(key("dataLayer"), Y::Mapping(dl));
    serde_yaml_ng::to_string(&Y::Mapping(root)).map_err(|e| e.to_string())
}
