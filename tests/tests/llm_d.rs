//! llm-d Router EndpointPickerConfig files through the real `blis`:
//! `blis run BASE --epp-config FILE` on the 19 files the llm-d Router ships
//! (`tests/data/llm-d-router-configs/`, copied unchanged), the loader's own
//! validation table (llm-d-router.md §1.6), the default profile against
//! the `weighted` policy, `convert` against `run`, and the hardening cases.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::examples::check_conservation;
use crate::util::{run_bad, TestDir};

/// Four instances, a chat workload with some sheddable traffic.
const BASE: &str = "seed = 7
[instance]
count = 4
[workload]
aggregate_rate = 30.0
num_requests = 240
[[workload.clients]]
id = \"chat\"
rate_fraction = 0.75
slo_class = \"standard\"
arrival = { process = \"poisson\" }
input = { type = \"gaussian\", mean = 256, std_dev = 64, min = 16, max = 1024 }
output = { type = \"gaussian\", mean = 64, std_dev = 16, min = 8, max = 256 }
prefix_group = \"sys\"
prefix_length = 512
[[workload.clients]]
id = \"batch\"
rate_fraction = 0.25
slo_class = \"sheddable\"
arrival = { process = \"poisson\" }
input = { type = \"gaussian\", mean = 512, std_dev = 64, min = 16, max = 1024 }
output = { type = \"gaussian\", mean = 32, std_dev = 8, min = 8, max = 128 }
";

/// The same workload on a prefill pool and a decode pool.
fn base_pd() -> String {
    let (head, rest) = BASE.split_once("[workload]").unwrap();
    format!(
        "{}[[pools]]\nname = \"prefill\"\nrole = \"prefill\"\ninstances = 2\n\
         [[pools]]\nname = \"decode\"\nrole = \"decode\"\ninstances = 2\n[workload]{rest}",
        head.replace("[instance]\ncount = 4\n", "")
    )
}

fn configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/llm-d-router-configs")
}

/// The P/D and encode files need a base with pools.
fn needs_pools(file: &str) -> bool {
    file.starts_with("pd-") || file.starts_with("sim-pd") || file.starts_with("sim-e-")
}

fn run_ok(dir: &TestDir, args: &[&str]) -> (Value, String) {
    let out = dir
        .blis()
        .args(args)
        .arg("--quiet")
        .output()
        .expect("run blis");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "blis {args:?}: {stderr}");
    (
        serde_json::from_slice(&out.stdout).expect("one JSON report"),
        stderr,
    )
}

/// Every shipped file runs (exit 0, requests conserved), except the one
/// the llm-d loader itself refuses, which names the misspelt parameter.
/// No note says a plugin was "ignored" or "not converted".
#[test]
fn the_shipped_configurations_run_unchanged() {
    let dir = TestDir::new("llm_d_shipped_configurations_run_unchanged");
    dir.write("base.toml", BASE);
    dir.write("base-pd.toml", &base_pd());
    let mut files: Vec<String> = std::fs::read_dir(configs())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 19, "{files:?}");
    for f in &files {
        let path = configs().join(f);
        let path = path.to_str().unwrap();
        let base = if needs_pools(f) {
            "base-pd.toml"
        } else {
            "base.toml"
        };
        if f == "epp-mm-embeddings-cache-config.yaml" {
            let e = run_bad(&dir, &["run", base, "--epp-config", path]);
            assert!(
                e.contains("cacheSizeInMB")
                    && e.contains("unknown field")
                    && e.contains("cacheSizeInMBPerServer"),
                "{e}"
            );
            continue;
        }
        let (report, stderr) = run_ok(&dir, &["run", base, "--epp-config", path]);
        check_conservation(&report, f);
        for bad in ["ignored", "NOT converted", "not simulated"] {
            assert!(
                !stderr
                    .lines()
                    .any(|l| l.contains(bad) && l.contains("plugin '")),
                "{f}: a note says {bad}:\n{stderr}"
            );
        }
    }
}

/// llm-d's default profile (queue 2, kv 2, prefix 3, max-score picker with
/// random ties, the 50 ms scrape, the legacy admission) is blis's
/// `weighted` policy with those scorers: the reports are byte-identical.
#[test]
fn the_default_profile_routes_exactly_like_weighted() {
    let dir = TestDir::new("llm_d_default_profile_routes_like_weighted");
    // llm-d-router.md §1.5, as a file.
    let default = r#"apiVersion: llm-d.ai/v1alpha1
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
"#;
    dir.write("default.yaml", default);
    dir.write("base.toml", BASE);
    let weighted = format!(
        "{BASE}[admission]\npolicy = \"gaie-legacy\"\nparams = {{ queue_depth_threshold = 5.0, kv_threshold = 0.8 }}\n\
         [routing]\npolicy = \"weighted\"\ntie_break = \"random\"\n\
         scorers = [{{ name = \"waiting-queue\", weight = 2.0 }}, {{ name = \"kv-utilization\", weight = 2.0 }}, \
         {{ name = \"prefix-affinity\", weight = 3.0, params = {{ capacity = 31250 }} }}]\n\
         [routing.freshness]\nqueue_depth_us = 50000\nbatch_size_us = 50000\nkv_utilization_us = 50000\n"
    );
    dir.write("weighted.toml", &weighted);
    let epp = dir
        .blis()
        .args([
            "run",
            "base.toml",
            "--epp-config",
            "default.yaml",
            "--quiet",
        ])
        .output()
        .unwrap();
    let w = dir
        .blis()
        .args(["run", "weighted.toml", "--quiet"])
        .output()
        .unwrap();
    assert!(
        epp.status.success(),
        "{}",
        String::from_utf8_lossy(&epp.stderr)
    );
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    assert!(epp.stdout == w.stdout, "the reports differ");
    // The same file in the run file (relative to it) and through --set.
    dir.write(
        "in-file.toml",
        &BASE.replace(
            "[workload]",
            "[routing]\nepp_config = \"default.yaml\"\n[workload]",
        ),
    );
    let f = dir
        .blis()
        .args(["run", "in-file.toml", "--quiet"])
        .output()
        .unwrap();
    assert!(
        f.stdout == w.stdout,
        "{}",
        String::from_utf8_lossy(&f.stderr)
    );
    let s = dir
        .blis()
        .args([
            "run",
            "base.toml",
            "--set",
            "routing.epp_config=default.yaml",
            "--quiet",
        ])
        .output()
        .unwrap();
    assert!(
        s.stdout == w.stdout,
        "{}",
        String::from_utf8_lossy(&s.stderr)
    );
    // Random ties matter: lowest-index ties route differently.
    dir.write(
        "lowest.toml",
        &weighted.replace("tie_break = \"random\"\n", ""),
    );
    let l = dir
        .blis()
        .args(["run", "lowest.toml", "--quiet"])
        .output()
        .unwrap();
    assert!(l.stdout != w.stdout, "tie-breaking made no difference");
}

/// `blis convert epp-config` prints the sections `--epp-config` applies:
/// the converted TOML appended to the base gives the same report.
/// `blis convert epp-config FILE` appended to `base` as `converted.toml`
/// runs exactly like `blis run base.toml --epp-config FILE` (with `base`
/// written as `base.toml`): returns the converted TOML, the report and the
/// `--epp-config` run's notes.
fn converted_runs_like_the_file(dir: &TestDir, base: &str, file: &Path) -> (String, Value, String) {
    let out = dir
        .blis()
        .args(["convert", "epp-config"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let converted = String::from_utf8(out.stdout).unwrap();
    dir.write("converted.toml", &format!("{base}{converted}\n"));
    dir.write("base.toml", base);
    let (a, _) = run_ok(dir, &["run", "converted.toml"]);
    let (b, notes) = run_ok(
        dir,
        &["run", "base.toml", "--epp-config", file.to_str().unwrap()],
    );
    assert_eq!(a, b, "{}", file.display());
    (converted, b, notes)
}

#[test]
fn convert_prints_what_run_applies() {
    let dir = TestDir::new("llm_d_convert_prints_what_run_applies");
    for (file, base) in [
        ("epp-estimate-prefix-cache-config.yaml", BASE.to_string()),
        ("sim-pd-epp-config.yaml", base_pd()),
        ("probabilistic-admitter-epp-config.yaml", BASE.to_string()),
    ] {
        converted_runs_like_the_file(&dir, &base, &configs().join(file));
    }
}

fn epp(body: &str) -> String {
    format!("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n{body}")
}

/// A file whose one profile is the filter `ty` (its `parameters:` lines
/// `params`, each indented four spaces and ending in a newline) and
/// queue-scorer; with `ty` None, queue-scorer alone.
fn filter_then_queue(ty: Option<&str>, params: &str) -> String {
    match ty {
        Some(ty) => epp(&format!(
            "plugins:\n- type: {ty}\n  parameters:\n{params}- type: queue-scorer\n\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: {ty}\n  - pluginRef: queue-scorer\n"
        )),
        None => epp("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"),
    }
}

/// Each invalid case of llm-d's loader test table is refused (exit 2) with
/// the loader's reason; each valid structural case is accepted.
#[test]
fn the_loader_table_is_enforced() {
    let dir = TestDir::new("llm_d_loader_table");
    dir.write("base.toml", BASE);
    let invalid: &[(&str, String, &str)] = &[
        ("errorBadYaml", epp("plugins:\n- just-a-string\n"), "failed to decode"),
        ("errorBadPluginReference", epp("plugins:\n- name: x\n"), "plugin 'x' is missing a type"),
        ("errorBadPluginReferencePlugin", epp("plugins:\n- type: no-such-type\n"), "plugin type 'no-such-type' is not registered"),
        ("errorBadPluginJSON", epp("plugins:\n- type: load-aware-scorer\n  parameters:\n    threshold: \"many\"\n"), "parameter threshold: expected an integer"),
        ("errorUnknownFeatureGate", epp("featureGates:\n- unknown-gate\n"), "feature gate 'unknown-gate' is unknown or unregistered"),
        ("errorBadFeatureGate", epp("featureGates:\n- flowControl=qwerty\n"), "qwerty is not a valid value for the feature gate flowControl"),
        ("errorNoProfileName", epp("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- plugins:\n  - pluginRef: queue-scorer\n"), "schedulingProfiles[0] is missing a name"),
        ("errorBadProfilePlugin", epp("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins:\n  - weight: 1\n"), "is missing a 'pluginRef'"),
        ("errorBadProfilePluginRef", epp("schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: nope\n"), "references undefined plugin 'nope'"),
        ("errorDuplicatePlugin", epp("plugins:\n- type: queue-scorer\n- type: queue-scorer\n"), "duplicate plugin name 'queue-scorer'"),
        ("errorDuplicateProfile", epp("plugins:\n- type: single-profile-handler\nschedulingProfiles:\n- name: a\n- name: a\n"), "duplicate name 'a'"),
        ("errorTwoPickers", epp("plugins:\n- type: max-score-picker\n- type: random-picker\nschedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: max-score-picker\n  - pluginRef: random-picker\n"), "already have a registered picker plugin"),
        ("errorTwoProfileHandlers", epp("plugins:\n- type: single-profile-handler\n- type: data-parallel-profile-handler\n"), "multiple profile handlers found ('single-profile-handler', 'data-parallel-profile-handler'); only one is allowed"),
        ("errorNoProfileHandlers", epp("schedulingProfiles:\n- name: a\n- name: b\n"), "no profile handler configured"),
        ("errorMultiProfilesUseSingleProfileHandler", epp("plugins:\n- type: single-profile-handler\nschedulingProfiles:\n- name: a\n- name: b\n"), "SingleProfileHandler cannot support multiple scheduling profiles"),
        ("errorPluginsRefedInLoop", epp("plugins:\n- type: disagg-profile-handler\n  name: h\n  parameters:\n    deciders:\n      prefill: h\n"), "cycle detected: graph is not a DAG"),
        ("errorBadSourceReference", epp("dataLayer:\n  sources:\n  - pluginRef: nowhere\n"), "the plugin nowhere is not registered"),
        ("errorBadExtractorReference", epp("plugins:\n- type: metrics-data-source\n- type: core-metrics-extractor\ndataLayer:\n  sources:\n  - pluginRef: metrics-data-source\n    extractors:\n    - core-metrics-extractor\n"), "failed to decode"),
        ("errorFlowControlMissingPlugin", epp("featureGates:\n- flowControl\nflowControl:\n  usageLimitPolicyPluginRef: nope\n"), "plugin \"nope\" not found"),
        ("errorFlowControlWrongPluginType", epp("featureGates:\n- flowControl\nplugins:\n- type: queue-scorer\nflowControl:\n  usageLimitPolicyPluginRef: queue-scorer\n"), "plugin \"queue-scorer\" does not implement UsageLimitPolicy"),
        ("errorParserWrongPluginType", epp("plugins:\n- type: queue-scorer\nrequestHandler:\n  parsers:\n  - pluginRef: queue-scorer\n"), "the plugin \"queue-scorer\" is not a parser plugin"),
        ("errorParserWrongPluginName", epp("requestHandler:\n  parsers:\n  - pluginRef: no-parser\n"), "parser references undefined plugin 'no-parser'"),
        ("removed gate dataLayer", epp("featureGates:\n- dataLayer\n"), "feature gate 'dataLayer' is unknown"),
        ("GAIE data:", epp("data: {}\n"), "unknown field `data`"),
        ("removed low-queue-filter", epp("plugins:\n- type: low-queue-filter\n"), "plugin type 'low-queue-filter' is not registered"),
        ("a blis policy name", epp("plugins:\n- type: queue-depth\n"), "plugin type 'queue-depth' is not registered"),
        ("strict parameters", epp("plugins:\n- type: prefix-cache-scorer\n  parameters:\n    maxPrefixBlocksToMatch: 4\n"), "unknown field \"maxPrefixBlocksToMatch\""),
        ("old pd threshold", epp("plugins:\n- type: pd-profile-handler\n  parameters:\n    threshold: 10\n"), "unknown field \"threshold\""),
        ("duplicate band", epp("featureGates:\n- flowControl\nflowControl:\n  priorityBands:\n  - priority: 1\n  - priority: 1\n"), "duplicate priority level 1"),
        ("negative band bytes", epp("featureGates:\n- flowControl\nflowControl:\n  priorityBands:\n  - priority: 1\n    maxBytes: -5\n"), "MaxBytes must be non-negative"),
        ("empty detector ref", epp("flowControl:\n  saturationDetector:\n    pluginRef: \"\"\n"), "saturation detector plugin reference is empty"),
        ("undefined detector", epp("flowControl:\n  saturationDetector:\n    pluginRef: nope\n"), "saturation detector references undefined plugin 'nope'"),
        ("detector of the wrong kind", epp("plugins:\n- type: queue-scorer\nflowControl:\n  saturationDetector:\n    pluginRef: queue-scorer\n"), "is not a fwkfc.SaturationDetector"),
        ("unknown decider", epp("plugins:\n- type: disagg-profile-handler\n  parameters:\n    deciders:\n      prefill: nope\n"), "dependency on the unregistered plugin nope"),
        ("prefill-first with a decider", epp("plugins:\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters:\n    stageOrder: prefill-first\n    deciders:\n      prefill: always-disagg-pd-decider\n"), "prefill decider is not supported in prefill-first stage order"),
        ("wrong kind", epp("apiVersion: llm-d.ai/v1alpha1\n").replace("kind: EndpointPickerConfig\napiVersion: llm-d.ai/v1alpha1\n", "kind: Other\n"), "expected EndpointPickerConfig"),
        ("wrong api group", "apiVersion: v1\nkind: EndpointPickerConfig\n".into(), "apiVersion: v1"),
    ];
    for (case, yaml, reason) in invalid {
        let f = dir.write("bad.yaml", yaml);
        let e = run_bad(
            &dir,
            &["validate", "base.toml", "--epp-config", f.to_str().unwrap()],
        );
        assert!(e.contains(reason), "{case}: expected {reason:?} in:\n{e}");
        assert!(
            e.contains("routing.epp_config"),
            "{case}: names the key:\n{e}"
        );
    }
    let valid: &[(&str, String)] = &[
        ("successDeprecatedText", "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n    weight: 50\n".into()),
        ("successConfigText", epp("featureGates:\n- flowControl\nplugins:\n- type: queue-scorer\n- name: kv\n  type: kv-cache-utilization-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n    weight: 50\n  - pluginRef: kv\n")),
        ("successNoProfilesText", epp("featureGates:\n- flowControl=false\nplugins:\n- type: queue-scorer\n- type: random-picker\n")),
        ("successWithNoProfileHandlers / NoWeight / PickerBeforeScorer", epp("plugins:\n- type: max-score-picker\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: max-score-picker\n  - pluginRef: queue-scorer\n")),
        ("successFlowControlConfig", epp("featureGates:\n- flowControl\nplugins:\n- type: queue-scorer\nflowControl:\n  maxBytes: 1Gi\n  maxRequests: 2k\n  defaultRequestTTL: 30s\n  noEndpointRequestTTL: 0s\n  priorityBands:\n  - priority: 100\n    maxRequests: 100\n  defaultPriorityBand:\n    maxRequests: 100\n")),
        ("successflowControlConfigDisabled", epp("plugins:\n- type: queue-scorer\nflowControl:\n  maxRequests: 10\n  defaultRequestTTL: 5s\n")),
        ("successMultipleParsers / ExplicitPassthrough", epp("plugins:\n- type: queue-scorer\n- name: oa\n  type: openai-parser\nrequestHandler:\n  parsers:\n  - pluginRef: oa\n  - pluginRef: passthrough-parser\n")),
        ("successDataLayerOptOut", epp("plugins:\n- type: queue-scorer\ndataLayer:\n  injectDefaults: false\n")),
        ("successDataLayerExplicitConfig", epp("plugins:\n- type: queue-scorer\n- type: metrics-data-source\n  parameters:\n    interval: 100ms\n- type: core-metrics-extractor\ndataLayer:\n  sources:\n  - pluginRef: metrics-data-source\n    extractors:\n    - pluginRef: core-metrics-extractor\n")),
        ("successDeprecatedTopLevelSaturationDetector / Parser", epp("plugins:\n- type: queue-scorer\n- type: utilization-detector\n  parameters:\n    queueDepthThreshold: 8\n- type: openai-parser\nsaturationDetector:\n  pluginRef: utilization-detector\nparser:\n  pluginRef: openai-parser\n")),
        ("empty text", String::new()),
        ("Helm router: wrapper", "router:\n  epp:\n    pluginsConfigFile: custom.yaml\n    pluginsCustomConfig:\n      custom.yaml: |\n        apiVersion: llm-d.ai/v1alpha1\n        kind: EndpointPickerConfig\n        plugins:\n        - type: queue-scorer\n".into()),
    ];
    for (case, yaml) in valid {
        let f = dir.write("good.yaml", yaml);
        let out = dir
            .blis()
            .args(["validate", "base.toml", "--epp-config", f.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{case}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Weights and thresholds blis cannot rank by are refused by the
/// converter, naming the plugin and the value (hardening defect 15).
#[test]
fn unusable_weights_and_thresholds_are_refused() {
    let dir = TestDir::new("llm_d_unusable_weights");
    dir.write("base.toml", BASE);
    for (weight, shown) in [(".nan", "NaN"), ("-2", "-2"), (".inf", "inf")] {
        let f = dir.write(
            "w.yaml",
            &epp(&format!("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n    weight: {weight}\n")),
        );
        for cmd in [
            vec!["convert", "epp-config", f.to_str().unwrap()],
            vec!["run", "base.toml", "--epp-config", f.to_str().unwrap()],
        ] {
            let e = run_bad(&dir, &cmd);
            assert!(
                e.contains("'queue-scorer'") && e.contains(&format!("weight {shown}")),
                "{weight}: {e}"
            );
        }
    }
    let f = dir.write("t.yaml", &epp("plugins:\n- type: load-aware-scorer\n  parameters:\n    threshold: 9223372036854775807\n"));
    let e = run_bad(&dir, &["convert", "epp-config", f.to_str().unwrap()]);
    assert!(
        e.contains("'load-aware-scorer'") && e.contains("9223372036854775807"),
        "{e}"
    );
    // llm-d's promptTokens floor (above nonCachedTokens) converts to the
    // deciders' prompt-length floor, for the prefill and encode deciders.
    let f = dir.write(
        "s.yaml",
        &epp("plugins:\n- type: queue-scorer\n- type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: 8\n    promptTokens: 100\n- type: disagg-profile-handler\n  parameters:\n    deciders:\n      encode: prefix-based-pd-decider\n      prefill: prefix-based-pd-decider\n\
              schedulingProfiles:\n- name: encode\n  plugins:\n  - pluginRef: queue-scorer\n- name: prefill\n  plugins:\n  - pluginRef: queue-scorer\n- name: decode\n  plugins:\n  - pluginRef: queue-scorer\n"),
    );
    let out = dir
        .blis()
        .args(["convert", "epp-config", f.to_str().unwrap()])
        .output()
        .unwrap();
    let conv = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && conv.contains("prefix_min_prompt_tokens = 100")
            && conv.contains("encode_prefix_min_prompt_tokens = 100"),
        "{conv}"
    );
}

/// llm-d's `utilization-filter` runs as blis-std's `utilization` filter:
/// the converted TOML gives the same report as `--epp-config`; the
/// filter changes routing (waiting-queue ≤ 0 keeps only instances with an
/// empty queue, all of them when none has one, with fallbackOnEmpty); its
/// conditions are checked as llm-d's factory checks them.
#[test]
fn the_utilization_filter_is_simulated() {
    let dir = TestDir::new("llm_d_utilization_filter");
    dir.write("base.toml", BASE);
    let file = |conds: &str, fallback: bool| {
        filter_then_queue(
            Some("utilization-filter"),
            &format!("    conditions: {conds}\n    fallbackOnEmpty: {fallback}\n"),
        )
    };
    let f = dir.write(
        "u.yaml",
        &file(
            "[{metric: waiting-queue, maxValue: 0}, {metric: active-requests, maxValue: 6}]",
            true,
        ),
    );
    let (converted, a, notes) = converted_runs_like_the_file(&dir, BASE, &f);
    assert!(
        converted.contains("name = \"utilization\"")
            && converted.contains("metric = \"active-requests\"")
            && converted.contains("fallback_on_empty = true"),
        "{converted}"
    );
    assert!(notes.contains("blis's utilization filter"), "{notes}");
    // The same file without the filter routes differently.
    let g = dir.write("plain.yaml", &filter_then_queue(None, ""));
    let (c, _) = run_ok(
        &dir,
        &["run", "base.toml", "--epp-config", g.to_str().unwrap()],
    );
    assert_ne!(a, c, "the filter changed nothing");
    for (conds, says) in [
        ("[]", "at least one"),
        ("[{metric: gpu-temperature, maxValue: 1}]", "is not one of"),
        ("[{metric: kv-cache-utilization, maxValue: 1.5}]", "≤ 1"),
        ("[{metric: waiting-queue}]", "maxValue is missing"),
        (
            "[{metric: waiting-queue, maxValue: 1, unit: x}]",
            "unit is not a parameter",
        ),
    ] {
        let f = dir.write("bad.yaml", &file(conds, false));
        let e = run_bad(
            &dir,
            &["run", "base.toml", "--epp-config", f.to_str().unwrap()],
        );
        assert!(
            e.contains("'utilization-filter'") && e.contains(says),
            "{conds}: {e}"
        );
    }
}

/// llm-d's `concurrency-detector` referenced as a filter (requests mode)
/// keeps the instances with fewer than maxConcurrency·(1 + headroom)
/// requests in flight: blis's `utilization` filter on active-requests with
/// max ⌈limit⌉ − 1, no fallback. Tokens mode is refused, naming it.
#[test]
fn the_concurrency_detector_filters_by_requests_in_flight() {
    let dir = TestDir::new("llm_d_concurrency_filter");
    dir.write("base.toml", BASE);
    let file = |params: &str| filter_then_queue(Some("concurrency-detector"), params);
    let f = dir.write(
        "c.yaml",
        &file("    maxConcurrency: 4\n    headroom: 0.5\n"),
    );
    let (converted, _, notes) = converted_runs_like_the_file(&dir, BASE, &f);
    // 4 · 1.5 = 6: fewer than 6 in flight is at most 5.
    assert!(
        converted.contains("name = \"utilization\"")
            && converted.contains("metric = \"active-requests\"")
            && converted.contains("max = 5.0")
            && converted.contains("fallback_on_empty = false"),
        "{converted}"
    );
    assert!(notes.contains("fewer than 6 requests in flight"), "{notes}");
    // (tokens and hybrid modes: the_concurrency_detector_counts_tokens)
    let f = dir.write("t.yaml", &file("    concurrencyMode: bytes\n"));
    let e = run_bad(
        &dir,
        &["run", "base.toml", "--epp-config", f.to_str().unwrap()],
    );
    assert!(
        e.contains("'concurrency-detector'") && e.contains("concurrencyMode 'bytes'"),
        "{e}"
    );
}

/// Label selectors over blis's instances, whose only label is their pool's
/// role (none outside `[[pools]]`): one every candidate passes has no
/// effect (said so, and the report is the one without it); one that would
/// leave no endpoint is refused, as llm-d would find none; a malformed one
/// is refused naming the plugin.
#[test]
fn label_selectors_see_the_role_labels_blis_instances_carry() {
    let dir = TestDir::new("llm_d_label_selectors");
    dir.write("base.toml", BASE);
    let file = |ty: &str, params: &str| filter_then_queue(Some(ty), params);
    let plain = dir.write("plain.yaml", &filter_then_queue(None, ""));
    let (without, _) = run_ok(
        &dir,
        &["run", "base.toml", "--epp-config", plain.to_str().unwrap()],
    );
    let run = |name: &str, text: &str| {
        let f = dir.write(name, text);
        let out = dir
            .blis()
            .args(["run", "base.toml", "--quiet", "--epp-config"])
            .arg(&f)
            .output()
            .unwrap();
        (
            out.status.code(),
            out.stdout,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (ty, params) in [
        (
            "label-selector-filter",
            "    matchExpressions:\n    - key: llm-d.ai/role\n      operator: DoesNotExist\n",
        ),
        (
            "label-selector-filter",
            "    matchExpressions:\n    - key: llm-d.ai/role\n      operator: NotIn\n      values: [prefill]\n",
        ),
        (
            "by-label",
            "    label: llm-d.ai/role\n    validValues: [decode]\n    allowsNoLabel: true\n",
        ),
    ] {
        let (code, stdout, err) = run("ok.yaml", &file(ty, params));
        assert_eq!(code, Some(0), "{ty} {params}: {err}");
        assert!(err.contains("passes the selector"), "{err}");
        let report: Value = serde_json::from_slice(&stdout).unwrap();
        assert_eq!(report, without, "{ty} {params}");
    }
    for (ty, params, says) in [
        (
            "label-selector-filter",
            "    matchLabels:\n      llm-d.ai/role: decode\n",
            "would drop every candidate",
        ),
        (
            "by-label-selector",
            "    matchExpressions:\n    - key: zone\n      operator: Exists\n",
            "would drop every candidate",
        ),
        (
            "by-label",
            "    label: llm-d.ai/role\n    validValues: [decode]\n",
            "would drop every candidate",
        ),
        (
            "label-selector-filter",
            "    matchExpressions:\n    - key: zone\n      operator: Near\n",
            "operator \"Near\"",
        ),
        (
            "label-selector-filter",
            "    matchExpressions:\n    - key: zone\n      operator: In\n",
            "needs values",
        ),
        // A malformed term after one that drops everything is still named.
        (
            "label-selector-filter",
            "    matchExpressions:\n    - key: zone\n      operator: Exists\n    - key: zone\n      operator: Near\n",
            "operator \"Near\"",
        ),
    ] {
        let (code, stdout, err) = run("bad.yaml", &file(ty, params));
        assert_eq!(code, Some(2), "{ty} {params}: {err}");
        assert!(stdout.is_empty());
        assert!(
            err.contains(&format!("({ty})")) && err.contains(says),
            "{ty}: {err}"
        );
    }
}

/// `blis run base.toml --epp-config f` with a decision trace and
/// per-request results: (trace records, result lines).
fn traced_run(dir: &TestDir, f: &Path) -> (Vec<Value>, Vec<Value>) {
    let trace = dir.path().join("trace.jsonl");
    let results = dir.path().join("results.jsonl");
    run_ok(
        dir,
        &[
            "run",
            "base.toml",
            "--epp-config",
            f.to_str().unwrap(),
            "--trace-path",
            trace.to_str().unwrap(),
            "--results-path",
            results.to_str().unwrap(),
        ],
    );
    let lines = |p: &Path| -> Vec<Value> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    (lines(&trace), lines(&results))
}

/// BASE with a multi-turn agent whose rounds follow each other closely.
fn base_sessions() -> String {
    format!(
        "{BASE}\n[[workload.clients]]\nid = \"agent\"\nrate_fraction = 0.5\nslo_class = \"standard\"\n\
         arrival = {{ process = \"poisson\" }}\n\
         input = {{ type = \"gaussian\", mean = 200, std_dev = 50, min = 16, max = 600 }}\n\
         output = {{ type = \"gaussian\", mean = 40, std_dev = 10, min = 8, max = 100 }}\n\
         session = {{ max_rounds = 4, think_time_us = 300000, context_growth = \"accumulate\" }}\n"
    )
}

/// Per request of a run with `--results-path` and `--trace-output`:
/// (session id, round) → instance.
fn session_instances(
    dir: &TestDir,
    base: &str,
    file: &Path,
) -> std::collections::BTreeMap<(String, u64), u64> {
    let results = dir.path().join("results.jsonl");
    let export = dir.path().join("export");
    let (_, _) = run_ok(
        dir,
        &[
            "run",
            base,
            "--epp-config",
            file.to_str().unwrap(),
            "--results-path",
            results.to_str().unwrap(),
            "--trace-output",
            export.to_str().unwrap(),
        ],
    );
    let mut instance = std::collections::HashMap::new();
    for line in std::fs::read_to_string(&results).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if let Some(i) = v["instance"].as_u64() {
            instance.insert(v["id"].as_u64().unwrap(), i);
        }
    }
    // The export's columns hold no commas here (numbers and client ids).
    let text = std::fs::read_to_string(export.with_extension("csv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (id, sid, round) = (col("request_id"), col("session_id"), col("round_index"));
    let mut out = std::collections::BTreeMap::new();
    for line in lines {
        let row: Vec<&str> = line.split(',').collect();
        assert_eq!(row.len(), head.len(), "{line}");
        let Ok(rid) = row[id].parse::<u64>() else {
            continue;
        };
        if row[sid].is_empty() {
            continue;
        }
        if let Some(&i) = instance.get(&rid) {
            out.insert((row[sid].to_string(), row[round].parse().unwrap()), i);
        }
    }
    out
}

/// llm-d's session-affinity scorer and filter (both strategies) keep every
/// round of a session on the instance its first round was routed to, while
/// first rounds spread by queue; without them, sessions move.
#[test]
fn session_affinity_keeps_a_session_on_its_instance() {
    let dir = TestDir::new("llm_d_session_affinity");
    dir.write("base.toml", &base_sessions());
    let scorer = |params: &str| {
        epp(&format!(
            "plugins:\n- type: session-affinity-scorer\n  parameters:\n{params}- type: queue-scorer\n\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: session-affinity-scorer\n    weight: 10\n  - pluginRef: queue-scorer\n"
        ))
    };
    let files = [
        dir.write(
            "scorer.yaml",
            &scorer("    strategy: encoded_endpoint_header\n"),
        ),
        dir.write("scorer-id.yaml", &scorer("    strategy: session_id\n")),
        dir.write(
            "filter.yaml",
            &filter_then_queue(
                Some("session-affinity-filter"),
                "    strategy: session_id\n",
            ),
        ),
    ];
    for f in &files {
        let got = session_instances(&dir, "base.toml", f);
        let sessions: std::collections::BTreeSet<&String> = got.keys().map(|(s, _)| s).collect();
        assert!(sessions.len() >= 10, "{} sessions", sessions.len());
        let mut firsts = std::collections::BTreeSet::new();
        for ((s, round), i) in &got {
            let first = got[&(s.clone(), 0)];
            firsts.insert(first);
            assert_eq!(*i, first, "{}: session {s} round {round}", f.display());
        }
        assert!(firsts.len() > 1, "first rounds all on one instance");
    }
    // The control: queue alone moves some session.
    let queue = dir.write("queue.yaml", &filter_then_queue(None, ""));
    let got = session_instances(&dir, "base.toml", &queue);
    assert!(
        got.iter().any(|((s, _), i)| got[&(s.clone(), 0)] != *i),
        "no session moved without affinity: the test could not fail"
    );
    // The note, and a strategy llm-d does not have.
    let (_, _, notes) = converted_runs_like_the_file(&dir, &base_sessions(), &files[0]);
    assert!(notes.contains("blis's session-affinity"), "{notes}");
    let bad = dir.write("bad.yaml", &scorer("    strategy: cookie\n"));
    let e = run_bad(
        &dir,
        &["run", "base.toml", "--epp-config", bad.to_str().unwrap()],
    );
    assert!(e.contains("strategy 'cookie'"), "{e}");
}

/// token-load-scorer: the first decision of an idle cluster scores every
/// instance 1 − L/T (the decision trace's own score); the run's KV block
/// size reaches the scorer; an inflight-load-producer's output estimate
/// is carried over; a threshold < 1 is refused.
#[test]
fn token_load_scores_in_flight_uncached_tokens() {
    let dir = TestDir::new("llm_d_token_load");
    dir.write("base.toml", BASE);
    let file = |t: i64, producer: &str| {
        epp(&format!(
            "plugins:\n- type: token-load-scorer\n  parameters:\n    queueThresholdTokens: {t}\n{producer}\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: token-load-scorer\n"
        ))
    };
    let f = dir.write("t.yaml", &file(2000, ""));
    let (converted, _, notes) = converted_runs_like_the_file(&dir, BASE, &f);
    assert!(
        converted.contains("name = \"token-load\"") && converted.contains("threshold = 2000"),
        "{converted}"
    );
    assert!(notes.contains("blis's token-load"), "{notes}");
    // The decision trace of the first request.
    let (trace, results) = traced_run(&dir, &f);
    let first = trace
        .iter()
        .find(|v| v["kind"] == "routing" && v["request_id"] == 0)
        .expect("a record of request 0");
    let input = results.iter().find(|v| v["id"] == 0).unwrap()["input_tokens"]
        .as_f64()
        .unwrap();
    let want = 1.0 - input.min(2000.0) / 2000.0;
    let text = first.to_string();
    // (the trace ranks the best few candidates)
    let cands = first["candidates"].as_array().expect(&text);
    assert!(!cands.is_empty(), "{text}");
    for c in cands {
        let s = c["scorer_scores"]["token-load"].as_f64().expect(&text);
        assert!((s - want).abs() < 1e-9, "{s} vs {want}: {text}");
    }
    // The output estimate comes from the producer (the run file's block
    // size is set when applying: host unit test
    // `token_load_counts_blocks_of_the_run_files_size`).
    let p = dir.write(
        "p.yaml",
        &file(
            2000,
            "- type: inflight-load-producer\n  parameters:\n    addEstimatedOutputTokens: true\n    outputRatio: 0.5\n",
        ),
    );
    let (converted, _, _) = converted_runs_like_the_file(&dir, BASE, &p);
    assert!(converted.contains("output_ratio = 0.5"), "{converted}");
    let bad = dir.write("bad.yaml", &file(0, ""));
    let e = run_bad(
        &dir,
        &["run", "base.toml", "--epp-config", bad.to_str().unwrap()],
    );
    assert!(e.contains("queueThresholdTokens 0"), "{e}");
}

/// Flow control: edf and slo-deadline ordering are first come, first served
/// within each blis flow (same sections, same report, a note saying why);
/// a static usage limit below 1 gates every band at it.
#[test]
fn flow_control_orderings_and_a_static_usage_limit() {
    let dir = TestDir::new("llm_d_flow_orderings");
    dir.write("base.toml", BASE);
    let fc = |order: &str, limit: &str| {
        epp(&format!(
            "featureGates:\n- flowControl\nplugins:\n- type: queue-scorer\n- type: {order}\n- name: limit\n  type: static-usage-limit-policy\n  parameters:\n    threshold: {limit}\n\
             flowControl:\n  usageLimitPolicyPluginRef: limit\n  defaultPriorityBand:\n    orderingPolicyRef: {order}\n\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
        ))
    };
    let fcfs = dir.write("fcfs.yaml", &fc("fcfs-ordering-policy", "1.0"));
    let body = |c: String| c.split_once('\n').unwrap().1.to_string();
    let (conv_fcfs, report_fcfs, _) = converted_runs_like_the_file(&dir, BASE, &fcfs);
    let conv_fcfs = body(conv_fcfs);
    for order in ["edf-ordering-policy", "slo-deadline-ordering-policy"] {
        let f = dir.write("o.yaml", &fc(order, "1.0"));
        let (conv, report, notes) = converted_runs_like_the_file(&dir, BASE, &f);
        assert_eq!(body(conv), conv_fcfs, "{order}");
        assert_eq!(report, report_fcfs, "{order}");
        assert!(
            notes.contains(&format!("{order}: first come, first served")),
            "{notes}"
        );
    }
    // Under load (10× the rate), a ceiling of 0.5 holds requests back.
    let heavy = BASE.replace("aggregate_rate = 30.0", "aggregate_rate = 300.0");
    let (_, full, _) = converted_runs_like_the_file(&dir, &heavy, &fcfs);
    let f = dir.write("s.yaml", &fc("fcfs-ordering-policy", "0.5"));
    let (conv, report, notes) = converted_runs_like_the_file(&dir, &heavy, &f);
    assert!(
        conv.contains("usage_limit = \"static\"") && conv.contains("usage_limit_threshold = 0.5"),
        "{conv}"
    );
    assert!(
        notes.contains("dispatches only while the saturation is below 0.5"),
        "{notes}"
    );
    let depth = |r: &Value| r["cluster"]["flow_control"]["peak_depth"].as_u64().unwrap();
    assert!(
        depth(&report) > depth(&full),
        "peak gateway depth {} with the ceiling at 0.5, {} at 1",
        depth(&report),
        depth(&full)
    ); // priority-holdback-policy by value from 0.9 down to 0.3 (blis's
       // ceilings by hand: host unit test `holdback_ceilings_by_hand`): the
       // top ceiling below 1 holds even critical requests back.
    let holdback = |domain: &str| {
        epp(&format!(
            "featureGates:\n- flowControl\nplugins:\n- type: queue-scorer\n- name: limit\n  type: priority-holdback-policy\n  parameters:\n    minCeiling: 0.3\n    maxCeiling: 0.9\n    domain: {domain}\n\
             flowControl:\n  usageLimitPolicyPluginRef: limit\n\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
        ))
    };
    let f = dir.write("h.yaml", &holdback("value"));
    let (conv, report, notes) = converted_runs_like_the_file(&dir, &heavy, &f);
    assert!(
        conv.contains("usage_limit = \"by-priority\"")
            && conv.contains("usage_limit_max = 0.9")
            && conv.contains("usage_limit_threshold = 0.3"),
        "{conv}"
    );
    assert!(notes.contains("linear by band priority"), "{notes}");
    assert!(
        depth(&report) > depth(&full),
        "{} vs {}",
        depth(&report),
        depth(&full)
    );
    let f = dir.write("r.yaml", &holdback("rank"));
    let (conv, _, _) = converted_runs_like_the_file(&dir, &heavy, &f);
    assert!(
        !conv.contains("usage_limit = ") && conv.contains("usage_limit_max = 0.9"),
        "{conv}"
    );
    let f = dir.write("bad.yaml", &holdback("volume"));
    let e = run_bad(
        &dir,
        &["run", "base.toml", "--epp-config", f.to_str().unwrap()],
    );
    assert!(e.contains("domain 'volume'"), "{e}");
}

/// header-profile-handler with two profiles: each workload client's
/// requests run the profile its `headers` name (header names match
/// case-insensitively), the others defaultProfile. The decision trace
/// shows which profile decided (its scorer's name); the run file form
/// (`profile_handler = "header"`) runs the same. A header naming no
/// profile, a header-less client without a default, and [[pools]] are
/// refused naming the cause.
#[test]
fn the_header_profile_handler_routes_each_client_by_its_header() {
    let dir = TestDir::new("llm_d_header_profiles");
    let base = BASE.replace(
        "prefix_length = 512\n",
        "prefix_length = 512\nheaders = { \"epp-profile\" = \"kv\" }\n",
    );
    dir.write("base.toml", &base);
    let file = |default: &str| {
        epp(&format!(
            "plugins:\n- type: header-profile-handler\n  parameters:\n    defaultProfile: {default}\n- type: queue-scorer\n- type: kv-cache-utilization-scorer\n- type: max-score-picker\n\
             schedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n\
             - name: kv\n  plugins:\n  - pluginRef: kv-cache-utilization-scorer\n  - pluginRef: max-score-picker\n"
        ))
    };
    let f = dir.write("h.yaml", &file("decode"));
    let (converted, _, notes) = converted_runs_like_the_file(&dir, &base, &f);
    assert!(
        converted.contains("profile_handler = \"header\"")
            && converted.contains("default_profile = \"decode\""),
        "{converted}"
    );
    assert!(notes.contains("EPP-Profile names (decode, kv)"), "{notes}");
    let (trace, results) = traced_run(&dir, &f);
    let client: std::collections::HashMap<u64, String> = results
        .iter()
        .map(|v| {
            (
                v["id"].as_u64().unwrap(),
                v["client_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut seen = std::collections::BTreeMap::new();
    for v in &trace {
        let line = v.to_string();
        if v["kind"] != "routing" {
            continue;
        }
        let scorers = &v["candidates"][0]["scorer_scores"];
        let profile = if scorers.get("kv-utilization").is_some() {
            "kv"
        } else if scorers.get("waiting-queue").is_some() {
            "decode"
        } else {
            panic!("{line}")
        };
        let c = &client[&v["request_id"].as_u64().unwrap()];
        let want = if c == "chat" { "kv" } else { "decode" };
        assert_eq!(profile, want, "{c}: {line}");
        *seen.entry(profile).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    // Refusals.
    let bad_value = BASE.replace(
        "prefix_length = 512\n",
        "prefix_length = 512\nheaders = { \"EPP-Profile\" = \"nope\" }\n",
    );
    dir.write("bad.toml", &bad_value);
    let e = run_bad(
        &dir,
        &["run", "bad.toml", "--epp-config", f.to_str().unwrap()],
    );
    assert!(
        e.contains("client 'chat'") && e.contains("\"nope\" names no profile"),
        "{e}"
    );
    let f = dir.write("nodefault.yaml", &file("prefill"));
    let e = run_bad(
        &dir,
        &["run", "base.toml", "--epp-config", f.to_str().unwrap()],
    );
    assert!(
        e.contains("client 'batch'") && e.contains("sends no EPP-Profile header"),
        "{e}"
    );
    dir.write("pd.toml", &base_pd());
    let e = run_bad(
        &dir,
        &["run", "pd.toml", "--epp-config", f.to_str().unwrap()],
    );
    assert!(
        e.contains("header-profile-handler") && e.contains("[[pools]]"),
        "{e}"
    );
}

/// llm-d's predicted-latency SLO profile (llm-d-router.md §5.5): strict
/// prefix affinity → SLO headroom tiers → loose affinity → latency scorer →
/// weighted-random pick, with the latency-slo admitter and the producer.
fn slo_profile(admitter: bool) -> String {
    let admit = if admitter {
        "- type: latency-slo-admitter\n"
    } else {
        ""
    };
    epp(&format!(
        "featureGates: [flowControl]\n\
         plugins:\n- type: predicted-latency-producer\n  parameters:\n    sloBufferFactor: 1.2\n{admit}\
         - name: strict\n  type: prefix-cache-affinity-filter\n  parameters:\n    affinityThreshold: 0.99\n\
         - type: slo-headroom-tier-filter\n  parameters:\n    epsilonExploreNeg: 0\n\
         - name: loose\n  type: prefix-cache-affinity-filter\n\
         - type: latency-scorer\n- type: weighted-random-picker\n\
         schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: predicted-latency-producer\n\
         \x20 - pluginRef: strict\n  - pluginRef: slo-headroom-tier-filter\n  - pluginRef: loose\n\
         \x20 - pluginRef: latency-scorer\n  - pluginRef: weighted-random-picker\n"
    ))
}

/// The SLO profile runs, converted and direct alike, with every plugin
/// simulated; the admitter reads each client's SLO headers through the
/// host: sheddable requests whose TTFT SLO no instance can meet are
/// refused once the predictor has learned, the same requests with a
/// generous SLO or no SLO header never are, and standard ones never are.
#[test]
fn the_predicted_latency_profile_reads_the_slo_headers() {
    let dir = TestDir::new("llm_d_predicted_latency");
    let base = |batch_slo: &str| {
        BASE.replace("aggregate_rate = 30.0", "aggregate_rate = 80.0")
            .replace("count = 4\n", "count = 4\ntotal_kv_blocks = 1500\n")
            .replace("num_requests = 240", "num_requests = 900")
            .replace(
                "slo_class = \"sheddable\"\n",
                &format!("slo_class = \"sheddable\"\n{batch_slo}"),
            )
            .replace(
                "prefix_length = 512\n",
                "prefix_length = 512\nheaders = { \"x-llm-d-slo-ttft-ms\" = \"1\" }\n",
            )
    };
    let f = dir.write("slo.yaml", &slo_profile(true));
    dir.write("base.toml", &base(""));
    let (converted, _, notes) = converted_runs_like_the_file(&dir, &base(""), &f);
    for want in [
        "name = \"prefix-cache-affinity\"",
        "name = \"slo-headroom-tier\"",
        "name = \"latency\"",
        "policy = \"latency-slo\"",
        "slo_buffer = 1.2",
    ] {
        assert!(converted.contains(want), "{want}: {converted}");
    }
    for want in [
        "blis's latency scorer",
        "blis's slo-headroom-tier filter",
        "blis's prefix-cache-affinity filter",
        "blis's latency-slo admission",
        "trains its own predictor",
    ] {
        assert!(notes.contains(want), "{want}: {notes}");
    }
    assert!(!notes.contains("not simulate"), "{notes}");
    let rejected = |batch_slo: &str| {
        dir.write("base.toml", &base(batch_slo));
        let (report, _) = run_ok(
            &dir,
            &["run", "base.toml", "--epp-config", f.to_str().unwrap()],
        );
        check_conservation(&report, "slo profile");
        let c = &report["cluster"];
        (
            c["rejected_by"]["admission"].as_u64().unwrap(),
            c["completed_requests"].as_u64().unwrap(),
        )
    };
    let (none, _) = rejected("");
    let (generous, _) = rejected("headers = { \"x-llm-d-slo-ttft-ms\" = \"600000\" }\n");
    let (tight, completed) = rejected("headers = { \"X-LLM-D-SLO-TTFT-MS\" = \"1\" }\n");
    assert_eq!((none, generous), (0, 0));
    // The standard chat requests (3/4 of 900) are all admitted.
    assert!(
        tight > 0 && completed >= 600,
        "{tight} rejected, {completed} completed"
    );
}

/// llm-d's concurrency-detector counting tokens: as the gateway's signal
/// (`concurrency_mode = "tokens"`: a small token budget holds requests in
/// the gateway queue that a large one lets through) and as a filter (the
/// `in-flight-limit` filter: a budget of one token leaves some requests no
/// candidate, a large one none). Converted TOML and file run alike.
#[test]
fn the_concurrency_detector_counts_tokens() {
    let dir = TestDir::new("llm_d_concurrency_tokens");
    let heavy = BASE.replace("aggregate_rate = 30.0", "aggregate_rate = 300.0");
    dir.write("base.toml", &heavy);
    let gateway = |mode: &str, tokens: u64| {
        epp(&format!(
            "featureGates: [flowControl]\nplugins:\n- type: queue-scorer\n- type: concurrency-detector\n  parameters:\n    concurrencyMode: {mode}\n    maxTokenConcurrency: {tokens}\n\
             flowControl:\n  saturationDetector:\n    pluginRef: concurrency-detector\n\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
        ))
    };
    let depth = |r: &Value| r["cluster"]["flow_control"]["peak_depth"].as_u64().unwrap();
    let big = dir.write("big.yaml", &gateway("tokens", 100_000_000));
    let (conv, wide, notes) = converted_runs_like_the_file(&dir, &heavy, &big);
    assert!(
        conv.contains("concurrency_mode = \"tokens\"") && conv.contains("max_token_concurrency"),
        "{conv}"
    );
    assert!(notes.contains("router's in-flight tokens"), "{notes}");
    let small = dir.write("small.yaml", &gateway("tokens", 300));
    let (_, narrow, _) = converted_runs_like_the_file(&dir, &heavy, &small);
    assert!(
        depth(&narrow) > depth(&wide),
        "{} vs {}",
        depth(&narrow),
        depth(&wide)
    );
    let hybrid = dir.write("hybrid.yaml", &gateway("hybrid", 300));
    let (conv, _, _) = converted_runs_like_the_file(&dir, &heavy, &hybrid);
    assert!(conv.contains("concurrency_mode = \"hybrid\""), "{conv}");
    // As a filter.
    let filter = |mode: &str, tokens: u64| {
        epp(&format!(
            "plugins:\n- type: queue-scorer\n- type: concurrency-detector\n  parameters:\n    concurrencyMode: {mode}\n    maxTokenConcurrency: {tokens}\n\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: concurrency-detector\n  - pluginRef: queue-scorer\n"
        ))
    };
    let rejected = |r: &Value| r["cluster"]["rejected_by"]["filter"].as_u64().unwrap();
    let f = dir.write("f1.yaml", &filter("tokens", 1));
    let (conv, one, _) = converted_runs_like_the_file(&dir, &heavy, &f);
    assert!(
        conv.contains("name = \"in-flight-limit\"") && conv.contains("max_tokens = 0"),
        "{conv}"
    );
    let f = dir.write("f2.yaml", &filter("hybrid", 100_000_000));
    let (conv, many, _) = converted_runs_like_the_file(&dir, &heavy, &f);
    assert!(conv.contains("max_requests = 99"), "{conv}");
    assert!(
        rejected(&one) > 0 && rejected(&many) == 0,
        "{} {}",
        rejected(&one),
        rejected(&many)
    );
    // With [[pools]]: a disaggregated request's tokens are charged to its
    // prefill instance and released at the hand-off; the budget still
    // holds requests back.
    let pd = base_pd().replace("aggregate_rate = 30.0", "aggregate_rate = 300.0");
    dir.write("pd.toml", &pd);
    let pd_run = |tokens: u64| {
        let f = dir.write(
            "pd.yaml",
            &epp(&format!(
                "featureGates: [flowControl]\nplugins:\n- type: queue-scorer\n- type: concurrency-detector\n  parameters:\n    concurrencyMode: tokens\n    maxTokenConcurrency: {tokens}\n\
                 - type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters:\n    deciders:\n      prefill: always-disagg-pd-decider\n\
                 flowControl:\n  saturationDetector:\n    pluginRef: concurrency-detector\n\
                 schedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: queue-scorer\n- name: decode\n  plugins:\n  - pluginRef: queue-scorer\n"
            )),
        );
        let (r, _) = run_ok(
            &dir,
            &["run", "pd.toml", "--epp-config", f.to_str().unwrap()],
        );
        check_conservation(&r, "pd tokens");
        assert_eq!(r["pd"]["disaggregated_requests"], 240, "{}", r["pd"]);
        r
    };
    let (narrow, wide) = (pd_run(300), pd_run(100_000_000));
    assert!(
        depth(&narrow) > depth(&wide),
        "{} vs {}",
        depth(&narrow),
        depth(&wide)
    );
}

/// The shipped E/P/D and E/PD files on a base with an encode pool and a
/// client whose requests all carry an image: the encode stage routes
/// exactly those requests (the vision client's, counted in the results)
/// over the encode pool, and the run converts to the same sections. On
/// a base without an encode pool the stage is dropped with a note.
#[test]
fn the_encode_stage_of_the_shipped_files_routes_multimodal_requests() {
    let dir = TestDir::new("llm_d_encode");
    let base = base_pd().replace(
        "[workload]",
        "[[pools]]\nname = \"enc\"\nrole = \"encode\"\ninstances = 2\n[workload]",
    ) + "multimodal = {}\n";
    dir.write("base.toml", &base);
    for name in ["sim-e-p-d-epp-config.yaml", "sim-e-pd-epp-config.yaml"] {
        let f = configs().join(name);
        let (conv, report, notes) = converted_runs_like_the_file(&dir, &base, &f);
        assert!(
            conv.contains("encode_decider = \"multimodal\""),
            "{name}: {conv}"
        );
        assert!(
            notes.contains("the encode stage routes requests with multimodal input"),
            "{notes}"
        );
        let (_, results) = traced_run(&dir, &f);
        // The batch client (the last one) carries the image.
        let batch = results.iter().filter(|v| v["client_id"] == "batch").count() as u64;
        assert!(batch > 20, "{batch}");
        assert_eq!(
            report["pd"]["encoded_requests"].as_u64(),
            Some(batch),
            "{name}"
        );
        check_conservation(&report, name);
    }
    // llm-d's prefix-based decider as the encode decider: encode the
    // requests with ≥ 600 uncached prompt tokens on their decode instance
    // (the batch client's prompts are about 512; the chat client's are
    // 256 + a 512-token shared prefix, cached after its first requests).
    let f = dir.write(
        "enc-prefix.yaml",
        &epp("plugins:\n- type: queue-scorer\n- type: prefix-based-pd-decider\n  parameters:\n    nonCachedTokens: 600\n- type: disagg-profile-handler\n  parameters:\n    deciders:\n      encode: prefix-based-pd-decider\n\
              schedulingProfiles:\n- name: encode\n  plugins:\n  - pluginRef: queue-scorer\n- name: decode\n  plugins:\n  - pluginRef: queue-scorer\n"),
    );
    let (conv, report, _) = converted_runs_like_the_file(&dir, &base, &f);
    assert!(
        conv.contains("encode_decider = \"prefix-threshold\"")
            && conv.contains("encode_prefix_threshold = 599"),
        "{conv}"
    );
    let encoded = report["pd"]["encoded_requests"].as_u64().unwrap();
    assert!(encoded > 0 && encoded < 240, "{encoded}");
    // A file without an encode stage sends nothing to the encode pool.
    let f = configs().join("pd-epp-config.yaml");
    let (report, notes) = run_ok(
        &dir,
        &["run", "base.toml", "--epp-config", f.to_str().unwrap()],
    );
    assert_eq!(report["pd"]["encoded_requests"], 0, "{}", report["pd"]);
    assert!(
        notes.contains("the run file's encode pools get no requests"),
        "{notes}"
    );
    dir.write("plain.toml", &base_pd());
    let f = configs().join("sim-e-p-d-epp-config.yaml");
    let (report, notes) = run_ok(
        &dir,
        &["run", "plain.toml", "--epp-config", f.to_str().unwrap()],
    );
    assert!(report["pd"].get("encoded_requests").is_none());
    assert!(notes.contains("no pool of role encode"), "{notes}");
}

/// passthrough-parser alone: the router sees no prompt. A prefix scorer
/// then scores 0 everywhere (dropped under max-score, said so), so the
/// profile routes exactly like its queue scorer alone; no-hit-lru treats
/// every request as cold; the predicted-latency policies see no prompt.
#[test]
fn passthrough_parser_alone_hides_the_prompt_from_the_router() {
    let dir = TestDir::new("llm_d_passthrough");
    dir.write("base.toml", BASE);
    let parsers = "requestHandler:\n  parsers:\n  - pluginRef: passthrough-parser\n";
    let with = dir.write(
        "with.yaml",
        &epp(&format!(
            "plugins:\n- type: prefix-cache-scorer\n- type: queue-scorer\n- type: no-hit-lru-scorer\n- type: latency-scorer\n{parsers}\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: prefix-cache-scorer\n    weight: 3\n  - pluginRef: queue-scorer\n"
        )),
    );
    let alone = dir.write(
        "alone.yaml",
        &epp("plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"),
    );
    let (_, with_report, notes) = converted_runs_like_the_file(&dir, BASE, &with);
    let (_, alone_report, _) = converted_runs_like_the_file(&dir, BASE, &alone);
    assert!(notes.contains("passthrough-parser alone"), "{notes}");
    assert!(
        notes.contains("plugin 'prefix-cache-scorer' (prefix-cache-scorer): no simulated effect")
            && notes.contains("every candidate scores 0"),
        "{notes}"
    );
    assert_eq!(with_report["cluster"], alone_report["cluster"]);
    // The unused scorers map too (convert shows every plugin's form).
    let both = dir.write(
        "both.yaml",
        &epp(&format!(
            "plugins:\n- type: no-hit-lru-scorer\n- type: latency-scorer\n{parsers}\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: no-hit-lru-scorer\n  - pluginRef: latency-scorer\n"
        )),
    );
    let (conv, _, _) = converted_runs_like_the_file(&dir, BASE, &both);
    assert!(
        conv.contains("all_cold = true") && conv.contains("prompt = false"),
        "{conv}"
    );
}

/// One profile of `plugins` (each `- type: …` with its parameters) and the
/// `refs` (each `pluginRef` with its weight).
fn profile(plugins: &str, refs: &[(&str, u32)]) -> String {
    let refs: String = refs
        .iter()
        .map(|(r, w)| format!("  - pluginRef: {r}\n    weight: {w}\n"))
        .collect();
    epp(&format!(
        "plugins:\n{plugins}schedulingProfiles:\n- name: default\n  plugins:\n{refs}"
    ))
}

/// The parameter values the llm-d loader accepts that blis once refused
/// run, each as the converted TOML runs: active-request-scorer's
/// idleThreshold/maxBusyScore, prefix-cache-scorer's match-length term,
/// a constant-score scorer under the weighted-random picker, two
/// admitters after the legacy controller, the legacy controller over a
/// concurrency-detector in each mode; and program-aware-fairness's unknown
/// strategy is refused with the loader's reason.
#[test]
fn the_values_blis_once_refused_are_simulated() {
    let dir = TestDir::new("llm_d_once_refused");
    dir.write("base.toml", BASE);
    let f = dir.write(
        "active.yaml",
        &profile(
            "- type: active-request-scorer\n  parameters:\n    idleThreshold: 2\n    maxBusyScore: 0.5\n- type: queue-scorer\n",
            &[("active-request-scorer", 2), ("queue-scorer", 1)],
        ),
    );
    let (conv, report, notes) = converted_runs_like_the_file(&dir, BASE, &f);
    assert!(
        conv.contains("idle_threshold = 2") && conv.contains("max_busy_score = 0.5"),
        "{conv}"
    );
    check_conservation(&report, "active");
    assert!(!notes.contains("not simulate"), "{notes}");

    let f = dir.write(
        "match.yaml",
        &profile(
            "- type: prefix-cache-scorer\n  parameters:\n    matchLengthWeight: 0.9\n    matchLengthScaleTokens: 65536\n- type: queue-scorer\n",
            &[("prefix-cache-scorer", 3), ("queue-scorer", 1)],
        ),
    );
    let (conv, with_term, notes) = converted_runs_like_the_file(&dir, BASE, &f);
    assert!(
        conv.contains("match_length_weight = 0.9")
            && conv.contains("match_length_scale_tokens = 65536.0"),
        "{conv}"
    );
    // Matches of at most 1,024 tokens over a 65,536-token scale: the
    // prefix score shrinks to about a tenth, and the queue decides more.
    assert!(
        notes.contains("0.9·min(1, matched tokens/65536)²"),
        "{notes}"
    );
    let f = dir.write(
        "plain.yaml",
        &profile(
            "- type: prefix-cache-scorer\n- type: queue-scorer\n",
            &[("prefix-cache-scorer", 3), ("queue-scorer", 1)],
        ),
    );
    let (_, plain, _) = converted_runs_like_the_file(&dir, BASE, &f);
    check_conservation(&with_term, "match length");
    assert_ne!(
        with_term["cluster"], plain["cluster"],
        "the term changes the routing"
    );

    // context-length-aware scores 0.5 everywhere: a constant that flattens
    // a draw by score, and nothing under max-score.
    let picker = |p: &str| {
        profile(
            &format!("- type: context-length-aware\n- type: queue-scorer\n- type: {p}\n"),
            &[("context-length-aware", 1), ("queue-scorer", 1), (p, 1)],
        )
    };
    let f = dir.write("wr.yaml", &picker("weighted-random-picker"));
    let (conv, report, notes) = converted_runs_like_the_file(&dir, BASE, &f);
    assert!(
        conv.contains("name = \"constant\"") && conv.contains("value = 0.5"),
        "{conv}"
    );
    assert!(
        notes.contains("blis's constant scorer (value 0.5)"),
        "{notes}"
    );
    check_conservation(&report, "constant");
    let f = dir.write("ms.yaml", &picker("max-score-picker"));
    let (conv, _, notes) = converted_runs_like_the_file(&dir, BASE, &f);
    assert!(!conv.contains("\"constant\""), "{conv}");
    assert!(
        notes.contains("plugin 'context-length-aware' (context-length-aware): no simulated effect"),
        "{notes}"
    );

    // The legacy controller, then two admitters, in llm-d's order.
    let f = dir.write(
        "admitters.yaml",
        &epp(
            "plugins:\n- type: queue-scorer\n- type: probabilistic-admitter\n- type: latency-slo-admitter\n\
             schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n",
        ),
    );
    let (conv, report, notes) = converted_runs_like_the_file(&dir, BASE, &f);
    let t: toml::Table = conv.parse().unwrap();
    let a = &t["admission"];
    assert_eq!(a["policy"].as_str(), Some("gaie-legacy"));
    let then: Vec<&str> = a["then"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["policy"].as_str().unwrap())
        .collect();
    assert_eq!(then, ["probabilistic", "latency-slo"]);
    assert!(
        notes.contains("blis asks gaie-legacy, then probabilistic, then latency-slo in turn"),
        "{notes}"
    );
    check_conservation(&report, "admitters");

    // The legacy controller over a concurrency-detector: one request in
    // flight per instance saturates, so sheddable requests are refused
    // (never standard ones); a budget nobody reaches refuses none.
    let rejected = |name: &str, params: &str| {
        let f = dir.write(
            &format!("{name}.yaml"),
            &epp(&format!(
                "plugins:\n- type: queue-scorer\n- type: concurrency-detector\n  parameters:\n{params}\
                 flowControl:\n  saturationDetector:\n    pluginRef: concurrency-detector\n\
                 schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
            )),
        );
        let (conv, report, _) = converted_runs_like_the_file(&dir, BASE, &f);
        assert!(conv.contains("policy = \"concurrency-shed\""), "{conv}");
        check_conservation(&report, name);
        let c = &report["cluster"];
        assert_eq!(
            report["slo_classes"]["standard"]["rejected_requests"].as_u64(),
            Some(0),
            "{name}"
        );
        c["rejected_by"]["admission"].as_u64().unwrap()
    };
    for (mode, tight, loose) in [
        ("requests", "maxConcurrency: 1", "maxConcurrency: 100000"),
        (
            "tokens",
            "maxTokenConcurrency: 100",
            "maxTokenConcurrency: 100000000",
        ),
        (
            "hybrid",
            "maxConcurrency: 1\n    maxTokenConcurrency: 100",
            "maxConcurrency: 100000\n    maxTokenConcurrency: 100000000",
        ),
    ] {
        let tight_n = rejected(
            &format!("{mode}-tight"),
            &format!("    concurrencyMode: {mode}\n    {tight}\n"),
        );
        let loose_n = rejected(
            &format!("{mode}-loose"),
            &format!("    concurrencyMode: {mode}\n    {loose}\n"),
        );
        assert!(tight_n > 0 && loose_n == 0, "{mode}: {tight_n} {loose_n}");
    }

    // Bands of their own: the sheddable class's band holds one request and
    // takes tenants in turn; the others keep llm-d's 5000. Only sheddable
    // requests meet a full band (one in flight per instance saturates).
    let banded = |cap: u32| {
        let f = dir.write(
            &format!("bands-{cap}.yaml"),
            &epp(&format!(
                "featureGates:\n- flowControl\nplugins:\n- type: queue-scorer\n- type: concurrency-detector\n  parameters:\n    maxConcurrency: 1\n\
                 - type: round-robin-fairness-policy\nflowControl:\n  saturationDetector:\n    pluginRef: concurrency-detector\n\
                 \x20 priorityBands:\n  - priority: -2\n    maxRequests: {cap}\n    fairnessPolicyRef: round-robin-fairness-policy\n\
                 schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"
            )),
        );
        let (conv, report, notes) = converted_runs_like_the_file(&dir, BASE, &f);
        assert!(
            conv.contains(&format!(
                "[flow_control.band_capacity]\nsheddable = {cap}\n"
            )) && conv.contains("[flow_control.band_fairness]\nsheddable = \"round-robin\"")
                && conv.contains("per_band_capacity = 5000"),
            "{conv}"
        );
        assert!(
            notes.contains(&format!("sheddable: capacity {cap}, round-robin")),
            "{notes}"
        );
        check_conservation(&report, "bands");
        let by_class = |c: &str| {
            report["slo_classes"][c]["rejected_requests"]
                .as_u64()
                .unwrap()
        };
        assert_eq!(by_class("standard"), 0);
        (
            report["cluster"]["rejected_by"]["gateway"]
                .as_u64()
                .unwrap(),
            by_class("sheddable"),
        )
    };
    let (gateway, sheddable) = banded(1);
    assert!(gateway > 0 && gateway == sheddable, "{gateway} {sheddable}");
    assert_eq!(banded(4000).0, 0);

    let f = dir.write(
        "pa.yaml",
        &epp("plugins:\n- type: queue-scorer\n- type: program-aware-fairness\n  parameters:\n    strategy: wfq\n\
              schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"),
    );
    let e = run_bad(
        &dir,
        &["run", "base.toml", "--epp-config", f.to_str().unwrap()],
    );
    assert!(
        e.contains("program-aware-fairness") && e.contains("only \"las\" is supported"),
        "{e}"
    );
}

/// llm-d's integration-test data source `mock-metrics-source` loads (issue
/// 53, item 18): in a simulator every metrics source is the simulated
/// instances, so the run equals the same file with metrics-data-source,
/// with a note saying so.
#[test]
fn the_mock_metrics_source_of_llm_ds_tests_reads_the_simulated_instances() {
    let dir = TestDir::new("llm_d_mock_metrics");
    dir.write("run.toml", BASE);
    let profile = "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n";
    for (name, source) in [
        ("real.yaml", "metrics-data-source"),
        ("mock.yaml", "mock-metrics-source"),
    ] {
        dir.write(
            name,
            &epp(&format!(
                "plugins:\n- type: {source}\n- type: core-metrics-extractor\n- type: queue-scorer\n{profile}dataLayer:\n  sources:\n  - pluginRef: {source}\n    extractors:\n    - pluginRef: core-metrics-extractor\n"
            )),
        );
    }
    let (real, _) = run_ok(&dir, &["run", "run.toml", "--epp-config", "real.yaml"]);
    let (mock, notes) = run_ok(&dir, &["run", "run.toml", "--epp-config", "mock.yaml"]);
    assert_eq!(real, mock);
    assert!(
        notes.contains("mock-metrics-source") && notes.contains("simulated instances"),
        "{notes}"
    );
}
