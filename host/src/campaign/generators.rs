//! One generator per run-file concern; [`scenario`] merges their fragments
//! into a complete run file. A new feature adds a generator to
//! [`generators`] (a strategy yielding the keys it sets).

use proptest::prelude::*;
use toml::{Table, Value};

/// A generated run: the run file as a TOML table, and the CSV trace it
/// replays, if any (written next to it as `trace.csv`).
#[derive(Clone, Debug)]
pub struct Scenario {
    pub table: Table,
    pub trace_csv: Option<String>,
    /// A TraceV2 workload's header (written next to it as `trace.yaml`;
    /// its data is `trace_csv`).
    pub trace_yaml: Option<String>,
}

/// What one generator contributes: keys (merged into the run table) and,
/// for a trace workload, the trace file's text.
#[derive(Clone, Debug, Default)]
pub struct Fragment {
    pub table: Table,
    pub trace_csv: Option<String>,
    pub trace_yaml: Option<String>,
}

/// The generators, one per concern; with `wasm_dir` (the components
/// `examples/wasm/build.sh --tests` built) every run without pools takes
/// its admission and routing from a WebAssembly component.
pub fn generators(wasm_dir: Option<String>) -> Vec<BoxedStrategy<Fragment>> {
    vec![
        seed().boxed(),
        model().boxed(),
        instance().boxed(),
        workload().boxed(),
        admission().boxed(),
        routing().boxed(),
        horizon().boxed(),
        flow_control().boxed(),
        tenants().boxed(),
        lora().boxed(),
        epp_config().boxed(),
        wasm(wasm_dir).boxed(),
        // P/D pools and the control plane are exclusive, and so are P/D
        // and serve pools (several models); serve pools go with the control
        // plane without node pools (each pool scaled on its own): a run
        // gets one of these at most.
        prop_oneof![
            control(),
            pd(),
            serve(),
            (serve(), control()).prop_map(|(mut s, c)| {
                if s.table.contains_key("pools") {
                    let mut c = c.table;
                    c.remove("node_pools");
                    merge(&mut s.table, c);
                }
                s
            }),
        ]
        .boxed(),
    ]
}

/// A complete run: every generator's fragment merged, outputs switched on
/// (the checks read the results file and the trace); WebAssembly policies
/// from the components in `wasm_dir`, if given.
pub fn scenario(wasm_dir: Option<String>) -> impl Strategy<Value = Scenario> {
    generators(wasm_dir).prop_map(|fragments| {
        let mut table = Table::new();
        let (mut trace_csv, mut trace_yaml) = (None, None);
        for f in fragments {
            merge(&mut table, f.table);
            trace_csv = trace_csv.or(f.trace_csv);
            trace_yaml = trace_yaml.or(f.trace_yaml);
        }
        if let Some(Value::String(path)) = section(&mut table, "routing").remove(EPP_PICK) {
            apply_epp_config(&mut table, path);
        }
        if let Some(Value::Table(pick)) = section(&mut table, "routing").remove(WASM_PICK) {
            apply_wasm(&mut table, pick);
        }
        let picks = table.remove(LORA_PICKS);
        if let Some(Value::Array(models)) = table.remove(MODEL_PICKS) {
            apply_model_picks(&mut table, &models);
        }
        if let (Some(Value::Array(picks)), true) = (picks, table.contains_key("lora")) {
            apply_lora_picks(&mut table, &picks);
        }
        if table.contains_key("pools") {
            // The pools are the cluster.
            section(&mut table, "instance").remove("count");
            // In-flight eviction is not supported with pools.
            if let Some(Value::Table(fc)) = table.get_mut("flow_control") {
                fc.remove("in_flight_eviction");
            }
        }
        let out = section(&mut table, "output");
        out.insert("results_path".into(), "results.jsonl".into());
        out.insert("trace_path".into(), "trace.jsonl".into());
        out.insert("counterfactual_k".into(), Value::Integer(64));
        Scenario {
            table,
            trace_csv,
            trace_yaml,
        }
    })
}

/// Deep-merge `from` into `into` (tables merge, other values replace).
fn merge(into: &mut Table, from: Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(Value::Table(a)), Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

/// The table `name` of `t`, created if absent.
fn section<'a>(t: &'a mut Table, name: &str) -> &'a mut Table {
    match t
        .entry(name.to_string())
        .or_insert_with(|| Value::Table(Table::new()))
    {
        Value::Table(s) => s,
        _ => unreachable!("generators only put tables at section names"),
    }
}

/// A fragment with the table `name` holding `keys`.
fn fragment(name: &str, keys: Table) -> Fragment {
    let mut table = Table::new();
    table.insert(name.into(), Value::Table(keys));
    Fragment {
        table,
        trace_csv: None,
        trace_yaml: None,
    }
}

fn int(v: impl Into<i64>) -> Value {
    Value::Integer(v.into())
}

/// Any u64 seed (above i64::MAX the run file holds it as a string).
fn seed() -> impl Strategy<Value = Fragment> {
    any::<u64>().prop_map(|s| {
        let mut table = Table::new();
        table.insert("seed".into(), crate::config::seed::to_value(s));
        Fragment {
            table,
            trace_csv: None,
            trace_yaml: None,
        }
    })
}

