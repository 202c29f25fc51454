//! llm-d's loader (llm-d-router.md §1.4–1.6): validation and defaulting,
//! in its order and with its error texts, over the decoded document. The
//! result names every plugin instance by index and every profile's slots;
//! nothing here knows blis.

use serde_yaml_ng::Value;

use super::catalogue::{self, kind, Keys, TypeInfo};
use super::schema::{self, EppConfig};

/// One plugin instance.
pub struct Plugin {
    pub name: String,
    pub info: &'static TypeInfo,
    /// The parameters (a mapping, or `Null` when none were given).
    pub params: Value,
    /// Created by the loader's defaulting, not by the file.
    pub auto: bool,
}

/// One scheduling profile's slots (indices into [`Loaded::plugins`]).
pub struct Profile {
    pub name: String,
    pub filters: Vec<usize>,
    pub scorers: Vec<(usize, f64)>,
    pub picker: usize,
}

/// A configuration the llm-d loader accepts, after its defaulting.
pub struct Loaded {
    pub plugins: Vec<Plugin>,
    pub profiles: Vec<Profile>,
    pub handler: usize,
    /// Gate `flowControl` (default off).
    pub flow_control_gate: bool,
    pub flow_control: schema::FlowControl,
    pub detector: usize,
    pub parsers: Vec<usize>,
    pub data_layer: Option<schema::DataLayer>,
    /// Notes on what the loader did (defaults, deprecations, Alpha types).
    pub notes: Vec<String>,
}

impl Loaded {
    pub fn plugin(&self, name: &str) -> Option<usize> {
        self.plugins.iter().position(|p| p.name == name)
    }

    /// Whether the router sees the prompt: not when `passthrough-parser`
    /// is its only parser (it forwards the body unparsed: no text, no
    /// tokens, no prefix hashes, no multimodal content).
    pub fn sees_prompt(&self) -> bool {
        !(self.parsers.len() == 1 && self.plugins[self.parsers[0]].info.ty == "passthrough-parser")
    }
}

const GATES: [&str; 2] = ["flowControl", "haPopulateNonLeaderDatastore"];
const DEFAULT_PARSERS: [&str; 4] = [
    "openai-parser",
    "anthropic-parser",
    "vllmhttp-parser",
    "passthrough-parser",
];

/// Go's `strconv.ParseBool`.
fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Decode and load `text` as the llm-d loader does.
pub fn load(text: &str) -> Result<Loaded, String> {
    let mut notes = Vec::new();
    let cfg = schema::decode(text, &mut notes)?;
    load_config(cfg, notes)
}

fn load_config(mut cfg: EppConfig, mut notes: Vec<String>) -> Result<Loaded, String> {
    check_kind(&cfg, &mut notes)?;
    // ---- 1. raw load: migrations, gates ----
    migrate(&mut cfg, &mut notes);
    let flow_control_gate = feature_gates(&cfg)?;
    // ---- 2. validatePlugins ----
    let mut plugins = validate_plugins(&cfg)?;
    // ---- 3. instantiate: parameters, dependencies ----
    instantiate(&plugins, &mut notes)?;
    // ---- 4. system defaults: profiles ----
    let specs = profile_specs(&cfg, &plugins, &mut notes)?;
    let handler = profile_handler(&specs, &mut plugins, &mut notes)?;
    if !plugins.iter().any(|p| p.info.is(kind::PICKER)) {
        plugins.push(auto("max-score-picker"));
        notes.push("no picker: llm-d adds max-score-picker".into());
    }
    // ---- 5. validateConfig: profiles ----
    let profiles = specs
        .iter()
        .map(|(name, refs)| build_profile(name, refs, &plugins, &mut notes))
        .collect::<Result<Vec<Profile>, String>>()?;
    // ---- flow-control policies, parsers, detector, data layer ----
    for ty in [
        "fcfs-ordering-policy",
        "global-strict-fairness-policy",
        "static-usage-limit-policy",
    ] {
        if !plugins.iter().any(|p| p.name == ty) {
            plugins.push(auto(ty));
        }
    }
    let parsers = resolve_parsers(&cfg, &mut plugins)?;
    let mut fc = cfg.flow_control.take().unwrap_or_default();
    let detector = resolve_detector(&fc, &mut plugins)?;
    check_data_layer(cfg.data_layer.as_ref(), &plugins)?;
    check_flow_control(&mut fc, flow_control_gate, &plugins, &mut notes)?;
    Ok(Loaded {
        plugins,
        profiles,
        handler,
        flow_control_gate,
        flow_control: fc,
        detector,
        parsers,
        data_layer: cfg.data_layer,
        notes,
    })
}

