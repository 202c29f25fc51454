//! Tests of the HEAD latency layer: trained-physics against the worked
//! examples of `latency-head.md` §2.10 and hand-computed batches (dense,
//! uniform MoE, interleaved MoE, shared experts, FP8, TP > 1, DP > 1), the
//! HEAD roofline against §3.4, KV capacity against §4.5, MoE and
//! quantisation parsing, and the model names.
//!
//! The expected values were computed by hand (a direct transcription of the
//! spec's formulas, evaluated request by request), not by this code.

use super::*;

/// A batch entry `(PI, In, T, n_out)` as the spec writes it: progress, input
/// length, tokens granted, output tokens so far.
type Entry = (u32, u32, u32, u32);

/// The batch shape the engine builds for spec-style entries: `PI < In` is a
/// prefill chunk of the whole prompt `In`; otherwise a decode of one token.
fn shape_of(entries: &[Entry]) -> BatchShape {
    let mut b = BatchShape::default();
    for &(pi, input, t, _) in entries {
        if pi < input {
            b.prefill.add_prefill(pi, t, input);
        } else {
            b.decode.add(pi, 1);
        }
    }
    b
}

fn batch_a() -> Vec<Entry> {
    vec![(0, 512, 512, 100)]
}
fn batch_bd() -> Vec<Entry> {
    vec![(1000, 900, 1, 200); 8]
}
fn batch_c() -> Vec<Entry> {
    let mut c = batch_a();
    c.extend(batch_bd());
    c
}
fn batch_dc() -> Vec<Entry> {
    vec![(2048, 3000, 952, 50)]
}
/// A chunk in the middle of a prompt, a whole prompt, two decodes.
fn batch_x() -> Vec<Entry> {
    vec![
        (256, 1024, 256, 10),
        (0, 300, 300, 5),
        (500, 400, 1, 7),
        (1200, 1000, 1, 3),
    ]
}

fn h100() -> GpuSpec {
    GpuSpec::bundled("H100").unwrap()
}

fn trained(
    model: &ModelConfig,
    gpu: &GpuSpec,
    tp: u32,
    dp: u32,
    comm: &str,
) -> TrainedPhysicsModel {
    let comm = MoeCommBackend::parse(comm).unwrap();
    TrainedPhysicsModel::new(model, gpu, tp, dp, comm, ITER29_ALPHA, &ITER29_BETA).unwrap()
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
        "{what}: got {got}, want {want}"
    );
}

fn json_model(json: &str) -> ModelConfig {
    ModelConfig::from_hf_json(json, "test").unwrap()
}

/// Mixtral-8x7B's shape: uniform MoE, 8 experts, top-2.
const MIXTRAL: &str = r#"{"num_hidden_layers":32,"hidden_size":4096,"num_attention_heads":32,
  "num_key_value_heads":8,"intermediate_size":14336,"num_local_experts":8,"num_experts_per_tok":2,
  "torch_dtype":"bfloat16","vocab_size":32000}"#;
/// DeepSeek-V2-Lite's shape: 64 routed experts (top-6) of width 1408, 2 shared.
const DEEPSEEK_LITE: &str = r#"{"num_hidden_layers":27,"hidden_size":2048,"num_attention_heads":16,
  "num_key_value_heads":16,"intermediate_size":10944,"n_routed_experts":64,"num_experts_per_tok":6,
  "moe_intermediate_size":1408,"n_shared_experts":2,"torch_dtype":"bfloat16","vocab_size":102400}"#;
/// Llama-3.1-8B's shape with FP8 weights.
const LLAMA_FP8: &str = r#"{"num_hidden_layers":32,"hidden_size":4096,"num_attention_heads":32,
  "num_key_value_heads":8,"intermediate_size":14336,"torch_dtype":"bfloat16","vocab_size":128256,
  "quantization_config":{"quant_method":"fp8"}}"#;

// ---- trained-physics: §2.10 worked examples ---------------------------------

#[test]
fn trained_physics_reproduces_the_worked_examples() {
    // (model, TP, [A, Bd, C, Dc]) as the spec's table gives them (truncated µs).
    let table: [(&str, u32, [i64; 4]); 4] = [
        ("llama-2-7b-hf", 1, [7476, 8896, 9952, 8587]),
        ("llama-3.1-70b-instruct", 4, [19804, 17037, 20227, 22801]),
        (
            "llama-4-scout-17b-16e-instruct-fp8-dynamic",
            2,
            [25507, 25394, 26002, 26123],
        ),
        ("mistral-nemo-instruct-2407", 2, [7081, 6571, 7594, 8119]),
    ];
    let batches = [batch_a(), batch_bd(), batch_c(), batch_dc()];
    for (name, tp, want) in table {
        let m = trained(&ModelConfig::bundled(name).unwrap(), &h100(), tp, 1, "");
        for (batch, want) in batches.iter().zip(want) {
            let shape = shape_of(batch);
            let us = m.step_us(&shape).unwrap();
            assert_eq!(us.trunc() as i64, want, "{name} TP {tp} {batch:?}");
            // blis rounds to the nearest tick (spec/README decision 20).
            assert_eq!(m.step_time(&shape), us.round() as Tick);
        }
    }
}

