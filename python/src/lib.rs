//! `blis._native`: the PyO3 extension module under the `blis` Python package
//! (`blis/__init__.py` is the public face). Each function goes through the
//! library entry point `blis run`, `blis replay` and `blis sweep` use
//! ([`blis_host::session`]: `load_run` / `load_replay` + `simulate_with`,
//! `sweep`), with keyword arguments as its run descriptions, so a report is
//! byte for byte the one the command prints.
//!
//! A simulation runs on its own thread with the GIL released; the calling
//! thread waits for it and checks Python's signals every 50 ms, so Ctrl-C
//! sets the run's cancel flag (polled by the cluster loop every 65,536
//! events) and the `KeyboardInterrupt` is raised once the run has stopped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use blis_host::config::Source;
use blis_host::fit::{self, FitArgs, FitError};
use blis_host::session::{self, Base, Error as Failure, Notice, Overrides, ReplayOptions};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

create_exception!(
    blis,
    Error,
    PyException,
    "Base class of the errors blis raises."
);
create_exception!(
    blis,
    InputError,
    Error,
    "Bad input (run file, overrides, sweep file, trace, measurements table, plugin library): nothing ran. The message is blis's, naming the file and key."
);
create_exception!(
    blis,
    RunError,
    Error,
    "A run failed while running (a plugin panicked or returned something invalid, an output file could not be written)."
);

/// How often the waiting thread checks Python's signals.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// Stack of the simulation thread (the `blis` binary's main thread has 8 MiB).
const STACK_BYTES: usize = 8 << 20;

/// A blis failure as the Python exception of its kind: exit code 2 (bad
/// input) is `InputError`, anything else `RunError`.
fn raise(f: Failure) -> PyErr {
    if f.is_input() {
        InputError::new_err(f.message)
    } else {
        RunError::new_err(f.message)
    }
}

