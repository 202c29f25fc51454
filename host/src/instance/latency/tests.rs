//! Tests of the latency layer: reference numbers of `core-engine.md`
//! Appendix A.4, the linear formula, validation messages, bundled data, KV
//! derivation and the run-file resolution rules.

use std::path::PathBuf;

use proptest::prelude::*;

use super::roofline_v1::request_cost;
use super::*;

/// The Appendix A.4 model: llama-3.1-8b's shape in bf16.
fn a4_model() -> ModelConfig {
    ModelConfig::new("a4", 32, 4096, 32, 8, 14336, 2.0)
}

/// The February H100 record (`roofline-v1`).
fn h100() -> GpuSpec {
    GpuSpec::bundled_v1("H100").unwrap()
}

fn roofline(tp: u32) -> LatencyModel {
    LatencyModel::RooflineV1(RooflineV1Model::new(&a4_model(), &h100(), tp, [0.0; 3]).unwrap())
}

fn shape(prefill: &[(u32, u32)], decode: &[(u32, u32)]) -> BatchShape {
    let mut b = BatchShape::default();
    for &(s, t) in prefill {
        b.prefill.add(s, t);
    }
    for &(s, t) in decode {
        b.decode.add(s, t);
    }
    b
}

fn assert_rel(got: f64, want: f64, what: &str) {
    let rel = ((got - want) / want).abs();
    assert!(
        rel <= 1e-12,
        "{what}: got {got:e}, want {want:e} (relative error {rel:e})"
    );
}

/// A temp file path unique to this test process.
fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("blis-latency-{}-{name}", std::process::id()))
}

// ---- Roofline: Appendix A.4 -------------------------------------------------

#[test]
fn roofline_reproduces_appendix_a4_step_times() {
    let cases: [(&str, BatchShape, u32, Tick); 5] = [
        ("empty", shape(&[], &[]), 1, 1140),
        ("empty", shape(&[], &[]), 2, 2420),
        ("one prefill S=0 T=512", shape(&[(0, 512)], &[]), 1, 12367),
        ("one decode S=1024", shape(&[], &[(1024, 1)]), 1, 6983),
        (
            "prefill S=256 T=256; decodes S=100, S=2000",
            shape(&[(256, 256)], &[(100, 1), (2000, 1)]),
            2,
            8292,
        ),
    ];
    for (name, batch, tp, want) in cases {
        assert_eq!(roofline(tp).step_time(&batch), want, "{name} at TP {tp}");
    }
}

#[test]
fn roofline_request_cost_matches_appendix_a4_figures() {
    let c = request_cost(&a4_model(), 0.0, 512.0);
    assert_rel(c.gemm, 7.215410839552e12, "gemm");
    assert_rel(c.sram, 8.03995648e8, "sram");
    assert_rel(c.weights, 1.3958643712e10, "weights");
    assert_rel(c.kv_growth, 6.7108864e7, "kv_growth");
    assert_eq!(c.kv_access, 0.0, "kv_access");
    assert_rel(c.activations, 1.34217728e8, "activations");
    assert_rel(weight_bytes(&a4_model()), 1.3958643712e10, "weight_bytes");
}

/// The §6.3 step, request by request, exactly as the spec writes it.
fn literal_step_us(
    model: &ModelConfig,
    gpu: &GpuSpec,
    tp: u32,
    prefill: &[(u32, u32)],
    decode: &[u32],
) -> f64 {
    let tp_f = f64::from(tp);
    let peak = gpu.tflops_peak * 1e12;
    let eff_bw = (gpu.bw_peak_tbs * 1e12) * gpu.bw_eff_constant;
    let vec = peak * 0.10;
    let w = request_cost(model, 0.0, 0.0).weights / tp_f;
    let phase = |reqs: &[(u32, u32)], mfu: f64| -> f64 {
        if reqs.is_empty() {
            return 0.0;
        }
        let (mut g, mut v, mut y) = (0.0, 0.0, 0.0);
        for &(s, t) in reqs {
            let c = request_cost(model, f64::from(s), f64::from(t));
            let total = (((0.0 + c.activations) + c.kv_access) + c.kv_growth) + c.weights;
            g += c.gemm / tp_f;
            v += c.sram / tp_f;
            y += (total - c.weights) / tp_f;
        }
        let compute = g / (peak * mfu) + v / vec;
        let memory = (w + y) / eff_bw;
        compute.max(memory)
    };
    let decode: Vec<(u32, u32)> = decode.iter().map(|&s| (s, 1)).collect();
    let hw = phase(prefill, gpu.mfu_prefill) + phase(&decode, gpu.mfu_decode);
    let nl = f64::from(model.num_layers);
    let layer = (nl * gpu.per_layer_overhead) / 1e6;
    let comm = if tp > 1 {
        (nl * 2.0 * gpu.all_reduce_latency) / 1e6
    } else {
        0.0
    };
    hw * 1e6 + layer * 1e6 + comm * 1e6 + gpu.t_overhead_micros
}

