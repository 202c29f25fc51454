//! The cluster hashes arriving prompts only when a policy of the run may
//! read the hashes (`Cluster::hash_prompts`): every plugin policy, and of
//! the standard library only those `std_reads_block_hashes` names. These
//! tests run every standard cluster-level policy on a prefix-sharing
//! workload with the hashes computed always and as decided, and require
//! byte-identical reports, per-request results and decision traces: a
//! standard policy that reads the hashes without being listed fails here.

use super::tests::{run_text_with, scratch};
use super::Provide;
use crate::plugins::registry::std_reads_block_hashes;
use crate::plugins::Registry;
use blis_plugin_api::KindCode;

/// A run of `section` (the admission and routing sections) on four small
/// instances: sessions that grow their context, two prefix groups (one of
/// them served through three LoRA adapters, two slots per instance) and
/// unique prompts, at a rate that queues, with a decision trace.
pub(super) fn run_file(section: &str) -> String {
    format!(
        r#"seed = 11
[model]
name = "qwen3-14b"
hardware = "H100"
latency_model = "roofline"
[instance]
count = 4
total_kv_blocks = 600
[workload]
aggregate_rate = 60.0
num_requests = 240
[[workload.clients]]
id = "agent"
rate_fraction = 0.4
input = {{ type = "gaussian", mean = 300, std_dev = 100, min = 16, max = 1024 }}
output = {{ type = "gaussian", mean = 60, std_dev = 20, min = 4, max = 200 }}
prefix_group = "sys"
prefix_length = 400
session = {{ max_rounds = 3, think_time_us = 200000, context_growth = "accumulate" }}
[[workload.clients]]
id = "docs"
rate_fraction = 0.3
input = {{ type = "gaussian", mean = 200, std_dev = 50, min = 16, max = 1024 }}
output = {{ type = "gaussian", mean = 40, std_dev = 10, min = 4, max = 200 }}
prefix_group = "rag"
prefix_length = 600
adapter_mix = {{ zipf_s = 1.0, ids = ["a", "b", "c"] }}
[[workload.clients]]
id = "chat"
rate_fraction = 0.3
input = {{ type = "gaussian", mean = 250, std_dev = 80, min = 16, max = 1024 }}
output = {{ type = "gaussian", mean = 50, std_dev = 20, min = 4, max = 200 }}
slo_class = "sheddable"
[lora]
adapter_capacity = 2
[[lora.adapters]]
id = "a"
rank = 8
[[lora.adapters]]
id = "b"
rank = 16
[[lora.adapters]]
id = "c"
rank = 8
[output]
results_path = "results.jsonl"
trace_path = "trace.jsonl"
{section}
"#
    )
}

/// Report, results and trace of `text` with the given prompt hashing.
fn outputs(text: &str, hashing: Provide, dir: &std::path::Path) -> String {
    outputs_with(text, dir, |s| s.prompt_hashing = hashing)
}

/// Report, results and (when the run writes one) trace of `text`, the
/// cluster's setup adjusted by `adjust`.
pub(super) fn outputs_with(
    text: &str,
    dir: &std::path::Path,
    adjust: impl FnOnce(&mut super::ClusterSetup),
) -> String {
    let _ = std::fs::remove_file(dir.join("trace.jsonl"));
    let report = run_text_with(text, dir, adjust);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    format!(
        "{report}\n{}\n{}",
        read("results.jsonl"),
        read("trace.jsonl")
    )
}

/// The `[admission]`/`[routing]` sections that exercise standard policy
/// `name` of `kind` (with hash-free company: round-robin routing, always-admit
/// admission, the queue-depth scorer, max-score).
pub(super) fn sections(kind: &str, name: &str) -> Option<String> {
    let admission_params = match name {
        "token-bucket" => "\n[admission.params]\ncapacity = 20000.0\nrefill_rate = 60000.0",
        _ => "",
    };
    // A filter with no default conditions gets some that bite.
    let filter_params = match name {
        "utilization" => ", params = { conditions = [{ metric = \"active-requests\", max = 6 }, { metric = \"waiting-queue\", max = 2 }], fallback_on_empty = true }",
        _ => "",
    };
    Some(match kind {
        "admission" => format!(
            "[admission]\npolicy = \"{name}\"{admission_params}\n[routing]\npolicy = \"round-robin\""
        ),
        "router" => format!("[routing]\npolicy = \"{name}\""),
        "scorer" => format!(
            "[routing]\npolicy = \"weighted\"\n[[routing.scorers]]\nname = \"{name}\"\nweight = 2.0\n\
             [[routing.scorers]]\nname = \"queue-depth\"\nweight = 1.0"
        ),
        "filter" => format!(
            "[routing]\npolicy = \"pipeline\"\n[[routing.profiles]]\nname = \"p\"\n\
             filters = [{{ name = \"{name}\"{filter_params} }}]\nscorers = [{{ name = \"queue-depth\", weight = 1.0 }}]"
        ),
        "picker" => format!(
            "[routing]\npolicy = \"pipeline\"\n[[routing.profiles]]\nname = \"p\"\n\
             scorers = [{{ name = \"queue-depth\", weight = 1.0 }}]\npicker = {{ name = \"{name}\" }}"
        ),
        _ => return None,
    })
}

/// Every standard policy that sees a request at the cluster level, with
/// the sections that exercise it (instance-level and cluster-wide ones —
/// schedulers, autoscalers — see no request and are left out).
pub(super) fn cluster_policies() -> Vec<(KindCode, String, String)> {
    let registry = Registry::standard();
    let mut out = Vec::new();
    for lib in registry.libraries() {
        for p in &lib.policies {
            if let Some(section) = sections(p.kind.name(), &p.name) {
                out.push((p.kind, p.name.clone(), section));
            }
        }
    }
    out
}

#[test]
fn no_standard_policy_reads_prompt_hashes_unless_it_says_so() {
    let dir = scratch("prompt-hashes");
    let mut checked = Vec::new();
    for (code, name, section) in cluster_policies() {
        let kind = code.name();
        let text = run_file(&section);
        let always = outputs(&text, Provide::Always, &dir);
        let decided = outputs(&text, Provide::WhenRead, &dir);
        assert!(
            always == decided,
            "{kind} '{name}' behaves differently without the prompt hashes: \
             list it in std_reads_block_hashes"
        );
        checked.push(format!("{kind}:{name}"));
    }
    // Every cluster-level kind was covered (5 admission, 4 router, 10
    // scorer, 2 filter, 3 picker policies when this was written).
    for kind in ["admission", "router", "scorer", "filter", "picker"] {
        assert!(checked.iter().any(|c| c.starts_with(kind)), "{checked:?}");
    }
    assert!(checked.len() >= 24, "{checked:?}");
}

/// The workload is one where the hashes matter: the policies that read
/// them decide differently without them (so the test above can fail).
#[test]
fn the_prefix_affinity_policies_need_the_hashes() {
    let dir = scratch("prompt-hashes-needed");
    for (code, name) in [
        (KindCode::ROUTER, "prefix-affinity"),
        (KindCode::SCORER, "prefix-affinity"),
    ] {
        assert!(std_reads_block_hashes(code, name));
        let kind = code.name();
        let text = run_file(&sections(kind, name).expect("a cluster-level kind"));
        let with = outputs(&text, Provide::WhenRead, &dir);
        assert_eq!(with, outputs(&text, Provide::Always, &dir));
        assert_ne!(
            with,
            outputs(&text, Provide::Never, &dir),
            "{kind} '{name}' decided the same without the hashes"
        );
    }
}
