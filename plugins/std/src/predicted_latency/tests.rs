//! Unit tests of the predicted-latency policies: llm-d's bucket and tier
//! scores by hand, the composite fallback, the affinity filter, the
//! predictor learning a known law, and parameter checks.

use super::*;
use crate::testutil::{cluster, request, snap};
use blis_plugin_api::abi_stable::std_types::RVec;
use blis_plugin_api::{EventKind, InstanceSnapshot};

fn pred(ttft_headroom: f64, tpot_headroom: f64) -> Option<Prediction> {
    Some(Prediction {
        ttft_ms: 0.0,
        tpot_ms: 0.0,
        ttft_headroom,
        tpot_headroom,
    })
}

fn assert_close(got: Vec<f64>, want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-9, "{got:?} vs {want:?}");
    }
}

/// §5.2 step 4 by hand. Non-streaming: TPOT headroom 0 everywhere, a flat
/// range, so its weight moves to TTFT. |TTFT headroom| 100, 300, 200 →
/// normalised 0, 1, 0.5. least: (⌊(1 − c)·100⌋ + 1)/100 = 1.01 → 1, 0.01,
/// 0.51; most: 0.01, 1, 0.51.
#[test]
fn bucket_scores_by_hand() {
    let preds = [pred(100.0, 0.0), pred(300.0, 0.0), pred(200.0, 0.0)];
    let idle = [false; 3];
    assert_close(rank(&preds, &idle, (0.8, 0.2), false), &[1.0, 0.01, 0.51]);
    assert_close(rank(&preds, &idle, (0.8, 0.2), true), &[0.01, 1.0, 0.51]);
    // Both dimensions vary: TTFT 100/300 → 0/1, TPOT 10/30/20 → 0/1/0.5;
    // c = 0.8·nT + 0.2·nP = 0, 1, 0.8·0 + 0.2·0.5 = 0.1 for (100, 20).
    let preds = [pred(100.0, 10.0), pred(300.0, 30.0), pred(100.0, 20.0)];
    assert_close(rank(&preds, &idle, (0.8, 0.2), false), &[1.0, 0.01, 0.91]);
}

/// §5.2 steps 2–3: the positive tier alone is scored; with none, the idle
/// candidates, else the least negative tier, always by `least`.
#[test]
fn tiers_by_hand() {
    // Candidate 1 misses its TTFT SLO: 0; the other two share the bucket.
    let preds = [pred(100.0, 0.0), pred(-50.0, 0.0), pred(300.0, 0.0)];
    assert_eq!(
        rank(&preds, &[false; 3], (1.0, 0.0), false),
        vec![1.0, 0.0, 0.01]
    );
    // All negative: the idle one (candidate 2) alone, flat → 0.5 → 0.51.
    let preds = [pred(-100.0, 0.0), pred(-50.0, 0.0), pred(-300.0, 0.0)];
    assert_eq!(
        rank(&preds, &[false, false, true], (1.0, 0.0), true),
        vec![0.0, 0.0, 0.51]
    );
    // None idle: the TTFT-only-negative tier, least strategy even when
    // `most` is configured: |−50| is the least headroom → 1.
    // |headroom| 100, 50, 300 → 0.2, 0, 1 → 0.81, 1, 0.01.
    assert_close(
        rank(&preds, &[false; 3], (1.0, 0.0), true),
        &[0.81, 1.0, 0.01],
    );
    // Only-TPOT-negative comes before only-TTFT-negative.
    let preds = [pred(-10.0, 5.0), pred(10.0, -5.0)];
    assert_eq!(
        rank(&preds, &[false; 2], (1.0, 0.0), false),
        vec![0.0, 0.51]
    );
}

/// Before the first fit the scorer falls back to llm-d's composite: weights
/// 1/3 each, kv 0.2 / 0.5, waiting 0 / 4 (max 4), no prefix held:
/// (0.8 + 1 + 0)/3 = 0.6 and (0.5 + 0 + 0)/3 = 0.1667 → 0.17.
#[test]
fn composite_before_any_prediction() {
    let mut s = Latency::create(Params::new(""), 1).unwrap();
    let snaps = [snap(0, 0, 0, 0.2), snap(4, 0, 0, 0.5)];
    let cands = [0u32, 1];
    let state = ClusterState {
        view: cluster(0, &snaps),
        candidates: cands.as_slice().into(),
        info: Default::default(),
        prefix_blocks: Default::default(),
    };
    let mut out = RVec::new();
    s.score_candidates(&request(0, 64, &[1, 2, 3, 4]), &state, &mut out);
    assert_eq!(out.to_vec(), vec![0.6, 0.17]);
}

