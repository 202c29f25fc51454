//! `output.percentiles = "sketch"` end to end: on a 1,000,000-request run the
//! sketched percentiles of every block (cluster, instances, SLO classes) are
//! within the stated relative error (0.5 %) of the exact ones, and
//! everything else in the report is the same as in exact mode.

use serde_json::Value;

use crate::util::TestDir;

/// 1,000,000 short requests over 8 instances at a sustainable rate, two SLO
/// classes (so the per-class blocks are populated), spread-out lengths (so
/// the percentiles are not all one value).
const RUN: &str = r#"
seed = 7

[model]
name = "qwen3-14b"
hardware = "H100"
latency_model = "roofline-v1"

[instance]
count = 8
total_kv_blocks = 100000

[workload]
aggregate_rate = 2000.0
num_requests = 1000000

[[workload.clients]]
id = "chat"
rate_fraction = 0.7
slo_class = "critical"
arrival = { process = "poisson" }
input = { type = "gaussian", mean = 48, std_dev = 24, min = 4, max = 128 }
output = { type = "exponential", mean = 3 }

[[workload.clients]]
id = "offline"
rate_fraction = 0.3
slo_class = "batch"
arrival = { process = "poisson" }
input = { type = "gaussian", mean = 96, std_dev = 32, min = 4, max = 256 }
output = { type = "constant", value = 2 }

[routing]
policy = "round-robin"
"#;

/// The stated relative error of a sketched percentile.
const ALPHA: f64 = 0.005;

fn run(dir: &TestDir, file: &std::path::Path, percentiles: &str) -> Value {
    let out = dir
        .blis()
        .arg("run")
        .arg(file)
        .arg("--quiet")
        .arg("--set")
        .arg(format!("output.percentiles=\"{percentiles}\""))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Compare two report values: percentile fields (`p50_ms` … `p99_ms`, at
/// any depth) within the sketch's error, everything else equal (floats to
/// 1e-9 relative: a sketch's mean sums in another order). Returns the number
/// of percentiles compared.
fn compare(path: &str, exact: &Value, sketch: &Value) -> usize {
    compare_within(path, exact, sketch, ALPHA)
}

/// [`compare`] with percentiles within `alpha` (relative) + 1 µs.
fn compare_within(path: &str, exact: &Value, sketch: &Value, alpha: f64) -> usize {
    match (exact, sketch) {
        (Value::Object(a), Value::Object(b)) => {
            assert_eq!(
                a.keys().collect::<Vec<_>>(),
                b.keys().collect::<Vec<_>>(),
                "{path}"
            );
            let mut n = 0;
            for (k, v) in a {
                let p = format!("{path}.{k}");
                let is_pct = ["p50_ms", "p90_ms", "p95_ms", "p99_ms"]
                    .iter()
                    .any(|s| k.ends_with(s))
                    && !k.starts_with("itl_");
                if is_pct && !v.is_null() {
                    let (e, s) = (v.as_f64().unwrap(), b[k].as_f64().unwrap());
                    // The sketch is within α of the sample at rank ⌊p(n−1)⌋;
                    // the exact R-7 value interpolates towards the next rank,
                    // which on a million samples is at most a tick (1 µs) away.
                    assert!(
                        (s - e).abs() <= alpha * e + 0.001,
                        "{p}: sketch {s} ms, exact {e} ms (more than {alpha} apart)"
                    );
                    n += 1;
                } else {
                    n += compare_within(&p, v, &b[k], alpha);
                }
            }
            n
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}");
            a.iter()
                .zip(b)
                .enumerate()
                .map(|(i, (x, y))| compare_within(&format!("{path}[{i}]"), x, y, alpha))
                .sum()
        }
        (Value::Number(x), Value::Number(y)) if x != y => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
                "{path}: exact {x}, sketch {y}"
            );
            0
        }
        _ => {
            assert_eq!(exact, sketch, "{path}");
            0
        }
    }
}

#[test]
fn sketch_percentiles_are_within_half_a_percent_of_exact_on_a_million_requests() {
    let dir = TestDir::new("sketch_percentiles_1m");
    let file = dir.write("run.toml", RUN);
    let exact = run(&dir, &file, "exact");
    let sketch = run(&dir, &file, "sketch");
    assert_eq!(exact["cluster"]["completed_requests"], 1_000_000);
    assert_eq!(exact["cluster"]["still_queued"], 0);
    // TTFT, E2E and scheduling delay: 4 percentiles each in the cluster and
    // 8 instance blocks, TTFT and E2E in 2 classes.
    let n = compare("report", &exact, &sketch);
    assert_eq!(n, 9 * 3 * 4 + 2 * 2 * 4);
    // Not a vacuous comparison: the percentiles differ across the tail.
    let c = &exact["cluster"];
    assert!(c["e2e_p99_ms"].as_f64() > c["e2e_p50_ms"].as_f64());
}

#[test]
fn sketch_counts_and_means_stay_exact_with_an_autoscaler() {
    // Round 4, item 8: instances the autoscaler adds keep their latencies
    // as the others do (they were exact populations, left out of the merged
    // sketch: TTFT mean 221.5 ms vs 125.2, count 1,303 vs 4,499).
    let dir = TestDir::new("sketch_autoscaler");
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/multi-model-autoscaling.toml");
    let exact = run(&dir, &file, "exact");
    let sketch = run(&dir, &file, "sketch");
    let n = exact["instances"].as_array().map_or(0, Vec::len);
    assert!(n > 2, "the autoscaler added no instance: {n}");
    // A few thousand samples: R-7 interpolation between ranks can be a few
    // percent of a percentile; counts, means, min and max must be equal.
    assert!(compare_within("report", &exact, &sketch, 0.05) > 0);
}

#[test]
fn a_bad_percentiles_value_names_the_key() {
    let dir = TestDir::new("sketch_percentiles_bad");
    let file = dir.write("run.toml", "[output]\npercentiles = \"tdigest\"\n");
    let out = dir.blis().arg("run").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("output.percentiles") && err.contains("sketch"),
        "{err}"
    );
}