proptest! {
    /// The aggregate form equals the per-request formulas on any batch.
    #[test]
    fn roofline_aggregate_equals_per_request_sum(
        prefill in proptest::collection::vec((0u32..20_000, 0u32..4096), 0..8),
        decode in proptest::collection::vec(0u32..100_000, 0..64),
        tp in 1u32..9,
        model_pick in 0usize..3,
    ) {
        let model = match model_pick {
            0 => a4_model(),
            1 => ModelConfig::bundled("qwen3-14b").unwrap(),
            _ => ModelConfig::bundled("qwen2.5-1.5b-instruct").unwrap(),
        };
        // TP must divide the attention heads: the largest divisor ≤ tp.
        let tp = (1..=tp).rev().find(|d| model.num_heads % d == 0).unwrap();
        let gpu = if tp % 2 == 0 { GpuSpec::bundled_v1("A100-SXM").unwrap() } else { h100() };
        let m = RooflineV1Model::new(&model, &gpu, tp, [0.0; 3]).unwrap();
        let decode_pairs: Vec<(u32, u32)> = decode.iter().map(|&s| (s, 1)).collect();
        let got = m.step_us(&shape(&prefill, &decode_pairs));
        let want = literal_step_us(&model, &gpu, tp, &prefill, &decode);
        prop_assert!(((got - want) / want).abs() <= 1e-12, "got {got}, want {want}");
    }
}

#[test]
fn roofline_alpha_terms_round_to_nearest() {
    let m = LatencyModel::RooflineV1(
        RooflineV1Model::new(&a4_model(), &h100(), 1, [100.4, 0.25, 49.5]).unwrap(),
    );
    assert_eq!(m.queueing_delay(0), 100);
    assert_eq!(m.queueing_delay(2), 101); // 100.9
    assert_eq!(m.queueing_delay(4), 101); // 101.4
    assert_eq!(m.output_token_overhead(), 50); // 49.5, half away from zero
}

#[test]
fn roofline_phase_with_zero_token_grant_still_pays_weights() {
    // A prefill request with a zero-token grant is present: weights are read.
    let m = roofline(1);
    let empty = m.step_time(&shape(&[], &[]));
    let zero_grant = m.step_time(&shape(&[(512, 0)], &[]));
    assert!(zero_grant > empty, "{zero_grant} vs {empty}");
}

// ---- Linear -------------------------------------------------------------------

#[test]
fn linear_step_time_is_its_formula_rounded_to_nearest() {
    let m =
        LatencyModel::Linear(LinearModel::new([100.0, 1.0, 50.0], [1000.0, 10.0, 5.0]).unwrap());
    // (prefill tokens, decode tokens, expected): beta0 + 10 P + 5 D.
    for (p, d, want) in [(0, 0, 1000), (20, 0, 1200), (0, 1, 1005), (24, 2, 1250)] {
        let mut b = BatchShape::default();
        if p > 0 {
            b.prefill.add(0, p);
        }
        for _ in 0..d {
            b.decode.add(100, 1);
        }
        assert_eq!(m.step_time(&b), want, "P={p} D={d}");
    }
    assert_eq!(m.queueing_delay(20), 120);
    assert_eq!(m.output_token_overhead(), 50);

    // Fractional coefficients (exact in binary): 0.375 + 0.25 P + 0.125 D.
    let f = LatencyModel::Linear(LinearModel::new([0.5, 0.3, 2.49], [0.375, 0.25, 0.125]).unwrap());
    let cases = [
        (0, 0, 0), // 0.375
        (1, 0, 1), // 0.625
        (4, 1, 2), // 1.5: half away from zero
        (5, 0, 2), // 1.625
        (3, 3, 2), // 1.5
        (2, 1, 1), // 1.0
        (0, 1, 1), // 0.5
        (9, 7, 4), // 3.5
        (6, 2, 2), // 2.125
    ];
    for (p, d, want) in cases {
        let mut b = BatchShape::default();
        b.prefill.add(7, p);
        for _ in 0..d {
            b.decode.add(9, 1);
        }
        assert_eq!(f.step_time(&b), want, "P={p} D={d}");
    }
    assert_eq!(f.queueing_delay(0), 1); // 0.5
    assert_eq!(f.queueing_delay(3), 1); // 1.4
    assert_eq!(f.output_token_overhead(), 2); // 2.49
}

