//! The TraceV2 data CSV (spec §2.2): the record, the optional-column
//! layout, and the streaming reader.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::TraceV2Error;

/// The 27 base columns, in their fixed order.
pub const BASE_COLUMNS: [&str; 27] = [
    "request_id",
    "client_id",
    "tenant_id",
    "slo_class",
    "session_id",
    "round_index",
    "prefix_group",
    "prefix_length",
    "streaming",
    "input_tokens",
    "output_tokens",
    "text_tokens",
    "image_tokens",
    "audio_tokens",
    "video_tokens",
    "reason_ratio",
    "model",
    "deadline_us",
    "server_input_tokens",
    "arrival_time_us",
    "send_time_us",
    "first_chunk_time_us",
    "last_chunk_time_us",
    "num_chunks",
    "status",
    "error_message",
    "finish_reason",
];

/// The `status` column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TraceStatus {
    /// Completed.
    #[default]
    Ok,
    /// Transport error or non-200 response (observe).
    Error,
    /// Timed out.
    Timeout,
    /// Neither completed nor timed out by the end of the run (generated).
    Incomplete,
}

impl TraceStatus {
    /// The CSV spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceStatus::Ok => "ok",
            TraceStatus::Error => "error",
            TraceStatus::Timeout => "timeout",
            TraceStatus::Incomplete => "incomplete",
        }
    }

    /// Parse the CSV spelling.
    pub fn parse(s: &str) -> Option<TraceStatus> {
        Some(match s {
            "ok" => TraceStatus::Ok,
            "error" => TraceStatus::Error,
            "timeout" => TraceStatus::Timeout,
            "incomplete" => TraceStatus::Incomplete,
            _ => return None,
        })
    }
}

/// One data row: every column. Optional columns absent from a file read
/// as 0 / empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TraceRecord {
    /// observe: dispatch index; run/replay: row index.
    pub request_id: u64,
    pub client_id: String,
    pub tenant_id: String,
    pub slo_class: String,
    /// Optional column (right after `slo_class`): vLLM priority (lower = sooner).
    pub vllm_priority: u64,
    /// Empty = not a session.
    pub session_id: String,
    pub round_index: u64,
    pub prefix_group: String,
    /// Tokens of shared prefix.
    pub prefix_length: u64,
    pub streaming: bool,
    /// Prompt tokens **minus** `prefix_length` (suffix only).
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub text_tokens: u64,
    pub image_tokens: u64,
    pub audio_tokens: u64,
    pub video_tokens: u64,
    /// In [0, 1].
    pub reason_ratio: f64,
    /// Empty = the default model.
    pub model: String,
    /// Absolute µs; 0 = no timeout.
    pub deadline_us: u64,
    /// Optional column (right after `deadline_us`): per-request TTFT target, µs.
    pub slo_target_us: u64,
    /// Server `prompt_tokens` (whole prompt); 0 = not recorded.
    pub server_input_tokens: u64,
    /// Scheduled arrival, µs from the run start.
    pub arrival_time_us: i64,
    /// observe: epoch µs; generated: = arrival.
    pub send_time_us: i64,
    pub first_chunk_time_us: i64,
    pub last_chunk_time_us: i64,
    pub num_chunks: u64,
    pub status: TraceStatus,
    pub error_message: String,
    pub finish_reason: String,
    /// Trailing optional column (real mode).
    pub x_request_id: String,
    /// Trailing optional column: LoRA adapter id.
    pub adapter: String,
    /// Trailing optional column: think time before this round, µs from the
    /// end of the previous request; 0 = not recorded.
    pub think_time_us: u64,
}

/// Which optional columns a file has (reader) or gets (writer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceColumns {
    pub vllm_priority: bool,
    pub slo_target_us: bool,
    pub x_request_id: bool,
    pub adapter: bool,
    pub think_time_us: bool,
}

