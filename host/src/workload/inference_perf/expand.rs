//! Expansion of `[workload.inference_perf]` into synthetic clients (one per
//! user and stage) and their arrival schedules.
//!
//! Stage s covers `[O_s, O_s + duration_s)` with `O_0 = 0` and the stages end
//! to end. Each stage has its own N = P·U users, created p-major, named
//! `prompt-<p>-user-<u>` (one stage) or `stage-<s>-prompt-<p>-user-<u>`; all
//! users of prompt p (in every stage) form tenant and prefix group
//! `prompt-<p>`, class `standard`, with constant question and output lengths.
//!
//! The stage's request count T_s = ⌊rate_s · duration_s⌋ is split evenly over
//! its users: ⌊T_s/N⌋ each, one more for the first T_s mod N users.
//!
//! * Without multi-turn chat a user sends exactly its share, spread over the
//!   stage by normalized exponential gaps (inference-perf's constant-load
//!   timer; [`Schedule::Spread`]): every arrival lies inside its stage.
//! * With multi-turn chat a user is one closed-loop session of `share`
//!   rounds: it starts one exponential gap (mean N/rate_s s) after the stage
//!   opens (a start past the stage end drops the user), and each later round
//!   arrives N/rate_s s after the previous round completed. Every round's
//!   prompt is the system prompt and a fresh question (no accumulated context).

use super::client::Client;
use super::spec::InferencePerfSpec;
use crate::engine::Tick;
use crate::workload::config::{
    ArrivalProcess, ArrivalSpec, ClientSpec, ContextGrowth, LengthDist, SessionSpec, Window,
};
use crate::workload::generator::Schedule;
use crate::workload::{cfg_err, WorkloadError};

/// Largest number of users (clients over all stages) an expansion may create.
pub const MAX_USERS: u64 = 1_000_000;
/// Largest request count of one stage (exact in an `f64`).
const MAX_STAGE_REQUESTS: f64 = (1u64 << 53) as f64;
/// Latest stage end, µs (about 146,000 years).
const MAX_END_US: u64 = 1 << 62;

/// The clients of an inference-perf workload, ready for `plan_clients`.
#[derive(Debug)]
pub(crate) struct Expansion {
    /// One client per user and stage.
    pub clients: Vec<ClientSpec>,
    /// The arrival schedule of each client (same order).
    pub schedules: Vec<Schedule>,
    /// Σ of the clients' rate fractions, so that each client's rate is its
    /// fraction (rate_s / N req/s).
    pub aggregate_rate: f64,
    /// Stage windows `[start, end)` in ticks.
    pub stages: Vec<(Tick, Tick)>,
    /// Σ T_s: the most requests the workload can send (chat rounds included).
    pub total_requests: u64,
}

/// Stage windows `[O_s, O_s + duration_s)` in µs, or an error naming the stage.
fn stage_windows(spec: &InferencePerfSpec) -> Result<Vec<(Tick, Tick)>, WorkloadError> {
    let mut out = Vec::with_capacity(spec.stages.len());
    let mut start: u64 = 0;
    for (s, st) in spec.stages.iter().enumerate() {
        let end = st
            .duration
            .checked_mul(1_000_000)
            .and_then(|d| start.checked_add(d))
            .filter(|&e| e <= MAX_END_US)
            .ok_or_else(|| {
                cfg_err(format!(
                    "inference_perf.stages[{s}]: the stages end after {MAX_END_US} µs; shorten the durations"
                ))
            })?;
        out.push((start as Tick, end as Tick));
        start = end;
    }
    Ok(out)
}

/// Every stage sends at least one request and fewer than 2^53.
fn check_counts(spec: &InferencePerfSpec) -> Result<(), WorkloadError> {
    for (s, st) in spec.stages.iter().enumerate() {
        let product = st.requests();
        if product < 1.0 {
            return Err(cfg_err(format!(
                "inference_perf.stages[{s}]: rate {} req/s × duration {} s gives no request; increase the rate or the duration",
                st.rate, st.duration
            )));
        }
        if product > MAX_STAGE_REQUESTS {
            return Err(cfg_err(format!(
                "inference_perf.stages[{s}]: rate {} req/s × duration {} s is more than 2^53 requests",
                st.rate, st.duration
            )));
        }
    }
    Ok(())
}

