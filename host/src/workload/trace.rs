//! Trace replay: requests read row by row from a CSV file.
//!
//! Format (also in the module README): a header row naming the columns, then
//! one row per request in non-decreasing arrival order.
//!
//! | column | required | meaning |
//! |---|---|---|
//! | `arrival_us` | yes | arrival time, integer µs (ticks) ≥ 0 |
//! | `input_tokens` | yes | prompt length ≥ 1, **including** the prefix and any session context |
//! | `output_tokens` | yes | output length ≥ 1 |
//! | `prefix_group` | no | shared-prefix group name (empty = none) |
//! | `prefix_length` | no | prefix length for this row (empty = 50); needs `prefix_group`; ≤ `input_tokens` |
//! | `slo_class` | no | `critical`, `standard` (empty), `batch`, `sheddable`, `background` |
//! | `tenant_id` | no | tenant (empty = `default`) |
//! | `session_id` | no | rows with the same id are consecutive rounds of one session |
//!
//! Columns may come in any order; an unknown or repeated column is an error.
//! Fields are trimmed; quoted fields follow standard CSV.
//!
//! Replay is exact: every row becomes one request with the row's arrival time
//! and lengths. Prompt content: rows of a prefix group start with the group's
//! prefix (the same tokens for every row; rows with different lengths share
//! their common leading part). A session round whose `input_tokens` is at
//! least the previous round's input + output carries that round's prompt and
//! output as its leading context (so it can hit the KV cache), followed by new
//! tokens; otherwise its prompt is built like an ordinary row.
//!
//! The file is read twice, both times streaming: a validation pass before the
//! run (a malformed row is reported as `file:line: column NAME: …` and nothing
//! is simulated; it also collects the tenant names and counts each session's
//! rows), then the replay pass, which keeps one row of look-ahead. Memory is
//! O(tenants + sessions), not O(rows): a session's context is held once, in
//! a segment log of which the prompts of its rounds are views (linear in the
//! context however many of its rounds are in flight, see `crate::prompt`),
//! and freed after its last row and its last round in flight.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::config::defaults;
use super::generator::{prefix_seed, trace_seed};
use super::sampler::MAX_TOKENS;
use super::WorkloadError;
use crate::engine::Tick;
use crate::request::{OptIdx, Prompt, Request, Segment, SegmentLog, SloClass};

/// Tenant name used when a row or client names none.
pub(crate) const DEFAULT_TENANT: &str = "default";

const COLUMNS: [&str; 8] = [
    "arrival_us",
    "input_tokens",
    "output_tokens",
    "prefix_group",
    "prefix_length",
    "slo_class",
    "tenant_id",
    "session_id",
];

/// Index of each column in the file (`None` = absent).
#[derive(Clone, Copy, Debug, Default)]
struct Columns([Option<usize>; 8]);

impl Columns {
    fn from_header(h: &csv::StringRecord, file: &str) -> Result<Self, WorkloadError> {
        let mut cols = Columns::default();
        for (i, name) in h.iter().enumerate() {
            let Some(k) = COLUMNS.iter().position(|c| *c == name) else {
                return Err(trace_err(
                    file,
                    1,
                    format!(
                        "unknown column \"{name}\" (known columns: {})",
                        COLUMNS.join(", ")
                    ),
                ));
            };
            if cols.0[k].replace(i).is_some() {
                return Err(trace_err(file, 1, format!("column {name} appears twice")));
            }
        }
        for required in &COLUMNS[..3] {
            if cols.get(required).is_none() {
                return Err(trace_err(
                    file,
                    1,
                    format!("the header has no {required} column (required: arrival_us, input_tokens, output_tokens)"),
                ));
            }
        }
        Ok(cols)
    }

    fn get(&self, name: &str) -> Option<usize> {
        COLUMNS
            .iter()
            .position(|c| *c == name)
            .and_then(|k| self.0[k])
    }
}

fn trace_err(file: &str, line: u64, message: String) -> WorkloadError {
    WorkloadError::Trace {
        file: file.to_string(),
        line,
        message,
    }
}

/// One parsed row, borrowing its strings from the record.
#[derive(Debug)]
struct Row<'a> {
    arrival: Tick,
    input: u32,
    output: u32,
    /// Prefix group and its length for this row.
    prefix: Option<(&'a str, u32)>,
    slo: SloClass,
    tenant: &'a str,
    session: Option<&'a str>,
}