/// `kind` and `apiVersion`.
fn check_kind(cfg: &EppConfig, notes: &mut Vec<String>) -> Result<(), String> {
    if cfg.kind != "EndpointPickerConfig" {
        return Err(format!("kind: {}: expected EndpointPickerConfig", cfg.kind));
    }
    match cfg.api_version.as_str() {
        "llm-d.ai/v1alpha1" => {}
        "inference.networking.x-k8s.io/v1alpha1" => notes.push(
            "apiVersion inference.networking.x-k8s.io/v1alpha1 is the deprecated alias of llm-d.ai/v1alpha1; read as such".into(),
        ),
        other => {
            return Err(format!(
                "apiVersion: {other}: expected llm-d.ai/v1alpha1 (or the deprecated inference.networking.x-k8s.io/v1alpha1)"
            ))
        }
    }
    Ok(())
}

/// Deprecated top-level keys moved where llm-d reads them now.
fn migrate(cfg: &mut EppConfig, notes: &mut Vec<String>) {
    if let Some(d) = cfg.saturation_detector.take() {
        let fc = cfg.flow_control.get_or_insert_with(Default::default);
        if fc.saturation_detector.is_none() {
            fc.saturation_detector = Some(d);
        }
        notes.push(
            "saturationDetector (top level) is deprecated: read as flowControl.saturationDetector"
                .into(),
        );
    }
    if let Some(p) = cfg.parser.take() {
        let rh = cfg.request_handler.get_or_insert_with(Default::default);
        if rh.parsers.is_empty() {
            rh.parsers.push(p);
        }
        notes.push("parser (top level) is deprecated: read as requestHandler.parsers".into());
    }
}

/// `featureGates` checked; whether the `flowControl` gate is on.
fn feature_gates(cfg: &EppConfig) -> Result<bool, String> {
    let mut flow_control_gate = false;
    for g in &cfg.feature_gates {
        let (name, value) = match g.split_once('=') {
            Some((n, v)) => (
                n,
                go_bool(v)
                    .ok_or_else(|| format!("{v} is not a valid value for the feature gate {n}"))?,
            ),
            None => (g.as_str(), true),
        };
        if !GATES.contains(&name) {
            return Err(format!(
                "featureGates: feature gate '{name}' is unknown or unregistered (llm-d has {})",
                GATES.join(", ")
            ));
        }
        if name == "flowControl" {
            flow_control_gate = value;
        }
    }
    Ok(flow_control_gate)
}

/// Every plugin of the file: a type, a unique name, a registered type.
fn validate_plugins(cfg: &EppConfig) -> Result<Vec<Plugin>, String> {
    let mut plugins: Vec<Plugin> = Vec::new();
    for (i, p) in cfg.plugins.iter().enumerate() {
        let Some(ty) = p.ty.as_deref().filter(|t| !t.is_empty()) else {
            let name = p.name.clone().unwrap_or_else(|| format!("plugins[{i}]"));
            return Err(format!("plugin '{name}' is missing a type"));
        };
        let name = p
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| ty.to_string());
        if plugins.iter().any(|q| q.name == name) {
            return Err(format!("duplicate plugin name '{name}'"));
        }
        let info = catalogue::lookup(ty).ok_or_else(|| unregistered(ty))?;
        plugins.push(Plugin {
            name,
            info,
            params: p.parameters.clone().unwrap_or(Value::Null),
            auto: false,
        });
    }
    Ok(plugins)
}

/// Parameters and dependencies checked; notes for Alpha and deprecated
/// plugins.
fn instantiate(plugins: &[Plugin], notes: &mut Vec<String>) -> Result<(), String> {
    for p in plugins {
        check_params(p)?;
    }
    check_dependencies(plugins)?;
    for p in plugins {
        if p.info.alpha {
            notes.push(format!(
                "plugin '{}' ({}) is Alpha: llm-d loads it only with --allow-experimental-plugins, which this configuration implies",
                p.name, p.info.ty
            ));
        }
        if let Some(by) = p.info.deprecated {
            notes.push(format!(
                "plugin '{}' ({}) is deprecated in llm-d (use {by})",
                p.name, p.info.ty
            ));
        }
    }
    Ok(())
}

