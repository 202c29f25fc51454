//! The library's entry point: "load a run, simulate it".
//!
//! Everything that runs simulations — the `blis` commands (the `cli` module),
//! the sweep executor ([`crate::sweep`], through [`sweep`]), `calibrate fit`
//! ([`crate::fit`]), `observe`, the Python package, and any program that
//! embeds blis — goes through this module:
//!
//! 1. **Describe** a run: a [`Base`] (the built-in scenario, a run file, or
//!    run-file text already read) plus [`Overrides`] (what `blis run`'s flags
//!    set), or a [`ReplayOptions`] (what `blis replay`'s flags set: a TraceV2
//!    trace in place of the run file's `[workload]`).
//! 2. **Load** it: [`load_run`] / [`load_replay`] turn the description into
//!    a validated [`RunFile`] and its [`Source`] (the folder relative paths
//!    are resolved against). Each override is an edit of the run file's TOML
//!    table, so a flag and the key it overrides are validated alike.
//! 3. **Simulate** it: [`simulate`] / [`simulate_with`] build the cluster
//!    (plugins, calibration, workload), run it (optional progress bar,
//!    cancel flag, notices handed to a callback) and return the JSON report
//!    exactly as `blis run` prints it, committing the requested output files
//!    only when the run succeeded.
//! 4. **Sweep**: [`sweep`] runs a sweep file's grid through
//!    [`crate::sweep`]'s executor, each run simulated as in 3.
//!
//! Errors are [`Error`]: bad input (nothing ran) or a failure while running,
//! with the file/key/line detail in the message. Only the `cli` module turns
//! them into exit codes and text on stderr.
//!
//! ```text
//! use blis_host::session::{self, Base, Overrides};
//! let overrides = Overrides { num_requests: Some(500), ..Overrides::default() };
//! let (run, source) = session::load_run(&Base::File("run.toml".into()), &overrides, |_| {})?;
//! let done = session::simulate(&run, &source, false, |_| {})?;
//! println!("{}", done.report);
//! ```
//!
//! (`tests/tests/session.rs` runs this and compares the report with `blis
//! run`'s, byte for byte.)

mod error;
mod overrides;
mod replay;
mod simulate;
mod sweep;

pub use error::{Error, ErrorKind};
pub use overrides::{load_run, Base, Overrides};
pub use replay::{load_replay, ReplayOptions};
pub(crate) use simulate::check_outputs_against_run_file;
pub use simulate::{simulate, simulate_with, validate_with, Notice, Simulated};
pub(crate) use sweep::SweepRunner;
pub use sweep::{resolve_jobs, sweep, sweep_merge};

pub use crate::config::{RunFile, Source};

/// The program version and the plugin ABI it loads (`blis --version`).
pub fn version() -> String {
    format!(
        "{} (plugin ABI {})",
        env!("CARGO_PKG_VERSION"),
        blis_plugin_api::ABI_VERSION
    )
}
