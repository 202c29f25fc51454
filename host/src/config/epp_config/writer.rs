//! blis's routing and admission → an llm-d `EndpointPickerConfig` (`blis
//! convert to-epp-config`, and `blis tune`'s tuned llm-d file): the inverse
//! of [`super::plan`] for what llm-d can express.
//!
//! The rule is exactness: every part written is one that [`super::plan`]
//! maps back to the same blis section, so `blis run RUN --epp-config
//! WRITTEN` runs what `blis run RUN` runs. What llm-d cannot express is
//! refused by name (a routing policy that is not a scheduling profile, a
//! scorer without an llm-d type, `[flow_control]`, P/D stages); what it
//! expresses only approximately is written with a note saying so (a run
//! that reads instance state live: llm-d scrapes every 50 ms at best).
//!
//! Covered: `[routing]` `weighted` (tie break `random`, llm-d's
//! max-score-picker) or `pipeline` with one profile and no filters (picker
//! `max-score` with random ties, or `random`), over the scorers
//! `waiting-queue`, `kv-utilization`, `running-requests`, `load-aware`,
//! `active-requests`, `prefix-affinity` (its index size as
//! `approx-prefix-cache-producer`'s `lruCapacityPerServer`, its match-length
//! term), `precise-prefix-cache` (normalise `total`, over a
//! `precise-prefix-cache-producer`), `no-hit-lru`, `lora-affinity` (graded),
//! `session-affinity`; `[routing.freshness]` as the metrics source's scrape
//! interval; `[admission]` `gaie-legacy` as the `utilization-detector` the
//! legacy admission controller reads.

use serde_yaml_ng::{Mapping, Value as Y};
use toml::Value as T;

use crate::config::{FreshnessSection, RunFile};

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

/// The plugins and the default profile's references, built up in order.
#[derive(Default)]
struct Doc {
    plugins: Vec<Plugin>,
    /// (pluginRef, weight) of the profile.
    refs: Vec<(String, Option<f64>)>,
    notes: Vec<String>,
}

impl Doc {
    /// Add a plugin (a second instance of a type gets a numbered name);
    /// returns its reference name.
    fn add(&mut self, ty: &'static str, params: Mapping) -> String {
        let same = self.plugins.iter().filter(|p| p.ty == ty).count();
        let name = (same > 0).then(|| format!("{ty}-{}", same + 1));
        let r = name.clone().unwrap_or_else(|| ty.to_string());
        self.plugins.push(Plugin { ty, name, params });
        r
    }
}

fn key(s: &str) -> Y {
    Y::String(s.to_string())
}

fn refuse(what: &str, why: &str) -> String {
    format!("{what}: llm-d cannot express this: {why}")
}

/// `run`'s routing and admission as an llm-d EndpointPickerConfig.
pub fn to_epp_config(run: &RunFile) -> Result<Written, String> {
    if run.routing.epp_config.is_some() {
        return Err("routing.epp_config: the run file already reads an llm-d file; convert the run file without it, or use that file".into());
    }
    if run.flow_control.is_some() {
        return Err(refuse(
            "[flow_control]",
            "blis writes llm-d's legacy admission only; flow control (llm-d's flowControl feature gate, bands and fairness) is not written yet — remove [flow_control] to convert the rest",
        ));
    }
    if run.pd.as_ref().is_some_and(|pd| pd.decider != "never") {
        return Err(refuse(
            "[pd]",
            "prefill/decode disaggregation (llm-d's disagg profile handler) is not written yet; convert a run file without [pd]",
        ));
    }
    let mut doc = Doc::default();
    let block_size = i64::from(run.instance.block_size);
    routing(run, block_size, &mut doc)?;
    admission(run, &mut doc)?;
    let interval = freshness(run.routing.freshness.as_ref(), &mut doc)?;
    Ok(Written {
        yaml: render(&doc, interval)?,
        notes: doc.notes,
    })
}