/// The scheduling profiles as (name, plugin refs): the file's, or llm-d's
/// `default` with every filter, scorer and picker; names present and unique.
fn profile_specs(
    cfg: &EppConfig,
    plugins: &[Plugin],
    notes: &mut Vec<String>,
) -> Result<Vec<ProfileSpec>, String> {
    let mut specs: Vec<ProfileSpec> = cfg
        .scheduling_profiles
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.plugins
                    .iter()
                    .map(|r| (r.plugin_ref.clone(), r.weight))
                    .collect(),
            )
        })
        .collect();
    if specs.is_empty() {
        let refs = plugins
            .iter()
            .filter(|p| p.info.is(kind::FILTER | kind::SCORER | kind::PICKER))
            .map(|p| (Some(p.name.clone()), None))
            .collect();
        specs.push((Some("default".into()), refs));
        notes.push("no schedulingProfiles: llm-d's profile 'default' with every filter, scorer and picker (blis keeps file order, llm-d's map order is unspecified)".into());
    }
    let mut seen_names: Vec<&str> = Vec::new();
    for (i, (name, _)) in specs.iter().enumerate() {
        let Some(name) = name.as_deref().filter(|n| !n.is_empty()) else {
            return Err(format!("schedulingProfiles[{i}] is missing a name"));
        };
        if seen_names.contains(&name) {
            return Err(format!("schedulingProfiles has duplicate name '{name}'"));
        }
        seen_names.push(name);
    }
    Ok(specs)
}