#[test]
fn trained_physics_terms_of_batch_c_match_the_spec() {
    let llama = trained(
        &ModelConfig::bundled("llama-2-7b-hf").unwrap(),
        &h100(),
        1,
        1,
        "",
    );
    let t = llama.terms(&shape_of(&batch_c()));
    close(t.pf_compute, 6910.144452, "pf_compute");
    close(t.pf_kv, 80.129987, "pf_kv");
    close(t.dc_compute, 108.954411, "dc_compute");
    close(t.dc_kv, 1253.283076, "dc_kv");
    close(t.weight, 3866.271866, "weight");
    assert_eq!(
        (t.tp_attn, t.tp_dense, t.moe_reduce, t.moe_dispatch),
        (0.0, 0.0, 0.0, 0.0)
    );

    let scout = ModelConfig::bundled("llama-4-scout-17b-16e-instruct-fp8-dynamic").unwrap();
    assert_eq!(scout.layer_split(), (24, 24));
    assert_eq!((scout.expert_ffn(), scout.dense_ffn()), (8192, 16384));
    assert_eq!(scout.weight_bytes_per_param(), 1.0);
    let t = trained(&scout, &h100(), 2, 1, "").terms(&shape_of(&batch_c()));
    close(t.pf_compute, 3222.853176, "scout pf_compute");
    close(t.pf_kv, 15.024373, "scout pf_kv");
    close(t.dc_compute, 50.818052, "scout dc_compute");
    close(t.dc_kv, 234.990577, "scout dc_kv");
    close(t.weight, 8563.892346, "scout weight");
    close(t.tp_attn, 76.295642, "scout tp_attn");
    close(t.tp_dense, 38.147821, "scout tp_dense");
    close(t.moe_reduce, 38.147821, "scout moe_reduce");
}

/// `moe_expert_load = "touched"`: Scout at TP 2 loads 24 MoE layers × 8
/// expert-equivalents × 3·5120·8192 bytes = 24 159 191 040 B of routed
/// experts per step (7211.698818 µs at 3.35 TB/s) of its 8563.892346 µs; a
/// step of `n` tokens (top-1 of 16) loads the fraction `1 − (15/16)^n` of
/// them. A dense model has no routed experts: nothing changes.
#[test]
fn touched_experts_scale_the_routed_expert_weights_by_the_step_tokens() {
    let scout = ModelConfig::bundled("llama-4-scout-17b-16e-instruct-fp8-dynamic").unwrap();
    let all = trained(&scout, &h100(), 2, 1, "");
    let touched = all
        .clone()
        .with_variant(&scout, StepVariant::parse(Some("touched"), None).unwrap());
    let one = shape_of(&[(1000, 900, 1, 200)]);
    // 1352.193528 + 7211.698818 · 1/16
    close(touched.terms(&one).weight, 1802.924704, "1 token");
    // 1352.193528 + 7211.698818 · (1 − (15/16)^8) = 0.403281
    close(
        touched.terms(&shape_of(&batch_bd())).weight,
        4260.531222,
        "8 tokens",
    );
    // 520 tokens touch every expert (1 − 10^-15).
    close(
        touched.terms(&shape_of(&batch_c())).weight,
        8563.892346,
        "520 tokens",
    );
    for b in [batch_a(), batch_bd(), batch_c(), batch_dc(), batch_x()] {
        let (t, a) = (touched.terms(&shape_of(&b)), all.terms(&shape_of(&b)));
        assert!(t.weight <= a.weight, "touched never loads more");
        close(a.weight, 8563.892346, "all: whatever the batch");
        assert_eq!(
            BasisTerms { weight: 0.0, ..t },
            BasisTerms { weight: 0.0, ..a }
        );
    }
    // The step time moves by β₃ × the weight change, nothing else.
    let diff = all.step_us(&one).unwrap() - touched.step_us(&one).unwrap();
    close(diff, ITER29_BETA[2] * (8563.892346 - 1802.924704), "step");

    let llama = ModelConfig::bundled("llama-2-7b-hf").unwrap();
    let dense = trained(&llama, &h100(), 1, 1, "");
    let dense_touched = dense
        .clone()
        .with_variant(&llama, StepVariant::parse(Some("touched"), None).unwrap());
    for b in [batch_a(), batch_bd(), batch_c()] {
        assert_eq!(
            dense.step_us(&shape_of(&b)),
            dense_touched.step_us(&shape_of(&b))
        );
    }
    assert_eq!(MoeExpertLoad::parse("").unwrap(), MoeExpertLoad::All);
    assert_eq!(MoeExpertLoad::parse("all").unwrap(), MoeExpertLoad::All);
    assert_eq!(
        MoeExpertLoad::parse("touched").unwrap(),
        MoeExpertLoad::Touched
    );
    let e = MoeExpertLoad::parse("some").unwrap_err().to_string();
    assert!(
        e.contains("moe_expert_load 'some'") && e.contains("touched"),
        "{e}"
    );
}