/// `[routing]` → scorers and a picker in the default profile.
fn routing(run: &RunFile, block_size: i64, doc: &mut Doc) -> Result<(), String> {
    let r = &run.routing;
    if r.latency_us != 0 || r.cache_signal_delay_us != 0 || r.snapshot_refresh_interval_us != 0 {
        return Err(refuse(
            "[routing] latency_us / cache_signal_delay_us / snapshot_refresh_interval_us",
            "llm-d has no such delay; set them to 0 (or leave them out)",
        ));
    }
    match r.policy.as_str() {
        "weighted" => {
            match r.tie_break.as_deref() {
                Some("random") => {}
                other => {
                    return Err(refuse(
                        &format!("[routing] tie_break = \"{}\"", other.unwrap_or("lowest-index")),
                        "llm-d's max-score-picker breaks ties uniformly at random; set tie_break = \"random\"",
                    ))
                }
            }
            if r.scorers.is_empty() {
                return Err(refuse("[routing] policy = \"weighted\" without scorers", "list its [[routing.scorers]] (blis's default profile is not written implicitly)"));
            }
            for (i, s) in r.scorers.iter().enumerate() {
                let what = format!("routing.scorers.{i} ({})", s.name);
                let name = scorer(&s.name, &s.params, block_size, &what, doc)?;
                doc.refs.push((name, Some(s.weight)));
            }
            let picker = doc.add("max-score-picker", Mapping::new());
            doc.refs.push((picker, None));
            Ok(())
        }
        "pipeline" => pipeline(run, block_size, doc),
        other => Err(refuse(
            &format!("[routing] policy = \"{other}\""),
            "llm-d routes by a scheduling profile (filters, weighted scorers, a picker); express the policy as policy = \"weighted\" with scorers (e.g. waiting-queue for least-queue routing)",
        )),
    }
}

/// `pipeline` with one profile of scorers and a picker.
fn pipeline(run: &RunFile, block_size: i64, doc: &mut Doc) -> Result<(), String> {
    let r = &run.routing;
    if r.profile_handler
        .as_deref()
        .is_some_and(|h| h != "single-profile")
        || r.profiles.len() != 1
    {
        return Err(refuse(
            "[routing] profiles",
            "only one profile (single-profile handler) is written yet",
        ));
    }
    let p = &r.profiles[0];
    if let Some(f) = p.filters.first() {
        return Err(refuse(
            &format!("routing.profiles.0.filters ({})", f.name),
            "filters are not written yet; remove them to convert the rest",
        ));
    }
    for (i, s) in p.scorers.iter().enumerate() {
        let what = format!("routing.profiles.0.scorers.{i} ({})", s.name);
        let name = scorer(&s.name, &s.params, block_size, &what, doc)?;
        doc.refs.push((name, Some(s.weight)));
    }
    let Some(pk) = &p.picker else {
        return Err(refuse(
            "routing.profiles.0.picker",
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
            &format!("routing.profiles.0.picker ({other})"),
            "llm-d's pickers are max-score (random ties: params tie_break = \"random\") and random",
        )),
    };
    let name = doc.add(picker, Mapping::new());
    doc.refs.push((name, None));
    Ok(())
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

/// A blis scorer as llm-d plugins; returns the scorer's reference.
fn scorer(
    name: &str,
    params: &toml::Table,
    block_size: i64,
    what: &str,
    doc: &mut Doc,
) -> Result<String, String> {
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
        "prefix-affinity" => return prefix_affinity(&p, what, doc),
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
            match (p.len(), p.get("ttl_us").and_then(T::as_integer)) {
                (0, _) => {}
                (1, Some(300_000_000)) => {
                    m.insert(key("strategy"), key("session_id"));
                }
                _ => return Err(refuse(what, "llm-d's session-affinity-scorer binds by the echoed endpoint (no params) or by session id for 300 s (ttl_us = 300000000)")),
            }
            "session-affinity-scorer"
        }
        other => {
            return Err(refuse(
                what,
                &format!("blis's scorer '{other}' has no llm-d scorer type written by blis (see the table in docs/src/llm-d.md)"),
            ))
        }
    };
    Ok(doc.add(ty, m))
}

/// `prefix-affinity` → llm-d's prefix-cache-scorer over the default
/// approximate producer, whose LRU is the index size.
fn prefix_affinity(p: &toml::Table, what: &str, doc: &mut Doc) -> Result<String, String> {
    only(
        p,
        &[
            "capacity",
            "match_length_weight",
            "match_length_scale_tokens",
        ],
        what,
    )?;
    if doc
        .plugins
        .iter()
        .any(|q| q.ty == "approx-prefix-cache-producer")
    {
        return Err(refuse(
            what,
            "llm-d has one approximate prefix producer, so one prefix-affinity scorer",
        ));
    }
    // blis's own default index size is 10,000 block hashes per instance;
    // llm-d's producer defaults to 31,250, so the size is always written.
    let capacity = p.get("capacity").and_then(T::as_integer).unwrap_or(10_000);
    let mut prod = Mapping::new();
    prod.insert(key("lruCapacityPerServer"), Y::from(capacity));
    doc.add("approx-prefix-cache-producer", prod);
    let mut m = Mapping::new();
    if let Some(w) = p.get("match_length_weight").and_then(num) {
        m.insert(key("matchLengthWeight"), Y::from(w));
        let scale = p
            .get("match_length_scale_tokens")
            .and_then(num)
            .unwrap_or(8192.0);
        m.insert(key("matchLengthScaleTokens"), Y::from(scale));
    } else if p.contains_key("match_length_scale_tokens") {
        return Err(refuse(
            what,
            "match_length_scale_tokens without match_length_weight",
        ));
    }
    Ok(doc.add("prefix-cache-scorer", m))
}