struct RowParser<'a> {
    file: &'a str,
    line: u64,
    rec: &'a csv::StringRecord,
    cols: &'a Columns,
}

impl<'a> RowParser<'a> {
    fn field(&self, name: &str) -> Option<&'a str> {
        self.cols
            .get(name)
            .and_then(|i| self.rec.get(i))
            .filter(|s| !s.is_empty())
    }

    fn err(&self, col: &str, msg: String) -> WorkloadError {
        trace_err(self.file, self.line, format!("column {col}: {msg}"))
    }

    fn uint(&self, col: &str, max: u64) -> Result<Option<u64>, WorkloadError> {
        let Some(s) = self.field(col) else {
            return Ok(None);
        };
        let v: u64 = s.parse().map_err(|_| {
            self.err(
                col,
                format!(
                    "\"{}\" is not a non-negative integer",
                    crate::text::clean(s, 100)
                ),
            )
        })?;
        if v > max {
            return Err(self.err(col, format!("{v} exceeds the maximum {max}")));
        }
        Ok(Some(v))
    }

    fn required(&self, col: &str, min: u64, max: u64) -> Result<u64, WorkloadError> {
        let v = self
            .uint(col, max)?
            .ok_or_else(|| self.err(col, "is empty (required)".into()))?;
        if v < min {
            return Err(self.err(col, format!("must be ≥ {min}, got {v}")));
        }
        Ok(v)
    }

    fn parse(&self) -> Result<Row<'a>, WorkloadError> {
        let arrival = self.required("arrival_us", 0, i64::MAX as u64)? as Tick;
        let max = u64::from(MAX_TOKENS);
        let input = self.required("input_tokens", 1, max)? as u32;
        let output = self.required("output_tokens", 1, max)? as u32;
        let group = self.field("prefix_group");
        let plen = self.uint("prefix_length", max)?;
        let prefix = match (group, plen) {
            (None, Some(_)) => {
                return Err(self.err("prefix_length", "is set but prefix_group is empty".into()))
            }
            (None, None) => None,
            (Some(g), p) => {
                let p = p.unwrap_or(u64::from(defaults::PREFIX_LENGTH)) as u32;
                if p == 0 {
                    return Err(self.err("prefix_length", "must be ≥ 1".into()));
                }
                if p > input {
                    return Err(self.err(
                        "prefix_length",
                        format!(
                            "{p} exceeds input_tokens {input} (input_tokens includes the prefix)"
                        ),
                    ));
                }
                Some((g, p))
            }
        };
        let slo = match self.field("slo_class") {
            None => SloClass::Standard,
            Some(s) => SloClass::parse(s).ok_or_else(|| {
                self.err(
                    "slo_class",
                    format!("unknown class \"{}\" (accepted: critical, standard, batch, sheddable, background)", crate::text::clean(s, 100)),
                )
            })?,
        };
        Ok(Row {
            arrival,
            input,
            output,
            prefix,
            slo,
            tenant: self.field("tenant_id").unwrap_or(DEFAULT_TENANT),
            session: self.field("session_id"),
        })
    }
}

/// Per-session replay state.
#[derive(Debug)]
struct TraceSession {
    number: u32,
    rows_left: u32,
    rounds: u32,
    /// Previous round's prompt followed by its output (`None` before round 0
    /// and after the last row): the session's segment log, of which each
    /// round's prompt is a view (the rounds in flight share it).
    context: Option<SegmentLog>,
    /// Tokens in `context`.
    context_tokens: u64,
}

/// Streaming CSV reader with its reusable record.
#[derive(Debug)]
struct Reader {
    file: String,
    csv: csv::Reader<crate::input::LineBounded<File>>,
    rec: csv::StringRecord,
    cols: Columns,
}

impl Reader {
    fn open(path: &Path, file: &str) -> Result<Self, WorkloadError> {
        let mut csv = csv::ReaderBuilder::new()
            .has_headers(true)
            .trim(csv::Trim::All)
            .from_reader(crate::input::LineBounded::new(File::open(path).map_err(
                |e| WorkloadError::File {
                    file: file.to_string(),
                    message: e.to_string(),
                },
            )?));
        let header = csv.headers().map_err(|e| map_csv(file, &e))?.clone();
        if header.iter().all(str::is_empty) {
            return Err(trace_err(
                file,
                1,
                "the header row is missing or empty".into(),
            ));
        }
        let cols = Columns::from_header(&header, file)?;
        Ok(Reader {
            file: file.to_string(),
            csv,
            rec: csv::StringRecord::new(),
            cols,
        })
    }

