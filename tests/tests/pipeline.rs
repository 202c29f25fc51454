//! Routing profiles (ABI 0.2) through the real `blis`: a third-party filter
//! changes the candidates the scorers see (and the trace says which filter
//! removed which instances), a picker changes the choices, a filter that
//! leaves nothing rejects the request, and a scorer written with lifecycle
//! hooks counts in-flight requests exactly as the host does at every event
//! and decision (it panics — failing the run — the moment they differ), and
//! a scheduler plugin reproducing SJF gives the native `sjf`'s report byte
//! for byte.

use serde_json::Value;

use crate::util::{artifacts, TestDir};

/// A loaded cluster: KV pressure so utilisation varies across instances.
const SCENARIO: &str = "seed = 11\n\
    [instance]\ncount = 6\ntotal_kv_blocks = 900\n\
    [workload]\naggregate_rate = 300.0\nnum_requests = 500\nprefix_tokens = 32\n\
    arrival = { process = \"poisson\" }\n";

/// Run `blis run FILE` in `dir` with `[routing]` given as TOML; returns the
/// report and the trace records.
fn run(dir: &TestDir, name: &str, routing: &str) -> (Value, Vec<Value>) {
    let file = dir.write(&format!("{name}.toml"), &format!("{SCENARIO}{routing}"));
    let trace = dir.path().join(format!("{name}.trace"));
    let out = dir
        .blis()
        .arg("run")
        .arg(&file)
        .arg("--plugin")
        .arg(artifacts().pipeline())
        .arg("--trace-path")
        .arg(&trace)
        .arg("--quiet")
        .output()
        .expect("cannot run blis");
    assert!(
        out.status.success(),
        "{name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let records = std::fs::read_to_string(&trace)
        .expect("trace")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    (report, records)
}

fn routings(records: &[Value]) -> impl Iterator<Item = &Value> {
    records.iter().filter(|r| r["kind"] == "routing")
}

#[test]
fn filter_removes_instances_and_the_trace_says_which() {
    let dir = TestDir::new("filter_removes_instances_and_the_trace_says_which");
    let (report, records) = run(
        &dir,
        "filtered",
        "[output]\ncounterfactual_k = 6\n[routing]\npolicy = \"pipeline\"\n\
         [[routing.profiles]]\nfilters = [{ name = \"kv-under\", params = { threshold = 0.5 } }]\n\
         scorers = [{ name = \"queue-depth\", weight = 1.0 }]\n",
    );
    let c = &report["cluster"];
    assert!(c["completed_requests"].as_u64().unwrap() > 0, "{c}");
    let mut removed_any = 0;
    for r in routings(&records) {
        let filtered = r["filtered"].as_array().expect("a filtered list");
        assert_eq!(filtered.len(), 1, "{r}");
        assert_eq!(filtered[0]["filter"], "fixture-pipeline::kv-under", "{r}");
        let removed: Vec<u64> = filtered[0]["removed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        removed_any += usize::from(!removed.is_empty());
        if r["chosen"].is_null() {
            continue;
        }
        // Only survivors are ranked, and every survivor is under the threshold.
        for c in r["candidates"].as_array().unwrap() {
            assert!(c["kv_utilization"].as_f64().unwrap() < 0.5, "{r}");
            assert!(!removed.contains(&c["instance"].as_u64().unwrap()), "{r}");
        }
        assert!(!removed.contains(&r["chosen"].as_u64().unwrap()), "{r}");
    }
    assert!(removed_any > 10, "the filter never removed anything");
}

/// The picker decides: `last-candidate` picks the highest-index candidate
/// where `max-score` picks the best total, and the runs differ.
#[test]
fn picker_plugin_changes_the_choices() {
    let dir = TestDir::new("picker_plugin_changes_the_choices");
    let profile = |picker: &str| {
        format!(
            "[routing]\npolicy = \"pipeline\"\n[[routing.profiles]]\n\
             filters = [{{ name = \"kv-under\", params = {{ threshold = 0.95 }} }}]\n\
             scorers = [{{ name = \"queue-depth\", weight = 2.0 }}, {{ name = \"kv-utilization\" }}]\n\
             picker = {{ name = \"{picker}\" }}\n"
        )
    };
    let (_, best) = run(&dir, "max-score", &profile("max-score"));
    let (_, last) = run(&dir, "last", &profile("last-candidate"));
    let mut differ = 0;
    for (a, b) in routings(&best).zip(routings(&last)) {
        if b["chosen"].is_null() {
            continue;
        }
        let removed: Vec<u64> = b["filtered"][0]["removed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let highest = (0..6u64).rev().find(|i| !removed.contains(i)).unwrap();
        assert_eq!(b["chosen"].as_u64(), Some(highest), "{b}");
        // max-score: the chosen one has the best total (regret 0).
        if !a["chosen"].is_null() {
            assert_eq!(a["regret"].as_f64(), Some(0.0), "{a}");
        }
        differ += usize::from(a["chosen"] != b["chosen"]);
    }
    assert!(differ > 10, "the picker changed almost nothing ({differ})");
}

/// A filter that removes every instance fails the profile: the request is
/// rejected (INV-1 still holds), and the trace names the filter.
#[test]
fn a_filter_leaving_nothing_rejects_the_request() {
    let dir = TestDir::new("a_filter_leaving_nothing_rejects_the_request");
    let (report, records) = run(
        &dir,
        "empty",
        "[routing]\npolicy = \"pipeline\"\n[[routing.profiles]]\n\
         filters = [{ name = \"kv-under\", params = { threshold = -1.0 } }, { name = \"low-queue\" }]\n",
    );
    let c = &report["cluster"];
    assert_eq!(c["rejected_requests"], c["num_requests"], "{c}");
    assert_eq!(c["injected_requests"].as_u64(), Some(0), "{c}");
    for r in routings(&records) {
        assert!(r["chosen"].is_null(), "{r}");
        let f = r["filtered"].as_array().unwrap();
        // The second filter never ran.
        assert_eq!(f.len(), 1, "{r}");
        assert_eq!(f[0]["removed"].as_array().unwrap().len(), 6, "{r}");
    }
}

/// The `active-requests` scorer counts requests in flight from the
/// `dispatched`, `completed` and `dropped` hooks and asserts, at every event
/// and every decision, that its counts equal the host's `in_flight` (a
/// mismatch panics and fails the run). The counts end at zero when every
/// request has finished.
#[test]
fn hooked_scorer_tracks_in_flight_requests_exactly() {
    let dir = TestDir::new("hooked_scorer_tracks_in_flight_requests_exactly");
    for (name, routing) in [
        (
            "pipeline",
            "[routing]\npolicy = \"pipeline\"\n[[routing.profiles]]\n\
             filters = [{ name = \"low-queue\", params = { threshold = 1000 } }]\n\
             scorers = [{ name = \"fixture-pipeline::active-requests\" }]\n",
        ),
        (
            "weighted",
            "[routing]\npolicy = \"weighted\"\n\
             scorers = [{ name = \"fixture-pipeline::active-requests\", weight = 1.0 }]\n",
        ),
        (
            "std",
            "[routing]\npolicy = \"weighted\"\n\
             scorers = [{ name = \"blis-std::active-requests\", weight = 1.0 }]\n",
        ),
    ] {
        let (report, records) = run(&dir, name, routing);
        let c = &report["cluster"];
        assert_eq!(c["completed_requests"].as_u64(), Some(500), "{name}: {c}");
        // Least in flight first: the load spreads over every instance.
        let used: std::collections::BTreeSet<u64> = routings(&records)
            .filter_map(|r| r["chosen"].as_u64())
            .collect();
        assert_eq!(used.len(), 6, "{name}");
    }
}

/// The wait-queue order as a plugin: a third-party "shortest prompt first"
/// and blis-std's `sjf` plugin give exactly the native `sjf`'s report and
/// per-request results, on a queue-heavy run where the order matters.
#[test]
fn scheduler_plugin_reproduces_native_sjf_byte_for_byte() {
    let dir = TestDir::new("scheduler_plugin_reproduces_native_sjf_byte_for_byte");
    let scenario = "seed = 3\n[instance]\ncount = 2\nmax_num_seqs = 8\ntotal_kv_blocks = 2000\n\
        [workload]\naggregate_rate = 150.0\nnum_requests = 400\n\
        prompt_tokens = 600\nprompt_tokens_stdev = 500\narrival = { process = \"poisson\" }\n";
    let mut outs = Vec::new();
    for sched in ["sjf", "shortest-first", "blis-std::sjf", "fcfs"] {
        let name = sched.replace("::", "-");
        // `scheduler` goes into [instance], which precedes [workload].
        dir.write(
            &format!("{name}.toml"),
            &scenario.replace(
                "[workload]",
                &format!("scheduler = \"{sched}\"\n[workload]"),
            ),
        );
        let results = dir.path().join(format!("{name}.results"));
        let out = dir
            .blis()
            .arg("run")
            .arg(format!("{name}.toml"))
            .arg("--plugin")
            .arg(artifacts().pipeline())
            .arg("--results-path")
            .arg(&results)
            .arg("--quiet")
            .output()
            .expect("run blis");
        assert!(
            out.status.success(),
            "{sched}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report.as_object_mut().unwrap().remove("plugins");
        outs.push((report, std::fs::read_to_string(&results).unwrap()));
    }
    assert!(outs[0].0["cluster"]["completed_requests"].as_u64().unwrap() > 0);
    assert_eq!(
        outs[0], outs[1],
        "shortest-first differs from the native sjf"
    );
    assert_eq!(
        outs[0], outs[2],
        "blis-std::sjf differs from the native sjf"
    );
    assert_ne!(
        outs[0].1, outs[3].1,
        "the order does not matter in this run"
    );
}

/// The preemption victim as a plugin: blis-std's `priority` and `fcfs`
/// preemption plugins give exactly the native policies' reports and
/// per-request results under KV pressure with mixed SLO classes (and the two
/// policies differ there, so the choice is exercised).
#[test]
fn preemption_plugins_reproduce_the_native_policies() {
    let dir = TestDir::new("preemption_plugins_reproduce_the_native_policies");
    let scenario = "seed = 9\n[instance]\ncount = 1\nmax_num_seqs = 64\ntotal_kv_blocks = 400\n\
        [workload]\naggregate_rate = 40.0\nnum_requests = 300\n\
        [[workload.clients]]\nid = \"a\"\nslo_class = \"critical\"\nrate_fraction = 0.5\n\
        arrival = { process = \"poisson\" }\n\
        input = { type = \"gaussian\", mean = 300, std_dev = 100, min = 10, max = 900 }\n\
        output = { type = \"gaussian\", mean = 300, std_dev = 100, min = 5, max = 900 }\n\
        [[workload.clients]]\nid = \"b\"\nslo_class = \"batch\"\nrate_fraction = 0.5\n\
        arrival = { process = \"poisson\" }\n\
        input = { type = \"gaussian\", mean = 300, std_dev = 100, min = 10, max = 900 }\n\
        output = { type = \"gaussian\", mean = 300, std_dev = 100, min = 5, max = 900 }\n";
    let mut outs = Vec::new();
    for p in ["priority", "blis-std::priority", "fcfs", "blis-std::fcfs"] {
        let name = p.replace("::", "-");
        dir.write(
            &format!("{name}.toml"),
            &scenario.replace("[workload]", &format!("preemption = \"{p}\"\n[workload]")),
        );
        let results = dir.path().join(format!("{name}.results"));
        let out = dir
            .blis()
            .arg("run")
            .arg(format!("{name}.toml"))
            .arg("--results-path")
            .arg(&results)
            .arg("--quiet")
            .output()
            .expect("run blis");
        assert!(
            out.status.success(),
            "{p}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        outs.push((report, std::fs::read_to_string(&results).unwrap()));
    }
    assert!(
        outs[0].0["cluster"]["preemption_count"].as_u64().unwrap() > 10,
        "{}",
        outs[0].0["cluster"]
    );
    assert_eq!(
        outs[0], outs[1],
        "blis-std::priority differs from the native priority"
    );
    assert_eq!(
        outs[2], outs[3],
        "blis-std::fcfs differs from the native fcfs"
    );
    assert_ne!(
        outs[0].1, outs[2].1,
        "the victim choice does not matter in this run"
    );
}

/// `blis convert epp-config` turns llm-d's default profile (and a profile
/// with a decode filter and the load-aware scorer) into a `[routing]`
/// section that `blis run` accepts: the scorers and weights are llm-d's
/// (the queue scorer is blis's `waiting-queue`), ties are broken at random
/// as llm-d's max-score-picker does, and the decode filter is stated to
/// have no simulated effect on instances without roles.
#[test]
fn llm_d_endpoint_picker_configs_convert_and_run() {
    let dir = TestDir::new("llm_d_endpoint_picker_configs_convert_and_run");
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/epp");
    for (file, scorers, note) in [
        (
            "default-profile.yaml",
            vec![
                ("waiting-queue", 2.0),
                ("kv-utilization", 2.0),
                ("prefix-affinity", 3.0),
            ],
            "'metrics-data-source' (metrics-data-source): the model-server metrics",
        ),
        (
            "decode-filter-load-aware.yaml",
            vec![("prefix-affinity", 1.0), ("load-aware", 1.0)],
            "'decode-filter' (decode-filter): no simulated effect",
        ),
    ] {
        let out = dir
            .blis()
            .args(["convert", "epp-config"])
            .arg(fixtures.join(file))
            .output()
            .expect("run blis");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{file}: {stderr}");
        assert!(stderr.contains(note), "{file}: {stderr}");
        let routing = String::from_utf8(out.stdout).unwrap();
        let t: toml::Table = routing.parse().expect("valid TOML");
        let r = &t["routing"];
        assert_eq!(r["policy"].as_str(), Some("weighted"), "{file}");
        assert_eq!(r["tie_break"].as_str(), Some("random"), "{file}");
        let got: Vec<(&str, f64)> = r["scorers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["name"].as_str().unwrap(), s["weight"].as_float().unwrap()))
            .collect();
        assert_eq!(got, scorers, "{file}");
        let name = file.trim_end_matches(".yaml");
        dir.write(&format!("{name}.toml"), &format!("{SCENARIO}{routing}\n"));
        let out = dir
            .blis()
            .args(["run", &format!("{name}.toml"), "--quiet"])
            .output()
            .expect("run blis");
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            report["cluster"]["completed_requests"].as_u64(),
            Some(500),
            "{file}"
        );
    }
}

/// Reasons and logging through a real `.so`: the admission policy's reason
/// lands in every admission record of the trace, the filter's reason in
/// each `filtered` entry that removed instances (and only there), and the
/// policy's per-request log lines reach stderr prefixed with its name,
/// rate-limited to `LOG_LINES_PER_POLICY` lines and one notice. stdout
/// stays the report alone.
#[test]
fn admission_and_filter_reasons_reach_the_trace_and_logs_are_rate_limited() {
    let dir = TestDir::new("admission_and_filter_reasons_reach_the_trace");
    let file = dir.write(
        "reasons.toml",
        &format!(
            "{SCENARIO}[admission]\npolicy = \"reject-odd\"\n[routing]\npolicy = \"pipeline\"\n\
             [[routing.profiles]]\nfilters = [{{ name = \"kv-under\", params = {{ threshold = 0.3 }} }}]\n\
             scorers = [{{ name = \"queue-depth\" }}]\n"
        ),
    );
    let trace = dir.path().join("reasons.trace");
    let out = dir
        .blis()
        .arg("run")
        .arg(&file)
        .arg("--plugin")
        .arg(artifacts().pipeline())
        .arg("--trace-path")
        .arg(&trace)
        .arg("--quiet")
        .output()
        .expect("cannot run blis");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON report");
    // The odd half, and those whose every candidate the filter removed.
    assert!(report["cluster"]["rejected_requests"].as_u64().unwrap() >= 250);
    let records: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut admissions = 0;
    let (mut with_reason, mut without) = (0, 0);
    for r in &records {
        if r["kind"] == "admission" {
            admissions += 1;
            let id = r["request_id"].as_u64().unwrap();
            assert_eq!(r["reason"], format!("odd request id {id}"), "{r}");
            continue;
        }
        for f in r["filtered"].as_array().unwrap() {
            if f["removed"].as_array().unwrap().is_empty() {
                assert!(f.get("reason").is_none(), "{r}");
                without += 1;
            } else {
                assert_eq!(f["reason"], "KV utilisation ≥ 0.3", "{r}");
                with_reason += 1;
            }
        }
    }
    assert_eq!(admissions, 250);
    assert!(with_reason > 10 && without > 10, "{with_reason} {without}");
    let logged: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("[fixture-pipeline::reject-odd] "))
        .collect();
    assert_eq!(logged.len(), 21, "{stderr}");
    assert_eq!(
        logged[0],
        "[fixture-pipeline::reject-odd] rejecting request 1"
    );
    assert_eq!(
        logged[19],
        "[fixture-pipeline::reject-odd] rejecting request 39"
    );
    assert!(logged[20].contains("further log lines of this policy are suppressed"));
}

/// `[[admission.then]]`: a request is admitted only when every policy
/// admits it, asked in order up to the first refusal, and the trace names
/// the policy that refused. reject-odd before or after always-admit
/// refuses exactly the 250 odd ids; reject-all after reject-odd refuses
/// all 500, the odd ones by reject-odd (reject-all never sees them) and the
/// even ones by reject-all; always-admit twice is the bare run byte for
/// byte; a bad policy in the chain names its place.
#[test]
fn an_admission_chain_admits_what_every_policy_admits() {
    let dir = TestDir::new("an_admission_chain");
    let run = |name: &str, admission: &str, trace: bool| {
        let file = dir.write(
            &format!("{name}.toml"),
            &format!("{SCENARIO}{admission}[routing]\npolicy = \"round-robin\"\n"),
        );
        let tr = dir.path().join(format!("{name}.trace"));
        let mut cmd = dir.blis();
        cmd.arg("run")
            .arg(&file)
            .arg("--plugin")
            .arg(artifacts().pipeline())
            .arg("--quiet");
        if trace {
            cmd.arg("--trace-path").arg(&tr);
        }
        let out = cmd.output().expect("cannot run blis");
        (out, tr)
    };
    let refusals = |name: &str, admission: &str| {
        let (out, tr) = run(name, admission, true);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut by: Vec<(u64, String)> = std::fs::read_to_string(tr)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["kind"] == "admission")
            .map(|r| {
                (
                    r["request_id"].as_u64().unwrap(),
                    r["policy"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        by.sort();
        assert_eq!(
            report["cluster"]["rejected_by"]["admission"]
                .as_u64()
                .unwrap(),
            by.len() as u64
        );
        by
    };
    let step = |p: &str| format!("[[admission.then]]\npolicy = \"{p}\"\n");
    let odd_first = refusals(
        "odd-first",
        &format!(
            "[admission]\npolicy = \"reject-odd\"\n{}",
            step("always-admit")
        ),
    );
    let odd_last = refusals(
        "odd-last",
        &format!(
            "[admission]\npolicy = \"always-admit\"\n{}",
            step("reject-odd")
        ),
    );
    assert_eq!(odd_first.len(), 250);
    assert!(odd_first
        .iter()
        .all(|(id, p)| id % 2 == 1 && p == "fixture-pipeline::reject-odd"));
    assert_eq!(odd_first, odd_last);
    let all = refusals(
        "all",
        &format!(
            "[admission]\npolicy = \"reject-odd\"\n{}",
            step("reject-all")
        ),
    );
    assert_eq!(all.len(), 500);
    for (id, p) in &all {
        let want = if id % 2 == 1 {
            "fixture-pipeline::reject-odd"
        } else {
            "blis-std::reject-all"
        };
        assert_eq!(p, want, "request {id}");
    }
    let (bare, _) = run("bare", "[admission]\npolicy = \"always-admit\"\n", false);
    let (twice, _) = run(
        "twice",
        &format!(
            "[admission]\npolicy = \"always-admit\"\n{}",
            step("always-admit")
        ),
        false,
    );
    assert!(bare.status.success() && twice.status.success());
    assert_eq!(bare.stdout, twice.stdout);
    let (bad, _) = run(
        "bad",
        &format!(
            "[admission]\npolicy = \"always-admit\"\n{}",
            step("no-such-policy")
        ),
        false,
    );
    let e = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{e}");
    assert!(
        e.contains("admission.then[0]") && e.contains("no-such-policy"),
        "{e}"
    );
}

/// `[routing.freshness]` with llm-d's 50 ms scrape for queue depth and
/// batch size: round-robin routing does not read the snapshots, so the run
/// is the same as with live signals, and at every decision the trace shows,
/// for every instance, exactly the values the live run showed at the
/// decision of the last read (the first decision ≥ 50 ms after the one
/// before). The KV signals, left live, match the live run everywhere.
#[test]
fn a_50_ms_scrape_shows_the_values_of_the_last_scrape() {
    let dir = TestDir::new("a_50_ms_scrape_shows_the_values_of_the_last_scrape");
    let base = "[output]\ncounterfactual_k = 6\n[routing]\npolicy = \"round-robin\"\n";
    let (live_report, live) = run(&dir, "live", base);
    let (scrape_report, scraped) = run(
        &dir,
        "scrape",
        &format!("{base}[routing.freshness]\nqueue_depth_us = 50000\nbatch_size_us = 50000\n"),
    );
    // The same run; only the regret, computed from the snapshots, differs.
    let without_regret = |r: &Value| {
        let mut c = r["cluster"].as_object().unwrap().clone();
        c.retain(|k, _| !k.ends_with("_regret"));
        c
    };
    assert_eq!(without_regret(&live_report), without_regret(&scrape_report));
    let by_instance = |r: &Value, key: &str| -> Vec<Value> {
        let mut v = vec![Value::Null; 6];
        for c in r["candidates"].as_array().unwrap() {
            v[c["instance"].as_u64().unwrap() as usize] = c[key].clone();
        }
        v
    };
    let live: Vec<&Value> = routings(&live).collect();
    let scraped: Vec<&Value> = routings(&scraped).collect();
    assert_eq!(live.len(), 500);
    assert_eq!(scraped.len(), 500);
    let mut last_read = 0;
    let mut stale = 0;
    for (k, (s, l)) in scraped.iter().zip(&live).enumerate() {
        let t = s["time_us"].as_i64().unwrap();
        assert_eq!(t, l["time_us"].as_i64().unwrap());
        if t - scraped[last_read]["time_us"].as_i64().unwrap() >= 50_000 {
            last_read = k;
        }
        for key in ["queue_depth", "batch_size"] {
            let seen = by_instance(s, key);
            let expected = by_instance(live[last_read], key);
            assert_eq!(seen, expected, "decision {k}: {key}");
            stale += usize::from(seen != by_instance(l, key));
        }
        assert_eq!(
            by_instance(s, "kv_utilization"),
            by_instance(l, "kv_utilization")
        );
    }
    assert!(
        stale > 50,
        "the scrape hardly ever differed from live ({stale})"
    );
}

/// Four prefix groups on four instances: routing by the live prefix-cache
/// query (`precise-prefix-cache` 2 + `queue-depth` 1) sends requests where
/// their prefix is cached, so the KV hit rate is higher than with
/// `queue-depth` alone; the same with the reference's 50 ms
/// `cache_signal_delay_us`, and its `sim-epp-no-hit-lru` profile
/// (`precise-prefix-cache` 2 + `no-hit-lru` 1), run and complete every
/// request.
#[test]
fn precise_prefix_cache_routes_to_the_cached_prefix() {
    let dir = TestDir::new("precise_prefix_cache_routes_to_the_cached_prefix");
    let mut workload = String::from(
        "seed = 5\n[instance]\ncount = 4\n[workload]\naggregate_rate = 40.0\nnum_requests = 400\n",
    );
    for g in 0..4 {
        workload.push_str(&format!(
            "[[workload.clients]]\nid = \"c{g}\"\nrate_fraction = 0.25\n\
             arrival = {{ process = \"poisson\" }}\n\
             input = {{ type = \"gaussian\", mean = 128, std_dev = 32, min = 16, max = 512 }}\n\
             output = {{ type = \"gaussian\", mean = 64, std_dev = 16, min = 8, max = 256 }}\n\
             prefix_group = \"g{g}\"\nprefix_length = 1024\n"
        ));
    }
    let hit_rate = |name: &str, routing: &str| -> f64 {
        dir.write(&format!("{name}.toml"), &format!("{workload}{routing}"));
        let out = dir
            .blis()
            .args(["run", &format!("{name}.toml"), "--quiet"])
            .output()
            .expect("run blis");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let c = &report["cluster"];
        assert_eq!(c["completed_requests"].as_u64(), Some(400), "{name}: {c}");
        c["kv_cache_hit_rate"].as_f64().unwrap()
    };
    let load = hit_rate(
        "load",
        "[routing]\npolicy = \"weighted\"\nscorers = [{ name = \"queue-depth\", weight = 1.0 }]\n",
    );
    let precise = |delay: u32| {
        format!(
            "[routing]\npolicy = \"weighted\"\ncache_signal_delay_us = {delay}\n\
             scorers = [{{ name = \"precise-prefix-cache\", weight = 2.0 }}, \
             {{ name = \"queue-depth\", weight = 1.0 }}]\n"
        )
    };
    let live = hit_rate("live", &precise(0));
    let stale = hit_rate("stale", &precise(50_000));
    let lru = hit_rate(
        "no-hit-lru",
        "[routing]\npolicy = \"pipeline\"\ncache_signal_delay_us = 50000\n[[routing.profiles]]\n\
         scorers = [{ name = \"precise-prefix-cache\", weight = 2.0 }, { name = \"no-hit-lru\" }]\n",
    );
    assert!(live > load, "live {live} vs load {load}");
    assert!(stale > 0.0 && lru > 0.0, "stale {stale}, no-hit-lru {lru}");
}

/// Freshness and cache-delay settings are checked: a negative interval, and
/// the KV interval given twice, are errors naming the key (exit 2, nothing
/// on stdout).
#[test]
fn bad_freshness_settings_are_rejected_with_the_key() {
    let dir = TestDir::new("bad_freshness_settings_are_rejected_with_the_key");
    for (name, routing, key) in [
        (
            "negative",
            "[routing.freshness]\nqueue_depth_us = -1\n",
            "routing.freshness.queue_depth_us = -1",
        ),
        (
            "delay",
            "[routing]\ncache_signal_delay_us = -5\n",
            "routing.cache_signal_delay_us = -5",
        ),
        (
            "twice",
            "[routing]\nsnapshot_refresh_interval_us = 1000\n\
             [routing.freshness]\nkv_utilization_us = 2000\n",
            "keep one of them",
        ),
        (
            "unknown",
            "[routing.freshness]\nqueue_depth = 5\n",
            "queue_depth",
        ),
    ] {
        dir.write(&format!("{name}.toml"), &format!("{SCENARIO}{routing}"));
        let out = dir
            .blis()
            .args(["run", &format!("{name}.toml"), "--quiet"])
            .output()
            .expect("run blis");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}");
        assert!(stderr.contains(key), "{name}: {stderr}");
    }
}
