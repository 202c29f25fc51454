//! The EndpointPickerConfig document as llm-d decodes it (llm-d-router.md
//! §1.1–1.3, §1.7): strict keys at every level, both API groups, the Helm
//! chart's `router:` values wrapper, Kubernetes quantities and Go durations.

use serde::Deserialize;
use serde_yaml_ng::Value;

/// The llm-d Router's built-in configuration (§1.5): what an empty file or
/// a Helm values file selecting `default-plugins.yaml` without a custom
/// text means.
pub const DEFAULT_CONFIG: &str = "\
apiVersion: llm-d.ai/v1alpha1
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
dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors:
    - pluginRef: core-metrics-extractor
";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EppConfig {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub feature_gates: Vec<String>,
    #[serde(default)]
    pub plugins: Vec<PluginSpec>,
    #[serde(default)]
    pub scheduling_profiles: Vec<ProfileSpec>,
    #[serde(default)]
    pub data_layer: Option<DataLayer>,
    #[serde(default)]
    pub flow_control: Option<FlowControl>,
    #[serde(default)]
    pub request_handler: Option<RequestHandler>,
    /// Deprecated: moved to `flowControl.saturationDetector`.
    #[serde(default)]
    pub saturation_detector: Option<Ref>,
    /// Deprecated: moved to `requestHandler.parsers`.
    #[serde(default)]
    pub parser: Option<Ref>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSpec {
    #[serde(default, rename = "type")]
    pub ty: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub plugins: Vec<ProfileRef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProfileRef {
    #[serde(default)]
    pub plugin_ref: Option<String>,
    #[serde(default)]
    pub weight: Option<f64>,
}

/// `{pluginRef: name}`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Ref {
    #[serde(default)]
    pub plugin_ref: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestHandler {
    #[serde(default)]
    pub parsers: Vec<Ref>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DataLayer {
    #[serde(default)]
    pub inject_defaults: Option<bool>,
    #[serde(default)]
    pub sources: Vec<Source>,
    #[serde(default)]
    pub discovery: Option<Ref>,
    #[serde(default)]
    pub peer_discovery: Option<Ref>,
    #[serde(default)]
    pub cross_replica_syncer_plugin_ref: Option<String>,
    #[serde(default)]
    pub cross_replica_sync_interval: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Source {
    pub plugin_ref: String,
    #[serde(default)]
    pub extractors: Vec<Ref>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FlowControl {
    #[serde(default)]
    pub max_bytes: Option<Value>,
    #[serde(default)]
    pub max_requests: Option<Value>,
    #[serde(default, rename = "defaultRequestTTL")]
    pub default_request_ttl: Option<String>,
    #[serde(default, rename = "noEndpointRequestTTL")]
    pub no_endpoint_request_ttl: Option<String>,
    #[serde(default)]
    pub default_priority_band: Option<Band>,
    #[serde(default)]
    pub default_negative_priority_band: Option<Band>,
    #[serde(default)]
    pub priority_bands: Vec<Band>,
    #[serde(default)]
    pub usage_limit_policy_plugin_ref: Option<String>,
    #[serde(default)]
    pub saturation_detector: Option<Ref>,
    #[serde(default)]
    pub enable_eviction: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Band {
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub max_bytes: Option<Value>,
    #[serde(default)]
    pub max_requests: Option<Value>,
    #[serde(default)]
    pub fairness_policy_ref: Option<String>,
    #[serde(default)]
    pub ordering_policy_ref: Option<String>,
}

/// Decode `text`: an EndpointPickerConfig, an empty text (the built-in
/// default, §1.5) or Helm chart values with `router:` (§1.7). Returns the
/// config and notes about the wrapper.
pub fn decode(text: &str, notes: &mut Vec<String>) -> Result<EppConfig, String> {
    if text.trim().is_empty() {
        notes.push("empty configuration: llm-d's built-in default (queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3)".into());
        return decode_strict(DEFAULT_CONFIG);
    }
    let value: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| format!("failed to decode configuration JSON/YAML: {e}"))?;
    if let Some(router) = value.get("router") {
        return unwrap_router(router, notes);
    }
    decode_strict(text)
}

fn decode_strict(text: &str) -> Result<EppConfig, String> {
    serde_yaml_ng::from_str(text)
        .map_err(|e| format!("failed to decode configuration JSON/YAML: {e}"))
}

/// The Helm chart's values: the EPP loads
/// `router.epp.pluginsCustomConfig[router.epp.pluginsConfigFile]`.
fn unwrap_router(router: &Value, notes: &mut Vec<String>) -> Result<EppConfig, String> {
    let epp = router.get("epp");
    let file = epp
        .and_then(|e| e.get("pluginsConfigFile"))
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or("router.epp.pluginsConfigFile: expected a file name (string)")
        })
        .transpose()?
        .unwrap_or_else(|| "default-plugins.yaml".to_string());
    let custom = epp
        .and_then(|e| e.get("pluginsCustomConfig"))
        .and_then(|c| c.get(file.as_str()));
    if let Some(flags) = epp.and_then(|e| e.get("flags")) {
        notes.push(format!(
            "router.epp.flags: read {} (refresh-metrics-interval sets the scrape interval; the others have no simulated effect)",
            flags_keys(flags)
        ));
    }
    match custom {
        Some(v) => {
            let text = v.as_str().ok_or_else(|| {
                format!("router.epp.pluginsCustomConfig.{file}: expected the EndpointPickerConfig as a YAML string")
            })?;
            notes.push(format!(
                "Helm values: the EPP configuration is router.epp.pluginsCustomConfig.{file}"
            ));
            decode_strict(text).map_err(|e| format!("router.epp.pluginsCustomConfig.{file}: {e}"))
        }
        None if file == "default-plugins.yaml" => {
            notes.push("Helm values without a custom default-plugins.yaml: the chart's default profile (llm-d's built-in default)".into());
            decode_strict(DEFAULT_CONFIG)
        }
        None => Err(format!(
            "router.epp.pluginsConfigFile = {file}, but router.epp.pluginsCustomConfig has no entry '{file}' (the chart ships default-plugins.yaml and payload-agnostic.yaml; give the text under pluginsCustomConfig)"
        )),
    }
}

fn flags_keys(flags: &Value) -> String {
    match flags.as_mapping() {
        Some(m) => m
            .keys()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        None => "?".into(),
    }
}

/// `router.epp.flags.refresh-metrics-interval` of a values file, if any.
pub fn refresh_flag(text: &str) -> Option<String> {
    let v: Value = serde_yaml_ng::from_str(text).ok()?;
    let f = v.get("router")?.get("epp")?.get("flags")?;
    f.get("refresh-metrics-interval")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// A Kubernetes quantity (`5000`, `"1Gi"`, `"1k"`) as an integer.
pub fn quantity(v: &Value, label: &str) -> Result<i64, String> {
    if let Some(i) = v.as_i64() {
        return Ok(i);
    }
    let s = v
        .as_str()
        .ok_or_else(|| {
            format!("{label}: expected a quantity (an integer or a string like \"1Gi\")")
        })?
        .trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let mult: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return Err(format!("{label} = \"{s}\": not a Kubernetes quantity")),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{label} = \"{s}\": not a Kubernetes quantity"))?;
    let x = (n * mult).ceil();
    if !x.is_finite() || x.abs() > 9.0e18 {
        return Err(format!("{label} = \"{s}\": out of range"));
    }
    Ok(x as i64)
}

/// A Go duration (`"60s"`, `"1m30s"`, `"200ms"`, `"0s"`) in µs.
pub fn duration_us(s: &str, label: &str) -> Result<i64, String> {
    let bad = || format!("{label} = \"{s}\": not a duration (e.g. \"60s\", \"200ms\", \"1m30s\")");
    let t = s.trim();
    if t == "0" {
        return Ok(0);
    }
    let (neg, mut rest) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let n: f64 = rest[..n_end].parse().map_err(|_| bad())?;
        rest = &rest[n_end..];
        let u_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..u_end] {
            "ns" => 1e-3,
            "us" | "µs" | "μs" => 1.0,
            "ms" => 1e3,
            "s" => 1e6,
            "m" => 60e6,
            "h" => 3600e6,
            _ => return Err(bad()),
        };
        total += n * unit;
        rest = &rest[u_end..];
    }
    if neg {
        return Err(format!("{label} = \"{s}\": must not be negative"));
    }
    if total > 9.0e15 {
        return Err(format!("{label} = \"{s}\": out of range"));
    }
    Ok(total.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_durations() {
        let q = |s: &str| quantity(&Value::String(s.into()), "x");
        assert_eq!(q("1Gi"), Ok(1 << 30));
        assert_eq!(q("1k"), Ok(1000));
        assert_eq!(q("5000"), Ok(5000));
        assert_eq!(quantity(&Value::Number(7.into()), "x"), Ok(7));
        assert!(q("1Q").is_err());
        assert_eq!(duration_us("60s", "d"), Ok(60_000_000));
        assert_eq!(duration_us("1m30s", "d"), Ok(90_000_000));
        assert_eq!(duration_us("200ms", "d"), Ok(200_000));
        assert_eq!(duration_us("0s", "d"), Ok(0));
        assert_eq!(duration_us("1.5h", "d"), Ok(5_400_000_000));
        assert!(duration_us("10", "d").is_err());
        assert!(duration_us("-1s", "d").is_err());
        assert!(duration_us("s", "d").is_err());
    }
}