/// Run `work` on a thread of its own with the GIL released; the calling
/// thread checks Python's signals meanwhile. A signal handler that raises
/// (Ctrl-C: `KeyboardInterrupt`) sets the flag handed to `work`, and its
/// exception is returned once `work` has returned.
fn interruptible<T: Send>(
    py: Python<'_>,
    work: impl FnOnce(Arc<AtomicBool>) -> T + Send,
) -> PyResult<T> {
    let cancel = Arc::new(AtomicBool::new(false));
    let mut interrupt: Option<PyErr> = None;
    let joined = py.detach(|| {
        std::thread::scope(|s| {
            let (done, finished) = mpsc::channel::<()>();
            let flag = Arc::clone(&cancel);
            let handle = std::thread::Builder::new()
                .name("blis-run".into())
                .stack_size(STACK_BYTES)
                .spawn_scoped(s, move || {
                    let out = work(flag);
                    let _ = done.send(());
                    out
                })?;
            // Ends when the thread sends, or drops the sender by panicking.
            while let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(SIGNAL_POLL) {
                if interrupt.is_none() {
                    if let Err(e) = Python::attach(|py| py.check_signals()) {
                        interrupt = Some(e);
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
            }
            Ok::<_, std::io::Error>(handle.join())
        })
    });
    if let Some(e) = interrupt {
        return Err(e);
    }
    match joined {
        Err(e) => Err(RunError::new_err(format!(
            "cannot start a thread for the run: {e}"
        ))),
        Ok(Err(panic)) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            Err(RunError::new_err(format!("blis panicked: {what}")))
        }
        Ok(Ok(out)) => Ok(out),
    }
}

/// How deep dicts and lists may nest in an argument: far deeper than any
/// run, sweep, plan or tune file, and far from the interpreter's and this
/// thread's stack limits (a dict that contains itself stops here too).
const MAX_DEPTH: usize = 64;

/// A Python value as a TOML value (`where_` names it in a mistake, as the
/// Python expression that reaches it: `sweep_file["axis"][0]["values"][2]`).
fn to_toml(v: &Bound<'_, PyAny>, where_: &str) -> PyResult<toml::Value> {
    to_toml_at(v, where_, 0)
}

fn to_toml_at(v: &Bound<'_, PyAny>, where_: &str, depth: usize) -> PyResult<toml::Value> {
    // bool before int: Python's bool is an int.
    if v.is_instance_of::<PyBool>() {
        return Ok(toml::Value::Boolean(v.extract()?));
    }
    if v.is_instance_of::<PyInt>() {
        return v.extract::<i64>().map(toml::Value::Integer).map_err(|_| {
            InputError::new_err(format!(
                "{where_}: {v} does not fit a TOML integer (64-bit signed)"
            ))
        });
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(toml::Value::Float(v.extract()?));
    }
    if v.is_instance_of::<PyString>() {
        return Ok(toml::Value::String(v.extract()?));
    }
    let nested =
        v.cast::<PyDict>().is_ok() || v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>();
    if nested && depth >= MAX_DEPTH {
        return Err(InputError::new_err(format!(
            "{where_}: dicts and lists nested more than {MAX_DEPTH} deep (one that contains itself?); no blis file nests so deep"
        )));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        return to_table_at(d, where_, depth + 1).map(toml::Value::Table);
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (i, item) in v.try_iter()?.enumerate() {
            items.push(to_toml_at(&item?, &format!("{where_}[{i}]"), depth + 1)?);
        }
        return Ok(toml::Value::Array(items));
    }
    if let Ok(p) = v.extract::<PathBuf>() {
        return Ok(toml::Value::String(p.display().to_string()));
    }
    let kind = v.get_type().name()?;
    Err(InputError::new_err(format!(
        "{where_}: a {kind} has no TOML value; give a bool, int, float, str, path, list or dict"
    )))
}

/// A TOML value as a Python object (a dict, list, str, int, float or bool;
/// a date-time as its TOML text). Floats keep ±inf and NaN, which JSON
/// cannot carry.
fn from_toml(py: Python<'_>, v: &toml::Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        toml::Value::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        toml::Value::Integer(i) => i.into_pyobject(py)?.into_any().unbind(),
        toml::Value::Float(f) => f.into_pyobject(py)?.into_any().unbind(),
        toml::Value::Boolean(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        toml::Value::Datetime(d) => d.to_string().into_pyobject(py)?.into_any().unbind(),
        toml::Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(from_toml(py, item)?)?;
            }
            list.into_any().unbind()
        }
        toml::Value::Table(t) => {
            let d = PyDict::new(py);
            for (k, item) in t {
                d.set_item(k, from_toml(py, item)?)?;
            }
            d.into_any().unbind()
        }
    })
}

/// A Python dict (string keys) as a TOML table; `where_` is the
/// argument's name.
fn to_table(d: &Bound<'_, PyDict>, where_: &str) -> PyResult<toml::Table> {
    to_table_at(d, where_, 1)
}

fn to_table_at(d: &Bound<'_, PyDict>, where_: &str, depth: usize) -> PyResult<toml::Table> {
    let mut t = toml::Table::new();
    for (k, v) in d.iter() {
        let key: String = k
            .extract()
            .map_err(|_| InputError::new_err(format!("{where_}: the key {k} is not a string")))?;
        let inner = format!("{where_}[{key:?}]");
        t.insert(key, to_toml_at(&v, &inner, depth)?);
    }
    Ok(t)
}

/// A dict as the text of a TOML file (run file or sweep file); `name` is
/// the argument it was given as.
#[pyfunction]
#[pyo3(signature = (table, name="run_file"))]
fn table_to_toml(table: &Bound<'_, PyDict>, name: &str) -> PyResult<String> {
    let t = to_table(table, name)?;
    toml::to_string(&t)
        .map_err(|e| InputError::new_err(format!("{name}: cannot write the table as TOML: {e}")))
}