/// The linear model with random small coefficients, or the roofline model
/// of a bundled model (with a random α).
fn model() -> impl Strategy<Value = Fragment> {
    let alpha = (
        0.0f64..500.0,
        0.0f64..2.0,
        prop_oneof![Just(0.0f64), 0.0f64..200.0],
    );
    prop_oneof![
        3 => (alpha.clone(), 1.0f64..5000.0, 0.0f64..30.0, 0.0f64..50.0).prop_map(|((a0, a1, a2), b0, b1, b2)| {
            let mut m = Table::new();
            m.insert("latency_model".into(), "linear".into());
            m.insert("alpha".into(), Value::Array(vec![a0.into(), a1.into(), a2.into()]));
            m.insert("beta".into(), Value::Array(vec![b0.into(), b1.into(), b2.into()]));
            fragment("model", m)
        }),
        1 => (alpha, prop::sample::select(vec![1u32, 2])).prop_map(|((a0, a1, a2), tp)| {
            let mut m = Table::new();
            m.insert("name".into(), "qwen3-14b".into());
            m.insert("hardware".into(), "H100".into());
            m.insert("tp".into(), int(tp));
            m.insert("latency_model".into(), "roofline".into());
            m.insert("alpha".into(), Value::Array(vec![a0.into(), a1.into(), a2.into()]));
            fragment("model", m)
        }),
    ]
}

/// Cluster size, batching, chunked prefill, schedulers, preemption, KV
/// pressure (tiny caches preempt and drop), context limits.
fn instance() -> impl Strategy<Value = Fragment> {
    (
        1u32..6,
        prop::sample::select(vec![1u32, 2, 4, 16, 32]),
        prop_oneof![2 => 4u64..40, 2 => 40u64..400, 1 => Just(1_000_000u64)],
        1u32..12,
        prop::sample::select(vec![8u32, 64, 256, 2048]),
        prop::sample::select(vec![0u32, 0, 16, 128]),
        prop::sample::select(vec!["fcfs", "priority-fcfs", "sjf", "reverse-priority"]),
        prop::sample::select(vec!["fcfs", "priority"]),
        prop::option::weighted(0.25, 16u32..2000),
    )
        .prop_map(
            |(count, block, blocks, seqs, budget, threshold, sched, preempt, mml)| {
                let mut t = Table::new();
                t.insert("count".into(), int(count));
                t.insert("block_size".into(), int(block));
                t.insert("total_kv_blocks".into(), int(blocks as i64));
                t.insert("max_num_seqs".into(), int(seqs));
                t.insert("max_num_batched_tokens".into(), int(budget));
                t.insert("long_prefill_token_threshold".into(), int(threshold));
                t.insert("scheduler".into(), sched.into());
                t.insert("preemption".into(), preempt.into());
                if let Some(m) = mml {
                    t.insert("max_model_len".into(), int(m));
                }
                fragment("instance", t)
            },
        )
}

fn arrival() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(("poisson", None::<f64>)),
        Just(("constant", None)),
        (0.2f64..4.0).prop_map(|cv| ("gamma", Some(cv))),
        (0.3f64..3.0).prop_map(|cv| ("weibull", Some(cv))),
    ]
    .prop_map(|(process, cv)| {
        let mut t = Table::new();
        t.insert("process".into(), process.into());
        if let Some(cv) = cv {
            t.insert("cv".into(), cv.into());
        }
        Value::Table(t)
    })
}

fn length_dist() -> impl Strategy<Value = Value> {
    prop_oneof![
        (1u32..300, 0u32..200, 1u32..50, 0u32..600).prop_map(|(mean, sd, min, extra)| {
            let mut t = Table::new();
            t.insert("type".into(), "gaussian".into());
            let (min, max) = (min.min(mean), mean.max(min) + extra);
            t.insert("mean".into(), f64::from(mean).into());
            t.insert("std_dev".into(), f64::from(sd).into());
            t.insert("min".into(), int(min));
            t.insert("max".into(), int(max));
            Value::Table(t)
        }),
        (1.0f64..200.0).prop_map(|mean| {
            let mut t = Table::new();
            t.insert("type".into(), "exponential".into());
            t.insert("mean".into(), mean.into());
            Value::Table(t)
        }),
        (1u32..400).prop_map(|v| {
            let mut t = Table::new();
            t.insert("type".into(), "constant".into());
            t.insert("value".into(), int(v));
            Value::Table(t)
        }),
    ]
}

/// One client of a multi-client workload: prefix group, session, class,
/// tenant, activity windows.
fn client() -> impl Strategy<Value = Value> {
    (
        0.1f64..1.0,
        arrival(),
        length_dist(),
        length_dist(),
        prop::option::weighted(0.6, prop::sample::select(vec![1u32, 16, 33, 100, 300])),
        prop::option::weighted(0.5, (1u32..5, 0u64..200_000, prop::bool::weighted(0.7))),
        prop::sample::select(vec![
            "critical",
            "standard",
            "sheddable",
            "batch",
            "background",
        ]),
        0usize..3,
        prop::option::weighted(0.15, (0u64..2_000_000, 1u64..5_000_000)),
    )
        .prop_map(
            |(frac, arr, input, output, prefix, session, class, tenant, window)| {
                let mut c = Table::new();
                c.insert("rate_fraction".into(), frac.into());
                c.insert("arrival".into(), arr);
                c.insert("input".into(), input);
                c.insert("output".into(), output);
                if let Some(len) = prefix {
                    // One prefix length per group: the name says which.
                    c.insert("prefix_group".into(), format!("prefix-{len}").into());
                    c.insert("prefix_length".into(), int(len));
                }
                if let Some((rounds, think, accumulate)) = session {
                    let mut s = Table::new();
                    s.insert("max_rounds".into(), int(rounds));
                    s.insert("think_time_us".into(), int(think as i64));
                    s.insert(
                        "context_growth".into(),
                        if accumulate { "accumulate" } else { "none" }.into(),
                    );
                    c.insert("session".into(), Value::Table(s));
                }
                c.insert("slo_class".into(), class.into());
                c.insert("tenant_id".into(), format!("tenant-{tenant}").into());
                if let Some((start, len)) = window {
                    let mut w = Table::new();
                    w.insert("start_us".into(), int(start as i64));
                    w.insert("end_us".into(), int((start + len) as i64));
                    c.insert("windows".into(), Value::Array(vec![Value::Table(w)]));
                }
                Value::Table(c)
            },
        )
}

