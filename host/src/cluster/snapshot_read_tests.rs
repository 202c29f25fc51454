//! Admission and routing decisions re-read the live instance snapshots only
//! when their policy may read them (`Cluster::admission_reads`,
//! `Cluster::routing_reads`): every plugin policy, every standard one not
//! listed in `std_reads_snapshots`, and routing whenever the decision trace
//! records them. These tests run every standard cluster-level policy with
//! the snapshots always re-read and as decided — with and without a trace,
//! with live and with periodic signals (whose schedules a skipped decision
//! must still move) — and require byte-identical reports, per-request
//! results and traces: a standard policy listed as not reading the
//! snapshots that does read them fails here.

use super::prompt_hash_tests::{cluster_policies, outputs_with, run_file, sections};
use super::tests::scratch;
use super::Provide;
use crate::plugins::registry::std_reads_snapshots;
use blis_plugin_api::KindCode;

/// Periodic signals: every group on its own schedule.
const PERIODIC: &str =
    "\n[routing.freshness]\nqueue_depth_us = 30000\nbatch_size_us = 7000\nkv_utilization_us = 20000\n";

/// The run files of a policy's sections: with and without the decision
/// trace, with the default (live) and with periodic freshness.
fn variants(section: &str) -> Vec<String> {
    let traced = run_file(section);
    let untraced = traced.replace("trace_path = \"trace.jsonl\"\n", "");
    assert_ne!(traced, untraced);
    vec![
        traced.clone(),
        untraced.clone(),
        format!("{traced}{PERIODIC}"),
        format!("{untraced}{PERIODIC}"),
    ]
}

#[test]
fn no_standard_policy_reads_snapshots_unless_it_says_so() {
    let dir = scratch("snapshot-reads");
    let mut skipping = Vec::new();
    for (code, name, section) in cluster_policies() {
        let kind = code.name();
        for text in variants(&section) {
            let always = outputs_with(&text, &dir, |s| s.snapshot_reads = Provide::Always);
            let decided = outputs_with(&text, &dir, |s| s.snapshot_reads = Provide::WhenRead);
            assert!(
                always == decided,
                "{kind} '{name}' behaves differently when decisions skip the snapshots: \
                 remove it from the list in std_reads_snapshots\n{text}"
            );
        }
        if !std_reads_snapshots(code, &name) {
            skipping.push(format!("{kind}:{name}"));
        }
    }
    // The policies that skip were all run (8 when this was written).
    skipping.sort();
    assert_eq!(
        skipping,
        [
            "admission:always-admit",
            "admission:concurrency-shed",
            "admission:reject-all",
            "admission:token-bucket",
            "filter:in-flight-limit",
            "filter:session-affinity",
            "router:round-robin",
            "scorer:constant",
            "scorer:session-affinity",
            "scorer:token-load"
        ],
    );
}

/// The workload is one where the snapshots matter: policies that read them
/// decide differently when decisions never re-read the live signals (so
/// the test above can fail).
#[test]
fn snapshot_readers_decide_differently_without_them() {
    let dir = scratch("snapshot-reads-needed");
    for (code, name) in [
        (KindCode::ROUTER, "least-loaded"),
        (KindCode::SCORER, "queue-depth"),
    ] {
        assert!(std_reads_snapshots(code, name));
        let kind = code.name();
        let text = &variants(&sections(kind, name).expect("a cluster-level kind"))[1];
        let with = outputs_with(text, &dir, |s| s.snapshot_reads = Provide::WhenRead);
        assert_eq!(
            with,
            outputs_with(text, &dir, |s| s.snapshot_reads = Provide::Always)
        );
        assert_ne!(
            with,
            outputs_with(text, &dir, |s| s.snapshot_reads = Provide::Never),
            "{kind} '{name}' decided the same without the snapshots"
        );
    }
}