/// Overrides as `--set` arguments: a dict of dotted keys and values, or
/// `KEY=VALUE` strings as the command line takes them.
fn set_args(overrides: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(o) = overrides else {
        return Ok(Vec::new());
    };
    if let Ok(d) = o.cast::<PyDict>() {
        let mut sets = Vec::new();
        for (k, v) in d.iter() {
            let key: String = k.extract().map_err(|_| {
                InputError::new_err(format!("overrides: the key {k} is not a string"))
            })?;
            let value = to_toml(&v, &format!("overrides[{key:?}]"))?;
            sets.push(format!("{key}={value}"));
        }
        return Ok(sets);
    }
    if o.is_instance_of::<PyString>() {
        return Err(InputError::new_err(
            "overrides: give a dict {\"section.key\": value} or a list of \"section.key=value\" strings, not one string",
        ));
    }
    o.try_iter()
        .and_then(|it| it.map(|s| s?.extract::<String>()).collect())
        .map_err(|_| {
            InputError::new_err(
                "overrides: give a dict {\"section.key\": value} or a list of \"section.key=value\" strings",
            )
        })
}

/// The output keys that can be captured, with their file names.
const CAPTURES: [(&str, &str); 3] = [
    ("results", "results.jsonl"),
    ("timeseries", "timeseries.jsonl"),
    ("trace", "trace.jsonl"),
];

/// One run. Returns the report's text, the setup's notices as `(kind,
/// text)` and, per captured output, its name and file: the run file's own
/// path for it if it sets one, else a file in `capture_dir`.
#[pyfunction]
#[pyo3(signature = (run_file=None, run_text=None, overrides=None, plugins=Vec::new(), capture=Vec::new(), capture_dir=None))]
#[allow(clippy::type_complexity)]
fn run(
    py: Python<'_>,
    run_file: Option<PathBuf>,
    run_text: Option<String>,
    overrides: Option<&Bound<'_, PyAny>>,
    plugins: Vec<PathBuf>,
    capture: Vec<String>,
    capture_dir: Option<PathBuf>,
) -> PyResult<(String, Vec<(String, String)>, Vec<(String, PathBuf)>)> {
    let overrides = Overrides {
        sets: set_args(overrides)?,
        plugins,
        ..Overrides::default()
    };
    let (mut run, source) = session::load_run(&base(run_file, run_text), &overrides, |n| {
        eprintln!("note: {n}")
    })
    .map_err(raise)?;
    let mut captured = Vec::new();
    for name in &capture {
        let Some((_, file)) = CAPTURES.iter().find(|(n, _)| n == name) else {
            return Err(InputError::new_err(format!(
                "cannot capture '{name}': results, timeseries or trace"
            )));
        };
        let o = &mut run.output;
        let slot = match name.as_str() {
            "results" => &mut o.results_path,
            "timeseries" => &mut o.timeseries_path,
            _ => &mut o.trace_path,
        };
        if slot.is_none() {
            let Some(dir) = &capture_dir else {
                return Err(InputError::new_err("capture needs capture_dir"));
            };
            *slot = Some(dir.join(file));
        }
        let p = slot.as_deref().unwrap_or(Path::new(""));
        let resolved = if p.is_absolute() {
            p.to_path_buf()
        } else {
            source.base_dir.join(p)
        };
        captured.push((name.clone(), resolved));
    }
    let mut notices = Vec::new();
    let done = interruptible(py, |cancel| {
        session::simulate_with(&run, &source, false, Some(cancel), |kind, text| {
            notices.push(notice_pair(kind, text));
        })
    })?
    .map_err(raise)?;
    Ok((done.report, notices, captured))
}

/// A notice of the setup as `(kind, text)`.
fn notice_pair(kind: Notice, text: &str) -> (String, String) {
    let kind = match kind {
        Notice::Note => "note",
        Notice::Warning => "warning",
    };
    (kind.to_string(), text.to_string())
}

/// The run file: given as text (a Python dict; relative paths in it are
/// against the current folder), else the file, else the built-in scenario.
fn base(run_file: Option<PathBuf>, run_text: Option<String>) -> Base {
    match (run_text, run_file) {
        (Some(text), _) => Base::Text(Source {
            name: "<run table>".into(),
            base_dir: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            text,
        }),
        (None, Some(p)) => Base::File(p),
        (None, None) => Base::Builtin,
    }
}