// ---- trained-physics: hand-computed batches ---------------------------------

/// `(label, model json, GPU, TP, DP, backend, [C µs, X µs], terms of X:
/// [pf_compute, dc_kv, weight, tp_attn, moe_reduce, moe_dispatch])`.
type HandCase = (
    &'static str,
    &'static str,
    &'static str,
    u32,
    u32,
    &'static str,
    [f64; 2],
    [f64; 6],
);

/// `geometry = "full"`, hand-computed on H100 (3.35 TB/s). Mistral-Nemo
/// (hidden 5120, 32 heads of a declared 128, 8 KV heads, 40 layers, MLP
/// 14336, vocab 131072, bf16) at TP 2: the reference's heads are 5120/32 =
/// 160 wide, so its weights are 40·5120·(2·5120 + 2·1280) + 40·3·5120·14336
/// bf16 values over 2 GPUs, 11 429 478 400 B = 3411.784597 µs; in full,
/// 40·5120·(2·4096 + 2·1024) attention weights and the LM head's
/// 131072·5120 besides: 11 576 279 040 B = 3455.605684 µs, and the KV
/// traffic of a decode is 1024/1280 of the reference's. Llama-2-7B's heads
/// are 4096/32 = 128 either way: only its LM head is added, 32000·4096·2 B
/// = 78.251940 µs at TP 1.
#[test]
fn full_geometry_reads_the_declared_head_size_and_the_lm_head() {
    let nemo = ModelConfig::bundled("mistral-nemo-instruct-2407").unwrap();
    assert_eq!(nemo.declared_head_dim, Some(128));
    let reference = trained(&nemo, &h100(), 2, 1, "");
    let full = reference
        .clone()
        .with_variant(&nemo, StepVariant::parse(None, Some("full")).unwrap());
    let bd = shape_of(&batch_bd());
    let (r, f) = (reference.terms(&bd), full.terms(&bd));
    close(r.weight, 3411.784597, "nemo reference weight");
    close(f.weight, 3455.605684, "nemo full weight");
    close(r.dc_kv, 244.781851, "nemo reference dc_kv");
    close(f.dc_kv, 195.825481, "nemo full dc_kv");
    // The query and output projections shrink from 5120 to 4096 wide.
    let c = shape_of(&batch_c());
    let ratio = full.terms(&c).dc_compute / reference.terms(&c).dc_compute;
    assert!(ratio < 1.0, "{ratio}");
    // Reference geometry is the model as frozen by new(): nothing changes.
    let same = reference
        .clone()
        .with_variant(&nemo, StepVariant::default());
    assert_eq!(same, reference);

    let llama = ModelConfig::bundled("llama-2-7b-hf").unwrap();
    let reference = trained(&llama, &h100(), 1, 1, "");
    let full = reference
        .clone()
        .with_variant(&llama, StepVariant::parse(None, Some("full")).unwrap());
    for b in [batch_a(), batch_bd(), batch_c(), batch_dc()] {
        let (r, f) = (reference.terms(&shape_of(&b)), full.terms(&shape_of(&b)));
        close(f.weight - r.weight, 78.251940, "llama-2 LM head");
        assert_eq!((f.pf_compute, f.dc_kv), (r.pf_compute, r.dc_kv));
    }
    assert_eq!(ModelGeometry::parse("").unwrap(), ModelGeometry::Reference);
    assert_eq!(ModelGeometry::parse("full").unwrap(), ModelGeometry::Full);
    let e = ModelGeometry::parse("exact").unwrap_err().to_string();
    assert!(
        e.contains("unknown geometry 'exact'") && e.contains("full"),
        "{e}"
    );
    // A profile records only the settings that differ from the default.
    assert_eq!(StepVariant::default().recorded(), [None, None]);
    assert_eq!(
        StepVariant::parse(Some("touched"), Some("full"))
            .unwrap()
            .recorded(),
        [Some("touched".to_string()), Some("full".to_string())]
    );
    // The first setting that differs, named.
    let touched = StepVariant::parse(Some("touched"), None).unwrap();
    let both = StepVariant::parse(Some("touched"), Some("full")).unwrap();
    assert_eq!(touched.difference(&touched), None);
    assert_eq!(
        StepVariant::default().difference(&both),
        Some(("moe_expert_load", "all", "touched"))
    );
    assert_eq!(
        touched.difference(&both),
        Some(("geometry", "reference", "full"))
    );
}