/// A CSV trace: rows with gaps, prefix groups, classes, tenants, sessions.
fn trace_rows() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            0i64..50_000,
            1u32..600,
            1u32..200,
            prop::option::weighted(0.5, (0usize..2, 1u32..200)),
            prop::sample::select(vec!["critical", "standard", "batch", ""]),
            prop::option::weighted(0.3, 0usize..3),
        ),
        1..40,
    )
    .prop_map(|rows| {
        let mut s = String::from(
            "arrival_us,input_tokens,output_tokens,prefix_group,prefix_length,slo_class,tenant_id,session_id\n",
        );
        let mut t = 0;
        for (gap, input, output, prefix, class, session) in rows {
            t += gap;
            let (g, l) = prefix
                .map(|(g, l)| (format!("p{g}"), l.min(input).to_string()))
                .unwrap_or_default();
            let sess = session.map(|x| format!("s{x}")).unwrap_or_default();
            s.push_str(&format!("{t},{input},{output},{g},{l},{class},t{},{sess}\n", input % 2));
        }
        s
    })
}

/// A TraceV2 trace (header YAML and data CSV) replayed as the workload:
/// the 27 positional columns, sometimes the optional `vllm_priority` column
/// (which shifts every later one) and the trailing `think_time_us`;
/// sessions whose rounds are 0, 1, 2, … (replayed fixed or closed-loop,
/// with or without `session_context_growth: accumulate`), prefix groups,
/// classes, tenants, deadlines, and rows that are not sessions.
fn trace_v2() -> impl Strategy<Value = Fragment> {
    let row = (
        0i64..40_000,
        1u32..400,
        1u32..150,
        prop::option::weighted(0.4, (0usize..2, 1u32..200)),
        prop::sample::select(vec!["critical", "standard", "batch", "sheddable", ""]),
        prop::option::weighted(0.4, (0usize..4, 1usize..4)),
        prop::option::weighted(0.15, 1i64..400_000),
        0i64..3,
        0i64..300_000,
    );
    (
        prop::collection::vec(row, 1..40),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(rows, closed_loop, accumulate, priority, think)| {
            let mut csv = String::from("request_id,client_id,tenant_id,slo_class,");
            if priority {
                csv.push_str("vllm_priority,");
            }
            csv.push_str(
                "session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,\
                 output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,\
                 model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,\
                 first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,\
                 finish_reason",
            );
            if think {
                csv.push_str(",think_time_us");
            }
            csv.push('\n');
            let mut t = 0i64;
            // The next round of each session (rounds are 0, 1, 2, … in
            // file order, so closed-loop replay accepts them).
            let mut rounds = [0u32; 4];
            for (k, (gap, input, output, prefix, class, session, deadline, prio, think_us)) in
                rows.into_iter().enumerate()
            {
                t += gap;
                let (group, plen) = prefix
                    .map(|(g, l)| (format!("p{g}"), l))
                    .unwrap_or_default();
                let (sid, round) = match session {
                    Some((s, _)) => {
                        let r = rounds[s];
                        rounds[s] += 1;
                        (format!("s{s}"), r)
                    }
                    None => (String::new(), 0),
                };
                let deadline = deadline.map_or(0, |d| t + d);
                let mut line = format!("{k},c{},t{},{class},", input % 3, input % 2);
                if priority {
                    line.push_str(&format!("{prio},"));
                }
                line.push_str(&format!(
                    "{sid},{round},{group},{plen},false,{input},{output},{input},0,0,0,0,,\
                     {deadline},0,{t},{t},0,0,0,ok,,"
                ));
                if think {
                    line.push_str(&format!(",{think_us}"));
                }
                line.push('\n');
                csv.push_str(&line);
            }
            let mut yaml = String::from(
                "trace_version: 2\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\n",
            );
            if accumulate {
                yaml.push_str("session_context_growth: accumulate\n");
            }
            let mut spec = Table::new();
            spec.insert("header".into(), "trace.yaml".into());
            spec.insert("data".into(), "trace.csv".into());
            spec.insert(
                "session_mode".into(),
                if closed_loop { "closed-loop" } else { "fixed" }.into(),
            );
            let mut w = Table::new();
            w.insert("trace_v2".into(), Value::Table(spec));
            let mut f = fragment("workload", w);
            f.trace_csv = Some(csv);
            f.trace_yaml = Some(yaml);
            f
        })
}

