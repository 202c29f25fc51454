//! `blis serve RUN_FILE`: the flags of [`crate::serve::serve`].

use std::path::PathBuf;

use clap::Args;

use super::commands::Failure;
use crate::serve::{self, ServeArgs};

/// `blis serve` flags.
#[derive(Debug, Args)]
pub struct ServeFlags {
    /// TOML run file whose instances to serve (default: the built-in scenario's).
    pub run_file: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// First instance's port: instance i listens on PORT + i (0: any free
    /// port each; the addresses are printed on stderr).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Also serve a gateway on this port: the run file's own admission,
    /// flow control and routing in front of the instances (0: any free port).
    #[arg(long)]
    pub gateway: Option<u16>,
    /// Simulated time per wall time (1: real time; 10: ten times faster).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Stop after this many seconds of wall time (default: at Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Requests in the servers at once past which a new one is answered
    /// 503 (the servers' memory stays bounded whatever clients do).
    #[arg(long, default_value_t = 10_000)]
    pub max_requests: u64,
    /// Open connections (all ports together) past which a new one is
    /// answered 503 and closed at once.
    #[arg(long, default_value_t = 4_096)]
    pub max_connections: usize,
    /// Write every `/metrics` answer's wall time, simulated time and gauges
    /// (running, waiting, KV-cache usage) to this file, one JSON line each,
    /// at the end: what a monitoring stack should have scraped.
    #[arg(long)]
    pub metrics_log: Option<PathBuf>,
}

/// Serve until Ctrl-C or `--duration`; the run's report for stdout.
pub fn serve(flags: &ServeFlags) -> Result<String, Failure> {
    serve::serve(&ServeArgs {
        run_file: flags.run_file.clone(),
        host: flags.host.clone(),
        port: flags.port,
        gateway: flags.gateway,
        speed: flags.speed,
        duration: flags.duration,
        max_requests: flags.max_requests,
        max_connections: flags.max_connections,
        metrics_log: flags.metrics_log.clone(),
    })
}
