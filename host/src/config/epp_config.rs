//! `blis convert epp-config`: an llm-d EndpointPickerConfig (YAML) → the run
//! file's `[routing]` section with one `[[routing.profiles]]`.
//!
//! Plugin types are mapped by their llm-d names (old and new spellings, see
//! `llm-d-scheduler.md` §3–5); the loader's defaulting is reproduced (no
//! profiles → one `default` profile holding every filter, scorer and picker;
//! no picker → `max-score-picker`; scorer weight → 1). Every plugin that
//! blis cannot map is reported in the notes with what happened to it, so a
//! conversion never drops anything silently.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_yaml_ng::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EppConfig {
    api_version: String,
    kind: String,
    #[serde(default)]
    feature_gates: Vec<String>,
    #[serde(default)]
    plugins: Vec<PluginSpec>,
    #[serde(default)]
    scheduling_profiles: Vec<ProfileSpec>,
    #[serde(default)]
    saturation_detector: Option<Value>,
    #[serde(default)]
    data_layer: Option<Value>,
    #[serde(default)]
    data: Option<Value>,
    #[serde(default)]
    flow_control: Option<Value>,
    #[serde(default)]
    parser: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginSpec {
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileSpec {
    name: String,
    #[serde(default)]
    plugins: Vec<ProfilePluginRef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProfilePluginRef {
    plugin_ref: String,
    #[serde(default)]
    weight: Option<f64>,
}

/// What an llm-d plugin type becomes in blis.
enum Mapped {
    Filter(&'static str),
    Scorer(&'static str),
    Picker(&'static str, Option<&'static str>),
    /// A single-profile handler (the only handler blis runs).
    Handler,
    /// Nothing to do in blis (data producers, metric sources, parsers…).
    Ignored(&'static str),
    /// Nothing in blis does this.
    Unmapped(&'static str),
}

fn map_type(ty: &str) -> Mapped {
    match ty {
        "queue-scorer" => Mapped::Scorer("queue-depth"),
        "kv-cache-utilization-scorer" => Mapped::Scorer("kv-utilization"),
        "prefix-cache-scorer" => Mapped::Scorer("prefix-affinity"),
        "running-requests-size-scorer" => Mapped::Scorer("running-requests"),
        "load-aware-scorer" => Mapped::Scorer("load-aware"),
        "active-request-scorer" => Mapped::Scorer("active-requests"),
        "max-score-picker" => Mapped::Picker("max-score", Some("random")),
        "random-picker" => Mapped::Picker("random", None),
        "weighted-random-picker" => Mapped::Picker("weighted-random", None),
        "low-queue-filter" => Mapped::Filter("low-queue"),
        "single-profile-handler" => Mapped::Handler,
        // Every blis instance has no role label; llm-d's decode filter keeps
        // unlabeled endpoints, so it keeps every instance.
        "decode-filter" => Mapped::Ignored(
            "every blis instance is unlabeled, which the decode filter keeps: it keeps all of them",
        ),
        "approx-prefix-cache-producer" | "inflight-load-producer" => {
            Mapped::Ignored("blis computes this signal itself")
        }
        "metrics-data-source"
        | "core-metrics-extractor"
        | "models-data-source"
        | "models-data-extractor"
        | "endpoint-notification-source"
        | "k8s-notification-source"
        | "openai-parser"
        | "passthrough-parser"
        | "vllmgrpc-parser"
        | "vertexai-parser"
        | "token-producer"
        | "tokenizer"
        | "request-attribute-reporter" => {
            Mapped::Ignored("a data source or parser: blis reads instance state directly")
        }
        "utilization-detector" | "concurrency-detector" => {
            Mapped::Unmapped("saturation detection is not simulated by blis yet")
        }
        "prefill-filter"
        | "encode-filter"
        | "disagg-profile-handler"
        | "pd-profile-handler"
        | "prefix-based-pd-decider"
        | "always-disagg-pd-decider"
        | "prefill-header-handler"
        | "disagg-headers-handler" => {
            Mapped::Unmapped("prefill/decode disaggregation is not simulated by blis yet")
        }
        "decision-tree-filter"
        | "least-queue-filter"
        | "least-kv-cache-filter"
        | "lora-affinity-filter" => Mapped::Unmapped("removed in GAIE v1.0; no blis equivalent"),
        _ => Mapped::Unmapped("no blis equivalent"),
    }
}

/// A profile's name and its plugin references with their weights.
type ProfileRefs = (String, Vec<(String, Option<f64>)>);

/// One entry of a profile after mapping.
enum Slot {
    Filter(String, toml::Table),
    Scorer(String, f64, toml::Table),
    Picker(String, toml::Table),
}

/// Convert the YAML text. Returns the TOML text and the notes (every
/// plugin that was ignored or could not be mapped, and what happened).
pub fn convert(yaml_text: &str) -> Result<(String, Vec<String>), String> {
    let cfg: EppConfig = serde_yaml_ng::from_str(yaml_text).map_err(|e| e.to_string())?;
    if cfg.kind != "EndpointPickerConfig" {
        return Err(format!("kind: {}: expected EndpointPickerConfig", cfg.kind));
    }
    let mut notes = Vec::new();
    match cfg.api_version.as_str() {
        "llm-d.ai/v1alpha1" => {}
        "inference.networking.x-k8s.io/v1alpha1" => notes.push(
            "apiVersion inference.networking.x-k8s.io/v1alpha1 is the deprecated name of llm-d.ai/v1alpha1; read as such".into(),
        ),
        other => {
            return Err(format!(
                "apiVersion: {other}: expected llm-d.ai/v1alpha1 (or the deprecated inference.networking.x-k8s.io/v1alpha1)"
            ))
        }
    }
    for (key, present) in [
        ("featureGates", !cfg.feature_gates.is_empty()),
        ("saturationDetector", cfg.saturation_detector.is_some()),
        ("dataLayer", cfg.data_layer.is_some() || cfg.data.is_some()),
        ("flowControl", cfg.flow_control.is_some()),
        ("parser", cfg.parser.is_some()),
    ] {
        if present {
            notes.push(format!("{key}: ignored (blis reads instance state directly and has no gateway flow control here)"));
        }
    }

    // Instantiate plugins in file order, by name.
    let mut by_name: BTreeMap<String, (String, Option<Value>)> = BTreeMap::new();
    let mut order = Vec::new();
    let mut pickers_seen = false;
    for p in &cfg.plugins {
        let name = p.name.clone().unwrap_or_else(|| p.ty.clone());
        if by_name
            .insert(name.clone(), (p.ty.clone(), p.parameters.clone()))
            .is_some()
        {
            return Err(format!("plugins: the name '{name}' is used twice"));
        }
        pickers_seen |= matches!(map_type(&p.ty), Mapped::Picker(..));
        order.push(name);
    }
    let mut handler_seen = false;
    for name in &order {
        let (ty, _) = &by_name[name];
        match map_type(ty) {
            Mapped::Handler => handler_seen = true,
            Mapped::Ignored(why) => notes.push(format!("plugin '{name}' ({ty}): ignored: {why}")),
            Mapped::Unmapped(why) => {
                notes.push(format!("plugin '{name}' ({ty}): NOT converted: {why}"))
            }
            _ => {}
        }
    }
    let _ = handler_seen;

    // Profiles: as given, or llm-d's default of one profile with every
    // filter, scorer and picker in file order.
    let profiles: Vec<ProfileRefs> = if cfg.scheduling_profiles.is_empty() {
        vec![(
            "default".to_string(),
            order
                .iter()
                .filter(|n| {
                    matches!(
                        map_type(&by_name[*n].0),
                        Mapped::Filter(_) | Mapped::Scorer(_) | Mapped::Picker(..)
                    )
                })
                .map(|n| (n.clone(), None))
                .collect(),
        )]
    } else {
        cfg.scheduling_profiles
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    p.plugins
                        .iter()
                        .map(|r| (r.plugin_ref.clone(), r.weight))
                        .collect(),
                )
            })
            .collect()
    };
    if profiles.len() > 1 {
        return Err(format!(
            "{} scheduling profiles ({}): blis runs one profile (single-profile handler); \
             multi-profile handlers (prefill/decode) are not simulated yet",
            profiles.len(),
            profiles
                .iter()
                .map(|p| p.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let (profile_name, refs) = &profiles[0];
    let mut slots = Vec::new();
    for (r, weight) in refs {
        let Some((ty, params)) = by_name.get(r) else {
            return Err(format!(
                "schedulingProfiles '{profile_name}': pluginRef '{r}' names no entry of plugins"
            ));
        };
        match map_type(ty) {
            Mapped::Filter(name) => {
                let mut t = toml::Table::new();
                if let Some(th) = params
                    .as_ref()
                    .and_then(|p| p.get("threshold"))
                    .and_then(Value::as_i64)
                {
                    t.insert("threshold".into(), toml::Value::Integer(th));
                }
                slots.push(Slot::Filter(name.to_string(), t));
            }
            Mapped::Scorer(name) => {
                let mut t = toml::Table::new();
                // load-aware-scorer's `threshold` is blis's load-aware `threshold`.
                let threshold = params
                    .as_ref()
                    .filter(|_| *ty == "load-aware-scorer")
                    .and_then(|p| p.get("threshold"))
                    .and_then(Value::as_i64);
                if let Some(th) = threshold {
                    t.insert("threshold".into(), toml::Value::Integer(th));
                } else if params.as_ref().is_some_and(|p| !p.is_null()) {
                    notes.push(format!(
                        "plugin '{r}' ({ty}): its parameters are not converted (blis's {name} takes its own; see `blis plugins show {name}`)"
                    ));
                }
                if *ty == "queue-scorer" {
                    notes.push(format!(
                        "plugin '{r}' (queue-scorer): mapped to queue-depth, which min-max normalises the effective load (queue + batch + pending) where llm-d uses the waiting queue only"
                    ));
                }
                slots.push(Slot::Scorer(name.to_string(), weight.unwrap_or(1.0), t))
            }
            Mapped::Picker(name, tie) => {
                let mut t = toml::Table::new();
                if let Some(tie) = tie {
                    t.insert("tie_break".into(), toml::Value::String(tie.into()));
                }
                if params
                    .as_ref()
                    .and_then(|p| p.get("maxNumOfEndpoints"))
                    .and_then(Value::as_i64)
                    .is_some_and(|k| k > 1)
                {
                    notes.push(format!(
                        "plugin '{r}' ({ty}): maxNumOfEndpoints > 1 ignored (blis routes to one instance; the others are fallbacks in llm-d)"
                    ));
                }
                slots.push(Slot::Picker(name.to_string(), t));
            }
            // Already reported above.
            Mapped::Handler | Mapped::Ignored(_) | Mapped::Unmapped(_) => {}
        }
    }
    if !slots.iter().any(|s| matches!(s, Slot::Picker(..))) {
        if !pickers_seen {
            notes.push("no picker: llm-d adds max-score-picker (random tie-break), and so does the conversion".into());
        }
        let mut t = toml::Table::new();
        t.insert("tie_break".into(), toml::Value::String("random".into()));
        slots.push(Slot::Picker("max-score".into(), t));
    }
    if slots
        .iter()
        .filter(|s| matches!(s, Slot::Picker(..)))
        .count()
        > 1
    {
        return Err(format!(
            "schedulingProfiles '{profile_name}': more than one picker"
        ));
    }

    let inline = |name: &str, params: &toml::Table, weight: Option<f64>| {
        let mut t = toml::map::Map::new();
        t.insert("name".to_string(), toml::Value::String(name.to_string()));
        if let Some(w) = weight {
            t.insert("weight".to_string(), toml::Value::Float(w));
        }
        if !params.is_empty() {
            t.insert("params".to_string(), toml::Value::Table(params.clone()));
        }
        toml::Value::Table(t)
    };
    let mut profile = toml::Table::new();
    profile.insert("name".into(), toml::Value::String(profile_name.clone()));
    let filters: Vec<toml::Value> = slots
        .iter()
        .filter_map(|s| match s {
            Slot::Filter(n, p) => Some(inline(n, p, None)),
            _ => None,
        })
        .collect();
    let scorers: Vec<toml::Value> = slots
        .iter()
        .filter_map(|s| match s {
            Slot::Scorer(n, w, p) => Some(inline(n, p, Some(*w))),
            _ => None,
        })
        .collect();
    if !filters.is_empty() {
        profile.insert("filters".into(), toml::Value::Array(filters));
    }
    if !scorers.is_empty() {
        profile.insert("scorers".into(), toml::Value::Array(scorers));
    }
    if let Some(Slot::Picker(n, p)) = slots.iter().find(|s| matches!(s, Slot::Picker(..))) {
        profile.insert("picker".into(), inline(n, p, None));
    }
    let mut routing = toml::Table::new();
    routing.insert("policy".into(), toml::Value::String("pipeline".into()));
    routing.insert(
        "profile_handler".into(),
        toml::Value::String("single-profile".into()),
    );
    routing.insert(
        "profiles".into(),
        toml::Value::Array(vec![toml::Value::Table(profile)]),
    );
    let mut root = toml::Table::new();
    root.insert("routing".into(), toml::Value::Table(routing));
    let text = toml::to_string(&root).map_err(|e| e.to_string())?;
    Ok((text, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llm-d's built-in default profile (llm-d-scheduler.md §5.1).
    const DEFAULT: &str = "\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
- type: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
";

    #[test]
    fn default_llm_d_profile_converts() {
        let (text, notes) = convert(DEFAULT).unwrap();
        let t: toml::Table = text.parse().unwrap();
        let r = &t["routing"];
        assert_eq!(r["policy"].as_str(), Some("pipeline"));
        let p = &r["profiles"][0];
        assert_eq!(p["name"].as_str(), Some("default"));
        let scorers: Vec<(&str, f64)> = p["scorers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["name"].as_str().unwrap(), s["weight"].as_float().unwrap()))
            .collect();
        assert_eq!(
            scorers,
            [
                ("queue-depth", 2.0),
                ("kv-utilization", 2.0),
                ("prefix-affinity", 3.0)
            ]
        );
        assert_eq!(p["picker"]["name"].as_str(), Some("max-score"));
        assert_eq!(p["picker"]["params"]["tie_break"].as_str(), Some("random"));
        let all = notes.join("\n");
        assert!(all.contains("deprecated name"), "{all}");
        assert!(
            all.contains("'metrics-data-source' (metrics-data-source): ignored"),
            "{all}"
        );
    }

    #[test]
    fn unmappable_plugins_are_reported_and_bad_refs_are_errors() {
        let yaml = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: session-affinity-scorer
- type: low-queue-filter
  parameters: {threshold: 64}
- type: random-picker
";
        let (text, notes) = convert(yaml).unwrap();
        let all = notes.join("\n");
        assert!(
            all.contains("'session-affinity-scorer' (session-affinity-scorer): NOT converted"),
            "{all}"
        );
        assert!(all.contains("decode-filter"), "{all}");
        let t: toml::Table = text.parse().unwrap();
        let p = &t["routing"]["profiles"][0];
        assert_eq!(p["filters"][0]["name"].as_str(), Some("low-queue"));
        assert_eq!(
            p["filters"][0]["params"]["threshold"].as_integer(),
            Some(64)
        );
        assert_eq!(p["picker"]["name"].as_str(), Some("random"));

        let bad = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins: []\nschedulingProfiles:\n- name: x\n  plugins:\n  - pluginRef: nope\n";
        assert!(convert(bad).unwrap_err().contains("pluginRef 'nope'"));
        let two = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nschedulingProfiles:\n- name: a\n- name: b\n";
        assert!(convert(two).unwrap_err().contains("blis runs one profile"));
        assert!(convert("apiVersion: x\nkind: EndpointPickerConfig\n").is_err());
        assert!(
            convert("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nbogus: 1\n")
                .is_err()
        );
    }
}