/// The predictor learns TTFT (E2E, non-streaming) = 20 + 30·waiting ms from
/// dispatch, refits every interval, and until `min_samples` predicts nothing.
#[test]
fn the_predictor_learns_the_latency_of_the_waiting_queue() {
    let params: PredictorParams = Params::new("min_samples = 50\nretrain_interval_us = 1")
        .parse()
        .unwrap();
    let mut p = Predictor::new(Some(params)).unwrap();
    let mut now = 0i64;
    for id in 0..200u64 {
        let q = (id % 5) as u32;
        let snaps = [snap(q, 0, 0, 0.1 * f64::from(q % 3))];
        let view = cluster(now, &snaps);
        let req = request(id, 100 + (id % 7) as u32 * 10, &[]);
        if id == 10 {
            p.prepare(&req, 1);
            assert!(p.predict(&req, &view, 0, (0.0, 0.0)).is_none());
        }
        p.dispatched(&req, &view, 0);
        let ms = 20.0 + 30.0 * f64::from(q);
        let done = now + (ms * 1e3) as i64;
        let event = |kind: EventKind, t: i64| RequestEvent {
            kind,
            instance: 0,
            time_us: t,
            request: req,
            ttft_us: -1,
            e2e_us: -1,
            output_tokens: 10,
            reserved: 0,
        };
        p.on_event(&event(EventKind::FIRST_TOKEN, now + 1000));
        p.on_event(&event(EventKind::COMPLETED, done));
        now += 1_000;
    }
    assert_eq!(p.in_flight(0), (0, 0), "every count is released");
    for q in 0..5u32 {
        let snaps: [InstanceSnapshot; 1] = [snap(q, 0, 0, 0.1 * f64::from(q % 3))];
        let req = request(999, 120, &[]);
        p.prepare(&req, 1);
        let got = p
            .predict(&req, &cluster(now, &snaps), 0, (200.0, 0.0))
            .unwrap();
        let want = 20.0 + 30.0 * f64::from(q);
        assert!((got.ttft_ms - want).abs() < 1.0, "q {q}: {got:?} vs {want}");
        assert!((got.ttft_headroom - (200.0 - got.ttft_ms)).abs() < 1e-9);
        assert_eq!(got.tpot_headroom, 0.0, "non-streaming: TPOT headroom 0");
    }
}

#[test]
fn bad_params_are_refused() {
    for (p, want) in [
        ("strategy = \"fast\"", "strategy"),
        ("ttft_weight = -1", "ttft_weight"),
        ("predictor = { window = 5 }", "window"),
        ("predictor = { slo_buffer = 0 }", "slo_buffer"),
        ("predictor = { nope = 1 }", "nope"),
    ] {
        let e = Latency::create(Params::new(p), 0).err().unwrap();
        assert!(e.contains(want), "{p}: {e}");
    }
    let e = PrefixCacheAffinity::create(Params::new("ttft_source = \"x\""), 0)
        .err()
        .unwrap();
    assert!(e.contains("ttft_source"), "{e}");
    let e = SloHeadroomTier::create(Params::new("epsilon_explore_neg = 2"), 0)
        .err()
        .unwrap();
    assert!(e.contains("epsilon_explore_neg"), "{e}");
}

#[test]
fn params_docs_list_every_key() {
    use blis_plugin_api::check_params_doc;
    check_params_doc::<LatencyParams>(Latency::PARAMS_DOC).unwrap();
    check_params_doc::<TierParams>(SloHeadroomTier::PARAMS_DOC).unwrap();
    check_params_doc::<AdmitterParams>(LatencySlo::PARAMS_DOC).unwrap();
    check_params_doc::<AffinityParams>(PrefixCacheAffinity::PARAMS_DOC).unwrap();
}

/// §5.4 with the prefill-throughput TTFT: sticky = prefix ratio ≥ 0.8. The
/// index learns request 0's four blocks on instance 1; request 1 shares
/// them all (ratio 1 on instance 1, 0 elsewhere) → only instance 1 kept.
/// With a penalty of 1 ms and 16,000 tokens in flight on instance 1 (about
/// 1,004 ms at 15,928 tok/s) against none elsewhere, every candidate is kept.
#[test]
fn affinity_filter_by_hand() {
    let snaps = [snap(0, 0, 0, 0.0); 3];
    let view = cluster(0, &snaps);
    let cands = [0u32, 1, 2];
    let state = ClusterState {
        view,
        candidates: cands.as_slice().into(),
        info: Default::default(),
        prefix_blocks: Default::default(),
    };
    let hashes = [11u64, 12, 13, 14];
    let run = |params: &str, prompt: u32| {
        let mut f = PrefixCacheAffinity::create(Params::new(params), 3).unwrap();
        f.observe(&request(0, prompt, &hashes), &view, 1);
        let mut keep = RVec::new();
        f.filter(&request(1, 64, &hashes), &state, &mut keep);
        keep.to_vec()
    };
    assert_eq!(run("", 64), vec![1]);
    assert_eq!(run("max_ttft_penalty_ms = 1", 16_000 + 64), vec![0, 1, 2]);
    assert_eq!(
        run("max_ttft_penalty_ms = 0", 16_000 + 64),
        vec![1],
        "0 = always stick"
    );
    assert_eq!(run("affinity_threshold = 0", 64), vec![0, 1, 2]);
}
