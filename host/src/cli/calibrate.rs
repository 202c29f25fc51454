//! `blis calibrate …`: `fit` (the latency model fitted to measurements,
//! [`crate::fit`]). The trace comparison of issue 27 joins here as
//! `calibrate`'s own flags or another subcommand.

use clap::{Args, Subcommand};

use super::commands::{usage, Failure};
use crate::fit::{self, FitArgs, FitError};

/// `blis calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    #[command(subcommand)]
    pub command: CalibrateCommand,
}

/// `blis calibrate` subcommands.
#[derive(Debug, Subcommand)]
pub enum CalibrateCommand {
    /// Fit the latency model's coefficients to measurements (simulator in
    /// the loop) and write a calibration profile for `[model] calibration`.
    Fit(FitArgs),
}

/// Run `blis calibrate …`; the summary JSON for stdout.
pub fn calibrate_command(args: &CalibrateArgs) -> Result<String, Failure> {
    match &args.command {
        CalibrateCommand::Fit(a) => fit::fit_command(a).map_err(|e| match e {
            FitError::Input(m) => usage(m),
            FitError::Runtime(m) => Failure {
                message: m,
                code: 1,
            },
        }),
    }
}