#[test]
fn linear_rejects_bad_coefficients_naming_them() {
    let msg = |alpha, beta| LinearModel::new(alpha, beta).unwrap_err().to_string();
    assert_eq!(
        msg([0.0; 3], [1.0, -3.0, 0.0]),
        "beta[1] = -3 must be a finite number in [0, 1e12] (µs; 1e12 µs is 11.6 days)"
    );
    assert_eq!(
        msg([f64::NAN, 0.0, 0.0], [0.0; 3]),
        "alpha[0] = NaN must be a finite number in [0, 1e12] (µs; 1e12 µs is 11.6 days)"
    );
    assert_eq!(
        msg([0.0, 0.0, f64::INFINITY], [0.0; 3]),
        "alpha[2] = inf must be a finite number in [0, 1e12] (µs; 1e12 µs is 11.6 days)"
    );
    assert_eq!(
        msg([0.0; 3], [0.0, 0.0, -0.5]),
        "beta[2] = -0.5 must be a finite number in [0, 1e12] (µs; 1e12 µs is 11.6 days)"
    );
    // Issue 18: absurd coefficients overflowed simulated time.
    assert_eq!(
        msg([1e19, 0.0, 0.0], [0.0; 3]),
        "alpha[0] = 10000000000000000000 must be a finite number in [0, 1e12] (µs; 1e12 µs is 11.6 days)"
    );
    assert!(msg([0.0; 3], [1e308, 0.0, 0.0]).starts_with("beta[0] = 1000000"));
    assert!(LinearModel::new([1e12; 3], [1e12; 3]).is_ok());
    assert!(LinearModel::new([0.0; 3], [0.0; 3]).is_ok());
}

// ---- Validation -------------------------------------------------------------------