#[test]
fn trained_physics_hand_computed_batches() {
    let cases: [HandCase; 7] = [
        (
            "uniform MoE, TP 2: the MoE all-reduce under β4",
            MIXTRAL,
            "H100",
            2,
            1,
            "",
            [21456.07802124595, 21285.087983023663],
            [
                7203.086597,
                33.296201,
                13862.487728,
                43.664583,
                43.664583,
                0.0,
            ],
        ),
        (
            "uniform MoE, TP 2 DP 2, all-gather dispatch",
            MIXTRAL,
            "H100",
            2,
            2,
            "",
            [11605.053591132377, 11509.075520288283],
            [
                3601.543298,
                16.648100,
                7131.568831,
                21.832291,
                0.0,
                32.748437,
            ],
        ),
        (
            "uniform MoE, TP 1 DP 2, all-to-all dispatch (top-k)",
            MIXTRAL,
            "H100",
            1,
            2,
            "pplx",
            [21971.374091412265, 21798.14781572178],
            [7203.086597, 33.296201, 14263.137662, 0.0, 0.0, 43.664583],
        ),
        (
            "MoE with shared experts",
            DEEPSEEK_LITE,
            "H100",
            1,
            1,
            "",
            [15349.040192340199, 14548.92647182344],
            [2705.053273, 112.374677, 9473.805908, 0.0, 0.0, 0.0],
        ),
        (
            "FP8 weights on H100: FP8 peak",
            LLAMA_FP8,
            "H100",
            1,
            1,
            "",
            [5206.798489671725, 4752.999251215612],
            [4035.575344, 66.592401, 2083.379659, 0.0, 0.0, 0.0],
        ),
        (
            "FP8 weights on A100: no FP8 peak",
            LLAMA_FP8,
            "A100-SXM",
            1,
            1,
            "",
            [10444.212002825576, 9941.686600969228],
            [25597.447457, 109.408800, 3422.914103, 0.0, 0.0, 0.0],
        ),
        (
            "FP8 weights on L40S, TP 2",
            LLAMA_FP8,
            "L40S",
            2,
            1,
            "",
            [8497.559715882071, 7594.337896289971],
            [2723.875718, 129.099852, 4038.959407, 169.301333, 0.0, 0.0],
        ),
    ];
    for (label, json, gpu, tp, dp, comm, steps, terms) in cases {
        let m = trained(
            &json_model(json),
            &GpuSpec::bundled(gpu).unwrap(),
            tp,
            dp,
            comm,
        );
        for (batch, want) in [batch_c(), batch_x()].iter().zip(steps) {
            let shape = shape_of(batch);
            close(m.step_us(&shape).unwrap(), want, label);
            assert_eq!(m.step_time(&shape), want.round() as Tick, "{label}");
        }
        let t = m.terms(&shape_of(&batch_x()));
        let got = [
            t.pf_compute,
            t.dc_kv,
            t.weight,
            t.tp_attn,
            t.moe_reduce,
            t.moe_dispatch,
        ];
        for (i, (g, w)) in got.iter().zip(terms).enumerate() {
            close(*g, w, &format!("{label}: term {i}"));
        }
    }
}

#[test]
fn trained_physics_beta_count_selects_the_split_terms() {
    let m = ModelConfig::bundled("llama-2-7b-hf").unwrap();
    let shape = shape_of(&batch_c());
    // 7 and 9 betas: decode = b[1]·max(...) = 0 here; 10 and 11: b[9]·T_dc_kv.
    for (n, want) in [
        (7, 7511.965949206421),
        (9, 7511.965949206421),
        (10, 9952.243088949803),
        (11, 9952.243088949803),
    ] {
        let comm = MoeCommBackend::AllGather;
        let tp = TrainedPhysicsModel::new(&m, &h100(), 1, 1, comm, ITER29_ALPHA, &ITER29_BETA[..n])
            .unwrap();
        close(tp.step_us(&shape).unwrap(), want, &format!("{n} betas"));
        // With fewer than 11, β_EP defaults to β4.
        assert_eq!(tp.beta()[10], 0.752037);
    }
    for n in [6, 12] {
        let beta = vec![1.0; n];
        let err = TrainedPhysicsModel::new(
            &m,
            &h100(),
            1,
            1,
            MoeCommBackend::AllGather,
            ITER29_ALPHA,
            &beta,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("7 to 11 beta"), "{err}");
    }
}