/// One replay of a TraceV2 trace, as `blis replay`: the flags are its
/// flags (`overrides` its `--set`s). Returns the report's text and the
/// setup's notices as `(kind, text)`.
#[pyfunction]
#[pyo3(signature = (
    trace_header, trace_data, run_file=None, run_text=None, session_mode="fixed".to_string(),
    think_time_ms=None, think_time_dist=None, seed=None, model=None, num_instances=None,
    horizon=None, admission_policy=None, routing_policy=None, routing_scorers=None,
    plugins=Vec::new(), results_path=None, metrics_path=None, trace_output=None, overrides=None
))]
#[allow(clippy::too_many_arguments)]
fn replay(
    py: Python<'_>,
    trace_header: PathBuf,
    trace_data: PathBuf,
    run_file: Option<PathBuf>,
    run_text: Option<String>,
    session_mode: String,
    think_time_ms: Option<f64>,
    think_time_dist: Option<String>,
    seed: Option<u64>,
    model: Option<String>,
    num_instances: Option<u32>,
    horizon: Option<i64>,
    admission_policy: Option<String>,
    routing_policy: Option<String>,
    routing_scorers: Option<String>,
    plugins: Vec<PathBuf>,
    results_path: Option<PathBuf>,
    metrics_path: Option<PathBuf>,
    trace_output: Option<PathBuf>,
    overrides: Option<&Bound<'_, PyAny>>,
) -> PyResult<(String, Vec<(String, String)>)> {
    let options = ReplayOptions {
        trace_header,
        trace_data,
        session_mode,
        think_time_ms,
        think_time_dist,
        seed,
        model,
        num_instances,
        horizon,
        admission_policy,
        routing_policy,
        routing_scorers,
        plugins,
        results_path,
        metrics_path,
        trace_output,
        sets: set_args(overrides)?,
    };
    let mut notices = Vec::new();
    let note = |n: &str| notices.push(notice_pair(Notice::Note, n));
    let (run, source) =
        session::load_replay(&base(run_file, run_text), &options, note).map_err(raise)?;
    let done = interruptible(py, |cancel| {
        session::simulate_with(&run, &source, false, Some(cancel), |kind, text| {
            notices.push(notice_pair(kind, text));
        })
    })?
    .map_err(raise)?;
    Ok((done.report, notices))
}

/// One row of the measurements table after a fit: line, run file, metric,
/// measured value, start / fitted / held-out predictions, fold.
type FitRow = (
    u64,
    String,
    String,
    f64,
    f64,
    f64,
    Option<f64>,
    Option<usize>,
);

/// `blis calibrate fit`: fit, write the profile (and page). Returns the
/// summary the command prints, the profile as Python objects (what the
/// TOML file holds: a dict of its tables), and one tuple per table row.
#[pyfunction]
#[pyo3(signature = (
    measurements, out, traces=Vec::new(), fit=None, bounds=Vec::new(), weights=Vec::new(),
    holdout=0, seed=1, jobs=None, iterations=0, html=None, quiet=true, sim_seeds=1,
    holdout_by=Vec::new(), prior_sd=None
))]
#[allow(clippy::too_many_arguments)]
fn calibrate_fit(
    py: Python<'_>,
    measurements: Option<PathBuf>,
    out: PathBuf,
    traces: Vec<String>,
    fit: Option<String>,
    bounds: Vec<String>,
    weights: Vec<String>,
    holdout: u32,
    seed: u64,
    jobs: Option<usize>,
    iterations: u64,
    html: Option<PathBuf>,
    quiet: bool,
    sim_seeds: u32,
    holdout_by: Vec<String>,
    prior_sd: Option<f64>,
) -> PyResult<(String, Py<PyAny>, Vec<FitRow>)> {
    let args = FitArgs {
        out,
        measurements,
        traces,
        fit,
        bounds,
        weights,
        holdout,
        holdout_by,
        seed,
        sim_seeds,
        jobs,
        iterations,
        prior_sd,
        html,
        quiet,
    };
    let outcome = interruptible(py, |cancel| fit::run_fit_with(&args, Some(cancel)))?.map_err(
        |e| match e {
            FitError::Input(m) => InputError::new_err(m),
            FitError::Runtime(m) => RunError::new_err(m),
        },
    )?;
    let profile = toml::Value::try_from(&outcome.profile)
        .map_err(|e| RunError::new_err(format!("cannot give the profile as a table: {e}")))
        .and_then(|v| from_toml(py, &v))?;
    let rows = outcome
        .rows
        .iter()
        .zip(&outcome.results)
        .map(|(row, r)| {
            (
                row.line,
                row.run_file.clone(),
                row.metric.name(),
                row.value,
                r.start,
                r.fitted,
                r.heldout,
                r.fold,
            )
        })
        .collect();
    Ok((outcome.summary, profile, rows))
}