#[test]
fn roofline_validation_lists_every_problem() {
    let model = ModelConfig {
        num_heads: 0,
        bytes_per_param: 0.0,
        dtype: Some("float4".into()),
        ..a4_model()
    };
    let gpu = GpuSpec {
        mfu_decode: f64::NAN,
        memory_gib: -1.0,
        ..h100()
    };
    let err = RooflineV1Model::new(&model, &gpu, 0, [0.0; 3]).unwrap_err();
    let text = err.to_string();
    for want in [
        "invalid roofline-v1 configuration:",
        "model a4: num_attention_heads must be > 0",
        "model a4: unknown dtype 'float4' (accepted: float32, float16, bfloat16",
        "GPU H100: mfuDecode = NaN must be a finite number > 0",
        "GPU H100: MemoryGiB = -1 must be a finite number ≥ 0",
        "tensor parallelism (tp) must be ≥ 1",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let LatencyError::InvalidRoofline { problems } = err else {
        panic!("wrong variant: {err:?}");
    };
    assert_eq!(problems.len(), 5, "{problems:?}");

    let err = RooflineV1Model::new(&a4_model(), &h100(), 1, [0.0, -1.0, 0.0]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "alpha[1] = -1 must be a finite number in [0, 1e12] (µs; 1e12 µs is 11.6 days)"
    );
}

// ---- Bundled data -----------------------------------------------------------------

#[test]
fn every_bundled_model_and_gpu_loads_and_validates() {
    assert_eq!(
        bundled_model_names(),
        [
            "llama-2-7b-hf",
            "llama-3.1-70b-instruct",
            "llama-3.1-8b-instruct",
            "llama-4-scout-17b-16e-instruct-fp8-dynamic",
            "mistral-nemo-instruct-2407",
            "qwen2.5-1.5b-instruct",
            "qwen2.5-3b-instruct",
            "qwen2.5-7b-instruct",
            "qwen3-14b",
            "yi-34b"
        ]
    );
    assert_eq!(bundled_gpu_names_v1(), ["A100-80", "A100-SXM", "H100"]);
    for name in bundled_model_names() {
        let m = ModelConfig::bundled(name).unwrap();
        assert!(m.problems().is_empty(), "{name}: {:?}", m.problems());
        assert!(
            m.moe_problems().is_empty(),
            "{name}: {:?}",
            m.moe_problems()
        );
        // roofline-v1 caveats: Scout is MoE and FP8; Mistral-Nemo's head_dim
        // is not hidden / heads.
        let w = m.warnings();
        match name {
            "llama-4-scout-17b-16e-instruct-fp8-dynamic" => assert_eq!(w.len(), 2, "{w:?}"),
            "mistral-nemo-instruct-2407" => assert_eq!(w.len(), 1, "{w:?}"),
            _ => assert!(w.is_empty(), "{name}: {w:?}"),
        }
        assert_eq!(m.bytes_per_param, 2.0, "{name}");
        assert!(m.max_position_embeddings.is_some(), "{name}");
        for gpu in bundled_gpu_names_v1() {
            let g = GpuSpec::bundled_v1(&gpu).unwrap();
            assert!(g.problems_v1().is_empty(), "{gpu}: {:?}", g.problems_v1());
            for tp in [1, 2, 3, 4, 8] {
                let built = RooflineV1Model::new(&m, &g, tp, [0.0; 3]);
                if m.num_heads % tp == 0 {
                    built.unwrap();
                } else {
                    // Issue 18: vLLM shards the heads evenly over the GPUs.
                    let e = built.unwrap_err().to_string();
                    assert!(e.contains(&format!("tp = {tp} does not divide")), "{e}");
                }
            }
        }
        for gpu in bundled_gpu_names() {
            let g = GpuSpec::bundled(&gpu).unwrap();
            assert!(
                g.problems_head(true).is_empty(),
                "{gpu}: {:?}",
                g.problems_head(true)
            );
            RooflineModel::new(&m, &g, 1, [0.0; 3]).unwrap();
        }
    }
}

#[test]
fn bundled_llama_is_the_appendix_a4_shape() {
    let m = ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
    let a4 = a4_model();
    assert_eq!(
        (
            m.num_layers,
            m.hidden_size,
            m.num_heads,
            m.num_kv_heads,
            m.intermediate_size
        ),
        (
            a4.num_layers,
            a4.hidden_size,
            a4.num_heads,
            a4.num_kv_heads,
            a4.intermediate_size
        )
    );
    assert_eq!(m.bytes_per_param, 2.0);
    assert_eq!(m.vocab_size, 128256);
    assert_eq!(m.max_position_embeddings, Some(131072));
    let q = ModelConfig::bundled("qwen3-14b").unwrap();
    assert_eq!(
        (
            q.num_layers,
            q.hidden_size,
            q.num_heads,
            q.num_kv_heads,
            q.intermediate_size
        ),
        (40, 5120, 40, 8, 17408)
    );
    assert_eq!(q.head_dim(), 128.0);
}

#[test]
fn bundled_gpu_records_are_the_spec_table() {
    let want = |name: &str, tflops: f64, bw: f64| GpuSpec {
        name: name.into(),
        tflops_peak: tflops,
        tflops_fp8: 0.0,
        bw_peak_tbs: bw,
        bw_eff_constant: 0.72,
        t_overhead_micros: 500.0,
        per_layer_overhead: 20.0,
        mfu_prefill: 0.65,
        mfu_decode: 0.12,
        all_reduce_latency: 20.0,
        memory_gib: 80.0,
    };
    assert_eq!(h100(), want("H100", 989.5, 3.35));
    assert_eq!(
        GpuSpec::bundled_v1("A100-SXM").unwrap(),
        want("A100-SXM", 312.0, 2.039)
    );
    assert_eq!(
        GpuSpec::bundled_v1("A100-80").unwrap(),
        want("A100-80", 312.0, 2.039)
    );
}

#[test]
fn names_match_case_insensitively_and_by_hf_id() {
    for name in [
        "qwen3-14b",
        "Qwen3-14B",
        "qwen/qwen3-14b",
        "Qwen/Qwen3-14B",
        " qwen3-14b ",
    ] {
        assert_eq!(
            ModelConfig::bundled(name).unwrap().hidden_size,
            5120,
            "{name}"
        );
    }
    assert_eq!(
        ModelConfig::bundled("meta-llama/Llama-3.1-8B-Instruct")
            .unwrap()
            .num_layers,
        32
    );
    assert_eq!(
        bundled_model_id("Qwen2.5-7B-Instruct"),
        Some("qwen/qwen2.5-7b-instruct")
    );
    assert_eq!(GpuSpec::bundled("h100").unwrap().name, "H100");
    assert_eq!(GpuSpec::bundled("a100-80").unwrap().name, "A100-80");
}

#[test]
fn unknown_model_or_gpu_lists_the_sorted_names() {
    assert_eq!(
        ModelConfig::bundled("gpt-5").unwrap_err().to_string(),
        "unknown model 'gpt-5': bundled models are llama-2-7b-hf, llama-3.1-70b-instruct, \
         llama-3.1-8b-instruct, llama-4-scout-17b-16e-instruct-fp8-dynamic, \
         mistral-nemo-instruct-2407, qwen2.5-1.5b-instruct, qwen2.5-3b-instruct, \
         qwen2.5-7b-instruct, qwen3-14b, yi-34b; or give the path of a HuggingFace config.json"
    );
    assert_eq!(
        GpuSpec::bundled("B200").unwrap_err().to_string(),
        "unknown GPU 'B200': available GPUs are A100-80, A100-SXM, H100, L40S"
    );
}

// ---- HF config parsing ------------------------------------------------------------

#[test]
fn hf_config_merges_text_config_and_applies_fallbacks() {
    let text = r#"{
        "architectures": ["SomeVLM"],
        "hidden_size": 1,
        "num_local_experts": 8,
        "text_config": {
            "num_hidden_layers": 24.0,
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "num_kv_heads": 0,
            "multi_query_group_num": 2,
            "ffn_hidden_size": 5632,
            "dtype": "torch.float16",
            "head_dim": 64
        }
    }"#;
    let m = ModelConfig::from_hf_json(text, "vlm").unwrap();
    assert_eq!(m.num_layers, 24, "a whole number written as a float");
    let e = ModelConfig::from_hf_json(&text.replace("24.0", "24.9"), "vlm").unwrap_err();
    assert!(e.to_string().contains("num_hidden_layers = 24.9"), "{e}");
    assert_eq!(m.hidden_size, 2048, "text_config wins over the top level");
    assert_eq!(m.num_kv_heads, 2, "first non-zero KV key");
    assert_eq!(m.intermediate_size, 5632);
    assert_eq!(m.bytes_per_param, 2.0);
    assert!(m.is_moe());
    let w = m.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("mixture-of-experts"), "{w:?}");
    assert!(w[1].contains("head_dim 64 differs"), "{w:?}");

    // No KV heads → heads; no MLP width → 4 · hidden; torch_dtype before dtype.
    let m = ModelConfig::from_hf_json(
        r#"{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "torch_dtype": "float32", "dtype": "int8", "intermediate_size": "wide"}"#,
        "tiny",
    )
    .unwrap();
    assert_eq!(
        (m.num_kv_heads, m.intermediate_size, m.bytes_per_param),
        (4, 256, 4.0)
    );

    for (dtype, bytes) in [
        ("float32", 4.0),
        ("float16", 2.0),
        ("bfloat16", 2.0),
        ("int8", 1.0),
        ("uint8", 1.0),
        ("fp8", 1.0),
        ("int4", 1.0),
        ("nf4", 1.0),
        ("float4", 0.0),
    ] {
        let m =
            ModelConfig::from_hf_json(&format!(r#"{{"torch_dtype": "{dtype}"}}"#), "d").unwrap();
        assert_eq!(m.bytes_per_param, bytes, "{dtype}");
    }
    let q = ModelConfig::from_hf_json(r#"{"torch_dtype": "int8"}"#, "q").unwrap();
    assert!(q.warnings()[0].contains("possibly quantized"));
}

#[test]
fn hf_config_errors_are_specific() {
    let err = ModelConfig::from_hf_json("[1, 2]", "x.json").unwrap_err();
    assert_eq!(
        err.to_string(),
        "x.json: a model config must be a JSON object"
    );
    let err = ModelConfig::from_hf_json("{", "x.json").unwrap_err();
    assert!(
        err.to_string().starts_with("x.json: not valid JSON:"),
        "{err}"
    );
    let err = ModelConfig::from_hf_json(r#"{"num_hidden_layers": -3}"#, "x.json").unwrap_err();
    assert!(
        err.to_string()
            .contains("num_hidden_layers = -3 is not a valid count"),
        "{err}"
    );

    let empty = ModelConfig::from_hf_json("{}", "empty").unwrap();
    let problems = empty.problems();
    assert_eq!(problems.len(), 4, "{problems:?}");
    assert!(
        problems[3].contains("no torch_dtype or dtype given"),
        "{problems:?}"
    );
}

#[test]
fn model_config_loads_from_a_file_or_its_folder() {
    let dir = temp_path("model");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.json");
    std::fs::write(
        &file,
        include_str!("../../../data/models/qwen2.5-7b-instruct.json"),
    )
    .unwrap();
    let from_file = ModelConfig::from_path(&file).unwrap();
    let from_dir = ModelConfig::from_path(&dir).unwrap();
    assert_eq!(from_file.num_kv_heads, 4);
    assert_eq!(from_dir.intermediate_size, 18944);
    let missing = ModelConfig::from_path(&dir.join("nope.json")).unwrap_err();
    assert!(missing.to_string().starts_with("cannot read "), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hardware_config_reads_a_user_file() {
    let path = temp_path("hw.json");
    std::fs::write(
        &path,
        r#"{"_comment": "mine", "Toy": {"tflopspeak": 100, "BWPEAKTBS": 1, "BwEffConstant": 0.5,
            "mfuPrefill": 0.5, "mfuDecode": 0.5, "extra": "ignored"}}"#,
    )
    .unwrap();
    let g = GpuSpec::from_hardware_file(&path, "toy").unwrap();
    assert_eq!(
        (g.tflops_peak, g.bw_peak_tbs, g.memory_gib),
        (100.0, 1.0, 0.0)
    );
    assert!(g.problems_v1().is_empty());
    let err = GpuSpec::from_hardware_file(&path, "H100").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown GPU 'H100': available GPUs are Toy"
    );
    std::fs::write(&path, r#"{"Toy": {"TFlopsPeak": "fast"}}"#).unwrap();
    let err = GpuSpec::from_hardware_file(&path, "Toy").unwrap_err();
    assert!(
        err.to_string()
            .ends_with("GPU 'Toy': TFlopsPeak must be a number, got \"fast\""),
        "{err}"
    );
    std::fs::remove_file(&path).unwrap();
}

// ---- KV capacity --------------------------------------------------------------------

#[test]
fn kv_blocks_for_qwen3_14b_on_h100() {
    let q = ModelConfig::bundled("qwen3-14b").unwrap();
    let blocks = derive_total_kv_blocks_v1(&q, &h100(), 1, 16, 0.9).unwrap();
    // usable 80 GiB · 0.9 = 77 309 411 328 B; weights 26 424 115 200 B;
    // one block 16 · 2 · 40 · 8 · 128 · 2 = 2 621 440 B.
    assert_eq!(blocks, 19411);
    assert_eq!(weight_bytes(&q), 26_424_115_200.0);
    assert_eq!(kv_bytes_per_token(&q), 163_840.0);
    // TP doubles memory, not weights; halving the block size doubles blocks (±1).
    let tp2 = derive_total_kv_blocks_v1(&q, &h100(), 2, 16, 0.9).unwrap();
    assert_eq!(tp2, 48902);
    let b8 = derive_total_kv_blocks_v1(&q, &h100(), 1, 8, 0.9).unwrap();
    assert_eq!(b8, 38822);
}

#[test]
fn kv_derivation_rejects_a_model_too_big_for_the_gpu() {
    // llama-3.1-70b shape: ~130 GiB of bf16 weights on one 80 GiB GPU.
    let big = ModelConfig::new("llama-70b", 80, 8192, 64, 8, 28672, 2.0);
    let err = derive_total_kv_blocks_v1(&big, &h100(), 1, 16, 0.9).unwrap_err();
    assert!(
        matches!(err, LatencyError::ModelDoesNotFit { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.starts_with("the model does not fit: its weights (and runtime overheads) need 127.50 GiB of the 72.00 GiB usable on H100 × TP 1"), "{text}");
    // Two GPUs fit it.
    assert!(derive_total_kv_blocks_v1(&big, &h100(), 2, 16, 0.9).unwrap() > 0);
}

#[test]
fn kv_derivation_rejects_bad_settings() {
    let m = a4_model();
    let msg = |gpu: &GpuSpec, tp, b, u| {
        derive_total_kv_blocks_v1(&m, gpu, tp, b, u)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(msg(&h100(), 1, 0, 0.9), "block_size must be ≥ 1 token");
    assert_eq!(
        msg(&h100(), 1, 16, 0.0),
        "gpu_memory_utilization = 0 must be in (0, 1]"
    );
    assert_eq!(
        msg(&h100(), 1, 16, 1.5),
        "gpu_memory_utilization = 1.5 must be in (0, 1]"
    );
    assert!(msg(&h100(), 0, 16, 0.9).contains("tensor parallelism (tp) must be ≥ 1"));
    let no_mem = GpuSpec {
        memory_gib: 0.0,
        ..h100()
    };
    assert_eq!(
        msg(&no_mem, 1, 16, 0.9),
        "cannot derive the number of KV blocks: GPU H100 has no MemoryGiB in its hardware config; \
         set total_kv_blocks explicitly"
    );
}

// ---- Coefficient table ----------------------------------------------------------------

#[test]
fn coefficient_table_holds_the_reachable_entries_exactly() {
    let entries = coefficient_entries();
    assert_eq!(entries.len(), 85);
    // No reachable duplicate of (id, gpu, tp): lookup never depends on the vLLM image.
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[..i] {
            assert!(
                !(a.id == b.id && a.gpu == b.gpu && a.tp == b.tp),
                "duplicate key {} {} {}",
                a.id,
                a.gpu,
                a.tp
            );
        }
        assert!(LinearModel::new(a.alpha, a.beta).is_ok(), "{}", a.id);
        assert_eq!(a.id, a.id.to_ascii_lowercase());
    }
    // Every number is the correctly rounded double of its text.
    let text = include_str!("../../../data/linear_coefficients.toml");
    let parsed: Vec<f64> = entries
        .iter()
        .flat_map(|e| e.alpha.into_iter().chain(e.beta))
        .collect();
    let written: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix("alpha = [")
                .or_else(|| l.strip_prefix("beta = ["))
        })
        .flat_map(|l| {
            l.trim_end_matches(']')
                .split(", ")
                .map(|n| n.parse::<f64>().unwrap())
        })
        .collect();
    assert_eq!(parsed.len(), written.len());
    for (p, w) in parsed.iter().zip(&written) {
        assert_eq!(p.to_bits(), w.to_bits(), "{p} vs {w}");
    }
}

#[test]
fn coefficient_lookup_matches_ids_gpus_and_tp() {
    let (m, kv) =
        lookup_linear_coefficients("meta-llama/llama-3.1-8b-instruct", "H100", 1).unwrap();
    assert_eq!(
        m.alpha,
        [232.46191091038054, 1.752360364195244, 3357.4400353290152]
    );
    assert_eq!(
        m.beta,
        [5752.705191348184, 17.25086436834028, 5.999143920128404]
    );
    assert_eq!(kv, 29205);
    // HF spelling, bare name, lower-case GPU.
    for id in ["Meta-Llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct"] {
        assert_eq!(
            lookup_linear_coefficients(id, "h100", 1).unwrap().0,
            m,
            "{id}"
        );
    }
    // A100-SXM is the A100-80 of the table.
    let (a100, kv) = lookup_linear_coefficients("qwen/qwen2.5-7b-instruct", "A100-SXM", 2).unwrap();
    assert_eq!(a100.beta[0], 401.64665660295196);
    assert_eq!(kv, 303840);
    // First entry wins over a shadowed duplicate with other numbers (#44 over #83).
    let (phi, _) = lookup_linear_coefficients("redhatai/phi-4-fp8-dynamic", "H100", 1).unwrap();
    assert_eq!(phi.alpha[0], 6933.519704638618);
    assert!(lookup_linear_coefficients("meta-llama/llama-3.1-8b-instruct", "H100", 3).is_none());
    assert!(lookup_linear_coefficients("qwen3-14b", "H100", 1).is_none());
    assert_eq!(
        calibrated_setups("microsoft/phi-4"),
        ["A100-80 TP 1", "H100 TP 1", "A100-80 TP 2", "H100 TP 2"]
    );
}

#[test]
fn default_hardware_table() {
    let d = default_hardware("meta-llama/llama-3.1-8b-instruct").unwrap();
    assert_eq!((d.gpu.as_str(), d.tp), ("H100", 2));
    assert_eq!(
        d.hf_repo.as_deref(),
        Some("meta-llama/Llama-3.1-8B-Instruct")
    );
    assert_eq!(
        default_hardware("openai/gpt-oss-20b").unwrap().hf_repo,
        None
    );
    assert!(default_hardware("mistralai/mixtral-8x7b-instruct-v0.1").is_none());
    // Every default names a calibrated setup.
    for e in coefficient_entries() {
        if let Some(d) = default_hardware(&e.id) {
            assert!(
                lookup_entry(&d.model, &d.gpu, d.tp).is_some(),
                "{}",
                d.model
            );
        }
    }
}

// ---- build_latency ------------------------------------------------------------------

#[test]
fn build_linear_from_the_table_with_default_hardware() {
    let built = build_latency(&LatencySetup::new(
        LatencyKind::Linear,
        "meta-llama/llama-3.1-8b-instruct",
    ))
    .unwrap();
    assert_eq!((built.gpu.as_deref(), built.tp), (Some("H100"), 2));
    let LatencyModel::Linear(m) = &built.model else {
        panic!("not linear");
    };
    assert_eq!(
        m.beta,
        [6910.420479880494, 17.67057489844186, 2.8377471109943855]
    );
    assert_eq!(built.total_kv_blocks, 132139);
    assert_eq!(built.kv_blocks_source, KvBlocksSource::Calibrated);
    assert_eq!(
        built.calibrated_vllm.as_deref(),
        Some("vllm/vllm-openai:v0.8.4")
    );

    // Block size 32: same memory, half the blocks.
    let mut s = LatencySetup::new(LatencyKind::Linear, "llama-3.1-8b-instruct");
    s.block_size = 32;
    assert_eq!(build_latency(&s).unwrap().total_kv_blocks, 66069);
}

#[test]
fn build_linear_with_explicit_coefficients() {
    let mut s = LatencySetup::new(LatencyKind::Linear, "my-model");
    s.alpha = Some([1.0, 2.0, 3.0]);
    s.beta = Some(vec![1000.0, 10.0, 5.0]);
    s.total_kv_blocks = Some(7463);
    let built = build_latency(&s).unwrap();
    assert_eq!(built.model.alpha(), &[1.0, 2.0, 3.0]);
    assert_eq!(
        (built.total_kv_blocks, built.kv_blocks_source),
        (7463, KvBlocksSource::Explicit)
    );

    // Derived KV needs a GPU and a model config.
    s.total_kv_blocks = None;
    let err = build_latency(&s).unwrap_err().to_string();
    assert!(
        err.contains("model 'my-model' is not calibrated and has no bundled config"),
        "{err}"
    );
    s.model = "qwen3-14b".into();
    let err = build_latency(&s).unwrap_err().to_string();
    assert!(
        err.starts_with("deriving total_kv_blocks (or set total_kv_blocks) needs a GPU"),
        "{err}"
    );
    s.hardware = Some("H100".into());
    let built = build_latency(&s).unwrap();
    assert_eq!(
        (built.total_kv_blocks, built.kv_blocks_source),
        (19411, KvBlocksSource::DerivedV1)
    );

    s.beta = Some(vec![1.0, -3.0, 0.0]);
    assert_eq!(
        build_latency(&s).unwrap_err().to_string(),
        "beta[1] = -3 must be a finite number in [0, 1e12] (µs; 1e12 µs is 11.6 days)"
    );
}

#[test]
fn build_linear_without_coefficients_says_what_exists() {
    let mut s = LatencySetup::new(LatencyKind::Linear, "microsoft/phi-4");
    s.hardware = Some("H100".into());
    s.tp = Some(4);
    assert_eq!(
        build_latency(&s).unwrap_err().to_string(),
        "no linear coefficients for model 'microsoft/phi-4' on H100 at TP 4: give beta explicitly, \
         or use one of the calibrated setups: A100-80 TP 1, H100 TP 1, A100-80 TP 2, H100 TP 2"
    );
    let s = LatencySetup::new(LatencyKind::Linear, "qwen3-14b");
    assert_eq!(
        build_latency(&s).unwrap_err().to_string(),
        "no linear coefficients for model 'qwen3-14b' on no GPU at TP 1: give beta explicitly"
    );
}

#[test]
fn build_roofline() {
    let mut s = LatencySetup::new(LatencyKind::RooflineV1, "Qwen/Qwen3-14B");
    s.hardware = Some("h100".into());
    let built = build_latency(&s).unwrap();
    assert!(matches!(built.model, LatencyModel::RooflineV1(_)));
    assert_eq!(built.model.alpha(), &[0.0; 3]);
    assert_eq!(
        (built.total_kv_blocks, built.kv_blocks_source),
        (19411, KvBlocksSource::DerivedV1)
    );
    assert!(built.warnings.is_empty());

    // A calibrated model keeps its alphas and measured KV blocks (§6.5).
    let mut s = LatencySetup::new(LatencyKind::RooflineV1, "meta-llama/llama-3.1-8b-instruct");
    s.tp = Some(1);
    let built = build_latency(&s).unwrap();
    assert_eq!(built.model.alpha()[0], 232.46191091038054);
    assert_eq!(built.total_kv_blocks, 29205);
    assert_eq!(built.model.step_time(&BatchShape::default()), 1140);

    // A user config file for a model blis does not bundle.
    let path = temp_path("a4.json");
    std::fs::write(
        &path,
        r#"{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "torch_dtype": "bfloat16"}"#,
    )
    .unwrap();
    let mut s = LatencySetup::new(LatencyKind::RooflineV1, "acme/model");
    s.model_config = Some(path.clone());
    s.hardware = Some("H100".into());
    s.tp = Some(2);
    s.alpha = Some([10.0, 0.0, 0.0]);
    let built = build_latency(&s).unwrap();
    assert_eq!(
        built
            .model
            .step_time(&shape(&[(256, 256)], &[(100, 1), (2000, 1)])),
        8292
    );
    assert_eq!(built.model.queueing_delay(5), 10);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn build_roofline_errors() {
    let s = LatencySetup::new(LatencyKind::RooflineV1, "qwen3-14b");
    assert_eq!(
        build_latency(&s).unwrap_err().to_string(),
        "the roofline-v1 latency model needs a GPU: set the hardware (one of A100-80, A100-SXM, H100)"
    );
    let mut s = LatencySetup::new(LatencyKind::RooflineV1, "qwen3-14b");
    s.hardware = Some("H100".into());
    s.beta = Some(vec![1.0, 1.0, 1.0]);
    assert!(matches!(build_latency(&s), Err(LatencyError::BetaNotUsed)));
    let mut s = LatencySetup::new(LatencyKind::RooflineV1, "acme/model");
    s.hardware = Some("H100".into());
    assert!(matches!(
        build_latency(&s),
        Err(LatencyError::UnknownModel { .. })
    ));
    let mut s = LatencySetup::new(LatencyKind::RooflineV1, "qwen3-14b");
    s.hardware = Some("H100".into());
    s.tp = Some(0);
    assert_eq!(
        build_latency(&s).unwrap_err().to_string(),
        "tensor parallelism (tp) must be ≥ 1"
    );
}

#[test]
fn latency_kind_names() {
    assert_eq!(
        "Linear".parse::<LatencyKind>().unwrap(),
        LatencyKind::Linear
    );
    assert_eq!(
        "blackbox".parse::<LatencyKind>().unwrap(),
        LatencyKind::Linear
    );
    assert_eq!(
        "roofline-v1".parse::<LatencyKind>().unwrap(),
        LatencyKind::RooflineV1
    );
    assert_eq!(
        "magic".parse::<LatencyKind>().unwrap_err().to_string(),
        "unknown latency model 'magic': expected one of linear, roofline, roofline-v1, trained-physics"
    );
}