    /// Reads the next row into the record; false at the end of the file.
    fn next(&mut self) -> Result<bool, WorkloadError> {
        self.csv
            .read_record(&mut self.rec)
            .map_err(|e| map_csv(&self.file, &e))
    }

    fn line(&self) -> u64 {
        self.rec.position().map_or(0, |p| p.line())
    }

    fn parse(&self) -> Result<Row<'_>, WorkloadError> {
        RowParser {
            file: &self.file,
            line: self.line(),
            rec: &self.rec,
            cols: &self.cols,
        }
        .parse()
    }
}

fn csv_message(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::Io(io) => io.to_string(),
        _ => e.to_string(),
    }
}

fn map_csv(file: &str, e: &csv::Error) -> WorkloadError {
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            pos,
            expected_len,
            len,
        } => trace_err(
            file,
            pos.as_ref().map_or(0, |p| p.line()),
            format!("the row has {len} fields, the header has {expected_len}"),
        ),
        csv::ErrorKind::Utf8 { pos, err } => trace_err(
            file,
            pos.as_ref().map_or(0, |p| p.line()),
            format!("field {} is not valid UTF-8", err.field() + 1),
        ),
        _ => WorkloadError::File {
            file: file.to_string(),
            message: csv_message(e),
        },
    }
}

/// What the validation pass learned.
#[derive(Debug)]
struct Prescan {
    rows: u64,
    tenants: Vec<String>,
    sessions: HashMap<String, TraceSession>,
}

fn prescan(path: &Path, file: &str, cap: Option<u64>) -> Result<Prescan, WorkloadError> {
    let mut r = Reader::open(path, file)?;
    let mut rows = 0u64;
    let mut tenants = Vec::new();
    let mut tenant_set: HashMap<String, ()> = HashMap::new();
    let mut sessions: HashMap<String, TraceSession> = HashMap::new();
    let mut prev: Tick = 0;
    while cap.is_none_or(|c| rows < c) && r.next()? {
        let line = r.line();
        let row = r.parse()?;
        if row.arrival < prev {
            return Err(trace_err(
                file,
                line,
                format!(
                    "column arrival_us: {} is earlier than the previous row's {prev} (rows must be in non-decreasing arrival order)",
                    row.arrival
                ),
            ));
        }
        prev = row.arrival;
        if !tenant_set.contains_key(row.tenant) {
            tenant_set.insert(row.tenant.to_string(), ());
            tenants.push(row.tenant.to_string());
        }
        if let Some(s) = row.session {
            let n = sessions.len() as u32;
            let e = sessions.entry(s.to_string()).or_insert(TraceSession {
                number: n,
                rows_left: 0,
                rounds: 0,
                context: None,
                context_tokens: 0,
            });
            e.rows_left += 1;
        }
        rows += 1;
    }
    if rows == 0 {
        return Err(WorkloadError::File {
            file: file.to_string(),
            message: "the trace has no request rows (only a header)".into(),
        });
    }
    Ok(Prescan {
        rows,
        tenants,
        sessions,
    })
}

/// A request read ahead of its turn (its prompt is in `TraceReplay::prompt`).
#[derive(Clone, Copy, Debug)]
struct Ahead {
    arrival: Tick,
    input_len: u32,
    output_len: u32,
    output_seed: u64,
    tenant: u32,
    slo: SloClass,
    session: Option<(u32, u32)>,
}

/// Replays a validated trace row by row.
#[derive(Debug)]
pub(crate) struct TraceReplay {
    reader: Reader,
    run_seed: u64,
    rng: ChaCha8Rng,
    tenants: HashMap<String, u32>,
    sessions: HashMap<String, TraceSession>,
    rows_left: u64,
    total_rows: u64,
    ahead: Option<Ahead>,
    prompt: Prompt,
    error: Option<WorkloadError>,
}

impl TraceReplay {
    /// Validates the whole trace (up to `cap` rows), then opens it for
    /// replay. Returns the replay and the tenant names in order of first use.
    pub(crate) fn open(
        path: &Path,
        file: &str,
        run_seed: u64,
        cap: Option<u64>,
    ) -> Result<(Self, Vec<String>), WorkloadError> {
        let scan = prescan(path, file, cap)?;
        let tenants = scan
            .tenants
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let mut replay = TraceReplay {
            reader: Reader::open(path, file)?,
            run_seed,
            rng: ChaCha8Rng::seed_from_u64(trace_seed(run_seed)),
            tenants,
            sessions: scan.sessions,
            rows_left: scan.rows,
            total_rows: scan.rows,
            ahead: None,
            prompt: Prompt::new(),
            error: None,
        };
        replay.read_ahead();
        if let Some(e) = replay.error.take() {
            return Err(e);
        }
        Ok((replay, scan.tenants))
    }

