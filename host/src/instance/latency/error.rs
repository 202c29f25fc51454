//! Errors of the latency layer: building a latency model, reading model and
//! GPU descriptions, sizing the KV cache.
//!
//! Every message names the offending value and says what would be accepted,
//! so the config layer can print it as is. Nothing here is raised while the
//! simulation runs: a model that builds never fails afterwards.

use std::path::PathBuf;

/// Why a latency model, a model/GPU description or a KV capacity could not be
/// produced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LatencyError {
    /// A coefficient (`alpha[i]` or `beta[i]`) is negative, NaN or infinite.
    /// Fix the value in the run file or on the command line.
    #[error("{name} = {value} must be a finite number ≥ 0")]
    InvalidCoefficient {
        /// Which coefficient, e.g. `beta[1]`.
        name: String,
        /// The rejected value.
        value: f64,
    },

    /// A model name is neither a bundled model nor known to the coefficient
    /// table. Use one of the listed names or give the path of a HuggingFace
    /// `config.json`.
    #[error(
        "unknown model '{name}': bundled models are {}; or give the path of a HuggingFace config.json",
        .available.join(", ")
    )]
    UnknownModel {
        /// The name as given.
        name: String,
        /// Names that would have been accepted, sorted.
        available: Vec<String>,
    },

    /// A GPU name is not in the hardware table in use.
    #[error("unknown GPU '{name}': available GPUs are {}", .available.join(", "))]
    UnknownGpu {
        /// The name as given.
        name: String,
        /// GPU names of the table, sorted.
        available: Vec<String>,
    },

    /// A model config or hardware config file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file that was opened.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// A model config or hardware config is not the JSON it should be.
    #[error("{origin}: {message}")]
    Parse {
        /// Where the text came from (a path, or `bundled <name>`).
        origin: String,
        /// What is wrong.
        message: String,
    },

    /// The model config, the GPU spec or the tensor parallelism cannot drive
    /// `roofline-v1`. Every problem found is listed.
    #[error("invalid roofline-v1 configuration:\n  - {}", .problems.join("\n  - "))]
    InvalidRoofline {
        /// One line per problem.
        problems: Vec<String>,
    },

    /// The roofline model, or deriving the KV capacity, was asked for
    /// without a GPU.
    #[error("{needed_for} needs a GPU: set the hardware (one of {})", .available.join(", "))]
    MissingGpu {
        /// What needed it (`the roofline latency model`, …).
        needed_for: String,
        /// Bundled GPU names, sorted.
        available: Vec<String>,
    },

    /// Beta coefficients were given to a model that does not use them.
    #[error("beta coefficients are only used by the trained-physics and linear latency models; remove them or choose one of those")]
    BetaNotUsed,

    /// The linear model has no beta coefficients: none were given and the
    /// coefficient table has no entry for this model, GPU and tensor
    /// parallelism.
    #[error(
        "no linear coefficients for model '{model}' on {gpu} at TP {tp}: give beta explicitly{}",
        if .known.is_empty() { String::new() } else { format!(", or use one of the calibrated setups: {}", .known.join(", ")) }
    )]
    NoCoefficients {
        /// Model id as given.
        model: String,
        /// GPU name, or `no GPU` when none was set.
        gpu: String,
        /// Tensor parallelism.
        tp: u32,
        /// Calibrated `GPU TP n` setups of this model, in table order.
        known: Vec<String>,
    },

    /// A setting is out of range (TP 0, block size 0, memory utilisation
    /// outside (0, 1], explicit total KV blocks 0, unknown latency model kind).
    /// The message names the setting and the accepted values.
    #[error("{0}")]
    InvalidSetting(String),

    /// The KV capacity could not be derived: the GPU spec has no memory size,
    /// or no model config is available.
    #[error("cannot derive the number of KV blocks: {reason}; set total_kv_blocks explicitly")]
    KvCapacityUnknown {
        /// What was missing.
        reason: String,
    },

    /// The model's weights leave no GPU memory for the KV cache.
    #[error(
        "the model does not fit: its weights (and runtime overheads) need {weights_gib:.2} GiB of the \
         {usable_gib:.2} GiB usable on {gpu} × TP {tp} at memory utilisation {utilization}, leaving \
         no room for a KV block; use more GPUs (higher TP) or a larger GPU{hint}"
    )]
    ModelDoesNotFit {
        /// GPU name.
        gpu: String,
        /// Tensor parallelism.
        tp: u32,
        /// Memory utilisation fraction.
        utilization: f64,
        /// Weight bytes in GiB.
        weights_gib: f64,
        /// `MemoryGiB · tp · utilization`.
        usable_gib: f64,
        /// Extra advice (`; at least TP 3 might fit`), or empty.
        hint: String,
    },

    /// The model config, the GPU spec or the parallelism cannot drive a HEAD
    /// latency model (`roofline`, `trained-physics`) or the KV sizing. Every
    /// problem found is listed.
    #[error("invalid {model} configuration:\n  - {}", .problems.join("\n  - "))]
    InvalidModel {
        /// What was being built (`trained-physics`, `roofline`, `KV sizing`).
        model: &'static str,
        /// One line per problem.
        problems: Vec<String>,
    },
}