/// The workload: distribution mode, a preset, clients, or a trace; a few to
/// a hundred requests, any rate.
fn workload() -> impl Strategy<Value = Fragment> {
    let rate = prop_oneof![0.5f64..20.0, 20.0f64..2000.0];
    let n = 1u64..80;
    prop_oneof![
        3 => (rate.clone(), n.clone(), prop::sample::select(vec![0u32, 0, 16, 100]), arrival(), (1u32..400, 0u32..300, 1u32..300, 0u32..200))
            .prop_map(|(rate, n, prefix, arr, (pm, ps, om, os))| {
                    let mut w = Table::new();
                    w.insert("aggregate_rate".into(), rate.into());
                    w.insert("num_requests".into(), int(n as i64));
                    w.insert("prompt_tokens".into(), int(pm));
                    w.insert("prompt_tokens_stdev".into(), int(ps));
                    w.insert("prompt_tokens_min".into(), int(1));
                    w.insert("prompt_tokens_max".into(), int(pm * 3));
                    w.insert("output_tokens".into(), int(om));
                    w.insert("output_tokens_stdev".into(), int(os));
                    w.insert("output_tokens_min".into(), int(1));
                    w.insert("output_tokens_max".into(), int(om * 3));
                    w.insert("prefix_tokens".into(), int(prefix));
                    w.insert("arrival".into(), arr);
                    fragment("workload", w)
            }),
        1 => (rate.clone(), 1u64..25, prop::sample::select(vec!["chatbot", "contentgen", "summarization", "multidoc"]))
            .prop_map(|(rate, n, preset)| {
                let mut w = Table::new();
                w.insert("aggregate_rate".into(), rate.into());
                w.insert("num_requests".into(), int(n as i64));
                w.insert("preset".into(), preset.into());
                fragment("workload", w)
            }),
        3 => (rate, n, prop::collection::vec(client(), 1..4)).prop_map(|(rate, n, clients)| {
            let mut w = Table::new();
            w.insert("aggregate_rate".into(), rate.into());
            w.insert("num_requests".into(), int(n as i64));
            let clients = clients
                .into_iter()
                .enumerate()
                .map(|(i, mut c)| {
                    if let Value::Table(t) = &mut c {
                        t.insert("id".into(), format!("client-{i}").into());
                    }
                    c
                })
                .collect();
            w.insert("clients".into(), Value::Array(clients));
            fragment("workload", w)
        }),
        1 => trace_v2(),
        1 => trace_rows().prop_map(|csv| {
            let mut w = Table::new();
            w.insert("trace".into(), "trace.csv".into());
            let mut f = fragment("workload", w);
            f.trace_csv = Some(csv);
            f
        }),
    ]
}

/// The llm-d Router's own EndpointPickerConfig files
/// (`tests/data/llm-d-router-configs`) as the routing of a sixth of the
/// runs: the ones that need no prefill/decode or encode pools, read by
/// `[routing] epp_config` in place of the routing, admission and flow
/// control the other generators drew.
fn epp_config() -> impl Strategy<Value = Fragment> {
    prop_oneof![
        5 => Just(Fragment::default()),
        1 => prop::sample::select(EPP_CONFIGS.to_vec()).prop_map(|file| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/data/llm-d-router-configs")
                .join(file);
            let mut r = Table::new();
            r.insert(EPP_PICK.into(), path.display().to_string().into());
            fragment("routing", r)
        }),
    ]
}

/// Where [`epp_config`] leaves the file it drew for [`scenario`].
const EPP_PICK: &str = "__epp_config";

/// The shipped configurations that run on a plain cluster (no
/// prefill/decode or encode pools, and not refused by llm-d's own loader).
const EPP_CONFIGS: &[&str] = &[
    "epp-config.yaml",
    "epp-burst-prefix-cache-config.yaml",
    "epp-estimate-prefix-cache-config.yaml",
    "epp-precise-prefix-cache-config.yaml",
    "probabilistic-admitter-epp-config.yaml",
    "sim-epp-config.yaml",
    "sim-epp-gpu-config.yaml",
    "sim-epp-kvcache-config.yaml",
    "sim-epp-no-hit-lru.yaml",
    "sim-epp-tokenizer-vllm-http-config.yaml",
    "sim-program-aware-config.yaml",
    "soft-reflective-ceiling-epp-config.yaml",
];

/// Route by the llm-d file at `path`: it replaces the drawn routing,
/// admission and flow control (not in runs with pools, which the drawn
/// configurations do not describe).
fn apply_epp_config(table: &mut Table, path: String) {
    if table.contains_key("pools") {
        return;
    }
    table.remove("admission");
    table.remove("flow_control");
    let mut routing = Table::new();
    routing.insert("epp_config".into(), path.into());
    table.insert("routing".into(), Value::Table(routing));
}

/// Where [`wasm`] leaves its choices for [`scenario`].
const WASM_PICK: &str = "__wasm";

/// The component the WebAssembly campaign loads (`examples/wasm/rust`).
const WASM_LIB: &str = "wasm-example";

/// WebAssembly policies from the components in `dir`, if given (the
/// campaign with WebAssembly policies, when `BLIS_TEST_WASM_DIR` names
/// what `examples/wasm/build.sh --tests` built): the admission and routing
/// come from the Rust example component — its token bucket or none, then
/// its least-loaded router or a profile of its low-queue filter and its
/// scorers (prefix-affinity, queue-depth, kv-utilization, lora-affinity).
/// (Not the Python one: instantiating its 19 MB image for every policy of
/// every run costs seconds in a debug build; the integration tests run it.)
fn wasm(dir: Option<String>) -> impl Strategy<Value = Fragment> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec((0usize..4, 0.1f64..5.0), 1..4),
        0i64..8,
    )
        .prop_map(move |(router, admission, scorers, threshold)| {
            let Some(dir) = dir.as_ref() else {
                return Fragment::default();
            };
            let lib = WASM_LIB;
            let mut pick = Table::new();
            pick.insert(
                "path".into(),
                std::path::Path::new(dir)
                    .join(format!("{lib}.wasm"))
                    .display()
                    .to_string()
                    .into(),
            );
            pick.insert("router".into(), router.into());
            pick.insert("admission".into(), admission.into());
            pick.insert("threshold".into(), int(threshold));
            let names = [
                "prefix-affinity",
                "queue-depth",
                "kv-utilization",
                "lora-affinity",
            ];
            let list = scorers
                .into_iter()
                .map(|(k, w)| {
                    let mut t = Table::new();
                    t.insert("name".into(), format!("{lib}::{}", names[k]).into());
                    t.insert("weight".into(), w.into());
                    Value::Table(t)
                })
                .collect();
            pick.insert("scorers".into(), Value::Array(list));
            let mut r = Table::new();
            r.insert(WASM_PICK.into(), Value::Table(pick));
            fragment("routing", r)
        })
}

