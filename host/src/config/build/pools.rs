//! `[[pools]]` and `[pd]`: prefill/decode disaggregation. A pool is an
//! `[instance]` section (and a `[model]` section) with a role and a count:
//! its `model` and `instance` tables override keys of the run's sections and
//! go through the same builders, so a pool can run other hardware, another
//! TP, latency model, batch limits or KV size.
//!
//! Pools of role `serve` are plain instance groups without P/D: each may
//! serve its own model (`model.name`, `model.config_path`), and requests
//! are routed only to the instances of the model they name
//! (`cluster::ModelFilter`).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::instance::{self, CheckedInstance, MAX_INSTANCES};
use super::model::{self, CheckedModel};
use super::pd_decider::{self, DeciderSpec};
use super::policies::{check_routing, RoutingPlan};
use super::{derive_seed, kv_offload, one_of, resolve, Problems};
use crate::cluster::pd::{Decider, EncodeStage, PdSetup, PoolInfo, PoolRole, TransferModel};
use crate::cluster::Routing;
use crate::config::{PdSection, RoutingSection, RunFile};
use crate::instance::latency::ModelConfig;
use crate::instance::{Instance, KvOffloadConfig};
use crate::plugins::Registry;

/// Smallest `pd.transfer_bandwidth_gbps` (1 MB/s) and largest
/// `pd.kv_bytes_per_token` (1 GB): past them a transfer's time cannot be
/// meant and would run into the simulated-time limit.
const MIN_BANDWIDTH_GBPS: f64 = 1e-3;
const MAX_KV_BYTES_PER_TOKEN: f64 = 1e9;

const ROLES: [&str; 5] = ["prefill", "both", "decode", "encode", "serve"];

/// One checked pool.
struct CheckedPool {
    name: String,
    role: PoolRole,
    count: u32,
    run: RunFile,
    instance: CheckedInstance,
    model: CheckedModel,
    kv_offload: Option<KvOffloadConfig>,
}

/// What `[[pools]]` and `[pd]` resolved to.
pub(super) struct CheckedPools {
    /// In instance order: prefill pools, then both, then decode pools.
    pools: Vec<CheckedPool>,
    pd: PdSection,
    decider: DeciderSpec,
    prefill_plan: Option<RoutingPlan>,
    decode_plan: Option<RoutingPlan>,
    /// The encode stage's decider and routing, with an encode pool.
    encode: Option<(Decider, Option<RoutingPlan>)>,
    kv_bytes_per_token: f64,
    split_by_tp: bool,
    /// `serve` pools: instance groups without P/D (every pool's `role`
    /// placeholder is unused).
    serve: bool,
}

/// `base` with the keys of `over` replaced (a pool's override of a section).
fn merged<T: Serialize + DeserializeOwned>(
    base: &T,
    over: &toml::Table,
    key: &str,
) -> Result<T, String> {
    let mut t = toml::Table::try_from(base).map_err(|e| format!("{key}: {e}"))?;
    for (k, v) in over {
        t.insert(k.clone(), v.clone());
    }
    T::deserialize(toml::Value::Table(t)).map_err(|e| format!("{key}: {}", e.message().trim()))
}

/// Check a P/D stage's routing section; errors name its keys.
fn check_stage(r: &RoutingSection, key: &str, problems: &mut Problems) -> RoutingPlan {
    let mut p = Problems::default();
    let plan = check_routing(r, &mut p);
    for e in p.errors {
        problems.error(e.replace("routing.", &format!("{key}.")));
    }
    if r.latency_us != 0 || r.snapshot_refresh_interval_us != 0 {
        problems.error(format!(
            "{key}: latency_us and snapshot_refresh_interval_us apply to the whole routing step; set them in [routing]"
        ));
    }
    plan
}

