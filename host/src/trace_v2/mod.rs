//! TraceV2: the trace format the reference simulator and its users
//! exchange — a YAML **header** and a CSV **data** file (spec:
//! `workload-head.md` §2.1–2.3). This module is the format only: it knows
//! nothing of the cluster, the workload or the CLI. `blis run
//! --trace-output`, `blis replay`, `blis observe` and `blis calibrate` are
//! built on it.
//!
//! # Public API
//!
//! * [`TraceHeader`] — every header key (`trace_version`, `time_unit`,
//!   `created_at`, `mode`, `warm_up_requests`, `workload_seed`,
//!   `workload_spec`, `session_context_growth`, `server`, `network`,
//!   `goodput_slo_targets`, `kv_offload`, `observed_kv_metrics`). Strict:
//!   an unknown key, nested ones included, is an error naming the key.
//!   [`read_header`] loads one from a file, [`parse_header`] from text,
//!   [`TraceHeader::to_yaml`] writes one.
//! * [`TraceRecord`] — one data row, every column (the 27 positional ones
//!   and the optional `vllm_priority`, `slo_target_us`, `x_request_id`,
//!   `adapter`, `think_time_us`; an absent optional column reads as 0 or
//!   empty). [`TraceStatus`] is the `status` column.
//! * [`TraceReader`] — streams the rows of a data file (one record of
//!   memory, whatever the file size): [`TraceReader::open`], then either
//!   the iterator (`for rec in reader { let rec = rec?; … }`) or
//!   [`TraceReader::read_into`] to reuse one record's buffers. Errors name
//!   the file and the 1-based line (`trace.csv:7: column input_tokens: …`).
//!   [`TraceReader::columns`] tells which optional columns the file has.
//! * [`TraceColumns`] — which optional columns a file has or a writer
//!   writes; [`TraceColumns::needed_by`] applies the reference's rule
//!   ("emitted only when at least one record needs it") to records known in
//!   advance.
//! * [`TraceV2Writer`] — writes a header and a data file atomically
//!   (through [`crate::output`]: temporary files renamed into place by
//!   [`TraceV2Writer::finish`]; dropped unfinished, nothing is left). The
//!   columns are fixed when it is created (it streams: it cannot look
//!   ahead); the header is given at the end, so a writer can fill it with
//!   what it learned while recording (observe's KV scrape).
//!   [`prefix_paths`] gives `P.yaml`, `P.csv` for `--trace-output P`.
//! * [`TraceV2Error`] — what went wrong, with file and line; its `Display`
//!   is the one-paragraph message the CLI prints (exit 2).
//!
//! # Decisions (where the reference is quirky, spec §8)
//!
//! * `trace_version` is read and written (3) but not checked (quirk 18):
//!   unknown keys are the guard against newer traces.
//! * `time_unit` is informational (`microseconds` or `us`, quirk 19).
//! * `mode` is required (`real`, `generated`, `replayed`): without it a
//!   reader cannot tell epoch send times from relative ones.
//! * `session_context_growth` accepts `accumulate` or absence; anything
//!   else, a case typo included, is an error.
//! * `kv_offload` is carried verbatim as a YAML mapping (the reference's
//!   resolved offload settings; blis does not interpret them).
//! * Base columns are located by position, never by name; the optional
//!   positional columns are recognised by their header name at their
//!   position (`vllm_priority` right after `slo_class`, `slo_target_us`
//!   right after `deadline_us`); the trailing ones by name anywhere after.
//!   Extra columns are accepted and ignored.
//! * Every numeric field must parse (surrounding spaces are tolerated);
//!   counts (tokens, lengths, chunks, rounds, priorities, deadlines,
//!   targets, think times, ids) must be ≥ 0; `reason_ratio` lies in
//!   [0, 1]; a `deadline_us` > 0 with an arrival > 0 is ≥ the arrival;
//!   `streaming` takes Go's ParseBool spellings (1, t, T, TRUE, true,
//!   True and their false forms); `status` is one of `ok`, `error`,
//!   `timeout`, `incomplete`. `error_message` and `finish_reason` are
//!   trimmed.
//! * Rows may come in any order (observe writes completion order, quirk 2).

mod data;
mod header;
mod writer;

#[cfg(test)]
mod tests;

pub use data::{TraceColumns, TraceReader, TraceRecord, TraceStatus, BASE_COLUMNS};
pub use header::{
    parse_header, read_header, rtt_ms_ok, GoodputTarget, KvMetricsSource, NetworkInfo,
    ObservedKvMetrics, ServerInfo, SessionContextGrowth, TraceHeader, TraceMode, MAX_RTT_MS,
};
pub use writer::{prefix_paths, TraceV2Writer};

/// Why a TraceV2 file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TraceV2Error {
    /// A header that is not a valid TraceV2 header (unknown key, wrong
    /// type, bad value): `file: message`.
    #[error("{file}: {message}")]
    Header {
        /// The path as given.
        file: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A malformed data row: `file:line: message`.
    #[error("{file}:{line}: {message}")]
    Row {
        /// The path as given.
        file: String,
        /// 1-based line of the row in the file.
        line: u64,
        /// What is wrong (starts with `column NAME:` when one column is at fault).
        message: String,
    },
    /// A file that cannot be opened, read or written.
    #[error("{file}: {message}")]
    Io {
        /// The path as given.
        file: String,
        /// What went wrong.
        message: String,
    },
}
