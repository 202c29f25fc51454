//! The `[output]` files as a run uses them: their paths checked against
//! each other and against every input of the run (the run file, the trace
//! it replays, model and hardware configs, plugin libraries) before
//! anything is written, then opened atomically ([`crate::output`]).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::cluster::TraceWriter;
use crate::metrics::ResultsWriter;
use crate::output::{check_paths, PendingOutput};

use super::{resolve, RunFile};

/// The output files of `run`, with their keys.
pub fn output_paths(run: &RunFile, base_dir: &Path) -> Vec<(&'static str, PathBuf)> {
    // An empty path stays empty (resolved, it would be the run file's folder).
    let path = |p: &Path| {
        if p.as_os_str().is_empty() {
            PathBuf::new()
        } else {
            resolve(base_dir, p)
        }
    };
    let mut v = Vec::new();
    if let Some(p) = &run.output.results_path {
        v.push(("output.results_path", path(p)));
    }
    if let Some(p) = &run.output.trace_path {
        v.push(("output.trace_path", path(p)));
    }
    if let Some(p) = &run.output.timeseries_path {
        v.push(("output.timeseries_path", path(p)));
    }
    if let Some(p) = &run.output.trace_v2 {
        let (h, d) = crate::trace_v2::prefix_paths(&resolve(base_dir, p));
        v.push(("output.trace_v2 (header)", h));
        v.push(("output.trace_v2 (data)", d));
    }
    if let Some(p) = &run.output.sim_results_path {
        v.push(("output.sim_results_path", resolve(base_dir, p)));
    }
    if let Some(p) = &run.output.metrics_path {
        v.push(("output.metrics_path", resolve(base_dir, p)));
    }
    v
}

/// Every file `run` reads, named for messages; `run_file` is the run
/// file's own path, when it has one.
pub fn input_paths(
    run: &RunFile,
    base_dir: &Path,
    run_file: Option<&Path>,
) -> Vec<(String, PathBuf)> {
    let mut v = Vec::new();
    if let Some(p) = run_file {
        v.push(("the run file".to_string(), p.to_path_buf()));
    }
    if let Some(t) = &run.workload.trace {
        v.push((
            "workload.trace".to_string(),
            resolve(base_dir, Path::new(t)),
        ));
    }
    if let Some(t) = &run.workload.trace_v2 {
        v.push((
            "workload.trace_v2.header".to_string(),
            resolve(base_dir, Path::new(&t.header)),
        ));
        v.push((
            "workload.trace_v2.data".to_string(),
            resolve(base_dir, Path::new(&t.data)),
        ));
    }
    if let Some(p) = &run.model.config_path {
        v.push(("model.config_path".to_string(), resolve(base_dir, p)));
    }
    if let Some(p) = &run.model.hardware_config {
        v.push(("model.hardware_config".to_string(), resolve(base_dir, p)));
    }
    for (i, p) in run.plugins.iter().enumerate() {
        v.push((format!("plugins[{i}].path"), resolve(base_dir, &p.path)));
    }
    v
}

/// Problems with the output paths of `run` (empty when none).
pub fn check(run: &RunFile, base_dir: &Path, run_file: Option<&Path>) -> Vec<String> {
    check_paths(
        &output_paths(run, base_dir),
        &input_paths(run, base_dir, run_file),
    )
}

/// The writers of a run and the files to commit when it succeeds.
#[derive(Default)]
pub struct OpenedOutputs {
    pub results: Option<ResultsWriter>,
    pub trace: Option<TraceWriter>,
    pub pending: Vec<PendingOutput>,
}

/// Open the outputs of `run` as temporary files next to their destinations.
/// `with_trace`: whether the decision trace is written.
pub fn open(run: &RunFile, base_dir: &Path, with_trace: bool) -> Result<OpenedOutputs, String> {
    let mut out = OpenedOutputs::default();
    let create = |what: &str, p: &Path| -> Result<(File, PendingOutput), String> {
        PendingOutput::create(p).map_err(|e| {
            format!(
                "cannot create the {what} file {}: {e}\n  Check that its folder exists and is writable.",
                p.display()
            )
        })
    };
    if let Some(p) = &run.output.results_path {
        let (f, pending) = create("results", &resolve(base_dir, p))?;
        out.results = Some(ResultsWriter::new(Box::new(BufWriter::new(f))));
        out.pending.push(pending);
    }
    if with_trace {
        if let Some(p) = &run.output.trace_path {
            let (f, pending) = create("trace", &resolve(base_dir, p))?;
            out.trace = Some(TraceWriter::new(
                Box::new(BufWriter::new(f)),
                run.output.counterfactual_k.unwrap_or(3) as usize,
            ));
            out.pending.push(pending);
        }
    }
    Ok(out)
}