#[test]
fn trained_physics_empty_batch_and_alphas() {
    let m = trained(
        &ModelConfig::bundled("qwen2.5-7b-instruct").unwrap(),
        &h100(),
        1,
        1,
        "",
    );
    assert_eq!(m.step_time(&BatchShape::default()), 1);
    let lm = LatencyModel::TrainedPhysics(m);
    // Queueing α0 only (no per-token term), α1 after the last token, α2 per token.
    assert_eq!(lm.queueing_delay(0), 15563);
    assert_eq!(lm.queueing_delay(10_000), 15563);
    assert_eq!(lm.post_decode_overhead(), 777);
    assert_eq!(lm.output_token_overhead(), 46);
    assert_eq!(lm.name(), "trained-physics");
}

#[test]
fn trained_physics_rejects_what_it_cannot_model() {
    let nemo = ModelConfig::bundled("mistral-nemo-instruct-2407").unwrap();
    let comm = MoeCommBackend::AllGather;
    let err = |m: &ModelConfig, tp, dp| {
        TrainedPhysicsModel::new(m, &h100(), tp, dp, comm, ITER29_ALPHA, &ITER29_BETA)
            .unwrap_err()
            .to_string()
    };
    let e = err(&nemo, 3, 1);
    assert!(
        e.contains("32 attention heads are not divisible by tp = 3"),
        "{e}"
    );
    assert!(e.contains("8 KV heads are not divisible by tp = 3"), "{e}");
    let e = err(&nemo, 1, 2);
    assert!(e.contains("dp = 2 needs a mixture-of-experts model"), "{e}");
    let e = MoeCommBackend::parse("carrier-pigeon")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("carrier-pigeon") && e.contains("deepep_low_latency"),
        "{e}"
    );
    let bad = TrainedPhysicsModel::new(&nemo, &h100(), 1, 1, comm, [-1.0, 0.0, 0.0], &ITER29_BETA)
        .unwrap_err()
        .to_string();
    assert!(bad.contains("alpha[0] = -1"), "{bad}");
}

// ---- roofline at HEAD: §3.4 ---------------------------------------------------

#[test]
fn roofline_reproduces_the_worked_examples() {
    // (model, TP, [A, Bd, C, Dc]) truncated µs as the spec gives them.
    let table: [(&str, u32, [i64; 4]); 4] = [
        ("llama-2-7b-hf", 1, [11730, 4258, 12016, 24378]),
        ("llama-3.1-70b-instruct", 4, [28745, 7608, 29432, 56658]),
        (
            "llama-4-scout-17b-16e-instruct-fp8-dynamic",
            2,
            [5912, 3226, 6147, 11023],
        ),
        ("mistral-nemo-instruct-2407", 2, [9887, 2780, 10127, 20386]),
    ];
    let batches = [batch_a(), batch_bd(), batch_c(), batch_dc()];
    for (name, tp, want) in table {
        let m = RooflineModel::new(&ModelConfig::bundled(name).unwrap(), &h100(), tp, [0.0; 3])
            .unwrap();
        for (batch, want) in batches.iter().zip(want) {
            let us = m.step_us(&shape_of(batch));
            assert_eq!(us.trunc() as i64, want, "{name} TP {tp} {batch:?}");
            assert_eq!(m.step_time(&shape_of(batch)), us.round() as Tick);
        }
    }
    // The compute/memory figures of A (llama-2-7b: compute-bound; Scout at
    // the FP8 rate: memory-bound).
    let llama = RooflineModel::new(
        &ModelConfig::bundled("llama-2-7b-hf").unwrap(),
        &h100(),
        1,
        [0.0; 3],
    )
    .unwrap();
    close(
        llama.step_us(&shape_of(&batch_a())),
        11730.615933649991,
        "llama A",
    );
    close(
        llama.step_us(&shape_of(&batch_bd())),
        4258.7835988059705,
        "llama Bd",
    );
    assert_eq!(
        RooflineModel::new(
            &ModelConfig::bundled("llama-2-7b-hf").unwrap(),
            &h100(),
            1,
            [0.0; 3]
        )
        .unwrap()
        .step_time(&BatchShape::default()),
        1
    );
}

