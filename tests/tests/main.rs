//! The blis integration tests: one binary, one module per topic.
//!
//! These tests work on what a user runs — plugin `.so` files built by the
//! workspace and the real `blis` executable — rather than on in-crate mocks.
//! [`util`] builds those artifacts once per test process and gives each test
//! a fresh temp dir; [`macros`] has assertions that print expected and got in
//! full. Add a topic as a new module here with a one-line comment.

#[macro_use]
mod macros;
mod util;

// Plugin libraries loaded from disk: ABI calls, isolation of libraries,
// panics, output validation, load errors, name resolution, embedded vs loaded.
mod plugins;

// The control plane: an autoscaler plugin from a .so, node provisioning,
// cost, and bad control sections.
mod autoscaling;

// Routing profiles (filters, scorers, pickers) and lifecycle hooks through
// the real `blis`, with third-party ABI 0.2 policies.
mod pipeline;

// `blis plan`: the brute-force answer with fewer simulations, resumption,
// bad plan files.
mod plan;

// `blis tune` and `blis convert to-epp-config`: a threshold recovered, no
// gain reported when there is none, llm-d round trips, bad tune files.
mod tune;

// The library entry point (blis_host::session) as an embedding program uses
// it: the report of `blis run`, errors of the right kind, cancellation.
mod session;

// The `blis` command end to end: report shape, determinism across processes,
// embedded vs loaded standard library, subcommands, bad input.
mod cli;

// `blis serve`: the simulated servers answer as vLLM does (completions,
// chat, streaming, errors, metrics) and reproduce `blis run` under `observe`.
mod serve;
// Real third parties in front of `blis serve`: nginx least_conn, Prometheus,
// inference-perf (when .ci/run installed them; alone, with --ignored).
mod serve_third_party;

// `blis observe` against misbehaving servers on loopback: endless and
// dripping streams, truncated and failed answers, Ctrl-C while in flight.
mod hostile;

// `blis calibrate fit`: bad tables, a fit that cannot improve, profiles
// written, applied and refused.
mod calibrate_fit;

// Every example in examples/ runs (with its plugins) and conserves requests;
// the plugin template builds on its own and changes routing decisions.
mod examples;

// Issue 18: regressions of the hardening defects and edges (overflowing
// times and weights, huge prompts, u64 seeds, outputs vs inputs, warnings).
mod hardening;

// Issue 33, defects 1-7: outputs never clobber inputs, each other, foreign
// folders or non-regular files; atomic, umask-honouring, interrupt-clean.
mod outputs;

// Issue 33, defects 8-14 and 17-20: silently wrong figures, the cache
// scorers after a scale-up, a grid too large to plan.
mod wrong_results;

// Latency models end to end: a sim-to-real run file within tolerance of the
// reference's golden predictions; bad latency-model and model-config input.
mod latency;

// inference-perf workloads end to end: per-stage statistics equal those
// recomputed from the per-request results; bad stages name their line.
mod inference_perf_runs;
mod stages;

// `output.percentiles = "sketch"`: within the stated error of exact
// percentiles on a million-request run; the rest of the report unchanged.
mod percentiles;

// `blis sweep`, `sweep merge` and `report`: byte-identical per-run reports,
// --jobs, kill-and-resume, shards + merge, bad input, HTML plots, time
// series, and the Slurm example when sbatch is available.
mod sweep;

// Issue 14's traffic control: SLO attainment and goodput vs the results
// file, the gateway queue (band order, fairness, counts, trace), bad input.
mod flow;
// Prefill/decode disaggregation: deciders and flags change what is
// disaggregated, determinism, bad topologies.
mod pd;

// TraceV2 (issue 27): run → trace → replay round trips, calibrate and the
// reference fixtures, every column layout, bad trace input.
mod traces;
// `blis observe` against llama.cpp's server (when .ci/run started one), a
// dead port, and a local server slower than --timeout with vLLM /metrics.
mod observe;

// Project conventions: file headers, no skipped or crash-expecting tests.
mod tidy;

// WebAssembly component plugins (issue 31): the same report from native,
// Rust and Python policies; loops, memory, files, clock and traps contained.
mod wasm;
// `blis plugins new --wasm`: a Rust and a Python project built outside the
// repository, every kind run.
mod wasm_new;

// LoRA adapters through the real `blis`: bad input, and the per-adapter
// report against the results file.
mod lora;

// Several base models in one cluster (serve pools): per-model sections
// against the results file, the model filter, unroutable requests, bad input.
mod models;

// llm-d Router EndpointPickerConfig files run unchanged (`--epp-config`):
// the 19 shipped files, the loader's validation table, equivalences.
mod llm_d;

// The book (docs/src): every `sh,checked` block runs against the real blis
// and prints what the book quotes; no command writes into the tracked tree.
mod book;
// The WebAssembly sandbox's promises against hostile guests (issue 56):
// sleep, text floods, host-call faults, the compiled-component cache, the
// address space.
mod sandbox;
