//! llm-d Router `EndpointPickerConfig` files (llm-d-router.md), read as the
//! llm-d loader reads them and turned, once, into blis's own sections:
//! `[routing]` (a `weighted` or `pipeline` profile, `[routing.freshness]`
//! from the data layer), `[admission]` (the legacy admission controller or
//! an admitter), `[flow_control]` (gate `flowControl`) and `[pd]` (the
//! disagg/pd profile handlers over the run file's `[[pools]]`). Nothing of
//! llm-d's vocabulary reaches the simulation.
//!
//! `[routing] epp_config = "FILE.yaml"` (or `blis run --epp-config`) applies
//! the file at build time ([`expand`]); `blis convert epp-config` prints the
//! same sections as TOML ([`convert`]): one code path, [`plan`].
//!
//! Modules: `schema` (the document, strict), `catalogue` (every llm-d
//! plugin type), `loader` (llm-d's validation and defaulting), `routing`
//! (profiles and handlers), `sections` (admission, flow control, data
//! layer, the other plugins).

mod catalogue;
mod loader;
mod predicted;
mod routing;
mod schema;
mod sections;
mod writer;

use std::path::Path;

use super::{FlowControlSection, PdSection, RoutingSection, RunFile};

pub use catalogue::{TypeInfo, TYPES};
pub use writer::{to_epp_config, Written};

/// Notes collected while mapping (each says what happened to something).
#[derive(Default)]
pub struct Out {
    pub notes: Vec<String>,
}

impl Out {
    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }
}

/// The blis sections an EPP config becomes.
pub struct Plan {
    /// `[routing]` keys (policy, scorers or profiles, tie_break, freshness).
    pub routing: toml::Table,
    pub admission: toml::Table,
    pub flow_control: Option<toml::Table>,
    /// `[pd]` keys (decider, prefix_threshold, stage routings).
    pub pd: Option<toml::Table>,
    pub notes: Vec<String>,
}

/// Load `text` as llm-d does and map it. `pools`: whether the run file
/// declares `[[pools]]` (`None` when converting without a run file).
pub fn plan(text: &str, pools: Option<bool>) -> Result<Plan, String> {
    let l = loader::load(text)?;
    let mut out = Out {
        notes: l.notes.clone(),
    };
    let h = routing::handler_plan(&l, pools, &mut out)?;
    let admission = sections::admission(&l, &mut out)?;
    let flow_control = sections::flow_control(&l, &mut out)?;
    let interval =
        sections::scrape_interval_us(&l, schema::refresh_flag(text).as_deref(), &mut out)?;
    sections::other_plugins(&l, &mut out)?;
    let mut routing = h.routing;
    let mut fresh = toml::Table::new();
    for k in [
        "queue_depth_us",
        "batch_size_us",
        "kv_utilization_us",
        "resident_adapters_us",
    ] {
        fresh.insert(k.into(), toml::Value::Integer(interval));
    }
    routing.insert("freshness".into(), toml::Value::Table(fresh));
    Ok(Plan {
        routing,
        admission,
        flow_control,
        pd: h.pd,
        notes: out.notes,
    })
}

/// `blis convert epp-config`: the sections as TOML text, and the notes.
pub fn convert(text: &str) -> Result<(String, Vec<String>), String> {
    let mut p = plan(text, None)?;
    let mut root = toml::Table::new();
    root.insert("admission".into(), toml::Value::Table(p.admission));
    root.insert("routing".into(), toml::Value::Table(p.routing));
    if let Some(fc) = p.flow_control {
        root.insert("flow_control".into(), toml::Value::Table(fc));
    }
    if let Some(pd) = p.pd {
        p.notes.push(
            "the [pd] section needs the run file's [[pools]] (roles prefill, decode or both)"
                .into(),
        );
        root.insert("pd".into(), toml::Value::Table(pd));
    }
    let text = toml::to_string(&root).map_err(|e| e.to_string())?;
    Ok((text, p.notes))
}

fn section<S: serde::de::DeserializeOwned>(t: toml::Table, what: &str) -> Result<S, String> {
    toml::Value::Table(t)
        .try_into()
        .map_err(|e: toml::de::Error| {
            format!("internal: the {what} made from the EPP config does not parse: {e}")
        })
}

