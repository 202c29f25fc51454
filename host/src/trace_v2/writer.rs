//! Writing a TraceV2 (header YAML + data CSV) atomically through
//! [`crate::output::PendingOutput`].

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{TraceColumns, TraceHeader, TraceRecord, TraceV2Error};
use crate::output::PendingOutput;

/// `P.yaml` and `P.csv` for `--trace-output P` (the suffixes are appended,
/// as the reference does: `out/t` → `out/t.yaml`, `out/t.csv`).
pub fn prefix_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    let mut y = prefix.as_os_str().to_owned();
    y.push(".yaml");
    let mut c = prefix.as_os_str().to_owned();
    c.push(".csv");
    (PathBuf::from(y), PathBuf::from(c))
}

/// Streams records into a data file; the header is written by
/// [`TraceV2Writer::finish`], which renames both files into place.
pub struct TraceV2Writer {
    header_path: PathBuf,
    data_path: PathBuf,
    header_pending: PendingOutput,
    header_file: File,
    data_pending: PendingOutput,
    csv: csv::Writer<BufWriter<File>>,
    columns: TraceColumns,
    buf: String,
    rows: u64,
}

impl std::fmt::Debug for TraceV2Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceV2Writer")
            .field("header_path", &self.header_path)
            .field("data_path", &self.data_path)
            .field("columns", &self.columns)
            .field("rows", &self.rows)
            .finish()
    }
}

fn io_err(path: &Path, what: &str, e: impl std::fmt::Display) -> TraceV2Error {
    TraceV2Error::Io {
        file: path.display().to_string(),
        message: format!("cannot {what}: {e}"),
    }
}

impl TraceV2Writer {
    /// Create the temporary files next to `header_path` and `data_path`
    /// and write the data file's header row for `columns`. The caller
    /// checks the paths against its inputs and other outputs first
    /// ([`crate::output::check_paths`]).
    pub fn create(
        header_path: &Path,
        data_path: &Path,
        columns: TraceColumns,
    ) -> Result<TraceV2Writer, TraceV2Error> {
        let create = |p: &Path| {
            PendingOutput::create(p).map_err(|e| {
                io_err(
                    p,
                    "create the trace file (check that its folder exists and is writable)",
                    e,
                )
            })
        };
        let (header_file, header_pending) = create(header_path)?;
        let (data_file, data_pending) = create(data_path)?;
        let mut csv = csv::WriterBuilder::new()
            .flexible(false)
            .from_writer(BufWriter::with_capacity(1 << 16, data_file));
        csv.write_record(columns.names())
            .map_err(|e| io_err(data_path, "write the trace data", e))?;
        Ok(TraceV2Writer {
            header_path: header_path.to_path_buf(),
            data_path: data_path.to_path_buf(),
            header_pending,
            header_file,
            data_pending,
            csv,
            columns,
            buf: String::with_capacity(64),
            rows: 0,
        })
    }

    /// The optional columns this writer writes.
    pub fn columns(&self) -> TraceColumns {
        self.columns
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    fn num(&mut self, v: impl std::fmt::Display) -> Result<(), csv::Error> {
        self.buf.clear();
        let _ = write!(self.buf, "{v}");
        self.csv.write_field(self.buf.as_bytes())
    }

    fn write_fields(&mut self, r: &TraceRecord) -> Result<(), csv::Error> {
        let c = self.columns;
        self.num(r.request_id)?;
        self.csv.write_field(&r.client_id)?;
        self.csv.write_field(&r.tenant_id)?;
        self.csv.write_field(&r.slo_class)?;
        if c.vllm_priority {
            self.num(r.vllm_priority)?;
        }
        self.csv.write_field(&r.session_id)?;
        self.num(r.round_index)?;
        self.csv.write_field(&r.prefix_group)?;
        self.num(r.prefix_length)?;
        self.csv
            .write_field(if r.streaming { "true" } else { "false" })?;
        self.num(r.input_tokens)?;
        self.num(r.output_tokens)?;
        self.num(r.text_tokens)?;
        self.num(r.image_tokens)?;
        self.num(r.audio_tokens)?;
        self.num(r.video_tokens)?;
        // Rust's Display is the shortest form that reads back exactly.
        self.num(r.reason_ratio)?;
        self.csv.write_field(&r.model)?;
        self.num(r.deadline_us)?;
        if c.slo_target_us {
            self.num(r.slo_target_us)?;
        }
        self.num(r.server_input_tokens)?;
        self.num(r.arrival_time_us)?;
        self.num(r.send_time_us)?;
        self.num(r.first_chunk_time_us)?;
        self.num(r.last_chunk_time_us)?;
        self.num(r.num_chunks)?;
        self.csv.write_field(r.status.as_str())?;
        self.csv.write_field(r.error_message.trim())?;
        self.csv.write_field(r.finish_reason.trim())?;
        if c.x_request_id {
            self.csv.write_field(&r.x_request_id)?;
        }
        if c.adapter {
            self.csv.write_field(&r.adapter)?;
        }
        if c.think_time_us {
            self.num(r.think_time_us)?;
        }
        self.csv.write_record(None::<&[u8]>)
    }

    /// Append one row. A value in a column this writer does not write
    /// (e.g. a nonzero `think_time_us` without that column) is dropped.
    pub fn write(&mut self, r: &TraceRecord) -> Result<(), TraceV2Error> {
        self.write_fields(r)
            .map_err(|e| io_err(&self.data_path, "write the trace data", e))?;
        self.rows += 1;
        Ok(())
    }

    /// Write `header`, flush both files and rename them into place.
    pub fn finish(mut self, header: &TraceHeader) -> Result<(), TraceV2Error> {
        let data_path = self.data_path.clone();
        let inner = self
            .csv
            .into_inner()
            .map_err(|e| io_err(&data_path, "write the trace data", e.error()))?;
        drop(
            inner
                .into_inner()
                .map_err(|e| io_err(&data_path, "write the trace data", e.error()))?,
        );
        self.header_file
            .write_all(header.to_yaml().as_bytes())
            .and_then(|()| self.header_file.flush())
            .map_err(|e| io_err(&self.header_path, "write the trace header", e))?;
        self.data_pending
            .commit()
            .map_err(|e| io_err(&data_path, "commit the trace data", e))?;
        self.header_pending
            .commit()
            .map_err(|e| io_err(&self.header_path, "commit the trace header", e))?;
        Ok(())
    }
}