/// One sweep into `out` (resumed if it holds the same sweep). Returns the
/// summary: planned, skipped, ran, failed, wall_s.
#[pyfunction]
#[pyo3(signature = (sweep_file, out, jobs=None, shard=None))]
fn sweep<'py>(
    py: Python<'py>,
    sweep_file: PathBuf,
    out: PathBuf,
    jobs: Option<usize>,
    shard: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let shard = shard
        .map(|s| {
            s.parse()
                .map_err(|e: String| InputError::new_err(format!("shard {s:?}: {e}")))
        })
        .transpose()?;
    let s = interruptible(py, |cancel| {
        session::sweep(&sweep_file, &out, jobs, shard, false, Some(cancel))
    })?
    .map_err(raise)?;
    let d = PyDict::new(py);
    d.set_item("planned", s.planned)?;
    d.set_item("skipped", s.skipped)?;
    d.set_item("ran", s.ran)?;
    d.set_item("failed", s.failed)?;
    d.set_item("wall_s", s.wall_s)?;
    Ok(d)
}

/// A search (`plan`, `tune`) on `jobs` threads (default: the CPUs), quiet,
/// interruptible by Ctrl-C.
fn search<T: Send>(
    py: Python<'_>,
    jobs: Option<usize>,
    work: impl FnOnce(blis_host::search::Options) -> T + Send,
) -> PyResult<T> {
    let jobs = session::resolve_jobs(jobs).map_err(raise)?;
    interruptible(py, |cancel| {
        work(blis_host::search::Options {
            jobs,
            progress: false,
            cancel: Some(cancel),
        })
    })
}

/// `blis plan PLAN_FILE --out OUT`: the search, its outputs written to
/// `out`. Returns the summary `blis plan` prints (JSON), and for a plan
/// with no answer (exit 3 on the command line) the message naming the
/// closest candidates (`plan.json` and `candidates.csv` are written either
/// way).
#[pyfunction]
#[pyo3(signature = (plan_file, out, jobs=None))]
fn plan(
    py: Python<'_>,
    plan_file: PathBuf,
    out: PathBuf,
    jobs: Option<usize>,
) -> PyResult<(Option<String>, Option<String>)> {
    let spec = blis_host::plan::PlanSpec::load(&plan_file).map_err(InputError::new_err)?;
    let outcome = search(py, jobs, |options| {
        blis_host::plan::plan(&spec, &out, options, None, &|_| {})
    })?;
    match outcome {
        Ok((_, written)) => Ok((Some(written.summary), None)),
        Err(e) if e.kind == blis_host::session::ErrorKind::Infeasible => {
            Ok((None, Some(e.message)))
        }
        Err(e) => Err(raise(e)),
    }
}

/// `blis tune TUNE_FILE --out OUT`: the search, the held-out verdict and
/// the outputs written to `out`. Returns the summary `blis tune` prints
/// (JSON). A held-out set equal to the training set is a warning the
/// caller sees in `tune.json` (`held_out.same_as_train`).
#[pyfunction]
#[pyo3(signature = (tune_file, out, jobs=None))]
fn tune(py: Python<'_>, tune_file: PathBuf, out: PathBuf, jobs: Option<usize>) -> PyResult<String> {
    let spec = blis_host::tune::TuneSpec::load(&tune_file).map_err(InputError::new_err)?;
    let outcome = search(py, jobs, |options| {
        blis_host::tune::tune(&spec, &out, options, &|_| {})
    })?;
    outcome.map(|(_, w)| w.summary).map_err(raise)
}

/// `blis --version`: the program version and the plugin ABI it loads.
#[pyfunction]
fn version() -> String {
    session::version()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("RunError", py.get_type::<RunError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(sweep, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(tune, m)?)?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(calibrate_fit, m)?)?;
    m.add_function(wrap_pyfunction!(table_to_toml, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
