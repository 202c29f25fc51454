//! Fuzz the run file: TOML parsing, then the whole validation and assembly
//! (`blis validate`), which must return an error, never panic. Paths that
//! would read outside the input (plugin libraries, model/hardware configs,
//! trace files) are removed first: the target checks the parser and the
//! validation rules, not the file system.
#![no_main]

use std::path::Path;

use blis_host::config::{self, Source};
use blis_host::plugins::Registry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let source = Source {
        name: "fuzz.toml".into(),
        base_dir: Path::new("/nonexistent-blis-fuzz").to_path_buf(),
        text: text.to_string(),
    };
    let Ok(mut run) = config::parse(&source) else {
        return;
    };
    run.plugins.clear();
    run.model.config_path = None;
    run.model.hardware_config = None;
    run.workload.trace = None;
    run.output.results_path = None;
    run.output.trace_path = None;
    run.output.trace_level = None;
    let mut registry = Registry::standard();
    let _ = config::build(&run, &source.base_dir, &mut registry, false);
});