/// Route (and maybe admit) with the component [`wasm`] drew: it replaces
/// the drawn routing and admission (not in runs with pools or an llm-d
/// file, whose stages name standard policies the component also offers).
fn apply_wasm(table: &mut Table, pick: Table) {
    if table.contains_key("pools")
        || table
            .get("routing")
            .is_some_and(|r| r.get("epp_config").is_some())
    {
        return;
    }
    let lib = WASM_LIB;
    let mut plugin = Table::new();
    plugin.insert("path".into(), pick["path"].clone());
    table.insert("plugins".into(), Value::Array(vec![Value::Table(plugin)]));
    if pick["admission"].as_bool() == Some(true) {
        let mut a = Table::new();
        a.insert("policy".into(), format!("{lib}::token-bucket").into());
        let mut params = Table::new();
        params.insert("capacity".into(), 20_000.0.into());
        params.insert("refill_rate".into(), 200_000.0.into());
        a.insert("params".into(), Value::Table(params));
        table.insert("admission".into(), Value::Table(a));
    } else {
        table.remove("admission");
    }
    let routing = section(table, "routing");
    routing.remove("scorers");
    routing.remove("profiles");
    if pick["router"].as_bool() == Some(true) {
        routing.insert("policy".into(), format!("{lib}::least-loaded").into());
    } else {
        routing.insert("policy".into(), "pipeline".into());
        let mut filter = Table::new();
        filter.insert("name".into(), format!("{lib}::low-queue").into());
        let mut params = Table::new();
        params.insert("threshold".into(), pick["threshold"].clone());
        filter.insert("params".into(), Value::Table(params));
        let mut profile = Table::new();
        profile.insert("filters".into(), Value::Array(vec![Value::Table(filter)]));
        profile.insert("scorers".into(), pick["scorers"].clone());
        routing.insert("profiles".into(), Value::Array(vec![Value::Table(profile)]));
    }
}

fn admission() -> impl Strategy<Value = Fragment> {
    (
        prop_oneof![
            6 => Just(("always-admit", None)),
            3 => (100.0f64..20_000.0, 10.0f64..100_000.0).prop_map(|(c, r)| ("token-bucket", Some((c, r)))),
            1 => Just(("reject-all", None)),
            1 => Just(("tier-shed", None)),
            1 => Just(("gaie-legacy", None)),
        ],
        prop::sample::select(vec![0i64, 0, 100, 5_000]),
    )
        .prop_map(|((policy, params), latency)| {
            let mut a = Table::new();
            a.insert("policy".into(), policy.into());
            a.insert("latency_us".into(), int(latency));
            if let Some((capacity, refill)) = params {
                let mut p = Table::new();
                p.insert("capacity".into(), capacity.into());
                p.insert("refill_rate".into(), refill.into());
                a.insert("params".into(), Value::Table(p));
            }
            fragment("admission", a)
        })
}

fn scorers() -> impl Strategy<Value = Value> {
    prop::collection::vec(
        (
            prop::sample::select(vec![
                "prefix-affinity",
                "queue-depth",
                "kv-utilization",
                "load-balance",
            ]),
            prop_oneof![4 => 0.0f64..10.0, 1 => Just(1e308f64)],
        ),
        1..4,
    )
    .prop_map(|list| {
        let mut any_positive = false;
        let mut v: Vec<Value> = list
            .into_iter()
            .map(|(name, w)| {
                any_positive |= w > 0.0;
                let mut s = Table::new();
                s.insert("name".into(), name.into());
                s.insert("weight".into(), w.into());
                Value::Table(s)
            })
            .collect();
        if !any_positive {
            if let Some(Value::Table(s)) = v.first_mut() {
                s.insert("weight".into(), 1.0.into());
            }
        }
        Value::Array(v)
    })
}

fn routing() -> impl Strategy<Value = Fragment> {
    (
        prop_oneof![
            Just(None),
            Just(Some("round-robin")),
            Just(Some("least-loaded")),
            Just(Some("always-busiest")),
            Just(Some("prefix-affinity")),
        ],
        prop::option::weighted(0.5, scorers()),
        prop::sample::select(vec![0i64, 0, 300, 2_000]),
        prop::sample::select(vec![0i64, 0, 1_000, 50_000]),
    )
        .prop_map(|(router, scorers, latency, refresh)| {
            let mut r = Table::new();
            match router {
                Some(name) => {
                    r.insert("policy".into(), name.into());
                }
                None => {
                    r.insert("policy".into(), "weighted".into());
                    if let Some(s) = scorers {
                        r.insert("scorers".into(), s);
                    }
                }
            }
            r.insert("latency_us".into(), int(latency));
            r.insert("snapshot_refresh_interval_us".into(), int(refresh));
            fragment("routing", r)
        })
}

fn horizon() -> impl Strategy<Value = Fragment> {
    prop::option::weighted(0.35, prop_oneof![0i64..100_000, 100_000i64..20_000_000]).prop_map(|h| {
        let mut table = Table::new();
        if let Some(h) = h {
            table.insert("horizon_us".into(), int(h));
        }
        Fragment {
            table,
            trace_csv: None,
            trace_yaml: None,
        }
    })
}