impl TraceColumns {
    /// The reference writers' rule: each optional column only when a
    /// record needs it — `vllm_priority` when one is nonzero (or, with
    /// `real`, a class is nonempty), `slo_target_us` when a target is > 0,
    /// `x_request_id` in `real` mode only, `adapter` when one is nonempty,
    /// `think_time_us` when one is nonzero.
    pub fn needed_by<'a>(records: impl IntoIterator<Item = &'a TraceRecord>, real: bool) -> Self {
        let mut c = TraceColumns {
            x_request_id: real,
            ..TraceColumns::default()
        };
        for r in records {
            c.vllm_priority |= r.vllm_priority != 0 || (real && !r.slo_class.is_empty());
            c.slo_target_us |= r.slo_target_us > 0;
            c.adapter |= !r.adapter.is_empty();
            c.think_time_us |= r.think_time_us != 0;
        }
        c
    }

    /// The header row's column names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v = Vec::with_capacity(32);
        for (i, name) in BASE_COLUMNS.iter().enumerate() {
            v.push(*name);
            if i == 3 && self.vllm_priority {
                v.push("vllm_priority");
            }
            if i == 17 && self.slo_target_us {
                v.push("slo_target_us");
            }
        }
        for (on, name) in [
            (self.x_request_id, "x_request_id"),
            (self.adapter, "adapter"),
            (self.think_time_us, "think_time_us"),
        ] {
            if on {
                v.push(name);
            }
        }
        v
    }
}

/// Where each column is in a file.
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// Index of base column k.
    base: [usize; 27],
    priority: Option<usize>,
    slo_target: Option<usize>,
    x_request_id: Option<usize>,
    adapter: Option<usize>,
    think_time: Option<usize>,
    /// Fewest fields a row may have.
    min_fields: usize,
}

impl Layout {
    fn from_header(h: &AnyRow<'_>) -> Result<Layout, String> {
        let name = |i: usize| h.get(i).map(str::trim);
        let priority = (name(4) == Some("vllm_priority")).then_some(4);
        let shift = usize::from(priority.is_some());
        let deadline = 17 + shift;
        let slo_target = (name(deadline + 1) == Some("slo_target_us")).then_some(deadline + 1);
        let positional = 27 + shift + usize::from(slo_target.is_some());
        if h.len() < positional {
            return Err(format!(
                "the header row has {} columns; a TraceV2 data file has at least the 27 base columns ({}{})",
                h.len(),
                BASE_COLUMNS.join(","),
                if shift + usize::from(slo_target.is_some()) > 0 {
                    ", plus the optional vllm_priority / slo_target_us it names"
                } else {
                    ""
                }
            ));
        }
        let mut base = [0usize; 27];
        for (k, slot) in base.iter_mut().enumerate() {
            let mut i = k;
            if k >= 4 {
                i += shift;
            }
            if k >= 18 && slo_target.is_some() {
                i += 1;
            }
            *slot = i;
        }
        // Columns are read by position: a header naming another base
        // column at a position (swapped input/output_tokens…) is a file
        // whose values would be read as the wrong quantity.
        for (k, &i) in base.iter().enumerate() {
            let found = name(i).unwrap_or("");
            if found != BASE_COLUMNS[k] && BASE_COLUMNS.contains(&found) {
                return Err(format!(
                    "column {} is named '{found}', but a TraceV2 data file has '{}' there (its columns are read by position, in the order {}); reorder the columns or fix the header",
                    i + 1,
                    BASE_COLUMNS[k],
                    BASE_COLUMNS.join(",")
                ));
            }
        }
        let trailing = |n: &str| (positional..h.len()).find(|&i| name(i) == Some(n));
        let (x, a, t) = (
            trailing("x_request_id"),
            trailing("adapter"),
            trailing("think_time_us"),
        );
        let count = [x, a, t].iter().filter(|o| o.is_some()).count();
        let last = [x, a, t].iter().flatten().max().map_or(0, |&i| i + 1);
        Ok(Layout {
            base,
            priority,
            slo_target,
            x_request_id: x,
            adapter: a,
            think_time: t,
            min_fields: (positional + count).max(last),
        })
    }

    fn columns(&self) -> TraceColumns {
        TraceColumns {
            vllm_priority: self.priority.is_some(),
            slo_target_us: self.slo_target.is_some(),
            x_request_id: self.x_request_id.is_some(),
            adapter: self.adapter.is_some(),
            think_time_us: self.think_time.is_some(),
        }
    }
}

/// Streams the rows of a TraceV2 data file.
///
/// Lines without a double quote (every line blis writes unless a text
/// field needs quoting) are split on commas directly: that is a third of
/// the cost of a general CSV parser on a million-row trace. From the first
/// line with a quote, or one that is not UTF-8, to the end of the file the
/// rows go through the `csv` crate, which reads quoted fields (commas and
/// line breaks inside quotes) and names invalid UTF-8. Both read the same
/// rows with the same line numbers.
#[derive(Debug)]
pub struct TraceReader {
    file: String,
    rows: Rows,
    layout: Layout,
}

type Rest = std::io::Chain<std::io::Cursor<Vec<u8>>, BufReader<File>>;