#[test]
fn roofline_moe_and_fp8_hand_computed() {
    // (model, GPU, TP, [C µs, X µs]).
    let cases = [
        (MIXTRAL, "H100", 2, [10509.592, 11207.538]),
        (DEEPSEEK_LITE, "H100", 1, [6799.79, 6404.498]),
        (LLAMA_FP8, "H100", 1, [6087.061, 6489.609]),
        (LLAMA_FP8, "A100-SXM", 1, [46164.735, 48855.763]),
        (LLAMA_FP8, "L40S", 2, [6006.391, 6216.507]),
    ];
    for (json, gpu, tp, want) in cases {
        let m = RooflineModel::new(
            &json_model(json),
            &GpuSpec::bundled(gpu).unwrap(),
            tp,
            [0.0; 3],
        )
        .unwrap();
        for (batch, w) in [batch_c(), batch_x()].iter().zip(want) {
            let got = m.step_us(&shape_of(batch));
            assert!((got - w).abs() < 1e-3, "{gpu} TP {tp}: got {got}, want {w}");
        }
    }
}

// ---- KV capacity at HEAD: §4.5 -------------------------------------------------

#[test]
fn kv_capacity_matches_the_reference_figures() {
    // The spec's worked values (H100, utilisation 0.9, block 16), and
    // hand-computed ones for the other bundled models.
    let cases: [(&str, u32, u64); 15] = [
        ("llama-2-7b-hf", 1, 6886),
        ("llama-3.1-70b-instruct", 4, 121801),
        ("llama-3.1-8b-instruct", 1, 26312),
        ("llama-3.1-8b-instruct", 2, 125278),
        ("llama-4-scout-17b-16e-instruct-fp8-dynamic", 2, 27345),
        ("mistral-nemo-instruct-2407", 1, 17512),
        ("qwen2.5-7b-instruct", 1, 61048),
        ("qwen2.5-7b-instruct", 2, 288159),
        ("yi-34b", 2, 40001),
        ("qwen2.5-1.5b-instruct", 1, 148567),
        ("qwen2.5-3b-instruct", 1, 110322),
        ("qwen3-14b", 1, 15909),
        ("qwen3-14b", 2, 89941),
        ("llama-2-7b-hf", 2, 31935),
        ("yi-34b", 1, 626),
    ];
    for (name, tp, want) in cases {
        let m = ModelConfig::bundled(name).unwrap();
        let got = derive_total_kv_blocks(&m, &h100(), tp, 1, 16, 0.9).unwrap();
        assert_eq!(got, want, "{name} TP {tp}");
    }
    // L40S (48 GiB) and MoE × DP.
    let q = ModelConfig::bundled("qwen3-14b").unwrap();
    assert_eq!(
        derive_total_kv_blocks(&q, &GpuSpec::bundled("L40S").unwrap(), 1, 1, 16, 0.9).unwrap(),
        4113
    );
    // Mixtral-8x7B TP 2: the spec's 48956, and 97912 at DP 2.
    let mixtral = json_model(MIXTRAL);
    assert_eq!(
        derive_total_kv_blocks(&mixtral, &h100(), 2, 1, 16, 0.9).unwrap(),
        48956
    );
    assert_eq!(
        derive_total_kv_blocks(&mixtral, &h100(), 2, 2, 16, 0.9).unwrap(),
        97912
    );
    // Too big: Llama-3.1-70B on one GPU.
    let big = ModelConfig::bundled("llama-3.1-70b-instruct").unwrap();
    let e = derive_total_kv_blocks(&big, &h100(), 1, 1, 16, 0.9)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("does not fit") && e.contains("at least TP"),
        "{e}"
    );
}

// ---- model configs: MoE and quantisation --------------------------------------