    /// Rows the replay yields in total.
    pub(crate) fn total_rows(&self) -> u64 {
        self.total_rows
    }

    pub(crate) fn peek_time(&self) -> Option<Tick> {
        self.ahead.map(|a| a.arrival)
    }

    pub(crate) fn take_error(&mut self) -> Option<WorkloadError> {
        self.error.take()
    }

    pub(crate) fn pop_into(&mut self, req: &mut Request) -> bool {
        let Some(a) = self.ahead.take() else {
            return false;
        };
        req.arrival = a.arrival;
        req.input_len = a.input_len;
        req.output_len = a.output_len;
        req.output_seed = a.output_seed;
        req.client = 0;
        req.tenant = a.tenant;
        req.slo_class = a.slo;
        req.session = a.session;
        req.adapter = OptIdx::NONE;
        req.model = OptIdx::NONE;
        // Hand the built prompt over and keep the recycled vector for the next row.
        std::mem::swap(&mut req.prompt, &mut self.prompt);
        self.read_ahead();
        true
    }

    /// Reads and resolves the next row into `ahead`/`prompt`.
    fn read_ahead(&mut self) {
        self.prompt.clear();
        if self.rows_left == 0 || self.error.is_some() {
            return;
        }
        match self.resolve_next() {
            Ok(a) => {
                self.ahead = a;
                self.rows_left -= 1;
            }
            Err(e) => self.error = Some(e),
        }
    }

    fn resolve_next(&mut self) -> Result<Option<Ahead>, WorkloadError> {
        if !self.reader.next()? {
            return Err(WorkloadError::File {
                file: self.reader.file.clone(),
                message: "the file changed during the run (fewer rows than validated)".into(),
            });
        }
        let unique_seed = self.rng.next_u64();
        let output_seed = self.rng.next_u64();
        let row = self.reader.parse()?;
        let tenant = *self
            .tenants
            .get(row.tenant)
            .ok_or_else(|| WorkloadError::File {
                file: self.reader.file.clone(),
                message: "the file changed during the run (unknown tenant)".into(),
            })?;
        let prompt = &mut self.prompt;
        let mut session = None;
        let mut built = false;
        if let Some(sid) = row.session {
            let s = self
                .sessions
                .get_mut(sid)
                .ok_or_else(|| WorkloadError::File {
                    file: self.reader.file.clone(),
                    message: "the file changed during the run (unknown session)".into(),
                })?;
            if let Some(log) = s.context.as_mut() {
                if u64::from(row.input) >= s.context_tokens {
                    let rest = row.input - s.context_tokens as u32;
                    if rest > 0 {
                        log.push(Segment {
                            seed: unique_seed,
                            len: rest,
                        });
                    }
                    log.view_into(prompt);
                    built = true;
                }
            }
            session = Some((s.number, s.rounds));
            s.rounds += 1;
            s.rows_left = s.rows_left.saturating_sub(1);
        }
        if !built {
            let mut rest = row.input;
            if let Some((group, len)) = row.prefix {
                prompt.push(Segment {
                    seed: prefix_seed(self.run_seed, group),
                    len,
                });
                rest -= len;
            }
            if rest > 0 {
                prompt.push(Segment {
                    seed: unique_seed,
                    len: rest,
                });
            }
        }
        if let Some(sid) = row.session {
            let s = self.sessions.get_mut(sid).expect("looked up above");
            if s.rows_left > 0 {
                // The next round may carry this prompt and its output: keep
                // them in the session's log, this prompt a view of it.
                if !built {
                    let log = SegmentLog::from_slice(prompt);
                    log.view_into(prompt);
                    s.context = Some(log);
                }
                let log = s.context.as_mut().expect("carried or just built");
                log.push(Segment {
                    seed: output_seed,
                    len: row.output,
                });
                s.context_tokens = u64::from(row.input) + u64::from(row.output);
            } else {
                s.context = None;
            }
        }
        Ok(Some(Ahead {
            arrival: row.arrival,
            input_len: row.input,
            output_len: row.output,
            output_seed,
            tenant,
            slo: row.slo,
            session,
        }))
    }
}