#[derive(Debug)]
enum Rows {
    /// Unquoted lines so far.
    Plain {
        input: BufReader<File>,
        line: Vec<u8>,
        /// Field bounds of the current line.
        bounds: Vec<(u32, u32)>,
        /// Lines read so far.
        line_no: u64,
    },
    /// The rest of the file, from the line that first needed the csv crate.
    Quoted {
        csv: Box<csv::Reader<Rest>>,
        rec: csv::StringRecord,
        /// Lines before the first line the csv reader saw.
        line_base: u64,
    },
    /// Between the two (never seen outside `next_row`).
    Switching,
}

/// A row read either way: a plain line split on its commas, or a csv record.
#[derive(Clone, Copy)]
enum AnyRow<'a> {
    Plain {
        line: &'a str,
        /// Field bounds in `line`.
        bounds: &'a [(u32, u32)],
    },
    Csv(&'a csv::StringRecord),
}

impl AnyRow<'_> {
    #[inline]
    fn len(&self) -> usize {
        match self {
            AnyRow::Plain { bounds, .. } => bounds.len(),
            AnyRow::Csv(r) => r.len(),
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Option<&str> {
        match self {
            AnyRow::Plain { line, bounds } => {
                bounds.get(i).map(|&(a, b)| &line[a as usize..b as usize])
            }
            AnyRow::Csv(r) => r.get(i),
        }
    }
}

fn csv_error(file: &str, line_base: u64, e: &csv::Error) -> TraceV2Error {
    match e.kind() {
        csv::ErrorKind::Utf8 { pos, err } => TraceV2Error::Row {
            file: file.to_string(),
            line: line_base + pos.as_ref().map_or(0, |p| p.line()),
            message: format!("field {} is not valid UTF-8", err.field() + 1),
        },
        csv::ErrorKind::Io(io) => TraceV2Error::Io {
            file: file.to_string(),
            message: io.to_string(),
        },
        _ => TraceV2Error::Io {
            file: file.to_string(),
            message: e.to_string(),
        },
    }
}

fn io_error(file: &str, e: &std::io::Error) -> TraceV2Error {
    TraceV2Error::Io {
        file: file.to_string(),
        message: e.to_string(),
    }
}

impl Rows {
    /// Read the next record; call `f` with its fields and its 1-based
    /// line. `Ok(None)` at the end of the file.
    fn next_row<R>(
        &mut self,
        file: &str,
        f: impl FnOnce(AnyRow<'_>, u64) -> R,
    ) -> Result<Option<R>, TraceV2Error> {
        if let Rows::Plain {
            input,
            line,
            bounds,
            line_no,
        } = self
        {
            line.clear();
            let limit = crate::input::MAX_LINE_BYTES;
            if (&mut *input)
                .take(limit + 1)
                .read_until(b'\n', line)
                .map_err(|e| io_error(file, &e))?
                == 0
            {
                return Ok(None);
            }
            *line_no += 1;
            if line.len() as u64 > limit {
                return Err(TraceV2Error::Row {
                    file: file.to_string(),
                    line: *line_no,
                    message: format!(
                        "the line is longer than {} MiB: not a TraceV2 row (is it the right file? a device or a pipe that never ends?)",
                        limit >> 20
                    ),
                });
            }
            // One pass over the bytes: the commas, and whether there is a quote.
            bounds.clear();
            let mut start = 0u32;
            let mut quoted = false;
            for (i, &c) in line.iter().enumerate() {
                if c == b',' {
                    bounds.push((start, i as u32));
                    start = i as u32 + 1;
                }
                quoted |= c == b'"';
            }
            let mut end = line.len();
            if line.last() == Some(&b'\n') {
                end -= 1;
                if end > 0 && line[end - 1] == b'\r' {
                    end -= 1;
                }
            }
            bounds.push((start, (end as u32).max(start)));
            if !quoted {
                if let Ok(text) = std::str::from_utf8(&line[..end]) {
                    let row = AnyRow::Plain { line: text, bounds };
                    return Ok(Some(f(row, *line_no)));
                }
            }
            // This line needs the csv crate: hand it the line and the rest.
            let Rows::Plain {
                input,
                line,
                line_no,
                ..
            } = std::mem::replace(self, Rows::Switching)
            else {
                unreachable!("matched above")
            };
            let rest = std::io::Cursor::new(line).chain(input);
            *self = Rows::Quoted {
                csv: Box::new(
                    csv::ReaderBuilder::new()
                        .has_headers(false)
                        .flexible(true)
                        .from_reader(rest),
                ),
                rec: csv::StringRecord::new(),
                line_base: line_no - 1,
            };
        }
        let Rows::Quoted {
            csv,
            rec,
            line_base,
        } = self
        else {
            unreachable!("a reader is plain or quoted")
        };
        if !csv
            .read_record(rec)
            .map_err(|e| csv_error(file, *line_base, &e))?
        {
            return Ok(None);
        }
        let line = *line_base + rec.position().map_or(0, |p| p.line());
        Ok(Some(f(AnyRow::Csv(rec), line)))
    }
}

impl TraceReader {
    /// Open `path` and read its header row.
    pub fn open(path: &Path) -> Result<TraceReader, TraceV2Error> {
        let file = path.display().to_string();
        let input = File::open(path).map_err(|e| TraceV2Error::Io {
            file: file.clone(),
            message: format!("cannot open the trace data: {e}"),
        })?;
        let mut rows = Rows::Plain {
            input: BufReader::with_capacity(1 << 16, input),
            line: Vec::new(),
            bounds: Vec::new(),
            line_no: 0,
        };
        let layout = rows
            .next_row(&file, |h, _| Layout::from_header(&h))?
            .ok_or_else(|| TraceV2Error::Row {
                file: file.clone(),
                line: 1,
                message: "the file is empty; a TraceV2 data file starts with a header row of the 27 base columns".into(),
            })?
            .map_err(|message| TraceV2Error::Row {
                file: file.clone(),
                line: 1,
                message,
            })?;
        Ok(TraceReader { file, rows, layout })
    }

    /// The optional columns of the file.
    pub fn columns(&self) -> TraceColumns {
        self.layout.columns()
    }

    /// The file as named in messages.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Read the next row into `out` (reusing its string buffers). Returns
    /// the row's 1-based line, or `None` at the end of the file.
    pub fn read_into(&mut self, out: &mut TraceRecord) -> Result<Option<u64>, TraceV2Error> {
        loop {
            let (file, layout) = (&self.file, &self.layout);
            let parsed = self.rows.next_row(file, |rec, line| {
                // A blank line (one empty field) is skipped.
                if rec.len() == 1 && rec.get(0).is_some_and(|f| f.trim().is_empty()) {
                    return Ok(None);
                }
                RowParser {
                    file,
                    line,
                    rec,
                    layout,
                }
                .parse(out)
                .map(|()| Some(line))
            })?;
            match parsed {
                None => return Ok(None),
                Some(Ok(None)) => continue,
                Some(r) => return r,
            }
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<TraceRecord, TraceV2Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut r = TraceRecord::default();
        match self.read_into(&mut r) {
            Ok(Some(_)) => Some(Ok(r)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// A field quoted in an error: control characters escaped, cut.
fn quote(s: &str) -> String {
    crate::text::clean(s, 100)
}

struct RowParser<'a> {
    file: &'a str,
    line: u64,
    rec: AnyRow<'a>,
    layout: &'a Layout,
}

/// `s.trim()`, without the Unicode scan when both ends are plain ASCII.
#[inline]
fn trim(s: &str) -> &str {
    let b = s.as_bytes();
    let plain = |c: &u8| c.is_ascii() && !c.is_ascii_whitespace();
    if b.first().is_none_or(plain) && b.last().is_none_or(plain) {
        s
    } else {
        s.trim()
    }
}

/// A plain decimal integer (optional `-`, at most 18 digits), the common
/// case of an integer column; anything else takes the general path.
#[inline]
fn plain_int(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let (neg, digits) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut v = 0i64;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + i64::from(d);
    }
    Some(if neg { -v } else { v })
}

impl RowParser<'_> {
    #[cold]
    fn err(&self, message: String) -> TraceV2Error {
        TraceV2Error::Row {
            file: self.file.to_string(),
            line: self.line,
            message,
        }
    }

    #[inline]
    fn raw(&self, i: usize) -> &str {
        self.rec.get(i).unwrap_or("")
    }

    #[inline]
    fn base(&self, k: usize) -> &str {
        self.raw(self.layout.base[k])
    }

    #[inline]
    fn count_at(&self, i: usize, col: &str) -> Result<u64, TraceV2Error> {
        match plain_int(self.raw(i)) {
            Some(v @ 0..) => Ok(v as u64),
            _ => self.count_slow(i, col),
        }
    }

    #[cold]
    fn count_slow(&self, i: usize, col: &str) -> Result<u64, TraceV2Error> {
        let s = trim(self.raw(i));
        match s.parse::<i64>() {
            Ok(v) if v >= 0 => Ok(v as u64),
            Ok(v) => Err(self.err(format!(
                "column {col}: {v} is negative (a count must be ≥ 0)"
            ))),
            Err(_) => Err(self.err(format!("column {col}: \"{}\" is not an integer", quote(s)))),
        }
    }

    #[inline]
    fn count(&self, k: usize) -> Result<u64, TraceV2Error> {
        self.count_at(self.layout.base[k], BASE_COLUMNS[k])
    }

    #[inline]
    fn time(&self, k: usize) -> Result<i64, TraceV2Error> {
        match plain_int(self.base(k)) {
            Some(v) => Ok(v),
            None => self.time_slow(k),
        }
    }

    #[cold]
    fn time_slow(&self, k: usize) -> Result<i64, TraceV2Error> {
        let s = trim(self.base(k));
        s.parse::<i64>().map_err(|_| {
            self.err(format!(
                "column {}: \"{}\" is not an integer (µs)",
                BASE_COLUMNS[k],
                quote(s)
            ))
        })
    }

    fn set(dst: &mut String, src: &str) {
        dst.clear();
        dst.push_str(src);
    }

    fn parse(&self, r: &mut TraceRecord) -> Result<(), TraceV2Error> {
        let n = self.rec.len();
        if n < self.layout.min_fields {
            return Err(self.err(format!(
                "the row has {n} fields; this file's header needs at least {} (the 27 base columns{})",
                self.layout.min_fields,
                if self.layout.min_fields > 27 { " and the optional columns it names" } else { "" }
            )));
        }
        r.request_id = self.count(0)?;
        Self::set(&mut r.client_id, self.base(1));
        Self::set(&mut r.tenant_id, self.base(2));
        Self::set(&mut r.slo_class, self.base(3));
        r.vllm_priority = match self.layout.priority {
            Some(i) => self.count_at(i, "vllm_priority")?,
            None => 0,
        };
        Self::set(&mut r.session_id, self.base(4));
        r.round_index = self.count(5)?;
        Self::set(&mut r.prefix_group, self.base(6));
        r.prefix_length = self.count(7)?;
        let s = trim(self.base(8));
        r.streaming = match s {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => {
                return Err(self.err(format!(
                    "column streaming: \"{}\" is not a boolean (true/false, 1/0, t/f)",
                    quote(s)
                )))
            }
        };
        r.input_tokens = self.count(9)?;
        r.output_tokens = self.count(10)?;
        r.text_tokens = self.count(11)?;
        r.image_tokens = self.count(12)?;
        r.audio_tokens = self.count(13)?;
        r.video_tokens = self.count(14)?;
        let s = trim(self.base(15));
        r.reason_ratio = match s.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => v,
            Ok(v) => return Err(self.err(format!("column reason_ratio: {v} lies outside [0, 1]"))),
            Err(_) => {
                return Err(self.err(format!(
                    "column reason_ratio: \"{}\" is not a number",
                    quote(s)
                )))
            }
        };
        Self::set(&mut r.model, self.base(16));
        r.deadline_us = self.count(17)?;
        r.slo_target_us = match self.layout.slo_target {
            Some(i) => self.count_at(i, "slo_target_us")?,
            None => 0,
        };
        r.server_input_tokens = self.count(18)?;
        r.arrival_time_us = self.time(19)?;
        r.send_time_us = self.time(20)?;
        r.first_chunk_time_us = self.time(21)?;
        r.last_chunk_time_us = self.time(22)?;
        r.num_chunks = self.count(23)?;
        let s = trim(self.base(24));
        r.status = TraceStatus::parse(s).ok_or_else(|| {
            self.err(format!(
                "column status: \"{}\" is not a status (ok, error, timeout, incomplete)",
                quote(s)
            ))
        })?;
        Self::set(&mut r.error_message, trim(self.base(25)));
        Self::set(&mut r.finish_reason, trim(self.base(26)));
        match self.layout.x_request_id {
            Some(i) => Self::set(&mut r.x_request_id, self.raw(i)),
            None => r.x_request_id.clear(),
        }
        match self.layout.adapter {
            Some(i) => Self::set(&mut r.adapter, self.raw(i)),
            None => r.adapter.clear(),
        }
        r.think_time_us = match self.layout.think_time {
            Some(i) => self.count_at(i, "think_time_us")?,
            None => 0,
        };
        if r.deadline_us > 0 && r.arrival_time_us > 0 && (r.deadline_us as i64) < r.arrival_time_us
        {
            return Err(self.err(format!(
                "column deadline_us: {} is before arrival_time_us {} (a deadline is absolute µs; 0 = none)",
                r.deadline_us, r.arrival_time_us
            )));
        }
        Ok(())
    }
}