/// Checks the table for a real client's [`super::driver::Driver`]: its
/// stages, and keys that client does not have. Returns whether its
/// sessions are multi-turn chats.
pub(crate) fn check_client(
    spec: &InferencePerfSpec,
    client: &Client,
) -> Result<bool, WorkloadError> {
    if spec.stages.is_empty() {
        return Err(cfg_err(
            "inference_perf.stages is empty: give at least one stage, e.g. stages = [{ rate = 10.0, duration = 60 }]",
        ));
    }
    stage_windows(spec)?;
    check_counts(spec)?;
    let sp = &spec.shared_prefix;
    let prompts =
        u64::from(sp.num_unique_system_prompts) * u64::from(sp.num_users_per_system_prompt);
    if prompts > MAX_USERS && *client != Client::Reference {
        return Err(cfg_err(format!(
            "inference_perf: {} system prompts × {} prompts each is more than {MAX_USERS} prompts",
            sp.num_unique_system_prompts, sp.num_users_per_system_prompt
        )));
    }
    match client {
        Client::Reference => {
            let set: Vec<&str> = [
                ("interval", spec.interval.is_some()),
                ("num_workers", spec.num_workers.is_some()),
                (
                    "worker_max_concurrency",
                    spec.worker_max_concurrency.is_some(),
                ),
                ("request_timeout", spec.request_timeout.is_some()),
            ]
            .into_iter()
            .filter_map(|(k, set)| set.then_some(k))
            .collect();
            if let Some(k) = set.first() {
                return Err(cfg_err(format!(
                    "inference_perf.{k} is a setting of the real client, and client = \"reference\" has none: remove it, or set client to the inference-perf release that ran"
                )));
            }
            Ok(sp.enable_multi_turn_chat)
        }
        Client::InferencePerf { version, chat, .. } => {
            if sp.enable_multi_turn_chat && !chat {
                return Err(cfg_err(format!(
                    "inference_perf.shared_prefix.enable_multi_turn_chat = true, but inference-perf {version} has no multi-turn chat (0.3.0 added it) and ignores the key: set it to false (as the client ran), or set client to a release that has it"
                )));
            }
            Ok(sp.enable_multi_turn_chat)
        }
    }
}

/// Expands the table (checked by [`super::spec`] value by value) into clients.
pub(crate) fn expand(spec: &InferencePerfSpec) -> Result<Expansion, WorkloadError> {
    if spec.stages.is_empty() {
        return Err(cfg_err(
            "inference_perf.stages is empty: give at least one stage, e.g. stages = [{ rate = 10.0, duration = 60 }]",
        ));
    }
    let sp = &spec.shared_prefix;
    let (p, u) = (
        u64::from(sp.num_unique_system_prompts),
        u64::from(sp.num_users_per_system_prompt),
    );
    let n = p.saturating_mul(u);
    if n.saturating_mul(spec.stages.len() as u64) > MAX_USERS {
        return Err(cfg_err(format!(
            "inference_perf: {p} system prompts × {u} users × {} stages is more than {MAX_USERS} users",
            spec.stages.len()
        )));
    }
    let windows = stage_windows(spec)?;
    check_counts(spec)?;
    let multi = spec.stages.len() > 1;
    let prefix = (sp.system_prompt_len > 0).then_some(sp.system_prompt_len);
    let mut clients = Vec::new();
    let mut schedules = Vec::new();
    let mut aggregate_rate = 0.0;
    let mut total_requests = 0u64;
    for (s, (st, &(start, end))) in spec.stages.iter().zip(&windows).enumerate() {
        let total = st.requests() as u64;
        total_requests = total_requests.saturating_add(total);
        let (base, extra) = (total / n, total % n);
        let fraction = st.rate / n as f64;
        let think_time_us = (n as f64 / st.rate * 1e6) as u64;
        for k in 0..n {
            let share = base + u64::from(k < extra);
            if share == 0 {
                continue;
            }
            let (pi, ui) = (k / u, k % u);
            let id = if multi {
                format!("stage-{s}-prompt-{pi}-user-{ui}")
            } else {
                format!("prompt-{pi}-user-{ui}")
            };
            let group = format!("prompt-{pi}");
            let mut client = ClientSpec {
                id,
                rate_fraction: Some(fraction),
                arrival: Some(ArrivalSpec::new(ArrivalProcess::Poisson)),
                input: LengthDist::Constant {
                    value: sp.question_len.max(1),
                },
                output: LengthDist::Constant {
                    value: sp.output_len.max(1),
                },
                prefix_group: prefix.map(|_| group.clone()),
                prefix_length: prefix,
                slo_class: None,
                tenant_id: Some(group),
                windows: None,
                session: None,
                adapter: None,
                adapter_mix: None,
                model: None,
                headers: Default::default(),
                multimodal: None,
            };
            let schedule = if sp.enable_multi_turn_chat {
                let max_rounds = u32::try_from(share).map_err(|_| {
                    cfg_err(format!(
                        "inference_perf.stages[{s}]: {share} rounds per chat session is more than {}",
                        u32::MAX
                    ))
                })?;
                client.session = Some(SessionSpec {
                    max_rounds,
                    think_time_us,
                    context_growth: ContextGrowth::None,
                });
                client.windows = Some(vec![Window {
                    start_us: start as u64,
                    end_us: end as u64,
                }]);
                Schedule::AtMost(1)
            } else {
                Schedule::Spread {
                    start,
                    span: end - start,
                    count: share,
                }
            };
            aggregate_rate += fraction;
            clients.push(client);
            schedules.push(schedule);
        }
    }
    Ok(Expansion {
        clients,
        schedules,
        aggregate_rate,
        stages: windows,
        total_requests,
    })
}
