//! Scheduling profiles and profile handlers → blis routing: one profile
//! becomes `[routing]` (the `weighted` policy when it is scorers and a
//! max-score pick, else a `pipeline` profile); the disagg/pd handlers become
//! `[pd]` with a routing section per stage over the run file's pools by
//! role. Every llm-d plugin is mapped, stated as having no simulated effect
//! (with the reason), or refused.

use serde_yaml_ng::Value;
use toml::Value as T;

use super::loader::{param_num as num, param_str, Loaded, Plugin, Profile};
use super::Out;

/// Where a profile runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stage {
    /// The only profile (single, data-parallel, header handlers).
    Single,
    Prefill,
    Decode,
    /// The encode stage (the run file's encode pools).
    Encode,
}

fn int(p: &Value, key: &str) -> Option<i64> {
    p.get(key).and_then(Value::as_i64)
}

fn table(pairs: &[(&str, T)]) -> toml::Table {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn unsupported(p: &Plugin, why: &str) -> String {
    format!(
        "plugin '{}' ({}): blis cannot run this: {why}. Remove it from the profile to run the rest (see \"What blis refuses\" in docs/src/llm-d.md)",
        p.name, p.info.ty
    )
}

/// A scorer's blis form, or none when its score is the same for every
/// instance in a simulation (with the reason).
enum ScorerMap {
    Blis(&'static str, toml::Table),
    /// Every candidate's score and why.
    Constant(f64, &'static str),
}

/// What a prompt-reading scorer is when the router sees no prompt.
const NO_PROMPT: &str = "llm-d's only parser is passthrough-parser, so the router sees no prompt";

fn map_scorer(l: &Loaded, p: &Plugin, out: &mut Out) -> Result<ScorerMap, String> {
    let params = &p.params;
    if !l.sees_prompt() {
        match p.info.ty {
            "prefix-cache-scorer" | "precise-prefix-cache-scorer" => {
                return Ok(ScorerMap::Constant(
                    0.0,
                    "llm-d's only parser is passthrough-parser, so the router sees no prompt and no candidate holds any of it: every candidate scores 0",
                ))
            }
            "token-load-scorer" => {
                return Ok(ScorerMap::Constant(
                    1.0,
                    "llm-d's only parser is passthrough-parser, so the router sees no prompt and counts no tokens: every candidate scores 1",
                ))
            }
            "no-hit-lru-scorer" => {
                out.note(format!(
                    "plugin '{}' (no-hit-lru-scorer): {NO_PROMPT}, so no candidate ever holds a prefix and every request is cold: blis's no-hit-lru with all_cold = true (least recently used instance first)",
                    p.name
                ));
                return Ok(ScorerMap::Blis(
                    "no-hit-lru",
                    table(&[("all_cold", T::Boolean(true))]),
                ));
            }
            _ => {}
        }
    }
    Ok(match p.info.ty {
        "queue-scorer" => ScorerMap::Blis("waiting-queue", toml::Table::new()),
        "kv-cache-utilization-scorer" => ScorerMap::Blis("kv-utilization", toml::Table::new()),
        "running-requests-size-scorer" => ScorerMap::Blis("running-requests", toml::Table::new()),
        "load-aware-scorer" => {
            let raw = params.get("threshold").map(|v| {
                v.as_i64()
                    .map(i128::from)
                    .or(v.as_u64().map(i128::from))
                    .unwrap_or(0)
            });
            let t = match raw {
                None => 128,
                Some(t) if t <= 0 => {
                    out.note(format!("plugin '{}' (load-aware-scorer): threshold {t} ≤ 0 means 128 in llm-d", p.name));
                    128
                }
                Some(t) if t > i128::from(u32::MAX) => {
                    return Err(format!(
                        "plugin '{}' (load-aware-scorer): threshold {t} is beyond what blis's load-aware scorer takes (at most {}); a queue that deep is never reached, so use a smaller threshold",
                        p.name,
                        u32::MAX
                    ))
                }
                Some(t) => t as i64,
            };
            ScorerMap::Blis("load-aware", table(&[("threshold", T::Integer(t))]))
        }
        "active-request-scorer" => {
            let mut idle = int(params, "idleThreshold").unwrap_or(0);
            let mut busy = num(params, "maxBusyScore").unwrap_or(1.0);
            if idle < 0 {
                out.note(format!("plugin '{}' (active-request-scorer): idleThreshold {idle} < 0 counts as 0", p.name));
                idle = 0;
            }
            if !(0.0..=1.0).contains(&busy) {
                out.note(format!("plugin '{}' (active-request-scorer): maxBusyScore {busy} is outside [0, 1] and counts as 1", p.name));
                busy = 1.0;
            }
            if params.get("requestTimeout").is_some() {
                out.note(format!("plugin '{}' (active-request-scorer): requestTimeout is ignored by llm-d too", p.name));
            }
            let mut t = toml::Table::new();
            if idle != 0 {
                t.insert("idle_threshold".into(), T::Integer(idle));
            }
            if busy != 1.0 {
                t.insert("max_busy_score".into(), T::Float(busy));
            }
            ScorerMap::Blis("active-requests", t)
        }
        "prefix-cache-scorer" => {
            let producer = param_str(params, "prefixMatchInfoProducerName").unwrap_or("");
            let mut m = prefix_scorer(l, p, producer, out)?;
            if let ScorerMap::Blis(_, t) = &mut m {
                match_length(p, t, out)?;
            }
            m
        }
        "precise-prefix-cache-scorer" => {
            out.note(format!(
                "plugin '{}' (precise-prefix-cache-scorer): llm-d's prefix-cache-scorer over a precise producer: blis's precise-prefix-cache with normalise = \"total\" (the fraction of the prompt's blocks the engine's KV cache holds)",
                p.name
            ));
            ScorerMap::Blis("precise-prefix-cache", precise_total())
        }
        "no-hit-lru-scorer" => {
            let lru = int(params, "lruSize").unwrap_or(1024);
            out.note(format!(
                "plugin '{}' (no-hit-lru-scorer): blis's no-hit-lru (warm = some instance holds a prefix block in its KV cache; llm-d asks its prefix producer); its LRU holds every instance, which is llm-d's lruSize {lru} whenever the cluster has at most {lru} instances",
                p.name
            ));
            ScorerMap::Blis("no-hit-lru", toml::Table::new())
        }
        "topology-affinity-scorer" => ScorerMap::Constant(
            0.0,
            "blis instances carry no topology labels, so every candidate shares no level with the peer and scores 0",
        ),
        "header-label-affinity-scorer" => ScorerMap::Constant(
            0.0,
            "blis requests carry no such header and instances no such label, so every candidate scores 0",
        ),
        "mm-embeddings-cache-scorer" => ScorerMap::Constant(
            0.0,
            "blis requests carry a multimodal flag but no items, so no candidate's encoder cache holds any and every candidate scores 0",
        ),
        "context-length-aware" => ScorerMap::Constant(
            0.5,
            "blis instances carry no context-length-range label, so every candidate scores 0.5",
        ),
        "endpoint-attribute-scorer" => ScorerMap::Constant(
            0.0,
            "blis produces no such endpoint attribute (no DCGM GPU metrics), so every candidate misses it and scores 0",
        ),
        "lora-affinity-scorer" => {
            out.note(format!(
                "plugin '{}' (lora-affinity-scorer): blis's lora-affinity with graded = true (1 resident, 0.8 a free adapter slot, 0.6 loading, else 0; llm-d's active and waiting adapters read as blis's resident and loading ones, live or as [routing.freshness] resident_adapters_us says; a base-model request scores 1 everywhere); it needs the run file's [lora]",
                p.name
            ));
            ScorerMap::Blis("lora-affinity", table(&[("graded", T::Boolean(true))]))
        }
        "token-load-scorer" => token_load(l, p, out)?,
        "session-affinity-scorer" => {
            ScorerMap::Blis("session-affinity", session_affinity(p, out)?)
        }
        "latency-scorer" => ScorerMap::Blis("latency", super::predicted::scorer(l, p, out)?),
        other => return Err(format!("plugin '{}' ({other}): not a scorer", p.name)),
    })
}

/// `session-affinity-scorer` / `-filter` → blis's `session-affinity`
/// params: strategy `encoded_endpoint_header` (the default: the client
/// echoes the instance of its last response, so no expiry) or `session_id`
/// (bindings kept 300 s after the session's last request).
fn session_affinity(p: &Plugin, out: &mut Out) -> Result<toml::Table, String> {
    let strategy = param_str(&p.params, "strategy").unwrap_or("encoded_endpoint_header");
    let (params, how) = match strategy {
        "encoded_endpoint_header" => (
            toml::Table::new(),
            "the client echoes the instance of its session's last response (x-session-token)",
        ),
        "session_id" => (
            table(&[("ttl_us", T::Integer(300_000_000))]),
            "the session id header binds the session to its last instance for 300 s",
        ),
        other => {
            return Err(format!(
                "plugin '{}' ({}): strategy '{other}' is not one of encoded_endpoint_header, session_id",
                p.name, p.info.ty
            ))
        }
    };
    let profile = param_str(&p.params, "profileName")
        .map(|n| format!("; profileName '{n}': blis binds the instance chosen by the profile the plugin is in"))
        .unwrap_or_default();
    out.note(format!(
        "plugin '{}' ({}): blis's session-affinity: {how}; blis sessions are the workload's multi-turn sessions (every round of one conversation), requests outside a session have none{profile}",
        p.name, p.info.ty
    ));
    Ok(params)
}

/// `token-load-scorer` (with the `inflight-load-producer` it reads) →
/// blis's `token-load`; `block_size` is set from the run file when the
/// config is applied to one.
fn token_load(l: &Loaded, p: &Plugin, out: &mut Out) -> Result<ScorerMap, String> {
    let t = int(&p.params, "queueThresholdTokens").unwrap_or(4_194_304);
    if t < 1 {
        return Err(format!(
            "plugin '{}' (token-load-scorer): queueThresholdTokens {t} must be ≥ 1",
            p.name
        ));
    }
    let mut params = table(&[("threshold", T::Integer(t))]);
    params.extend(in_flight_params(l, p));
    let estimate = match params.get("output_ratio") {
        Some(ratio) => format!(", plus round(prompt × {ratio}) estimated output tokens (blis requests carry no client max_tokens to cap it)"),
        None => String::new(),
    };
    out.note(format!(
        "plugin '{}' (token-load-scorer): blis's token-load: the router's in-flight uncached prompt tokens per instance{estimate}, released at the first token (at the end with an output estimate), plus this request's uncached tokens there, from a router-side prefix index like prefix-affinity's in blocks of the run's KV block size",
        p.name
    ));
    Ok(ScorerMap::Blis("token-load", params))
}

/// blis's `precise-prefix-cache` scoring as llm-d's prefix-cache-scorer
/// does over a precise producer: matched / total blocks.
fn precise_total() -> toml::Table {
    table(&[("normalise", T::String("total".into()))])
}

/// `matchLengthWeight` / `matchLengthScaleTokens` of a prefix-cache-scorer
/// onto its blis scorer's params (validated as llm-d does).
fn match_length(p: &Plugin, t: &mut toml::Table, out: &mut Out) -> Result<(), String> {
    let w = num(&p.params, "matchLengthWeight").unwrap_or(0.0);
    let scale = num(&p.params, "matchLengthScaleTokens").unwrap_or(8192.0);
    if !(0.0..=1.0).contains(&w) {
        return Err(format!("failed to create plugin '{}' (type: prefix-cache-scorer): matchLengthWeight {w} must be in [0, 1]", p.name));
    }
    if w > 0.0 && scale <= 0.0 {
        return Err(format!("failed to create plugin '{}' (type: prefix-cache-scorer): matchLengthScaleTokens {scale} must be > 0 when matchLengthWeight > 0", p.name));
    }
    if w == 0.0 {
        return Ok(());
    }
    t.insert("match_length_weight".into(), T::Float(w));
    t.insert("match_length_scale_tokens".into(), T::Float(scale));
    out.note(format!(
        "plugin '{}' (prefix-cache-scorer): matchLengthWeight {w}, matchLengthScaleTokens {scale}: score = {w}·min(1, matched tokens/{scale})² + {}·(the match fraction), matched tokens counted in the run's KV blocks",
        p.name,
        1.0 - w
    ));
    Ok(())
}

/// `prefix-cache-scorer` over the producer named `producer` ("" = the
/// default approximate index).
fn prefix_scorer(
    l: &Loaded,
    p: &Plugin,
    producer: &str,
    out: &mut Out,
) -> Result<ScorerMap, String> {
    let prod = if producer.is_empty() {
        l.plugins
            .iter()
            .find(|q| q.info.ty == "approx-prefix-cache-producer")
    } else {
        match l.plugins.iter().find(|q| q.name == producer) {
            Some(q) => Some(q),
            None => {
                return Err(format!(
                    "plugin '{}' (prefix-cache-scorer): prefixMatchInfoProducerName '{producer}' names no plugin (no default producer found for missing data key PrefixCacheMatchInfo/{producer})",
                    p.name
                ))
            }
        }
    };
    let ty = prod.map_or("approx-prefix-cache-producer", |q| q.info.ty);
    Ok(match ty {
        "approx-prefix-cache-producer" => {
            let lru = prod
                .and_then(|q| int(&q.params, "lruCapacityPerServer"))
                .unwrap_or(31250);
            if lru < 1 {
                return Err(format!(
                    "plugin '{}' (approx-prefix-cache-producer): lruCapacityPerServer {lru} must be ≥ 1",
                    prod.map_or("approx-prefix-cache-producer", |q| q.name.as_str())
                ));
            }
            out.note(format!(
                "plugin '{}' (prefix-cache-scorer): blis's prefix-affinity, a router-side index of each instance's prompts with llm-d's lruCapacityPerServer {lru} (blis indexes the run's KV blocks, default 16 tokens, where llm-d hashes blocks of at least 64 tokens)",
                p.name
            ));
            ScorerMap::Blis("prefix-affinity", table(&[("capacity", T::Integer(lru))]))
        }
        "precise-prefix-cache-producer" => {
            out.note(format!(
                "plugin '{}' (prefix-cache-scorer on {producer}): blis's precise-prefix-cache with normalise = \"total\": the fraction of the prompt's blocks the engine's KV cache holds, as KV events report it",
                p.name
            ));
            ScorerMap::Blis("precise-prefix-cache", precise_total())
        }
        "burst-prefix-cache-producer" => {
            out.note(format!(
                "plugin '{}' (prefix-cache-scorer on {producer}): simulated as blis's prefix-affinity (the router-side prefix index); the burst producer's co-location window has no simulated effect",
                p.name
            ));
            ScorerMap::Blis("prefix-affinity", toml::Table::new())
        }
        other => {
            return Err(format!(
                "plugin '{}' (prefix-cache-scorer): prefixMatchInfoProducerName '{producer}' is a {other}, which produces no prefix match info",
                p.name
            ))
        }
    })
}

/// A filter's effect: a blis filter, removed by the stage's pool (role
/// filters) or none in a simulation (with the reason), or refused.
enum FilterMap {
    Blis(&'static str, toml::Table),
    NoEffect(String),
}

fn map_filter(
    l: &Loaded,
    p: &Plugin,
    stage: Stage,
    pools: Option<bool>,
    out: &mut Out,
) -> Result<FilterMap, String> {
    if p.info.ty == "utilization-detector" {
        let qd = num(&p.params, "queueDepthThreshold").unwrap_or(5.0);
        let kv = num(&p.params, "kvCacheUtilThreshold").unwrap_or(0.8);
        let h = num(&p.params, "headroom").unwrap_or(0.0);
        out.note(format!(
            "plugin '{}' (utilization-detector) as a filter: blis's unsaturated (queue < {qd}·(1 + {h}), kv < {kv}·(1 + {h}), all when none); its 200 ms staleness rule never applies to blis's 50 ms scrape",
            p.name
        ));
        return Ok(FilterMap::Blis(
            "unsaturated",
            table(&[
                ("queue_depth_threshold", T::Float(qd)),
                ("kv_threshold", T::Float(kv)),
                ("headroom", T::Float(h)),
            ]),
        ));
    }
    if p.info.ty == "utilization-filter" {
        return utilization_filter(p, out);
    }
    if p.info.ty == "concurrency-detector" {
        return concurrency_filter(l, p, out);
    }
    if p.info.ty == "slo-headroom-tier-filter" {
        return Ok(FilterMap::Blis(
            "slo-headroom-tier",
            super::predicted::tier_filter(l, p, out)?,
        ));
    }
    if p.info.ty == "prefix-cache-affinity-filter" && !l.sees_prompt() {
        return Ok(FilterMap::NoEffect(format!(
            "{NO_PROMPT}: no candidate holds any of it, so none is sticky and every candidate is kept"
        )));
    }
    if p.info.ty == "prefix-cache-affinity-filter" {
        return Ok(FilterMap::Blis(
            "prefix-cache-affinity",
            super::predicted::affinity_filter(l, p, out)?,
        ));
    }
    if p.info.ty == "session-affinity-filter" {
        return Ok(FilterMap::Blis(
            "session-affinity",
            session_affinity(p, out)?,
        ));
    }
    if matches!(
        p.info.ty,
        "label-selector-filter" | "by-label-selector" | "by-label"
    ) {
        return label_filter(p, stage, pools).map(FilterMap::NoEffect);
    }
    Ok(FilterMap::NoEffect(match (p.info.ty, stage) {
        ("decode-filter", Stage::Decode) => "the decode stage routes over the decode and both pools (llm-d's role labels are blis's pool roles)".into(),
        ("prefill-filter", Stage::Prefill) => "the prefill stage routes over the prefill and both pools (llm-d's role labels are blis's pool roles)".into(),
        ("encode-filter", Stage::Encode) => "the encode stage routes over the encode pools (llm-d's role labels are blis's pool roles)".into(),
        ("decode-filter", Stage::Single) if pools != Some(true) => "blis instances outside [[pools]] carry no role label, which decode-filter keeps: it keeps every instance".into(),
        ("decode-filter", Stage::Single) => "blis routes whole requests over the decode and both pools, which decode-filter keeps".into(),
        ("prefill-filter" | "encode-filter", _) | ("decode-filter", Stage::Prefill | Stage::Encode) => {
            return Err(format!(
                "plugin '{}' ({}) in a {} profile: it would drop every candidate of that stage (blis's pool roles are the role labels)",
                p.name,
                p.info.ty,
                match stage { Stage::Single => "single", Stage::Prefill => "prefill", Stage::Decode => "decode", Stage::Encode => "encode" }
            ))
        }
        ("topology-affinity-filter", _) => "blis instances carry no topology labels, so no candidate shares a level with the peer and the filter keeps them all".into(),
        ("context-length-aware", _) => "blis instances carry no context-length-range label, and unlabelled endpoints are kept".into(),
        ("endpoint-attribute-filter", _) => {
            let pass = param_str(&p.params, "onMissing").unwrap_or("Pass") == "Pass";
            let fallback = p.params.get("fallbackOnEmpty").and_then(Value::as_bool).unwrap_or(false);
            if !(pass || fallback) {
                return Err(unsupported(p, "blis instances carry no such attribute (no DCGM GPU metrics), so this onMissing would leave no endpoint for any request, where the deployment's endpoints carry it (set onMissing: Pass or fallbackOnEmpty: true)"));
            }
            "blis produces no such endpoint attribute (no DCGM GPU metrics), so every instance passes (onMissing: Pass / fallbackOnEmpty)".into()
        }
        _ => return Err(unsupported(p, "this filter's signal")),
    }))
}

/// The role label llm-d puts on endpoints (blis's pool roles).
const ROLE_LABEL: &str = "llm-d.ai/role";

/// Whether an endpoint whose only label is `role` (`None`: no label at
/// all) passes `p`'s selector (`label-selector-filter`, `by-label-selector`:
/// Kubernetes `matchLabels` and `matchExpressions`; `by-label`: `label`,
/// `validValues`, `allowsNoLabel`).
fn selects(p: &Plugin, role: Option<&str>) -> Result<bool, String> {
    let bad = |m: String| format!("plugin '{}' ({}): {m}", p.name, p.info.ty);
    let value = |key: &str| if key == ROLE_LABEL { role } else { None };
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_sequence)
            .map(|s| {
                s.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    if p.info.ty == "by-label" {
        let Some(label) = param_str(&p.params, "label") else {
            return Err(bad("parameters.label is required".into()));
        };
        let valid = strings(p.params.get("validValues"));
        let no_label = p
            .params
            .get("allowsNoLabel")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        return Ok(match value(label) {
            Some(v) => valid.iter().any(|x| x == v),
            None => no_label,
        });
    }
    // Every term is read (and checked) whatever the earlier ones gave: a
    // malformed selector is refused for what it is, not for what it keeps.
    let mut all = true;
    if let Some(m) = p.params.get("matchLabels").and_then(Value::as_mapping) {
        for (k, v) in m {
            let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
                return Err(bad("matchLabels maps label names to string values".into()));
            };
            all &= value(k) == Some(v);
        }
    }
    if let Some(exprs) = p.params.get("matchExpressions") {
        let Some(exprs) = exprs.as_sequence() else {
            return Err(bad(
                "matchExpressions is a list of {key, operator, values}".into()
            ));
        };
        for (i, e) in exprs.iter().enumerate() {
            let key = param_str(e, "key").unwrap_or("");
            let op = param_str(e, "operator").unwrap_or("");
            let values = strings(e.get("values"));
            let present = value(key);
            let ok = match op {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(bad(format!("matchExpressions[{i}]: operator {op} needs values")))
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(bad(format!("matchExpressions[{i}]: operator {op} takes no values")))
                }
                "In" => present.is_some_and(|v| values.iter().any(|x| x == v)),
                "NotIn" => present.is_none_or(|v| !values.iter().any(|x| x == v)),
                "Exists" => present.is_some(),
                "DoesNotExist" => present.is_none(),
                other => {
                    return Err(bad(format!(
                        "matchExpressions[{i}]: operator \"{other}\" is not In, NotIn, Exists or DoesNotExist"
                    )))
                }
            };
            all &= ok;
        }
    }
    Ok(all)
}

/// A label selector over blis's instances, whose only label is the role
/// of their pool (none outside `[[pools]]`): it keeps every candidate of
/// the stage (no simulated effect, said why) or none (refused: llm-d would
/// find no endpoint); one that keeps some of a stage's pools and not others
/// is refused (blis routes a stage over all its pools).
fn label_filter(p: &Plugin, stage: Stage, pools: Option<bool>) -> Result<String, String> {
    let roles: &[Option<&str>] = match (pools == Some(true), stage) {
        (false, _) => &[None],
        (true, Stage::Prefill) => &[Some("prefill"), Some("both")],
        (true, Stage::Single | Stage::Decode) => &[Some("decode"), Some("both")],
        (true, Stage::Encode) => &[Some("encode")],
    };
    let mut kept = Vec::new();
    for &r in roles {
        if selects(p, r)? {
            kept.push(r);
        }
    }
    let shown =
        |r: &Option<&str>| r.map_or("no label".to_string(), |v| format!("{ROLE_LABEL}={v}"));
    let stage_name = match stage {
        Stage::Single => "the profile",
        Stage::Prefill => "the prefill stage",
        Stage::Decode => "the decode stage",
        Stage::Encode => "the encode stage",
    };
    if kept.len() == roles.len() {
        return Ok(format!(
            "blis instances carry only their pool's role label, and every candidate of {stage_name} ({}) passes the selector",
            roles.iter().map(shown).collect::<Vec<_>>().join(", ")
        ));
    }
    if kept.is_empty() {
        return Err(format!(
            "plugin '{}' ({}): it would drop every candidate of {stage_name} (blis instances carry only their pool's role label: {}), so llm-d would find no endpoint",
            p.name,
            p.info.ty,
            roles.iter().map(shown).collect::<Vec<_>>().join(", ")
        ));
    }
    Err(unsupported(
        p,
        &format!(
            "a selector that keeps some pools of {stage_name} ({}) and not others (blis routes a stage over all its pools)",
            kept.iter().map(shown).collect::<Vec<_>>().join(", ")
        ),
    ))
}

/// llm-d's `concurrency-detector` as a filter (requests mode): keep the
/// endpoints with in-flight requests < maxConcurrency·(1 + headroom), none
/// when all are over — blis-std's `utilization` filter on active-requests
/// with max = ⌈limit⌉ − 1 (in-flight counts are integers).
fn concurrency_filter(l: &Loaded, p: &Plugin, out: &mut Out) -> Result<FilterMap, String> {
    let mode = concurrency_mode(p)?;
    let h = num(&p.params, "headroom").unwrap_or(0.0);
    // "in flight < limit" as an inclusive integer bound, the limit ≥ 1.
    let keep_max = |key: &str, default: f64| -> Result<(f64, f64), String> {
        let limit = num(&p.params, key).unwrap_or(default) * (1.0 + h);
        if !(limit.is_finite() && limit >= 1.0) {
            return Err(format!(
                "plugin '{}' (concurrency-detector): {key}·(1 + headroom) = {limit} keeps no endpoint; give at least 1",
                p.name
            ));
        }
        Ok((limit, limit.ceil() - 1.0))
    };
    let (req_limit, req_max) = keep_max("maxConcurrency", 100.0)?;
    if mode == "requests" {
        out.note(format!(
            "plugin '{}' (concurrency-detector) as a filter: blis's utilization filter keeping instances with fewer than {req_limit} requests in flight (active-requests ≤ {req_max}; none when all are over, as llm-d)",
            p.name
        ));
        return Ok(utilization(&[("active-requests", req_max)], false));
    }
    let (tok_limit, tok_max) = keep_max("maxTokenConcurrency", 1_000_000.0)?;
    if !l.sees_prompt() {
        // No tokens are ever counted: the token condition keeps everyone.
        if mode == "tokens" {
            return Ok(FilterMap::NoEffect(format!(
                "{NO_PROMPT} and counts no in-flight tokens: every candidate is under {tok_limit}"
            )));
        }
        out.note(format!(
            "plugin '{}' (concurrency-detector, hybrid) as a filter: {NO_PROMPT} and counts no tokens: blis's utilization filter keeping instances with fewer than {req_limit} requests in flight",
            p.name
        ));
        return Ok(utilization(&[("active-requests", req_max)], false));
    }
    let mut t = table(&[("max_tokens", T::Integer(tok_max as i64))]);
    let mut also = String::new();
    if mode == "hybrid" {
        t.insert("max_requests".into(), T::Integer(req_max as i64));
        also = format!(" and fewer than {req_limit} requests");
    }
    t.extend(in_flight_params(l, p));
    out.note(format!(
        "plugin '{}' (concurrency-detector, {mode}) as a filter: blis's in-flight-limit keeping instances with fewer than {tok_limit} router in-flight tokens{also} (token-load's count: uncached prompt tokens until the first token; none when all are over, as llm-d)",
        p.name
    ));
    Ok(FilterMap::Blis("in-flight-limit", t))
}

/// A `concurrency-detector`'s `concurrencyMode` (default `requests`), an
/// unknown one refused as llm-d's factory refuses it.
pub(super) fn concurrency_mode(p: &Plugin) -> Result<&str, String> {
    let mode = param_str(&p.params, "concurrencyMode").unwrap_or("requests");
    if !matches!(mode, "requests" | "tokens" | "hybrid") {
        return Err(format!(
            "failed to create plugin '{}' (type: concurrency-detector): concurrencyMode '{mode}' is not one of requests, tokens, hybrid",
            p.name
        ));
    }
    Ok(mode)
}

/// The `inflight-load-producer` settings `p` reads (`inFlightLoadProducerName`
/// or the config's first): output estimate and the approx index's LRU.
fn in_flight_params(l: &Loaded, p: &Plugin) -> toml::Table {
    let mut params = toml::Table::new();
    let producer = param_str(&p.params, "inFlightLoadProducerName");
    let prod = l
        .plugins
        .iter()
        .find(|q| q.info.ty == "inflight-load-producer" && producer.is_none_or(|n| q.name == n));
    if let Some(q) = prod {
        if q.params
            .get("addEstimatedOutputTokens")
            .and_then(Value::as_bool)
            == Some(true)
        {
            let ratio = num(&q.params, "outputRatio").unwrap_or(1.5);
            params.insert("output_ratio".into(), T::Float(ratio));
            if let Some(m) = int(&q.params, "maxEstimatedOutputTokens") {
                params.insert("max_output_estimate".into(), T::Integer(m));
            }
        }
    }
    let lru = l
        .plugins
        .iter()
        .find(|q| q.info.ty == "approx-prefix-cache-producer")
        .and_then(|q| int(&q.params, "lruCapacityPerServer"))
        .unwrap_or(31250);
    params.insert("capacity".into(), T::Integer(lru.max(1)));
    params
}

/// blis-std's `utilization` filter with these (metric, max) conditions.
fn utilization(conditions: &[(&str, f64)], fallback_on_empty: bool) -> FilterMap {
    let conditions = conditions
        .iter()
        .map(|&(metric, max)| {
            T::Table(table(&[
                ("metric", T::String(metric.into())),
                ("max", T::Float(max)),
            ]))
        })
        .collect();
    FilterMap::Blis(
        "utilization",
        table(&[
            ("conditions", T::Array(conditions)),
            ("fallback_on_empty", T::Boolean(fallback_on_empty)),
        ]),
    )
}

/// llm-d's `utilization-filter` → blis-std's `utilization` filter, its
/// conditions checked as llm-d's factory checks them.
fn utilization_filter(p: &Plugin, out: &mut Out) -> Result<FilterMap, String> {
    const METRICS: [&str; 4] = [
        "active-requests",
        "running-requests",
        "waiting-queue",
        "kv-cache-utilization",
    ];
    let bad = |m: String| format!("plugin '{}' (utilization-filter): {m}", p.name);
    let conds = match p.params.get("conditions") {
        Some(Value::Sequence(c)) if !c.is_empty() => c,
        _ => {
            return Err(bad(
                "parameters.conditions needs at least one {metric, maxValue}".into(),
            ))
        }
    };
    let mut list = Vec::with_capacity(conds.len());
    for (k, c) in conds.iter().enumerate() {
        let metric = param_str(c, "metric").unwrap_or("");
        if !METRICS.contains(&metric) {
            return Err(bad(format!(
                "conditions[{k}].metric \"{metric}\" is not one of {}",
                METRICS.join(", ")
            )));
        }
        let Some(max) = num(c, "maxValue") else {
            return Err(bad(format!(
                "conditions[{k}].maxValue is missing or not a number"
            )));
        };
        if !(max >= 0.0 && (metric != "kv-cache-utilization" || max <= 1.0)) {
            return Err(bad(format!(
                "conditions[{k}].maxValue {max} must be ≥ 0 (and ≤ 1 for kv-cache-utilization)"
            )));
        }
        if let Some(extra) = c.as_mapping().and_then(|m| {
            m.keys()
                .filter_map(Value::as_str)
                .find(|k| !["metric", "maxValue"].contains(k))
        }) {
            return Err(bad(format!(
                "conditions[{k}].{extra} is not a parameter (metric, maxValue)"
            )));
        }
        list.push((metric, max));
    }
    let fallback = p
        .params
        .get("fallbackOnEmpty")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    out.note(format!(
        "plugin '{}' (utilization-filter): blis's utilization filter (active-requests is the router's live in-flight count, the others the scraped metrics){}",
        p.name,
        if param_str(&p.params, "inFlightLoadProducerName").is_some() {
            "; inFlightLoadProducerName: blis counts in-flight requests itself"
        } else {
            ""
        }
    ));
    Ok(utilization(&list, fallback))
}

/// One profile as a blis routing section (a table of `RoutingSection`):
/// the `weighted` policy where it ranks alike, else a `pipeline` profile.
pub fn profile_routing(
    l: &Loaded,
    prof: &Profile,
    stage: Stage,
    pools: Option<bool>,
    out: &mut Out,
) -> Result<toml::Table, String> {
    let m = map_profile(l, prof, stage, pools, out)?;
    Ok(m.weighted.unwrap_or_else(|| {
        table(&[
            ("policy", T::String("pipeline".into())),
            ("profile_handler", T::String("single-profile".into())),
            ("profiles", T::Array(vec![T::Table(m.pipeline)])),
        ])
    }))
}

/// A profile mapped to blis: its `[[routing.profiles]]` table, and the
/// `weighted` policy's `[routing]` keys when the profile is scorers under
/// a max-score pick and no filter (llm-d's raw weights rank as the
/// normalised ones, ties uniformly random).
struct MappedProfile {
    pipeline: toml::Table,
    weighted: Option<toml::Table>,
}

fn map_profile(
    l: &Loaded,
    prof: &Profile,
    stage: Stage,
    pools: Option<bool>,
    out: &mut Out,
) -> Result<MappedProfile, String> {
    let ctx = |m: String| format!("schedulingProfiles[{}]: {m}", prof.name);
    let mut filters = Vec::new();
    for &f in &prof.filters {
        let p = &l.plugins[f];
        match map_filter(l, p, stage, pools, out).map_err(ctx)? {
            FilterMap::NoEffect(why) => out.note(format!(
                "plugin '{}' ({}): no simulated effect: {why}",
                p.name, p.info.ty
            )),
            FilterMap::Blis(name, params) => {
                let mut t = table(&[("name", T::String(name.into()))]);
                t.insert("params".into(), T::Table(params));
                filters.push(T::Table(t));
            }
        }
    }
    let picker = &l.plugins[prof.picker];
    let k = int(&picker.params, "maxNumOfEndpoints").unwrap_or(1);
    if k > 1 {
        out.note(format!(
            "plugin '{}' ({}): maxNumOfEndpoints {k}: the extra endpoints are Envoy fallbacks; blis routes to the first",
            picker.name, picker.info.ty
        ));
    }
    let max_score = picker.info.ty == "max-score-picker";
    let mut scorers = Vec::new();
    for &(s, w) in &prof.scorers {
        let p = &l.plugins[s];
        match map_scorer(l, p, out).map_err(ctx)? {
            ScorerMap::Blis(name, params) => scorers.push((name, w, params)),
            ScorerMap::Constant(value, why) => {
                // A constant moves no argmax, and a draw by score only
                // when it is not 0 (the totals scale with the weights).
                if max_score || value == 0.0 || picker.info.ty == "random-picker" {
                    out.note(format!(
                        "plugin '{}' ({}): no simulated effect: {why}",
                        p.name, p.info.ty
                    ));
                } else {
                    out.note(format!(
                        "plugin '{}' ({}): blis's constant scorer (value {value}): {why}, which flattens the draw of {}",
                        p.name, p.info.ty, picker.info.ty
                    ));
                    scorers.push(("constant", w, table(&[("value", T::Float(value))])));
                }
            }
        }
    }
    let scorer_tables: Vec<T> = scorers
        .iter()
        .map(|(n, w, params)| {
            let mut t = table(&[("name", T::String(n.to_string())), ("weight", T::Float(*w))]);
            if !params.is_empty() {
                t.insert("params".into(), T::Table(params.clone()));
            }
            T::Table(t)
        })
        .collect();
    let any_weight = scorers.iter().any(|(_, w, _)| *w > 0.0);
    let weighted = (max_score && any_weight && filters.is_empty()).then(|| {
        table(&[
            ("policy", T::String("weighted".into())),
            ("tie_break", T::String("random".into())),
            ("scorers", T::Array(scorer_tables.clone())),
        ])
    });
    let (pname, pparams) = match picker.info.ty {
        "max-score-picker" => (
            "max-score",
            table(&[("tie_break", T::String("random".into()))]),
        ),
        "random-picker" => ("random", toml::Table::new()),
        _ => ("weighted-random", toml::Table::new()),
    };
    let mut pk = table(&[("name", T::String(pname.into()))]);
    if !pparams.is_empty() {
        pk.insert("params".into(), T::Table(pparams));
    }
    let mut profile = table(&[("name", T::String(prof.name.clone()))]);
    if !filters.is_empty() {
        profile.insert("filters".into(), T::Array(filters));
    }
    if !scorer_tables.is_empty() {
        profile.insert("scorers".into(), T::Array(scorer_tables));
    }
    profile.insert("picker".into(), T::Table(pk));
    Ok(MappedProfile {
        pipeline: profile,
        weighted,
    })
}

/// The handler's plan: `[routing]`, and `[pd]` keys for disaggregation.
pub struct HandlerPlan {
    pub routing: toml::Table,
    pub pd: Option<toml::Table>,
}

fn profile<'a>(l: &'a Loaded, name: &str) -> Option<&'a Profile> {
    l.profiles.iter().find(|p| p.name == name)
}

/// Map the profile handler and its profiles.
pub fn handler_plan(l: &Loaded, pools: Option<bool>, out: &mut Out) -> Result<HandlerPlan, String> {
    let h = &l.plugins[l.handler];
    let single = |prof: &Profile, out: &mut Out| -> Result<HandlerPlan, String> {
        Ok(HandlerPlan {
            routing: profile_routing(l, prof, Stage::Single, pools, out)?,
            pd: None,
        })
    };
    match h.info.ty {
        "single-profile-handler" => single(&l.profiles[0], out),
        "data-parallel-profile-handler" => {
            if l.profiles.len() != 1 {
                return Err(format!("plugin '{}' (data-parallel-profile-handler) runs exactly one profile, and the configuration has {}", h.name, l.profiles.len()));
            }
            out.note(format!("plugin '{}' (data-parallel-profile-handler): single-profile routing; its x-data-parallel-host-port header and port rewrite have no simulated effect (blis routes to the instance itself)", h.name));
            single(&l.profiles[0], out)
        }
        "header-profile-handler" => header_handler(l, h, pools, out),
        "disagg-profile-handler" | "pd-profile-handler" => disagg(l, h, pools, out),
        other => Err(format!(
            "plugin '{}' ({other}) is not a profile handler",
            h.name
        )),
    }
}

/// `header-profile-handler` {headerName EPP-Profile, defaultProfile
/// decode}: one profile runs for every request; several become blis's
/// `header` handler over `pipeline` profiles, each workload client's
/// requests running the profile its `headers` name (the default without).
fn header_handler(
    l: &Loaded,
    h: &Plugin,
    pools: Option<bool>,
    out: &mut Out,
) -> Result<HandlerPlan, String> {
    if l.profiles.len() == 1 {
        out.note(format!("plugin '{}' (header-profile-handler): one profile, which every request runs whatever its header says", h.name));
        return Ok(HandlerPlan {
            routing: profile_routing(l, &l.profiles[0], Stage::Single, pools, out)?,
            pd: None,
        });
    }
    if pools == Some(true) {
        return Err(format!("plugin '{}' (header-profile-handler) with several profiles is llm-d's per-stage coordinator handler (one EPP call per stage); with [[pools]] use disagg-profile-handler, whose stages blis maps onto the pools", h.name));
    }
    let header = param_str(&h.params, "headerName").unwrap_or("EPP-Profile");
    let default = param_str(&h.params, "defaultProfile").unwrap_or("decode");
    let mut profiles = Vec::new();
    for prof in &l.profiles {
        let m = map_profile(l, prof, Stage::Single, pools, out)?;
        profiles.push(T::Table(m.pipeline));
    }
    let mut routing = table(&[
        ("policy", T::String("pipeline".into())),
        ("profile_handler", T::String("header".into())),
        ("header", T::String(header.into())),
        ("profiles", T::Array(profiles)),
    ]);
    let names: Vec<&str> = l.profiles.iter().map(|p| p.name.as_str()).collect();
    let fallback = if profile(l, default).is_some() {
        routing.insert("default_profile".into(), T::String(default.into()));
        format!("defaultProfile '{default}'")
    } else {
        // llm-d refuses header-less requests; blis refuses a workload
        // that would send one (default_profile "" = none).
        routing.insert("default_profile".into(), T::String(String::new()));
        format!("defaultProfile '{default}' is no profile, so llm-d refuses requests without the header (429): blis refuses a workload with a client that sends none")
    };
    out.note(format!(
        "plugin '{}' (header-profile-handler): each workload client's requests run the profile its `headers` {header} names ({}); without the header, {fallback}",
        h.name,
        names.join(", ")
    ));
    Ok(HandlerPlan { routing, pd: None })
}

/// The encode stage's decider in blis terms (`pd.encode_decider` and the
/// requests it sends to encode), or none when llm-d's never approves.
fn encode_decider(
    d: &Plugin,
    sees: bool,
    pd: &mut toml::Table,
    out: &mut Out,
) -> Result<Option<(&'static str, String)>, String> {
    Ok(match d.info.ty {
        "always-disagg-multimodal-decider" if !sees => {
            out.note(format!("plugin '{}' (always-disagg-multimodal-decider) as the encode decider: {NO_PROMPT} and finds no multimodal content: the encode stage never runs", d.name));
            None
        }
        "prefix-based-pd-decider" if !sees => {
            out.note(format!("plugin '{}' (prefix-based-pd-decider) as the encode decider: {NO_PROMPT}: no uncached tokens, so the encode stage never runs", d.name));
            None
        }
        "always-disagg-multimodal-decider" => Some((
            "multimodal",
            "requests with multimodal input (a workload client's `multimodal`)".to_string(),
        )),
        "always-disagg-pd-decider" => Some(("always", "every request".to_string())),
        "prefix-based-pd-decider" => {
            let n = int(&d.params, "nonCachedTokens").unwrap_or(0);
            let pt = int(&d.params, "promptTokens").unwrap_or(0);
            if n == 0 {
                out.note(format!("plugin '{}' (prefix-based-pd-decider) as the encode decider: nonCachedTokens 0 never approves: the encode stage never runs", d.name));
                None
            } else {
                if pt > n {
                    pd.insert("encode_prefix_min_prompt_tokens".into(), T::Integer(pt));
                }
                pd.insert("encode_prefix_threshold".into(), T::Integer(n - 1));
                Some((
                    "prefix-threshold",
                    format!("the requests with at least {n} prompt tokens not cached on their decode instance (llm-d's ≥; encode_prefix_threshold = {}: blis's >)", n - 1),
                ))
            }
        }
        _ => {
            return Err(format!(
                "plugin '{}' ({}) is not a decider",
                d.name, d.info.ty
            ))
        }
    })
}

/// The prefill stage's decider in blis terms (`pd.decider`).
fn prefill_decider(
    d: &Plugin,
    sees: bool,
    pd: &mut toml::Table,
    out: &mut Out,
) -> Result<String, String> {
    Ok(match d.info.ty {
        "prefix-based-pd-decider" | "always-disagg-multimodal-decider" if !sees => {
            out.note(format!("plugin '{}' ({}): {NO_PROMPT}: no uncached tokens and no multimodal content, so it never disaggregates: blis's decider never", d.name, d.info.ty));
            "never".to_string()
        }
        "prefix-based-pd-decider" => {
            let n = int(&d.params, "nonCachedTokens").unwrap_or(0);
            let pt = int(&d.params, "promptTokens").unwrap_or(0);
            if n == 0 {
                out.note(format!("plugin '{}' (prefix-based-pd-decider): nonCachedTokens 0 never disaggregates: blis's decider never", d.name));
                "never".to_string()
            } else {
                if pt > n {
                    // (pt ≤ n needs no floor: n uncached tokens
                    // already make a prompt of at least n.)
                    pd.insert("prefix_min_prompt_tokens".into(), T::Integer(pt));
                    out.note(format!("plugin '{}' (prefix-based-pd-decider): promptTokens {pt}: no prompt shorter than that is disaggregated (pd.prefix_min_prompt_tokens)", d.name));
                }
                pd.insert("prefix_threshold".into(), T::Integer(n - 1));
                out.note(format!(
                "plugin '{}' (prefix-based-pd-decider): blis's prefix-threshold: disaggregate when the prompt tokens not cached on the chosen decode instance are ≥ {n} (llm-d's ≥; prefix_threshold = {}: blis's >); blis reads the decode instance's KV cache where llm-d reads its approximate prefix index",
                d.name,
                n - 1
            ));
                "prefix-threshold".to_string()
            }
        }
        "always-disagg-pd-decider" => "always".to_string(),
        "always-disagg-multimodal-decider" => {
            out.note(format!("plugin '{}' (always-disagg-multimodal-decider) as the prefill decider: blis's decider multimodal, disaggregating the requests with multimodal input (a workload client's `multimodal`)", d.name));
            "multimodal".to_string()
        }
        other => return Err(format!("plugin '{}' ({other}) is not a decider", d.name)),
    })
}

fn disagg(
    l: &Loaded,
    h: &Plugin,
    pools: Option<bool>,
    out: &mut Out,
) -> Result<HandlerPlan, String> {
    let pd_handler = h.info.ty == "pd-profile-handler";
    let nested = |stage: &str| {
        h.params
            .get("profiles")
            .and_then(|p| p.get(stage))
            .and_then(Value::as_str)
    };
    let flat = |key: &str| param_str(&h.params, key);
    let decode_name = nested("decode")
        .or(flat("decodeProfile"))
        .unwrap_or("decode");
    let prefill_name = nested("prefill")
        .or(flat("prefillProfile"))
        .unwrap_or("prefill");
    let encode_name = nested("encode")
        .or(flat("encodeProfile"))
        .unwrap_or("encode");
    let sees = l.sees_prompt();
    let Some(decode) = profile(l, decode_name) else {
        return Err(format!("plugin '{}' ({}): no scheduling profile named '{decode_name}' (the decode profile): every request would fail", h.name, h.info.ty));
    };
    if pools == Some(false) {
        return Err(format!(
            "plugin '{}' ({}) disaggregates over prefill and decode endpoints, but the run file declares no [[pools]]: add pools with role = \"prefill\" and role = \"decode\" (or \"both\")",
            h.name, h.info.ty
        ));
    }
    let prefill_first = param_str(&h.params, "stageOrder") == Some("prefill-first");
    let deps = super::loader::dependencies(h);
    let decider_of = |stage: &str| {
        deps.iter()
            .find(|(_, s)| *s == stage)
            .and_then(|(n, _)| l.plugin(n))
            .map(|i| &l.plugins[i])
    };
    let mut pd = toml::Table::new();
    // The encode stage: run iff its decider approves (llm-d), over the run
    // file's encode pools (`expand` drops it when the run has none).
    if let Some(enc) = profile(l, encode_name) {
        let decider = match decider_of("encode") {
            None => {
                out.note(format!(
                    "schedulingProfiles[{}]: no encode decider, so llm-d skips the encode stage",
                    enc.name
                ));
                None
            }
            Some(d) => encode_decider(d, sees, &mut pd, out)?,
        };
        if let Some((name, which)) = decider {
            pd.insert("encode_decider".into(), T::String(name.into()));
            pd.insert(
                "encode_routing".into(),
                T::Table(profile_routing(l, enc, Stage::Encode, pools, out)?),
            );
            out.note(format!(
                "schedulingProfiles[{}]: the encode stage routes {which} over the run file's pools of role encode; it takes no time in blis (the reference's encode stage), so it changes which encoder is chosen, not latencies",
                enc.name
            ));
        }
    }
    let prefill = profile(l, prefill_name);
    let decider = match (prefill, decider_of("prefill")) {
        (None, _) => {
            out.note(format!(
                "plugin '{}' ({}): no '{prefill_name}' profile: no request is disaggregated",
                h.name, h.info.ty
            ));
            "never".to_string()
        }
        (Some(_), _) if prefill_first => {
            out.note(format!("plugin '{}' (disagg-profile-handler): stageOrder prefill-first runs prefill for every request: blis's decider always (blis chooses the decode instance first; without topology signals the order does not change either choice's signals beyond the one request)", h.name));
            "always".to_string()
        }
        (Some(p), None) => {
            out.note(format!("schedulingProfiles[{}]: no prefill decider, so llm-d never runs the prefill stage: blis's decider never", p.name));
            "never".to_string()
        }
        (Some(_), Some(d)) => prefill_decider(d, sees, &mut pd, out)?,
    };
    if pd_handler && flat("primaryPort").is_some() {
        out.note(format!("plugin '{}' (pd-profile-handler): primaryPort has no simulated effect (a port rewrite)", h.name));
    }
    let decode_routing = profile_routing(l, decode, Stage::Decode, pools, out)?;
    pd.insert("decider".into(), T::String(decider));
    if let Some(p) = prefill {
        pd.insert(
            "prefill_routing".into(),
            T::Table(profile_routing(l, p, Stage::Prefill, pools, out)?),
        );
    }
    pd.insert("decode_routing".into(), T::Table(decode_routing.clone()));
    for p in &l.profiles {
        if ![decode_name, prefill_name, encode_name].contains(&p.name.as_str()) {
            out.note(format!(
                "schedulingProfiles[{}]: {} never runs a profile of that name",
                p.name, h.info.ty
            ));
        }
    }
    Ok(HandlerPlan {
        routing: decode_routing,
        pd: Some(pd),
    })
}