/// `[flow_control]` in a third of the runs: every detector and fairness,
/// small capacities and depths (with and without shedding), short TTLs,
/// in-flight eviction in half of them.
fn flow_control() -> impl Strategy<Value = Fragment> {
    prop::option::weighted(
        0.35,
        (
            prop::sample::select(vec!["utilization", "concurrency", "never"]),
            prop::sample::select(vec![0.2f64, 0.6, 1.0]),
            prop::option::of(1u64..20),
            prop::option::of(1u64..30),
            any::<bool>(),
            prop::sample::select(vec!["global-strict", "round-robin"]),
            prop::option::of(prop_oneof![1i64..1000, 1000i64..2_000_000]),
            prop::sample::select(vec![1i64, 1000, 50_000]),
            prop::sample::select(vec![0.5f64, 5.0]),
            any::<bool>(),
        ),
    )
    .prop_map(|fc| {
        let Some((det, limit, band, depth, shedding, fairness, ttl, tick, threshold, evict)) = fc
        else {
            return Fragment::default();
        };
        let mut t = Table::new();
        t.insert("saturation_detector".into(), det.into());
        t.insert("usage_limit_threshold".into(), limit.into());
        t.insert("queue_depth_threshold".into(), threshold.into());
        t.insert("max_concurrency".into(), (threshold * 4.0).into());
        if let Some(b) = band {
            t.insert("per_band_capacity".into(), int(b as i64));
        }
        if let Some(d) = depth {
            t.insert("max_depth".into(), int(d as i64));
            t.insert("shedding".into(), shedding.into());
        }
        t.insert("fairness".into(), fairness.into());
        if let Some(ttl) = ttl {
            t.insert("request_ttl_us".into(), int(ttl));
        }
        t.insert("dispatch_tick_us".into(), int(tick));
        t.insert("in_flight_eviction".into(), evict.into());
        fragment("flow_control", t)
    })
}

/// `[tenants]` budgets in a quarter of the runs, for tenants of the
/// client and trace workloads (and one that does not exist).
fn tenants() -> impl Strategy<Value = Fragment> {
    prop::option::weighted(
        0.25,
        prop::collection::vec(
            (
                prop::sample::select(vec!["tenant-0", "tenant-1", "t0", "t1", "absent"]),
                prop::sample::select(vec![0.0f64, 0.001, 0.05, 0.3, 1.0]),
            ),
            1..4,
        ),
    )
    .prop_map(|budgets| {
        let Some(budgets) = budgets else {
            return Fragment::default();
        };
        let mut b = Table::new();
        for (name, f) in budgets {
            b.insert(name.into(), f.into());
        }
        let mut t = Table::new();
        t.insert("budgets".into(), Value::Table(b));
        fragment("tenants", t)
    })
}

/// The control plane: none (half the runs), or instance lifecycle with a
/// drain policy, node pools (GPUs per node ≥ the largest TP generated; the
/// first pool holds every initial instance), and an autoscaler whose
/// analyzer is tuned to scale both ways within a short run.
fn control() -> impl Strategy<Value = Fragment> {
    let lifecycle = (
        prop_oneof![Just(0.0f64), 0.0f64..0.5],
        prop_oneof![Just(0.0f64), 0.0f64..0.2],
        any::<bool>(),
        prop::sample::select(vec![0u32, 0, 1, 3]),
        prop::sample::select(vec!["wait", "immediate", "redirect"]),
    );
    let pools = prop::option::weighted(
        0.6,
        (
            prop::sample::select(vec![2u32, 4, 8]),
            0u32..4,
            0u32..3,
            prop_oneof![Just(0.0f64), 0.0f64..0.5],
            0.0f64..100.0,
            any::<bool>(),
        ),
    );
    let scaler = prop::option::weighted(
        0.7,
        (
            prop::sample::select(vec![20_000i64, 100_000, 500_000]),
            prop::sample::select(vec![0i64, 0, 200_000]),
            prop::sample::select(vec![0i64, 300_000]),
            prop_oneof![Just(0.0f64), 0.0f64..0.2],
            5u32..9,
            prop::sample::select(vec![1.0f64, 64.0, 4096.0]),
        ),
    );
    prop_oneof![
        1 => Just(Fragment::default()),
        1 => (lifecycle, pools, scaler).prop_map(|(lc, pools, scaler)| {
            let mut table = Table::new();
            let delay = |mean: f64, sd: f64| {
                let mut d = Table::new();
                d.insert("mean".into(), mean.into());
                d.insert("stddev".into(), sd.into());
                Value::Table(d)
            };
            let mut l = Table::new();
            l.insert("loading_delay".into(), delay(lc.0, lc.1));
            l.insert("warm_start_initial_instances".into(), lc.2.into());
            l.insert("warm_up_request_count".into(), int(lc.3));
            l.insert("drain_policy".into(), lc.4.into());
            table.insert("lifecycle".into(), Value::Table(l));
            if let Some((gpus, extra, min, prov, cost, two)) = pools {
                let mut list = Vec::new();
                // Six initial nodes hold the at most five initial instances
                // whatever their TP (≤ 2).
                for (k, extra) in [(0, extra), (1, 2)].into_iter().take(if two { 2 } else { 1 }) {
                    let mut p = Table::new();
                    p.insert("name".into(), format!("pool{k}").into());
                    p.insert("gpu_type".into(), "H100".into());
                    p.insert("gpus_per_node".into(), int(gpus));
                    let initial = if k == 0 { 6 } else { 0 };
                    p.insert("initial_nodes".into(), int(initial));
                    p.insert("min_nodes".into(), int(min.min(initial)));
                    p.insert("max_nodes".into(), int(initial + extra));
                    p.insert("provisioning_delay".into(), delay(prov, prov / 4.0));
                    p.insert("cost_per_hour".into(), (cost + k as f64).into());
                    list.push(Value::Table(p));
                }
                table.insert("node_pools".into(), Value::Array(list));
            }
            if let Some((interval, up, down, scrape, max, avg)) = scaler {
                let mut a = Table::new();
                a.insert("interval_us".into(), int(interval));
                a.insert("scale_up_stabilization_window_us".into(), int(up));
                a.insert("scale_down_stabilization_window_us".into(), int(down));
                a.insert("hpa_scrape_delay".into(), delay(scrape, scrape / 2.0));
                a.insert("min_instances".into(), int(1));
                a.insert("max_instances".into(), int(max));
                let mut params = Table::new();
                params.insert("avg_input_tokens".into(), avg.into());
                a.insert("params".into(), Value::Table(params));
                table.insert("autoscaler".into(), Value::Table(a));
            }
            Fragment {
                table,
                trace_csv: None,
            trace_yaml: None,
            }
        }),
    ]
}