/// Every policy of `t` that counts prompt blocks — `token-load`,
/// `in-flight-limit`, `concurrency-shed` counting tokens, prefix scorers
/// with llm-d's match-length term or total normalisation, and every
/// predicted-latency policy's predictor — at any depth (weighted scorers,
/// pipeline profiles, P/D stage routings, admission and its `then` steps)
/// counts blocks of `block_size` tokens, the run's KV block size.
fn set_block_size(t: &mut toml::Table, block_size: &toml::Value) {
    let name = t
        .get("name")
        .or_else(|| t.get("policy"))
        .and_then(toml::Value::as_str)
        .map(str::to_string);
    let params = t.get_mut("params").and_then(toml::Value::as_table_mut);
    match (name.as_deref(), params) {
        (Some("token-load" | "in-flight-limit"), _) => {
            let params = t
                .entry("params")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let Some(p) = params.as_table_mut() {
                p.insert("block_size".into(), block_size.clone());
            }
        }
        // Their block size counts matched tokens (the match-length term)
        // and the prompt's blocks (normalise = "total").
        (Some("prefix-affinity" | "precise-prefix-cache"), Some(p))
            if p.contains_key("match_length_weight") || p.contains_key("normalise") =>
        {
            p.insert("block_size".into(), block_size.clone());
        }
        (Some("concurrency-shed"), Some(p))
            if p.get("mode").and_then(toml::Value::as_str) != Some("requests") =>
        {
            p.insert("block_size".into(), block_size.clone());
        }
        (
            Some("latency" | "slo-headroom-tier" | "prefix-cache-affinity" | "latency-slo"),
            Some(p),
        ) => {
            if let Some(p) = p.get_mut("predictor").and_then(toml::Value::as_table_mut) {
                p.insert("block_size".into(), block_size.clone());
            }
        }
        _ => {}
    }
    // Policies nest in profiles, stages and `[[admission.then]]`.
    for (_, v) in t.iter_mut().filter(|(k, _)| *k != "params") {
        match v {
            toml::Value::Table(inner) => set_block_size(inner, block_size),
            toml::Value::Array(items) => {
                for x in items {
                    if let toml::Value::Table(inner) = x {
                        set_block_size(inner, block_size);
                    }
                }
            }
            _ => {}
        }
    }
}

/// `blis convert to-epp-config`: the run file's routing and admission (an
/// llm-d file it names applied first) as an llm-d EndpointPickerConfig.
pub fn write(run: &RunFile, base_dir: &Path) -> Result<Written, String> {
    match expand(run, base_dir)? {
        Some((expanded, _)) => to_epp_config(&expanded),
        None => to_epp_config(run),
    }
}