#[test]
fn moe_and_quantization_fields_are_read_from_any_config() {
    let m = json_model(DEEPSEEK_LITE);
    assert!(m.is_moe());
    assert_eq!(
        (m.num_experts, m.num_experts_per_tok, m.expert_ffn()),
        (64, 6, 1408)
    );
    assert_eq!(m.shared_expert_intermediate_size, 2816);
    assert_eq!(m.layer_split(), (27, 0));
    // The first expert-count key that is ≥ 2 wins; 1 expert is dense.
    let one = json_model(r#"{"num_local_experts":1,"num_experts":4,"num_experts_per_tok":1}"#);
    assert_eq!(one.num_experts, 4);
    let dense = json_model(r#"{"num_local_experts":1}"#);
    assert!(!dense.is_moe());

    let q = |qc: &str| {
        json_model(&format!(
            r#"{{"torch_dtype":"bfloat16","quantization_config":{qc}}}"#
        ))
        .weight_bytes_per_param()
    };
    assert_eq!(q(r#"{"bits":4}"#), 0.5);
    assert_eq!(q(r#"{"bits":"8","quant_method":"gptq"}"#), 1.0);
    assert_eq!(q(r#"{"quant_method":"FP8"}"#), 1.0);
    assert_eq!(
        q(
            r#"{"quant_method":"compressed-tensors","config_groups":{"b":{"weights":{"num_bits":8}},"a":{"weights":{"num_bits":4}}}}"#
        ),
        0.5
    );
    assert_eq!(q(r#"{"quant_method":"awq"}"#), 2.0);
    assert_eq!(
        json_model(r#"{"torch_dtype":"float32"}"#).weight_bytes_per_param(),
        4.0
    );
}

#[test]
fn a_moe_config_missing_a_required_field_names_it() {
    let no_topk = json_model(
        r#"{"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"intermediate_size":128,
            "num_local_experts":8,"torch_dtype":"bfloat16","vocab_size":10}"#,
    );
    let comm = MoeCommBackend::AllGather;
    let e = TrainedPhysicsModel::new(&no_topk, &h100(), 1, 1, comm, ITER29_ALPHA, &ITER29_BETA)
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs num_experts_per_tok"), "{e}");
    let e = RooflineModel::new(&no_topk, &h100(), 1, [0.0; 3])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs num_experts_per_tok"), "{e}");

    let no_count = json_model(
        r#"{"num_hidden_layers":2,"hidden_size":64,"num_attention_heads":4,"intermediate_size":128,
            "num_experts_per_tok":2,"torch_dtype":"bfloat16","vocab_size":10}"#,
    );
    let e = derive_total_kv_blocks(&no_count, &h100(), 1, 1, 16, 0.9)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no expert count") && e.contains("num_local_experts"),
        "{e}"
    );
}

#[test]
fn bundled_golden_models_and_gpus() {
    for name in [
        "llama-2-7b-hf",
        "llama-3.1-70b-instruct",
        "llama-4-scout-17b-16e-instruct-fp8-dynamic",
        "mistral-nemo-instruct-2407",
        "qwen2.5-7b-instruct",
        "yi-34b",
    ] {
        assert!(bundled_model_names().contains(&name), "{name}");
    }
    // By HuggingFace id, case-insensitively.
    let scout =
        ModelConfig::bundled("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic").unwrap();
    assert_eq!(
        (
            scout.num_layers,
            scout.num_experts,
            scout.interleave_moe_layer_step
        ),
        (48, 16, 1)
    );
    assert_eq!(bundled_gpu_names(), ["A100-80", "A100-SXM", "H100", "L40S"]);
    let l40s = GpuSpec::bundled("l40s").unwrap();
    assert_eq!(
        (
            l40s.tflops_peak,
            l40s.tflops_fp8,
            l40s.bw_peak_tbs,
            l40s.memory_gib
        ),
        (362.05, 1466.0, 0.864, 48.0)
    );
    assert_eq!((l40s.mfu_prefill, l40s.mfu_decode), (0.32, 0.08));
    let h = h100();
    assert_eq!(
        (
            h.tflops_peak,
            h.tflops_fp8,
            h.bw_peak_tbs,
            h.mfu_prefill,
            h.mfu_decode
        ),
        (989.5, 1979.0, 3.35, 0.45, 0.30)
    );
    let a = GpuSpec::bundled("A100-80").unwrap();
    assert_eq!(
        (
            a.tflops_peak,
            a.tflops_fp8,
            a.bw_peak_tbs,
            a.mfu_prefill,
            a.mfu_decode
        ),
        (312.0, 0.0, 2.039, 0.38, 0.18)
    );
}

#[test]
fn latency_model_names() {
    for (name, kind) in [
        ("trained-physics", LatencyKind::TrainedPhysics),
        ("roofline", LatencyKind::Roofline),
        ("Roofline-V1", LatencyKind::RooflineV1),
        ("linear", LatencyKind::Linear),
        ("blackbox", LatencyKind::Linear),
    ] {
        assert_eq!(name.parse::<LatencyKind>().unwrap(), kind);
    }
    assert_eq!(LatencyKind::default(), LatencyKind::TrainedPhysics);
    let e = "crossmodel".parse::<LatencyKind>().unwrap_err().to_string();
    assert!(
        e.contains("linear, roofline, roofline-v1, trained-physics"),
        "{e}"
    );
}

#[test]
fn build_trained_physics_and_roofline_from_a_setup() {
    let mut s = LatencySetup::new(LatencyKind::TrainedPhysics, "qwen2.5-7b-instruct");
    s.hardware = Some("H100".into());
    s.tp = Some(1); // the model's default hardware says TP 4
    let b = build_latency(&s).unwrap();
    assert!(matches!(b.model, LatencyModel::TrainedPhysics(_)));
    assert_eq!(
        (b.total_kv_blocks, b.kv_blocks_source),
        (61048, KvBlocksSource::Derived)
    );
    assert_eq!(b.model.alpha(), &ITER29_ALPHA);

    s.beta = Some(vec![0.0; 7]);
    assert!(build_latency(&s).unwrap_err().to_string().contains("all 0"));
    s.beta = Some(vec![1.0; 3]);
    assert!(build_latency(&s)
        .unwrap_err()
        .to_string()
        .contains("7 to 11"));
    s.beta = None;
    s.dp = Some(2);
    assert!(build_latency(&s)
        .unwrap_err()
        .to_string()
        .contains("mixture-of-experts"));

    let mut r = LatencySetup::new(LatencyKind::Roofline, "yi-34b");
    r.hardware = Some("H100".into());
    r.tp = Some(2);
    let b = build_latency(&r).unwrap();
    assert!(matches!(b.model, LatencyModel::Roofline(_)));
    assert_eq!(b.total_kv_blocks, 40001);
    assert_eq!(b.model.alpha(), &[0.0; 3]);
    r.beta = Some(vec![1.0; 7]);
    assert!(matches!(build_latency(&r), Err(LatencyError::BetaNotUsed)));
    r.beta = None;
    r.dp = Some(2);
    assert!(build_latency(&r)
        .unwrap_err()
        .to_string()
        .contains("trained-physics only"));
    r.dp = None;
    r.moe_expert_load = Some("touched".into());
    let e = build_latency(&r).unwrap_err().to_string();
    assert!(
        e.contains("moe_expert_load is used by trained-physics only"),
        "{e}"
    );
    r.moe_expert_load = None;
    r.geometry = Some("full".into());
    let e = build_latency(&r).unwrap_err().to_string();
    assert!(
        e.contains("geometry is used by trained-physics only"),
        "{e}"
    );
    r.geometry = None;

    s.dp = None;
    s.model = "llama-4-scout-17b-16e-instruct-fp8-dynamic".into();
    s.tp = Some(2);
    s.moe_expert_load = Some("touched".into());
    assert!(build_latency(&s).is_ok());
    s.moe_expert_load = Some("lazy".into());
    let e = build_latency(&s).unwrap_err().to_string();
    assert!(e.contains("unknown moe_expert_load 'lazy'"), "{e}");
    s.moe_expert_load = None;
    s.geometry = Some("full".into());
    assert!(build_latency(&s).is_ok());
    s.geometry = Some("exact".into());
    let e = build_latency(&s).unwrap_err().to_string();
    assert!(e.contains("unknown geometry 'exact'"), "{e}");
}

#[test]
fn prefill_attention_sum_is_exact() {
    let mut p = PhaseSums::default();
    p.add_prefill(256, 256, 1024);
    p.add_prefill(0, 300, 300);
    // Σ T·(2·In + T) = 256·2304 + 300·900.
    assert_eq!(p.prompt_attention2, 256 * 2304 + 300 * 900);
    assert_eq!((p.requests, p.new_tokens, p.context_tokens), (2, 556, 256));
}

/// `[lora]` reserves `adapter_capacity × footprint_bytes_per_rank × max
/// rank` of HBM: 4 slots × 4096000 B × rank 16 = 262144000 B, exactly 100
/// KV blocks of qwen3-14b at TP 1 (16 tokens × 163840 B = 2621440 B per
/// block), so the derived 15909 blocks become 15809.
#[test]
fn lora_reservation_reduces_derived_kv_blocks_exactly() {
    let lora: crate::config::LoraSection = toml::from_str(
        r#"
        adapter_capacity = 4
        footprint_bytes_per_rank = 4096000
        adapters = [{ id = "a", rank = 8 }, { id = "b", rank = 16 }]
        "#,
    )
    .unwrap();
    let reserved = lora.reserved_bytes("qwen3-14b");
    assert_eq!(reserved, 262_144_000);
    let q = ModelConfig::bundled("qwen3-14b").unwrap();
    assert_eq!(kv_bytes_per_token_at_tp(&q, 1) * 16.0, 2_621_440.0);
    let plain = derive_total_kv_blocks(&q, &h100(), 1, 1, 16, 0.9).unwrap();
    let with = derive_total_kv_blocks_reserving(&q, &h100(), 1, 1, 16, 0.9, reserved).unwrap();
    assert_eq!(plain, 15909);
    assert_eq!(with, 15809);
    // Through the latency setup (roofline: no calibrated KV count).
    let mut ls = LatencySetup::new(LatencyKind::Roofline, "qwen3-14b");
    ls.hardware = Some("H100".into());
    ls.tp = Some(1);
    let base = build_latency(&ls).unwrap();
    ls.adapter_reserved_bytes = reserved;
    let reserving = build_latency(&ls).unwrap();
    assert_eq!(base.kv_blocks_source, KvBlocksSource::Derived);
    assert_eq!(base.total_kv_blocks, plain);
    assert_eq!(reserving.total_kv_blocks, 15809);
}