/// Prefill/decode disaggregation in a third of the runs: random pool sizes
/// (prefill, both, decode), deciders, transfer settings, and decode pools
/// sometimes with little KV (drops at the reservation) or their own batch
/// limits.
fn pd() -> impl Strategy<Value = Fragment> {
    let pools = (
        0u32..3,
        0u32..2,
        1u32..4,
        prop::option::weighted(0.4, 20u64..600),
        prop::option::weighted(0.3, prop::sample::select(vec![64u32, 512, 4096])),
    );
    let pd = (
        0usize..3,
        0i64..400,
        any::<bool>(),
        prop_oneof![Just(0.5f64), 1.0f64..100.0],
        prop_oneof![Just(0.0f64), 0.0f64..2.0],
        prop::sample::select(vec![4096.0f64, 65536.0, 131072.0]),
    );
    prop_oneof![
        2 => Just(Fragment::default()),
        1 => (pools, pd).prop_map(
            |((prefill, both, decode, decode_kv, decode_budget), (decider, threshold, contention, bw, base, kv))| {
                let prefill = if decider > 0 && prefill + both == 0 { 1 } else { prefill };
                let mut list = Vec::new();
                for (name, role, n) in [("pre", "prefill", prefill), ("mix", "both", both), ("dec", "decode", decode)] {
                    if n == 0 {
                        continue;
                    }
                    let mut p = Table::new();
                    p.insert("name".into(), name.into());
                    p.insert("role".into(), role.into());
                    p.insert("instances".into(), int(n));
                    if role == "decode" {
                        let mut over = Table::new();
                        if let Some(kv) = decode_kv {
                            over.insert("total_kv_blocks".into(), int(kv as i64));
                        }
                        if let Some(b) = decode_budget {
                            over.insert("max_num_batched_tokens".into(), int(b));
                        }
                        p.insert("instance".into(), Value::Table(over));
                    }
                    list.push(Value::Table(p));
                }
                let mut pd = Table::new();
                pd.insert(
                    "decider".into(),
                    ["never", "always", "prefix-threshold"][decider].into(),
                );
                if decider == 2 {
                    pd.insert("prefix_threshold".into(), int(threshold));
                }
                pd.insert("transfer_contention".into(), contention.into());
                pd.insert("transfer_bandwidth_gbps".into(), bw.into());
                pd.insert("transfer_base_latency_ms".into(), base.into());
                pd.insert("kv_bytes_per_token".into(), kv.into());
                let mut table = Table::new();
                table.insert("pools".into(), Value::Array(list));
                table.insert("pd".into(), Value::Table(pd));
                Fragment {
                    table,
                    trace_csv: None,
            trace_yaml: None,
                }
            },
        ),
    ]
}

/// Where the LoRA generator leaves its choices for [`scenario`] (per
/// client: 0 base model, 1 one adapter, 2 a Zipf mix; then whether the
/// weighted policy gets `lora-affinity`).
const LORA_PICKS: &str = "__lora_picks";

/// `[lora]` in a third of the runs: 1–6 adapters of random ranks, 1–3
/// slots, short loads, sometimes step-overhead tiers; clients of the
/// workload get an adapter or a mix ([`apply_lora_picks`]).
fn lora() -> impl Strategy<Value = Fragment> {
    prop::option::weighted(
        1.0 / 3.0,
        (
            prop::collection::vec(prop::sample::select(vec![1u32, 4, 8, 16, 64]), 1..7),
            1u32..4,
            0i64..3_000,
            prop::sample::select(vec![100.0f64, 5_000.0, 1e6]),
            any::<bool>(),
            prop::collection::vec(0i64..3, 8),
            any::<bool>(),
        ),
    )
    .prop_map(|g| {
        let Some((ranks, capacity, base, bandwidth, tiers, picks, affinity)) = g else {
            return Fragment::default();
        };
        let mut l = Table::new();
        l.insert("adapter_capacity".into(), int(capacity));
        l.insert("load_base_latency_us".into(), (base as f64).into());
        l.insert("load_bandwidth_bytes_us".into(), bandwidth.into());
        l.insert("footprint_bytes_per_rank".into(), int(1000));
        if tiers {
            let mut t = Table::new();
            for (r, k6, k7) in [("8", 0.05, 0.02), ("32", 0.2, 0.1)] {
                let mut c = Table::new();
                c.insert("k6".into(), k6.into());
                c.insert("k7".into(), k7.into());
                t.insert(r.into(), Value::Table(c));
            }
            l.insert("step_overhead_tiers".into(), Value::Table(t));
        }
        let adapters = ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                let mut a = Table::new();
                a.insert("id".into(), format!("ad-{i}").into());
                a.insert("rank".into(), int(r));
                Value::Table(a)
            })
            .collect();
        l.insert("adapters".into(), Value::Array(adapters));
        let mut table = Table::new();
        table.insert("lora".into(), Value::Table(l));
        let mut p: Vec<Value> = picks.into_iter().map(Value::Integer).collect();
        p.push(Value::Boolean(affinity));
        table.insert(LORA_PICKS.into(), Value::Array(p));
        Fragment {
            table,
            trace_csv: None,
            trace_yaml: None,
        }
    })
}