/// The one profile handler (llm-d adds single-profile-handler to a
/// one-profile file without one).
fn profile_handler(
    specs: &[ProfileSpec],
    plugins: &mut Vec<Plugin>,
    notes: &mut Vec<String>,
) -> Result<usize, String> {
    let handlers: Vec<usize> = (0..plugins.len())
        .filter(|&i| plugins[i].info.is(kind::HANDLER))
        .collect();
    let handler = match handlers.as_slice() {
        [h] => *h,
        [] if specs.len() == 1 => {
            plugins.push(auto("single-profile-handler"));
            notes.push("no profile handler: llm-d adds single-profile-handler".into());
            plugins.len() - 1
        }
        [] => return Err("no profile handler configured".into()),
        many => {
            return Err(format!(
                "multiple profile handlers found ({}); only one is allowed",
                many.iter()
                    .map(|&i| format!("'{}'", plugins[i].name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    };
    if plugins[handler].info.ty == "single-profile-handler" && specs.len() > 1 {
        return Err("SingleProfileHandler cannot support multiple scheduling profiles".into());
    }
    Ok(handler)
}

/// One scheduling profile: its filters, weighted scorers and picker (an
/// existing picker instance when it names none).
fn build_profile(
    name: &Option<String>,
    refs: &[(Option<String>, Option<f64>)],
    plugins: &[Plugin],
    notes: &mut Vec<String>,
) -> Result<Profile, String> {
    let name = name.clone().unwrap_or_default();
    let mut filters = Vec::new();
    let mut scorers = Vec::new();
    let mut picker: Option<usize> = None;
    for (j, (r, weight)) in refs.iter().enumerate() {
        let Some(r) = r.as_deref().filter(|r| !r.is_empty()) else {
            return Err(format!(
                "schedulingProfiles[{name}].plugins[{j}] is missing a 'pluginRef'"
            ));
        };
        let Some(k) = plugins.iter().position(|p| p.name == r) else {
            return Err(format!(
                "schedulingProfiles[{name}] references undefined plugin '{r}'"
            ));
        };
        let info = plugins[k].info;
        if let Some(w) = weight {
            if !(w.is_finite() && *w >= 0.0) {
                return Err(format!(
                    "schedulingProfiles[{name}]: plugin '{r}' has weight {w}; a weight must be a finite number ≥ 0 (blis cannot rank by it)"
                ));
            }
        }
        let mut used = false;
        if info.is(kind::FILTER) {
            filters.push(k);
            used = true;
        }
        if info.is(kind::SCORER) {
            scorers.push((k, weight.unwrap_or(1.0)));
            used = true;
        }
        if info.is(kind::PICKER) {
            if let Some(prev) = picker {
                return Err(format!(
                    "failed to register plugin '{r}' in profile '{name}': profile already have a registered picker plugin ('{}')",
                    plugins[prev].name
                ));
            }
            picker = Some(k);
            used = true;
        }
        if !used {
            notes.push(format!(
                "schedulingProfiles[{name}]: '{r}' ({}) fills no profile slot; llm-d ignores it there (it still runs as a plugin)",
                info.ty
            ));
        }
    }
    let picker = match picker {
        Some(p) => p,
        None => {
            let first = plugins
                .iter()
                .position(|p| p.info.is(kind::PICKER))
                .expect("a picker exists");
            if plugins[first].info.ty != "max-score-picker" {
                notes.push(format!(
                    "schedulingProfiles[{name}] has no picker: llm-d gives it an existing picker instance, here '{}' ({})",
                    plugins[first].name, plugins[first].info.ty
                ));
            }
            first
        }
    };
    Ok(Profile {
        name,
        filters,
        scorers,
        picker,
    })
}

fn unregistered(ty: &str) -> String {
    format!(
        "plugin type '{ty}' is not registered (it is not an llm-d Router plugin type; see the llm-d table in README.md for the types blis reads)"
    )
}

fn auto(ty: &str) -> Plugin {
    Plugin {
        name: ty.to_string(),
        info: catalogue::lookup(ty).expect("a registered default type"),
        params: Value::Null,
        auto: true,
    }
}

/// Strict parameter decoding: the factory's keys, and the types of the
/// scalar parameters (`threshold: "x"` for an integer fails).
fn check_params(p: &Plugin) -> Result<(), String> {
    let fail = |m: String| {
        format!(
            "failed to create plugin '{}' (type: {}): {m}",
            p.name, p.info.ty
        )
    };
    let map = match &p.params {
        Value::Null => return Ok(()),
        Value::Mapping(m) => m,
        _ if matches!(p.info.keys, Keys::Any) => return Ok(()),
        other => {
            return Err(fail(format!(
                "parameters must be a mapping, got {}",
                describe(other)
            )))
        }
    };
    match p.info.keys {
        Keys::Any => {}
        Keys::Empty if !map.is_empty() => {
            return Err(fail("this policy takes no parameters".into()));
        }
        Keys::Empty => {}
        Keys::Only(keys) => {
            for k in map.keys() {
                let k = k.as_str().unwrap_or("?");
                if !keys.contains(&k) {
                    return Err(fail(format!(
                        "unknown field \"{k}\" (the parameters of {} are: {})",
                        p.info.ty,
                        keys.join(", ")
                    )));
                }
            }
        }
    }
    for (k, v) in map {
        let k = k.as_str().unwrap_or("?");
        let want = expected(p.info.ty, k);
        let ok = match want {
            Want::Int => v.as_i64().is_some() || v.as_u64().is_some(),
            Want::Num => v.as_f64().is_some(),
            Want::Bool => v.as_bool().is_some(),
            Want::Str => v.as_str().is_some(),
            Want::Map => v.is_mapping(),
            Want::List => v.is_sequence(),
            Want::Any => true,
        };
        if !ok {
            return Err(fail(format!(
                "parameter {k}: expected {}, got {}",
                want.name(),
                describe(v)
            )));
        }
    }
    Ok(())
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("bool {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string \"{s}\""),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

#[derive(Clone, Copy)]
enum Want {
    Int,
    Num,
    Bool,
    Str,
    Map,
    List,
    Any,
}

impl Want {
    fn name(self) -> &'static str {
        match self {
            Want::Int => "an integer",
            Want::Num => "a number",
            Want::Bool => "a boolean",
            Want::Str => "a string",
            Want::Map => "a mapping",
            Want::List => "a list",
            Want::Any => "anything",
        }
    }
}

/// The type of the scalar parameters blis reads or llm-d's factories type.
fn expected(ty: &str, key: &str) -> Want {
    match (ty, key) {
        ("load-aware-scorer", "threshold") => Want::Int,
        (_, "threshold") => Want::Num,
        (
            _,
            "nonCachedTokens"
            | "promptTokens"
            | "lruSize"
            | "maxNumOfEndpoints"
            | "primaryPort"
            | "lruCapacityPerServer"
            | "blockSizeTokens"
            | "blockSize"
            | "maxPrefixTokensToMatch"
            | "maxPrefixBlocksToMatch"
            | "idleThreshold"
            | "queueThresholdTokens"
            | "matchLengthScaleTokens"
            | "maxTokenConcurrency"
            | "windowDurationMs"
            | "maxPerReplica"
            | "minColocateBlocks"
            | "maxBatchSize"
            | "cacheSizeInMBPerServer"
            | "minCachedTokenDelta",
        ) => Want::Int,
        (
            _,
            "queueDepthThreshold"
            | "kvCacheUtilThreshold"
            | "power"
            | "k"
            | "maxBusyScore"
            | "matchLengthWeight"
            | "maxConcurrency"
            | "headroom"
            | "minCeiling"
            | "maxCeiling"
            | "lasWeightService"
            | "lasWeightHeadWait"
            | "lasHalfLifeSeconds"
            | "outputRatio",
        ) => Want::Num,
        (
            _,
            "autoTune"
            | "enableFiltering"
            | "fallbackOnEmpty"
            | "speculativeIndexing"
            | "addEstimatedOutputTokens"
            | "allowsNoLabel",
        ) => Want::Bool,
        (
            _,
            "stageOrder"
            | "decodeProfile"
            | "prefillProfile"
            | "encodeProfile"
            | "deciderPluginName"
            | "prefillDeciderPluginName"
            | "encodeDeciderPluginName"
            | "prefixMatchInfoProducerName"
            | "concurrencyMode"
            | "metricsStalenessThreshold"
            | "headerName"
            | "defaultProfile"
            | "strategy"
            | "minAffinity",
        ) => Want::Str,
        (
            _,
            "deciders" | "profiles" | "tokenProcessorConfig" | "indexerConfig" | "kvEventsConfig",
        ) => Want::Map,
        (_, "conditions") => Want::List,
        _ => Want::Any,
    }
}

/// A string parameter of `p` (already type-checked).
pub fn param_str<'a>(p: &'a Value, key: &str) -> Option<&'a str> {
    p.get(key).and_then(Value::as_str)
}

/// A number parameter of `p` (integers are numbers too:
/// `queueDepthThreshold: 8`).
pub fn param_num(p: &Value, key: &str) -> Option<f64> {
    p.get(key).and_then(Value::as_f64)
}

/// The plugins each plugin depends on through `pluginRef`-tagged
/// parameters: the deciders of the disagg/pd handlers.
pub fn dependencies(p: &Plugin) -> Vec<(String, &'static str)> {
    let mut deps = Vec::new();
    match p.info.ty {
        "disagg-profile-handler" => {
            if let Some(d) = p.params.get("deciders") {
                for stage in ["prefill", "encode"] {
                    if let Some(n) = d.get(stage).and_then(Value::as_str) {
                        deps.push((n.to_string(), stage));
                    }
                }
            }
            for (key, stage) in [
                ("prefillDeciderPluginName", "prefill"),
                ("deciderPluginName", "prefill"),
                ("encodeDeciderPluginName", "encode"),
            ] {
                if let Some(n) = param_str(&p.params, key) {
                    deps.push((n.to_string(), stage));
                }
            }
        }
        "pd-profile-handler" => deps.push((
            param_str(&p.params, "deciderPluginName")
                .unwrap_or("prefix-based-pd-decider")
                .to_string(),
            "prefill",
        )),
        _ => {}
    }
    deps
}

/// `program-aware-fairness`'s factory checks: its one strategy and the
/// ranges of its numbers.
fn program_aware(p: &Plugin) -> Result<(), String> {
    let fail = |m: String| {
        Err(format!(
            "failed to create plugin '{}' (type: program-aware-fairness): {m}",
            p.name
        ))
    };
    if let Some(s) = param_str(&p.params, "strategy").filter(|s| !s.is_empty() && *s != "las") {
        return fail(format!(
            "unknown scoring strategy \"{s}\": only \"las\" is supported"
        ));
    }
    let num = |k: &str| p.params.get(k).and_then(Value::as_f64);
    for k in [
        "lasWeightService",
        "lasWeightHeadWait",
        "lasHalfLifeSeconds",
        "evictionTtlSeconds",
    ] {
        if let Some(v) = num(k).filter(|v| *v < 0.0) {
            return fail(format!("{k} must be ≥ 0, got {v}"));
        }
    }
    if let Some(v) = num("evictionSweepSeconds").filter(|v| *v <= 0.0) {
        return fail(format!("evictionSweepSeconds must be > 0, got {v}"));
    }
    Ok(())
}

fn check_dependencies(plugins: &[Plugin]) -> Result<(), String> {
    for p in plugins {
        if p.info.ty == "disagg-profile-handler" {
            let nested = ["profiles", "deciders", "stageOrder"]
                .iter()
                .any(|k| p.params.get(*k).is_some());
            let flat = [
                "decodeProfile",
                "prefillProfile",
                "encodeProfile",
                "prefillDeciderPluginName",
                "encodeDeciderPluginName",
                "deciderPluginName",
            ]
            .iter()
            .any(|k| p.params.get(*k).is_some());
            if nested && flat {
                return Err(format!(
                    "failed to create plugin '{}' (type: disagg-profile-handler): the nested form (profiles, deciders, stageOrder) and the legacy flat form (decodeProfile, prefillDeciderPluginName, …) cannot be mixed",
                    p.name
                ));
            }
            if let Some(d) = p.params.get("deciders") {
                for k in d.as_mapping().into_iter().flat_map(|m| m.keys()) {
                    let k = k.as_str().unwrap_or("?");
                    if k != "prefill" && k != "encode" {
                        return Err(format!("failed to create plugin '{}' (type: disagg-profile-handler): deciders: unknown field \"{k}\" (prefill, encode)", p.name));
                    }
                }
            }
            if let Some(pr) = p.params.get("profiles") {
                for k in pr.as_mapping().into_iter().flat_map(|m| m.keys()) {
                    let k = k.as_str().unwrap_or("?");
                    if !["decode", "prefill", "encode"].contains(&k) {
                        return Err(format!("failed to create plugin '{}' (type: disagg-profile-handler): profiles: unknown field \"{k}\" (decode, prefill, encode)", p.name));
                    }
                }
            }
            match param_str(&p.params, "stageOrder") {
                None | Some("decode-first") => {}
                Some("prefill-first") => {
                    if dependencies(p).iter().any(|(_, s)| *s == "prefill") {
                        return Err(format!("failed to create plugin '{}' (type: disagg-profile-handler): prefill decider is not supported in prefill-first stage order", p.name));
                    }
                }
                Some(o) => return Err(format!("failed to create plugin '{}' (type: disagg-profile-handler): stageOrder '{o}' is not valid (decode-first, prefill-first)", p.name)),
            }
        }
        if p.info.ty == "program-aware-fairness" {
            program_aware(p)?;
        }
        if p.info.ty == "prefix-based-pd-decider" {
            for k in ["nonCachedTokens", "promptTokens"] {
                if p.params
                    .get(k)
                    .and_then(Value::as_i64)
                    .is_some_and(|v| v < 0)
                {
                    return Err(format!(
                        "failed to create plugin '{}' (type: prefix-based-pd-decider): {k} must be ≥ 0",
                        p.name
                    ));
                }
            }
        }
    }
    // Every dependency names an instance; the graph has no cycle.
    let index = |n: &str| plugins.iter().position(|p| p.name == n);
    let mut edges: Vec<Vec<usize>> = Vec::new();
    for p in plugins {
        let mut e = Vec::new();
        for (d, stage) in dependencies(p) {
            let Some(k) = index(&d) else {
                return Err(format!(
                    "failed to create plugin '{}' (type: {}): a plugin has a dependency on the unregistered plugin {d}",
                    p.name, p.info.ty
                ));
            };
            e.push(k);
            if k != index(&p.name).unwrap_or(usize::MAX) && !plugins[k].info.is(kind::DECIDER) {
                return Err(format!(
                    "failed to create plugin '{}' (type: {}): plugin {d} does not implement {stage}DeciderPlugin",
                    p.name, p.info.ty
                ));
            }
        }
        edges.push(e);
    }
    // Depth-first search for a cycle (0 new, 1 on the stack, 2 done).
    fn visit(i: usize, edges: &[Vec<usize>], state: &mut [u8]) -> bool {
        if state[i] == 1 {
            return true;
        }
        if state[i] == 2 {
            return false;
        }
        state[i] = 1;
        for &j in &edges[i] {
            if visit(j, edges, state) {
                return true;
            }
        }
        state[i] = 2;
        false
    }
    let mut state = vec![0u8; plugins.len()];
    for (i, p) in plugins.iter().enumerate() {
        if visit(i, &edges, &mut state) {
            return Err(format!(
                "cycle detected: graph is not a DAG (plugin '{}' depends on itself through its pluginRef parameters)",
                p.name
            ));
        }
    }
    Ok(())
}

/// A profile as written: its name and its (pluginRef, weight) entries.
type ProfileSpec = (Option<String>, Vec<(Option<String>, Option<f64>)>);

fn resolve_parsers(cfg: &EppConfig, plugins: &mut Vec<Plugin>) -> Result<Vec<usize>, String> {
    let refs: Vec<String> = match &cfg.request_handler {
        Some(rh) if !rh.parsers.is_empty() => {
            rh.parsers.iter().map(|r| r.plugin_ref.clone()).collect()
        }
        _ => DEFAULT_PARSERS.iter().map(|s| s.to_string()).collect(),
    };
    let mut out = Vec::new();
    for r in refs {
        if r.is_empty() {
            return Err("requestHandler.parsers: a parser reference is empty".into());
        }
        let k = match plugins.iter().position(|p| p.name == r) {
            Some(k) => k,
            None => match catalogue::lookup(&r) {
                Some(info) if info.is(kind::PARSER) => {
                    plugins.push(auto(&r));
                    plugins.len() - 1
                }
                Some(_) => return Err(format!("the plugin \"{r}\" is not a parser plugin")),
                None => {
                    return Err(format!(
                        "parser references undefined plugin '{r}' (plugin type '{r}' not found in registry)"
                    ))
                }
            },
        };
        if !plugins[k].info.is(kind::PARSER) {
            return Err(format!("the plugin \"{r}\" is not a parser plugin"));
        }
        out.push(k);
    }
    Ok(out)
}

fn resolve_detector(fc: &schema::FlowControl, plugins: &mut Vec<Plugin>) -> Result<usize, String> {
    let name = match &fc.saturation_detector {
        Some(r) if r.plugin_ref.is_empty() => {
            return Err("saturation detector plugin reference is empty".into())
        }
        Some(r) => r.plugin_ref.clone(),
        None => "utilization-detector".to_string(),
    };
    let k = match plugins.iter().position(|p| p.name == name) {
        Some(k) => k,
        None if name == "utilization-detector" => {
            plugins.push(auto("utilization-detector"));
            plugins.len() - 1
        }
        None => {
            return Err(format!(
                "saturation detector references undefined plugin '{name}'"
            ))
        }
    };
    if !plugins[k].info.is(kind::DETECTOR) {
        return Err(format!("plugin '{name}' is not a fwkfc.SaturationDetector"));
    }
    Ok(k)
}

fn check_data_layer(dl: Option<&schema::DataLayer>, plugins: &[Plugin]) -> Result<(), String> {
    let Some(dl) = dl else { return Ok(()) };
    let find = |n: &str| plugins.iter().find(|p| p.name == n);
    for s in &dl.sources {
        match find(&s.plugin_ref) {
            None => {
                return Err(format!(
                    "dataLayer.sources: the plugin {} is not registered (no plugin has that name)",
                    s.plugin_ref
                ))
            }
            Some(p) if !p.info.is(kind::SOURCE) => {
                return Err(format!(
                    "dataLayer.sources: the plugin {} is not a fwkdl.DataSource",
                    s.plugin_ref
                ))
            }
            _ => {}
        }
        for e in &s.extractors {
            match find(&e.plugin_ref) {
                None => {
                    return Err(format!(
                        "dataLayer.sources[{}].extractors: the plugin {} is not registered",
                        s.plugin_ref, e.plugin_ref
                    ))
                }
                Some(p) if !p.info.is(kind::EXTRACTOR) => {
                    return Err(format!(
                        "dataLayer.sources[{}].extractors: the plugin {} is not an extractor",
                        s.plugin_ref, e.plugin_ref
                    ))
                }
                _ => {}
            }
        }
    }
    for (key, r) in [
        ("discovery", &dl.discovery),
        ("peerDiscovery", &dl.peer_discovery),
    ] {
        if let Some(r) = r {
            match find(&r.plugin_ref) {
                Some(p) if p.info.is(kind::DISCOVERY) => {}
                Some(_) => {
                    return Err(format!(
                        "dataLayer.{key}: the plugin {} is not a discovery plugin",
                        r.plugin_ref
                    ))
                }
                None => {
                    return Err(format!(
                        "dataLayer.{key}: the plugin {} is not registered",
                        r.plugin_ref
                    ))
                }
            }
        }
    }
    if let Some(s) = &dl.cross_replica_syncer_plugin_ref {
        return Err(format!(
            "dataLayer.crossReplicaSyncerPluginRef: the plugin {s} is not a fwkdl.CrossReplicaSyncer (llm-d has no in-tree syncer)"
        ));
    }
    Ok(())
}

fn check_flow_control(
    fc: &mut schema::FlowControl,
    gate: bool,
    plugins: &[Plugin],
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let configured = fc.max_bytes.is_some()
        || fc.max_requests.is_some()
        || fc.default_request_ttl.is_some()
        || fc.no_endpoint_request_ttl.is_some()
        || fc.default_priority_band.is_some()
        || fc.default_negative_priority_band.is_some()
        || !fc.priority_bands.is_empty()
        || fc.usage_limit_policy_plugin_ref.is_some()
        || fc.enable_eviction.is_some();
    if !gate {
        if configured {
            notes.push("flowControl: the feature gate flowControl is off, so llm-d ignores these settings (saturationDetector still applies); so does blis".into());
        }
        return Ok(());
    }
    let check_ref = |r: &Option<String>, k: u32, what: &str| -> Result<(), String> {
        let Some(r) = r else { return Ok(()) };
        match plugins.iter().find(|p| &p.name == r) {
            None => Err(format!("flowControl: plugin \"{r}\" not found")),
            Some(p) if !p.info.is(k) => Err(format!(
                "flowControl: plugin \"{r}\" does not implement {what}"
            )),
            _ => Ok(()),
        }
    };
    check_ref(
        &fc.usage_limit_policy_plugin_ref,
        kind::USAGE_LIMIT,
        "UsageLimitPolicy",
    )?;
    let mut seen = Vec::new();
    let bands = fc
        .priority_bands
        .iter()
        .map(|b| ("priorityBands", b))
        .chain(
            fc.default_priority_band
                .iter()
                .map(|b| ("defaultPriorityBand", b)),
        )
        .chain(
            fc.default_negative_priority_band
                .iter()
                .map(|b| ("defaultNegativePriorityBand", b)),
        );
    for (label, b) in bands {
        check_ref(&b.fairness_policy_ref, kind::FAIRNESS, "FairnessPolicy")?;
        check_ref(&b.ordering_policy_ref, kind::ORDERING, "OrderingPolicy")?;
        for (q, what) in [(&b.max_bytes, "MaxBytes"), (&b.max_requests, "MaxRequests")] {
            if let Some(v) = q {
                if schema::quantity(v, &format!("flowControl.{label}.{what}"))? < 0 {
                    return Err(format!("flowControl.{label} {what} must be non-negative"));
                }
            }
        }
        if label == "priorityBands" {
            let p = b.priority.unwrap_or(0);
            if seen.contains(&p) {
                return Err(format!(
                    "flowControl.priorityBands: duplicate priority level {p}"
                ));
            }
            seen.push(p);
        }
    }
    for (q, what) in [
        (&fc.max_bytes, "MaxBytes"),
        (&fc.max_requests, "MaxRequests"),
    ] {
        if let Some(v) = q {
            if schema::quantity(v, &format!("flowControl.{what}"))? < 0 {
                return Err(format!("flowControl {what} must be non-negative"));
            }
        }
    }
    for (d, label) in [
        (&fc.default_request_ttl, "defaultRequestTTL"),
        (&fc.no_endpoint_request_ttl, "noEndpointRequestTTL"),
    ] {
        if let Some(d) = d {
            schema::duration_us(d, &format!("flowControl.{label}"))?;
        }
    }
    Ok(())
}