/// `[admission]` → the saturation detector llm-d's legacy admission
/// controller reads (the controller itself is always on without the
/// flowControl gate).
fn admission(run: &RunFile, doc: &mut Doc) -> Result<(), String> {
    let a = &run.admission;
    if let Some(step) = a.then.first() {
        return Err(refuse(
            &format!("[[admission.then]] ({})", step.policy),
            "an admitter after the legacy controller (llm-d's probabilistic-admitter) is not written yet",
        ));
    }
    if a.latency_us != 0 {
        return Err(refuse(
            "[admission] latency_us",
            "llm-d has no admission delay; leave it out",
        ));
    }
    let (qd, kv) = match a.policy.as_str() {
        "gaie-legacy" => {
            only(&a.params, &["queue_depth_threshold", "kv_threshold"], "[admission] gaie-legacy")?;
            (
                a.params.get("queue_depth_threshold").and_then(num).unwrap_or(5.0),
                a.params.get("kv_threshold").and_then(num).unwrap_or(0.8),
            )
        }
        "always-admit" => {
            doc.notes.push("[admission] always-admit: llm-d's legacy admission controller is always on; the file sets its utilization-detector to queueDepthThreshold 999999999 and kvCacheUtilThreshold 1.0 (llm-d's own probabilistic-admitter example does so), so it sheds sheddable requests (priority < 0) only while every instance's KV cache is full".into());
            (999_999_999.0, 1.0)
        }
        other => {
            return Err(refuse(
                &format!("[admission] policy = \"{other}\""),
                "llm-d's admission without flow control is its legacy controller over a utilization detector (blis's gaie-legacy)",
            ))
        }
    };
    let mut m = Mapping::new();
    m.insert(key("queueDepthThreshold"), Y::from(qd));
    m.insert(key("kvCacheUtilThreshold"), Y::from(kv));
    doc.add("utilization-detector", m);
    Ok(())
}

/// `[routing.freshness]` → the metrics source's scrape interval (µs), or
/// the default 50 ms with a note when blis reads live.
fn freshness(f: Option<&FreshnessSection>, doc: &mut Doc) -> Result<i64, String> {
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

/// The YAML text.
fn render(doc: &Doc, interval_us: i64) -> Result<String, String> {
    let mut root = Mapping::new();
    root.insert(key("apiVersion"), key("llm-d.ai/v1alpha1"));
    root.insert(key("kind"), key("EndpointPickerConfig"));
    let mut plugins: Vec<Y> = Vec::new();
    let mut source = Mapping::new();
    source.insert(key("type"), key("metrics-data-source"));
    if interval_us != 50_000 {
        let mut p = Mapping::new();
        p.insert(
            key("interval"),
            Y::String(format!("{}ms", interval_us / 1000)),
        );
        source.insert(key("parameters"), Y::Mapping(p));
    }
    plugins.push(Y::Mapping(source));
    let mut extractor = Mapping::new();
    extractor.insert(key("type"), key("core-metrics-extractor"));
    plugins.push(Y::Mapping(extractor));
    for p in &doc.plugins {
        let mut m = Mapping::new();
        m.insert(key("type"), key(p.ty));
        if let Some(n) = &p.name {
            m.insert(key("name"), key(n));
        }
        if !p.params.is_empty() {
            m.insert(key("parameters"), Y::Mapping(p.params.clone()));
        }
        plugins.push(Y::Mapping(m));
    }
    root.insert(key("plugins"), Y::Sequence(plugins));
    let refs: Vec<Y> = doc
        .refs
        .iter()
        .map(|(r, w)| {
            let mut m = Mapping::new();
            m.insert(key("pluginRef"), key(r));
            if let Some(w) = w {
                m.insert(key("weight"), Y::from(*w));
            }
            Y::Mapping(m)
        })
        .collect();
    let mut profile = Mapping::new();
    profile.insert(key("name"), key("default"));
    profile.insert(key("plugins"), Y::Sequence(refs));
    root.insert(
        key("schedulingProfiles"),
        Y::Sequence(vec![Y::Mapping(profile)]),
    );
    let mut src = Mapping::new();
    src.insert(key("pluginRef"), key("metrics-data-source"));
    let mut ex = Mapping::new();
    ex.insert(key("pluginRef"), key("core-metrics-extractor"));
    src.insert(key("extractors"), Y::Sequence(vec![Y::Mapping(ex)]));
    let mut dl = Mapping::new();
    dl.insert(key("sources"), Y::Sequence(vec![Y::Mapping(src)]));
    root.insert(key("dataLayer"), Y::Mapping(dl));
    serde_yaml_ng::to_string(&Y::Mapping(root)).map_err(|e| e.to_string())
}