/// Check `[[pools]]` and `[pd]`; `None` when the run has no pools.
pub(super) fn check(
    run: &RunFile,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<CheckedPools> {
    if run.pools.is_empty() {
        if run.pd.is_some() {
            problems.error(
                "[pd] is given but the run file has no [[pools]]: a decider needs prefill and decode pools \
                 (add [[pools]] tables with role = \"prefill\" and role = \"decode\", or remove [pd])",
            );
        }
        return None;
    }
    let before = problems.errors.len();
    if run.instance.count != 1 {
        problems.error(format!(
            "instance.count = {}: with [[pools]] the cluster is the pools' instances; remove instance.count \
             and give each pool its `instances`",
            run.instance.count
        ));
    }
    let serve = run.pools.iter().any(|p| p.role == "serve");
    if serve {
        check_serve_mix(run, problems);
    }
    // The run without its pools, cloned once (each pool's run is a copy
    // of it: cloning the run itself per pool grew as pools²).
    let bare = run.without_pools();
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let pools: Vec<CheckedPool> = (0..run.pools.len())
        .filter_map(|i| {
            let p = &run.pools[i];
            if *first.entry(p.name.as_str()).or_insert(i) != i {
                problems.error(format!(
                    "pools[{i}] ({}): another pool has the name \"{}\"",
                    p.name, p.name
                ));
            }
            check_pool(run, &bare, i, serve, base_dir, problems)
        })
        .collect();
    // (pools of an unknown role were refused above and are not counted)
    let total: u64 = run
        .pools
        .iter()
        .filter(|p| ROLES.contains(&p.role.as_str()))
        .map(|p| u64::from(p.instances))
        .sum();
    if total > u64::from(MAX_INSTANCES) {
        problems.error(format!(
            "[[pools]]: {total} instances in all; at most {MAX_INSTANCES} are supported"
        ));
    }
    if serve {
        if problems.errors.len() > before {
            return None;
        }
        return Some(CheckedPools {
            pools,
            pd: PdSection::default(),
            decider: pd_decider::check(&PdSection::default(), problems),
            prefill_plan: None,
            decode_plan: None,
            encode: None,
            kv_bytes_per_token: 0.0,
            split_by_tp: true,
            serve: true,
        });
    }
    check_pd(run, pools, base_dir, problems, before)
}

/// Serve pools (instance groups of several models) mix with no other role
/// and no `[pd]`.
fn check_serve_mix(run: &RunFile, problems: &mut Problems) {
    if let Some((i, p)) = run
        .pools
        .iter()
        .enumerate()
        .find(|(_, p)| p.role != "serve")
    {
        problems.error(format!(
            "pools[{i}].role = \"{}\" with pools of role \"serve\": instance groups of several models \
             and prefill/decode pools cannot be mixed yet; give every pool role = \"serve\" or none",
            p.role
        ));
    }
    if run.pd.is_some() {
        problems.error(
            "[pd] with pools of role \"serve\": serve pools have no prefill/decode split; remove [pd]",
        );
    }
}

/// Check pool `i`: its keys, and its instance and model sections as the
/// run's with the pool's overrides. `None` when it cannot be built.
fn check_pool(
    run: &RunFile,
    bare: &RunFile,
    i: usize,
    serve: bool,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<CheckedPool> {
    let p = &run.pools[i];
    let key = format!("pools[{i}] ({})", p.name);
    if p.name.is_empty() {
        problems.error(format!("pools[{i}].name is empty: give every pool a name"));
    }
    let role = match p.role.as_str() {
        "prefill" => PoolRole::Prefill,
        "decode" => PoolRole::Decode,
        "encode" => PoolRole::Encode,
        // (a placeholder: serve pools have no P/D role)
        "both" | "serve" => PoolRole::Both,
        other => {
            problems.error(one_of(&format!("pools[{i}].role"), other, &ROLES));
            return None;
        }
    };
    check_pool_keys(run, i, serve, problems);
    let mut prun = bare.clone();
    match merged(&run.model, &p.model, &format!("pools[{i}].model")) {
        Ok(m) => prun.model = m,
        Err(e) => {
            problems.error(e);
            return None;
        }
    }
    match merged(&run.instance, &p.instance, &format!("pools[{i}].instance")) {
        Ok(m) => prun.instance = m,
        Err(e) => {
            problems.error(e);
            return None;
        }
    }
    prun.instance.count = p.instances.max(1);
    if !serve && prun.instance.block_size != run.instance.block_size {
        problems.error(format!(
            "pools[{i}].instance.block_size = {}: every pool uses instance.block_size = {} (KV moves in blocks)",
            prun.instance.block_size, run.instance.block_size
        ));
    }
    let mut pp = Problems::default();
    let inst = instance::check(&prun.instance, &mut pp);
    let offload = kv_offload::check(&prun.instance, &mut pp);
    let model = model::check(&prun, base_dir, &mut pp);
    for e in pp.errors {
        problems.error(format!("{key}: {e}"));
    }
    let (Some(instance), Some(model)) = (inst, model) else {
        return None;
    };
    Some(CheckedPool {
        name: p.name.clone(),
        role,
        count: p.instances,
        run: prun,
        instance,
        model,
        kv_offload: offload,
    })
}

/// Pool `i`'s size, autoscaler bounds and the keys a pool may not override.
fn check_pool_keys(run: &RunFile, i: usize, serve: bool, problems: &mut Problems) {
    let p = &run.pools[i];
    if p.instances == 0 {
        problems.error(format!(
            "pools[{i}].instances = 0: a pool needs at least one instance"
        ));
    }
    for (k, v) in [
        ("min_instances", p.min_instances),
        ("max_instances", p.max_instances),
    ] {
        if v.is_some() && !(serve && run.autoscaler.is_some()) {
            problems.error(format!(
                "pools[{i}].{k}: a pool's autoscaler bounds need role = \"serve\" and [autoscaler] \
                 (each serve pool is then scaled on its own); remove the key"
            ));
        }
    }
    if p.instance.contains_key("count") {
        problems.error(format!(
            "pools[{i}].instance.count: give the pool's size as pools[{i}].instances"
        ));
    }
    for k in ["name", "config_path"] {
        if !serve && p.model.contains_key(k) {
            problems.error(format!(
                "pools[{i}].model.{k}: every pool serves the run's model (a KV transfer moves its cache); \
                 override hardware, tp, latency_model and the like only"
            ));
        }
    }
}

/// The P/D side of prefill/decode/encode pools: roles present, `[pd]`'s
/// decider, transfer, stage routing and encode stage; then the pools in
/// instance order.
fn check_pd(
    run: &RunFile,
    mut pools: Vec<CheckedPool>,
    base_dir: &Path,
    problems: &mut Problems,
    before: usize,
) -> Option<CheckedPools> {
    let has = |r: PoolRole| run.pools.iter().any(|p| p.role == r.name());
    if !has(PoolRole::Decode) && !has(PoolRole::Both) {
        problems.error(
            "[[pools]]: no pool can decode; add a pool with role = \"decode\" (or \"both\")",
        );
    }
    let pd = run.pd.clone().unwrap_or_default();
    let decider = pd_decider::check(&pd, problems);
    if decider.may_disaggregate() && !has(PoolRole::Prefill) && !has(PoolRole::Both) {
        problems.error(format!(
            "pd.decider = \"{}\" disaggregates requests but no pool can prefill; add a pool with role = \"prefill\"",
            pd.decider
        ));
    }
    check_transfer(&pd, problems);
    let (kv_bytes_per_token, split_by_tp) =
        kv_bytes_per_token(run, &pd, base_dir, decider.may_disaggregate(), problems);
    let prefill_plan = pd
        .prefill_routing
        .as_ref()
        .map(|r| check_stage(r, "pd.prefill_routing", problems));
    let decode_plan = pd
        .decode_routing
        .as_ref()
        .map(|r| check_stage(r, "pd.decode_routing", problems));
    let encode = check_encode(&pd, has(PoolRole::Encode), problems);
    if problems.errors.len() > before {
        return None;
    }
    // Instance order: prefill pools, both pools, decode pools, encode pools
    // (file order within a role).
    let rank = |r: PoolRole| match r {
        PoolRole::Prefill => 0,
        PoolRole::Both => 1,
        PoolRole::Decode => 2,
        PoolRole::Encode => 3,
    };
    pools.sort_by_key(|p| rank(p.role));
    Some(CheckedPools {
        pools,
        pd,
        decider,
        prefill_plan,
        decode_plan,
        encode,
        kv_bytes_per_token,
        split_by_tp,
        serve: false,
    })
}

/// `pd.transfer_bandwidth_gbps` and `pd.transfer_base_latency_ms` in range.
fn check_transfer(pd: &PdSection, problems: &mut Problems) {
    if !(pd.transfer_bandwidth_gbps.is_finite() && pd.transfer_bandwidth_gbps > 0.0) {
        problems.error(format!(
            "pd.transfer_bandwidth_gbps = {}: must be a finite number > 0 (GB/s per link)",
            pd.transfer_bandwidth_gbps
        ));
    } else if pd.transfer_bandwidth_gbps < MIN_BANDWIDTH_GBPS {
        problems.error(format!(
            "pd.transfer_bandwidth_gbps = {}: must be at least {MIN_BANDWIDTH_GBPS} (1 MB/s); a slower link cannot be meant",
            pd.transfer_bandwidth_gbps
        ));
    }
    if !(pd.transfer_base_latency_ms.is_finite() && pd.transfer_base_latency_ms >= 0.0) {
        problems.error(format!(
            "pd.transfer_base_latency_ms = {}: must be a finite number ≥ 0 (ms)",
            pd.transfer_base_latency_ms
        ));
    } else if pd.transfer_base_latency_ms > 1e9 {
        problems.error(format!(
            "pd.transfer_base_latency_ms = {}: at most 1e9 ms",
            pd.transfer_base_latency_ms
        ));
    }
}

/// The KV bytes one token moves at TP 1 (`pd.kv_bytes_per_token`, else the
/// model's), and whether the KV splits by TP (not for MLA models).
fn kv_bytes_per_token(
    run: &RunFile,
    pd: &PdSection,
    base_dir: &Path,
    may_disaggregate: bool,
    problems: &mut Problems,
) -> (f64, bool) {
    match pd.kv_bytes_per_token {
        Some(b) if !(b.is_finite() && b > 0.0) => problems.error(format!(
            "pd.kv_bytes_per_token = {b}: must be a finite number > 0 (bytes of one token's KV at TP 1)"
        )),
        Some(b) if b > MAX_KV_BYTES_PER_TOKEN => problems.error(format!(
            "pd.kv_bytes_per_token = {b}: must be at most {MAX_KV_BYTES_PER_TOKEN:e} (1 GB per token; real models need kB to a few MB)"
        )),
        Some(b) => return (b, true),
        None => {
            let cfg = match &run.model.config_path {
                Some(p) => ModelConfig::from_path(&resolve(base_dir, p)),
                None => ModelConfig::bundled(&run.model.name),
            };
            match cfg {
                Ok(m) => {
                    return (
                        crate::instance::latency::kv_bytes_per_token_at_tp(&m, 1),
                        m.kv_lora_rank == 0,
                    )
                }
                Err(e) if may_disaggregate => problems.error(format!(
                    "[pd]: the KV transfer needs the model's KV bytes per token: {e}; give model.config_path \
                     or pd.kv_bytes_per_token"
                )),
                Err(_) => {}
            }
        }
    }
    (0.0, true)
}

/// The encode stage: its decider and routing when an encode pool exists;
/// its keys refused otherwise.
fn check_encode(
    pd: &PdSection,
    has_encode: bool,
    problems: &mut Problems,
) -> Option<(Decider, Option<RoutingPlan>)> {
    if !has_encode {
        if pd.encode_decider.is_some()
            || pd.encode_routing.is_some()
            || pd.encode_prefix_threshold.is_some()
            || pd.encode_prefix_min_prompt_tokens.is_some()
        {
            problems.error(
                "pd.encode_decider / pd.encode_routing: the run has no pool with role = \"encode\"; add one or remove them",
            );
        }
        return None;
    }
    let decider = match pd.encode_decider.as_deref() {
        None | Some("multimodal") => Decider::Multimodal,
        Some("always") => Decider::Always,
        Some("never") => Decider::Never,
        Some("prefix-threshold") => match pd.encode_prefix_threshold.unwrap_or(16) {
            t if (0..=i64::from(u32::MAX)).contains(&t) => Decider::PrefixThreshold(t as u32),
            t => {
                problems.error(format!(
                    "pd.encode_prefix_threshold = {t}: must be an integer in [0, {}]",
                    u32::MAX
                ));
                Decider::Never
            }
        },
        Some(other) => {
            problems.error(one_of(
                "pd.encode_decider",
                other,
                &["multimodal", "always", "never", "prefix-threshold"],
            ));
            Decider::Never
        }
    };
    if (pd.encode_prefix_threshold.is_some() || pd.encode_prefix_min_prompt_tokens.is_some())
        && !matches!(decider, Decider::PrefixThreshold(_))
    {
        problems.error(
            "pd.encode_prefix_threshold is given but pd.encode_decider is not \"prefix-threshold\"; remove it or set the decider",
        );
    }
    let plan = pd
        .encode_routing
        .as_ref()
        .map(|r| check_stage(r, "pd.encode_routing", problems));
    Some((decider, plan))
}

impl CheckedPools {
    /// Instances in all.
    pub(super) fn instance_count(&self) -> u32 {
        self.pools.iter().map(|p| p.count).sum()
    }

    /// One line for stderr.
    pub(super) fn describe(&self) -> String {
        let pools: Vec<String> = self
            .pools
            .iter()
            .map(|p| {
                format!(
                    "{} ({}, {} × {} {} KV blocks)",
                    p.name,
                    if self.serve {
                        p.run.model.name.as_str()
                    } else {
                        p.role.name()
                    },
                    p.count,
                    p.model.latency.gpu.as_deref().unwrap_or("?"),
                    p.model.latency.total_kv_blocks
                )
            })
            .collect();
        if self.serve {
            return format!("pools: {}", pools.join(", "));
        }
        format!(
            "pools: {}; decider {}",
            pools.join(", "),
            match self.decider {
                DeciderSpec::Standard(d) => d.name(),
                DeciderSpec::Plugin => self.pd.decider.as_str(),
            }
        )
    }

    /// The instances, the P/D setup, and the decode stage's routing (which
    /// replaces `routing` when `[pd.decode_routing]` is given).
    pub(super) fn create(
        self,
        run: &RunFile,
        registry: &mut Registry,
        routing: Routing,
    ) -> Result<(Vec<Instance>, PdSetup, Routing), String> {
        let mut instances = Vec::new();
        let mut infos = Vec::new();
        let mut tp = Vec::new();
        for (k, p) in self.pools.into_iter().enumerate() {
            let first = instances.len() as u32;
            let mut made = p
                .instance
                .create_from(first, &p.run.instance, &p.model, p.kv_offload)
                .map_err(|e| format!("pool {}: {e}", p.name))?;
            super::instance_policies::install(
                &p.run.instance,
                derive_seed(run.seed, &format!("pool/{k}")),
                registry,
                &mut made,
            )?;
            tp.extend(std::iter::repeat_n(p.model.latency.tp, made.len()));
            instances.extend(made);
            infos.push(PoolInfo {
                name: p.name,
                role: p.role,
                first,
                count: p.count,
            });
        }
        let end = |roles: &[PoolRole]| {
            infos
                .iter()
                .filter(|p| roles.contains(&p.role))
                .map(|p| p.first..p.first + p.count)
                .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
                .unwrap_or(0..0)
        };
        let prefill = end(&[PoolRole::Prefill, PoolRole::Both]);
        let decode = end(&[PoolRole::Both, PoolRole::Decode]);
        let prefill_routing = stage_routing(
            self.prefill_plan,
            self.pd.prefill_routing.as_ref(),
            run,
            "pd/prefill",
            registry,
        )?;
        let routing = match self.decode_plan {
            Some(plan) => plan.create_routing(
                self.pd.decode_routing.as_ref().expect("checked"),
                derive_seed(run.seed, "pd/decode"),
                registry,
                None,
            )?,
            None => routing,
        };
        if matches!(routing, Routing::ByClient(_)) {
            return Err("routing.profile_handler = \"header\" chooses a profile per request, but the decode stage of [[pools]] runs one; use single-profile routing with [[pools]]".into());
        }
        let encode = match self.encode {
            Some((decider, plan)) => Some(EncodeStage {
                instances: end(&[PoolRole::Encode]),
                min_prompt: min_prompt(self.pd.encode_prefix_min_prompt_tokens),
                routing: stage_routing(
                    plan,
                    self.pd.encode_routing.as_ref(),
                    run,
                    "pd/encode",
                    registry,
                )?,
                decider,
            }),
            None => None,
        };
        let transfer = TransferModel {
            bandwidth_bytes_per_us: self.pd.transfer_bandwidth_gbps * 1000.0,
            base_us: self.pd.transfer_base_latency_ms * 1000.0,
            contention: self.pd.transfer_contention,
            block_size: run.instance.block_size,
            kv_bytes_per_token: self.kv_bytes_per_token,
            split_by_tp: self.split_by_tp,
            tp,
        };
        Ok((
            instances,
            PdSetup {
                pools: infos,
                prefill,
                decode,
                prefill_routing,
                decider: pd_decider::create(self.decider, &self.pd, registry, run.seed)?,
                min_prompt: min_prompt(self.pd.prefix_min_prompt_tokens),
                transfer,
                encode,
            },
            routing,
        ))
    }
}

/// A checked prompt-length floor (0 when absent).
fn min_prompt(v: Option<i64>) -> u32 {
    v.map_or(0, |v| v.clamp(0, i64::from(u32::MAX)) as u32)
}

/// A P/D stage's routing: its own section (`plan` checked from
/// `section`), else a copy of `[routing]`; seeded from `seed_key`.
fn stage_routing(
    plan: Option<RoutingPlan>,
    section: Option<&RoutingSection>,
    run: &RunFile,
    seed_key: &str,
    registry: &mut Registry,
) -> Result<Routing, String> {
    let seed = derive_seed(run.seed, seed_key);
    match (plan, section) {
        (Some(plan), Some(section)) => plan.create_routing(section, seed, registry, None),
        _ => {
            let mut p = Problems::default();
            check_routing(&run.routing, &mut p).create_routing(&run.routing, seed, registry, None)
        }
    }
}

/// The instances of `serve` pools and the model of each (an index into the
/// returned names, in order of first mention: `first` first, then the
/// pools' models).
pub(super) struct ServeFleet {
    pub instances: Vec<Instance>,
    pub names: Vec<String>,
    pub of_instance: Vec<u32>,
    /// The pools' names, and the pool of each instance (the control
    /// plane's scaling groups).
    pub pool_names: Vec<String>,
    pub pool_of_instance: Vec<u32>,
}

impl CheckedPools {
    /// True for `serve` pools (several models, no P/D).
    pub(super) fn is_serve(&self) -> bool {
        self.serve
    }

    /// Build the instances of `serve` pools; `first` is the run's default
    /// model (fleet model 0, served or not).
    pub(super) fn create_serve(
        self,
        run: &RunFile,
        registry: &mut Registry,
        first: &str,
    ) -> Result<ServeFleet, String> {
        let mut names = vec![first.to_string()];
        let mut instances = Vec::new();
        let mut of_instance = Vec::new();
        let mut pool_names = Vec::new();
        let mut pool_of_instance = Vec::new();
        for (k, p) in self.pools.into_iter().enumerate() {
            let start = instances.len() as u32;
            let mut made = p
                .instance
                .create_from(start, &p.run.instance, &p.model, p.kv_offload)
                .map_err(|e| format!("pool {}: {e}", p.name))?;
            super::instance_policies::install(
                &p.run.instance,
                derive_seed(run.seed, &format!("pool/{k}")),
                registry,
                &mut made,
            )?;
            let m = match names.iter().position(|n| *n == p.run.model.name) {
                Some(m) => m,
                None => {
                    names.push(p.run.model.name.clone());
                    names.len() - 1
                }
            } as u32;
            of_instance.extend(std::iter::repeat_n(m, made.len()));
            pool_of_instance.extend(std::iter::repeat_n(k as u32, made.len()));
            pool_names.push(p.name);
            instances.extend(made);
        }
        Ok(ServeFleet {
            instances,
            names,
            of_instance,
            pool_names,
            pool_of_instance,
        })
    }
}