/// Give the workload's clients the adapters the LoRA generator picked,
/// and the weighted policy `lora-affinity` when it asked.
fn apply_lora_picks(table: &mut Table, picks: &[Value]) {
    let n = match table.get("lora").and_then(|l| l.get("adapters")) {
        Some(Value::Array(a)) => a.len(),
        _ => return,
    };
    let ids: Vec<Value> = (0..n).map(|i| Value::from(format!("ad-{i}"))).collect();
    if let Some(Value::Array(clients)) = section(table, "workload").get_mut("clients") {
        for (i, c) in clients.iter_mut().enumerate() {
            let Value::Table(c) = c else { continue };
            match picks.get(i % (picks.len() - 1)).and_then(Value::as_integer) {
                Some(1) => {
                    c.insert("adapter".into(), ids[i % n].clone());
                }
                Some(2) => {
                    let mut m = Table::new();
                    m.insert("ids".into(), Value::Array(ids.clone()));
                    m.insert("zipf_s".into(), 1.0.into());
                    c.insert("adapter_mix".into(), Value::Table(m));
                }
                _ => {}
            }
        }
    }
    let affinity = picks.last().and_then(Value::as_bool) == Some(true);
    let routing = section(table, "routing");
    if affinity && routing.get("policy").and_then(Value::as_str) == Some("weighted") {
        let mut lora = Table::new();
        lora.insert("name".into(), "lora-affinity".into());
        lora.insert("weight".into(), 2.0.into());
        match routing.get_mut("scorers") {
            Some(Value::Array(list)) => list.push(Value::Table(lora)),
            _ => {
                let mut qd = Table::new();
                qd.insert("name".into(), "queue-depth".into());
                qd.insert("weight".into(), 1.0.into());
                routing.insert(
                    "scorers".into(),
                    Value::Array(vec![Value::Table(lora), Value::Table(qd)]),
                );
            }
        }
    }
}

/// Where the serve-pool generator leaves, per client, the model it asks
/// for (an index into the served models; past the end: no `model` key, so
/// `[model].name`).
const MODEL_PICKS: &str = "__model_picks";

/// Several base models in a third of the runs that have neither P/D nor a
/// control plane: 2–3 `serve` pools of 1–3 instances, each serving
/// `[model].name` or a model of its own (`model-1`, `model-2`, with its own
/// β and sometimes its own KV size and batch limit); sometimes no pool
/// serves `[model].name`, so the clients without a model are
/// `unroutable_by_model`. Clients name a served model or none
/// ([`apply_model_picks`]).
fn serve() -> impl Strategy<Value = Fragment> {
    let pool = (
        1u32..4,
        0usize..3,
        0.0f64..3000.0,
        prop::option::weighted(0.4, 8u64..400),
        prop::option::weighted(0.3, prop::sample::select(vec![64u32, 512, 4096])),
    );
    prop_oneof![
        2 => Just(Fragment::default()),
        1 => (prop::collection::vec(pool, 2..4), prop::collection::vec(0usize..4, 8)).prop_map(|(pools, picks)| {
            let mut list = Vec::new();
            let mut served: Vec<String> = Vec::new();
            for (k, (n, model, b0, kv, budget)) in pools.into_iter().enumerate() {
                let mut p = Table::new();
                p.insert("name".into(), format!("pool-{k}").into());
                p.insert("role".into(), "serve".into());
                p.insert("instances".into(), int(n));
                if model > 0 {
                    let mut m = Table::new();
                    m.insert("name".into(), format!("model-{model}").into());
                    m.insert("latency_model".into(), "linear".into());
                    m.insert("alpha".into(), Value::Array(vec![50.0.into(), 0.5.into(), 10.0.into()]));
                    m.insert("beta".into(), Value::Array(vec![b0.into(), 2.0.into(), 20.0.into()]));
                    p.insert("model".into(), Value::Table(m));
                    if !served.contains(&format!("model-{model}")) {
                        served.push(format!("model-{model}"));
                    }
                }
                let mut over = Table::new();
                if let Some(kv) = kv {
                    over.insert("total_kv_blocks".into(), int(kv as i64));
                }
                if let Some(b) = budget {
                    over.insert("max_num_batched_tokens".into(), int(b));
                }
                if !over.is_empty() {
                    p.insert("instance".into(), Value::Table(over));
                }
                list.push(Value::Table(p));
            }
            let mut table = Table::new();
            table.insert("pools".into(), Value::Array(list));
            // Per client: a served model of its own (by index), or none.
            let picks = picks
                .into_iter()
                .map(|i| served.get(i).map_or(Value::Boolean(false), |m| Value::from(m.clone())))
                .collect();
            table.insert(MODEL_PICKS.into(), Value::Array(picks));
            Fragment {
                table,
                trace_csv: None,
            trace_yaml: None,
            }
        }),
    ]
}

/// Give the workload's clients the models the serve-pool generator picked
/// (a client without one asks for `[model].name`).
fn apply_model_picks(table: &mut Table, picks: &[Value]) {
    if let Some(Value::Array(clients)) = section(table, "workload").get_mut("clients") {
        for (i, c) in clients.iter_mut().enumerate() {
            if let (Value::Table(c), Some(Value::String(m))) = (c, picks.get(i % picks.len())) {
                c.insert("model".into(), m.clone().into());
            }
        }
    }
}