/// Apply `run.routing.epp_config` (relative to `base_dir`): the run file
/// with its routing, admission, flow control and P/D routing replaced by
/// the EPP config's, and the notes. `None` without an EPP config.
pub fn expand(run: &RunFile, base_dir: &Path) -> Result<Option<(RunFile, Vec<String>)>, String> {
    let Some(rel) = &run.routing.epp_config else {
        return Ok(None);
    };
    let path = super::build::resolve(base_dir, rel);
    let label = format!("routing.epp_config = {}", path.display());
    let text = crate::input::read_to_string(&path).map_err(|e| {
        format!("{label}: cannot read it: {e}\n  Give the path of an llm-d EndpointPickerConfig YAML (relative to the run file).")
    })?;
    let mut plan = plan(&text, Some(!run.pools.is_empty())).map_err(|e| format!("{label}: {e}"))?;
    let block_size = toml::Value::Integer(i64::from(run.instance.block_size));
    set_block_size(&mut plan.routing, &block_size);
    set_block_size(&mut plan.admission, &block_size);
    if let Some(pd) = plan.pd.as_mut() {
        set_block_size(pd, &block_size);
    }
    let mut encode_note = None;
    if let Some(pd) = plan.pd.as_mut() {
        if pd.contains_key("encode_decider") && !run.pools.iter().any(|p| p.role == "encode") {
            pd.remove("encode_decider");
            pd.remove("encode_prefix_threshold");
            pd.remove("encode_prefix_min_prompt_tokens");
            pd.remove("encode_routing");
            encode_note = Some("the run file has no pool of role encode: llm-d's encode profile would find no endpoint and each request goes on without it (add [[pools]] with role = \"encode\" to see the encode stage)");
        }
    }
    let mut notes: Vec<String> = plan
        .notes
        .iter()
        .map(|n| format!("{}: {n}", path.display()))
        .collect();
    if let Some(n) = encode_note {
        notes.push(format!("{label}: {n}"));
    }
    let mut out = run.clone();
    let keep = &run.routing;
    if keep.policy != RoutingSection::default().policy
        || !keep.scorers.is_empty()
        || !keep.profiles.is_empty()
    {
        notes.push(format!(
            "{label} replaces the run file's routing policy \"{}\"",
            keep.policy
        ));
    }
    let mut routing: RoutingSection = section(plan.routing, "[routing]")?;
    routing.latency_us = keep.latency_us;
    routing.snapshot_refresh_interval_us = keep.snapshot_refresh_interval_us;
    routing.cache_signal_delay_us = keep.cache_signal_delay_us;
    if keep.freshness.is_some() {
        notes.push(format!("{label}: the run file's [routing.freshness] is kept in place of the EPP config's scrape interval"));
        routing.freshness = keep.freshness.clone();
    }
    routing.epp_config = None;
    out.routing = routing;
    if run.admission.policy != "always-admit" {
        notes.push(format!("{label} replaces the run file's admission policy \"{}\" (llm-d's admission is the EPP's)", run.admission.policy));
    }
    let adm: super::AdmissionSection = section(plan.admission, "[admission]")?;
    out.admission.policy = adm.policy;
    out.admission.params = adm.params;
    out.admission.then = adm.then;
    out.flow_control = match plan.flow_control {
        Some(fc) => Some(section::<FlowControlSection>(fc, "[flow_control]")?),
        None => {
            if run.flow_control.is_some() {
                notes.push(format!("{label}: the run file's [flow_control] is dropped: the EPP config's feature gate flowControl is off"));
            }
            None
        }
    };
    let mut pd_table: toml::Table = toml::Table::try_from(run.pd.clone().unwrap_or_default())
        .map_err(|e| format!("internal: [pd] does not serialise: {e}"))?;
    for k in [
        "decider",
        "decider_params",
        "prefix_threshold",
        "prefix_min_prompt_tokens",
        "prefill_routing",
        "decode_routing",
        "encode_decider",
        "encode_prefix_threshold",
        "encode_prefix_min_prompt_tokens",
        "encode_routing",
    ] {
        pd_table.remove(k);
    }
    // An encode pool with a config that has no encode stage: llm-d routes
    // no request to it.
    let has_encode_pool = run.pools.iter().any(|p| p.role == "encode");
    if has_encode_pool
        && plan
            .pd
            .as_ref()
            .is_none_or(|pd| !pd.contains_key("encode_decider"))
    {
        pd_table.insert("encode_decider".into(), toml::Value::String("never".into()));
        notes.push(format!("{label}: no encode stage (no encode profile with an encode decider): the run file's encode pools get no requests (pd.encode_decider = \"never\")"));
    }
    match plan.pd {
        Some(pd) => {
            pd_table.extend(pd);
            out.pd = Some(section::<PdSection>(pd_table, "[pd]")?);
        }
        None if !run.pools.is_empty() => {
            notes.push(format!("{label}: one scheduling profile: requests are not disaggregated (pd.decider = \"never\")"));
            out.pd = Some(section::<PdSection>(pd_table, "[pd]")?);
        }
        None => {}
    }
    Ok(Some((out, notes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token-load scorer gets the run file's KV block size wherever the
    /// plan puts it (here a weighted `[routing]`).
    #[test]
    fn token_load_counts_blocks_of_the_run_files_size() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: token-load-scorer\n- type: queue-scorer\n";
        let mut p = plan(text, Some(false)).unwrap();
        set_block_size(&mut p.routing, &toml::Value::Integer(32));
        let scorers = p.routing["scorers"].as_array().unwrap();
        let tl = scorers
            .iter()
            .find(|s| s["name"].as_str() == Some("token-load"))
            .unwrap();
        assert_eq!(tl["params"]["block_size"].as_integer(), Some(32));
        assert_eq!(tl["params"]["threshold"].as_integer(), Some(4_194_304));
        let q = scorers
            .iter()
            .find(|s| s["name"].as_str() == Some("waiting-queue"))
            .unwrap();
        assert!(q
            .get("params")
            .is_none_or(|p| p.get("block_size").is_none()));
    }
}
