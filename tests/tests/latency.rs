//! Latency models end to end: choosing a latency model and a model config
//! fails with one paragraph naming what is wrong.

use crate::util::TestDir;

#[test]
fn unknown_latency_model_lists_the_available_ones() {
    let dir = TestDir::new("latency_unknown_model");
    let out = dir
        .blis()
        .args(["run", "--set", "model.latency_model=\"blackbox-v2\""])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("model.latency_model")
            && err.contains("blackbox-v2")
            && err.contains("linear, roofline, roofline-v1, trained-physics"),
        "{err}"
    );
}

#[test]
fn moe_config_missing_a_field_names_it() {
    let dir = TestDir::new("latency_moe_missing_field");
    dir.write(
        "config.json",
        r#"{"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
            "intermediate_size": 512, "num_local_experts": 8, "vocab_size": 1000,
            "torch_dtype": "bfloat16"}"#,
    );
    dir.write(
        "run.toml",
        "[model]\nname = \"toy-moe\"\nconfig_path = \"config.json\"\n[workload]\nnum_requests = 10\n",
    );
    let out = dir.blis().args(["run", "run.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("num_experts_per_tok"), "{err}");
}
