//! The sweep file and its expansion into a grid of runs.
//!
//! A sweep file names a base run file, overrides applied to every run
//! (`[set]`), axes — a run-file key with a list of values, or named variants
//! that set several keys at once — optional `zip` groups of axes that advance
//! together, and `seeds`. [`Plan::load`] checks it and expands the Cartesian
//! product in a fixed order (first axis slowest, seeds fastest); each
//! [`PlannedRun`] has a stable id derived from its axis values alone, so the
//! same run has the same id on every machine and in every shard.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{overrides, RunFile};

/// The sweep file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    /// Base run file, relative to the sweep file (default: the built-in scenario).
    #[serde(default)]
    base: Option<PathBuf>,
    /// Seeds: each run's `seed` (default: the base run file's seed, one run
    /// per cell); any u64, as an integer or (above i64::MAX) a string.
    #[serde(default)]
    seeds: Option<Vec<SeedValue>>,
    /// Overrides applied to every run (dotted keys, or nested tables).
    #[serde(default)]
    set: toml::Table,
    /// The axes, in order (the first varies slowest).
    #[serde(default, rename = "axis")]
    axes: Vec<AxisFile>,
}

/// One seed of `seeds`, read as the run file reads `seed`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(transparent)]
pub(crate) struct SeedValue(
    #[serde(deserialize_with = "crate::config::seed::deserialize")] pub(crate) u64,
);

/// The most runs a sweep may have: past it, the grid cannot be meant (a
/// million runs of a millisecond each is already 17 minutes of CPU) and
/// its plan alone would take gigabytes.
pub const MAX_RUNS: u128 = 1_000_000;

/// Column names a sweep's table has besides the axes.
const FIXED_COLUMNS: [&str; 4] = ["run_id", "status", "error", "seed"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AxisFile {
    /// Run-file key (dotted, as `--set` takes it), for a list of `values`.
    #[serde(default)]
    key: Option<String>,
    /// Column name in results (default: the key).
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    values: Option<Vec<toml::Value>>,
    #[serde(default)]
    variants: Option<Vec<VariantFile>>,
    /// Axes with the same `zip` name advance together (equal lengths).
    #[serde(default)]
    zip: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VariantFile {
    name: String,
    #[serde(default)]
    set: toml::Table,
}

/// One axis after checking: a column name and, per value, a label (the
/// column's value) and the overrides it stands for.
#[derive(Clone, Debug)]
pub struct Axis {
    pub name: String,
    pub points: Vec<AxisPoint>,
}

/// One value of an axis.
#[derive(Clone, Debug)]
pub struct AxisPoint {
    /// What the results column shows (the value itself, or the variant name).
    pub label: toml::Value,
    pub sets: Vec<(String, toml::Value)>,
}

/// One run of the grid.
#[derive(Clone, Debug)]
pub struct PlannedRun {
    /// Position in the grid (0-based).
    pub index: usize,
    /// Stable id: a hash of the axis values and the seed.
    pub id: String,
    /// (column, value) per axis, in axis order.
    pub axes: Vec<(String, toml::Value)>,
    pub seed: Option<u64>,
    /// Every override of this run, in the order applied: `[set]`, the axes, the seed.
    pub sets: Vec<(String, toml::Value)>,
}

/// A checked sweep: where its base is, its axes, and the runs.
#[derive(Debug)]
pub struct Plan {
    /// The sweep file (for messages).
    pub name: String,
    /// Base run file (absolute), or `None` for the built-in scenario.
    pub base: Option<PathBuf>,
    /// Base run file's text (part of the sweep's fingerprint).
    pub base_text: String,
    pub axis_names: Vec<String>,
    pub runs: Vec<PlannedRun>,
    /// A hash of everything that decides the runs' reports.
    pub fingerprint: String,
}

/// Flatten nested tables into dotted keys (arrays and scalars are leaves).
pub(crate) fn flatten_sets(prefix: &str, t: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(inner) if !inner.is_empty() => flatten_sets(&key, inner, out),
            _ => out.push((key, v.clone())),
        }
    }
}

/// FNV-1a, 64 bits: stable across platforms and Rust versions.
pub fn fnv64(bytes: &[u8]) -> u64 {
    fnv64_more(0xcbf2_9ce4_8422_2325, bytes)
}

/// FNV-1a continued from `h` over `bytes` ([`fnv64`] starts it).
pub fn fnv64_more(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// [`fnv64`] of a file's contents, read in pieces (a trace of gigabytes
/// is hashed in constant memory).
fn fnv64_file(path: &Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut buf = vec![0u8; 1 << 16];
    let mut h = fnv64(&[]);
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h);
        }
        h = fnv64_more(h, &buf[..n]);
    }
}

/// A value as one line of TOML (`10.0`, `"x"`, `[1, 2]`).
pub fn toml_text(v: &toml::Value) -> String {
    v.to_string()
}

/// The run id of a run with these axis values and seed.
fn run_id(axes: &[(String, toml::Value)], seed: Option<u64>) -> String {
    let mut canon = String::new();
    for (k, v) in axes {
        canon.push_str(k);
        canon.push('=');
        canon.push_str(&toml_text(v));
        canon.push('\n');
    }
    if let Some(s) = seed {
        canon.push_str(&format!("seed={s}\n"));
    }
    format!("{:016x}", fnv64(canon.as_bytes()))
}

/// Levenshtein distance (for "did you mean").
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// If `message` (a serde error) is about an unknown field of `key`, the
/// closest accepted key (as a full dotted path).
fn closest_key(key: &str, message: &str) -> Option<Option<String>> {
    let rest = message.split("unknown field `").nth(1)?;
    let unknown = rest.split('`').next()?;
    let parts: Vec<&str> = key.split('.').collect();
    let pos = parts.iter().position(|p| *p == unknown)?;
    let prefix = parts[..pos].join(".");
    let expected: Vec<&str> = rest
        .split("expected")
        .nth(1)
        .unwrap_or("")
        .split('`')
        .skip(1)
        .step_by(2)
        .collect();
    let best = expected
        .iter()
        .min_by_key(|c| (edit_distance(unknown, c), c.len()))
        .map(|c| {
            if prefix.is_empty() {
                (*c).to_string()
            } else {
                format!("{prefix}.{c}")
            }
        });
    Some(best)
}

/// Check that `key` names a run-file key: set it (to `value`) in the base
/// table and deserialise; an unknown field is an error naming the closest key.
pub(crate) fn check_key(
    base: &toml::Table,
    key: &str,
    value: &toml::Value,
    what: &str,
) -> Result<(), String> {
    let mut t = base.clone();
    overrides::set(&mut t, key, value.clone()).map_err(|e| format!("{what}: {e}"))?;
    let text = toml::to_string(&t).map_err(|e| format!("{what}: {e}"))?;
    if let Err(e) = toml::from_str::<RunFile>(&text) {
        if let Some(best) = closest_key(key, e.message()) {
            return Err(match best {
                Some(b) => format!(
                    "{what}: '{key}' is not a run-file key; did you mean '{b}'? (see README.md, \"Run file reference\")"
                ),
                None => format!(
                    "{what}: '{key}' is not a run-file key (see README.md, \"Run file reference\")"
                ),
            });
        }
    }
    Ok(())
}

impl Plan {
    /// Read, check and expand a sweep file.
    pub fn load(path: &Path) -> Result<Plan, String> {
        let text = crate::input::read_to_string(path)
            .map_err(|e| format!("cannot read sweep file {}: {e}", path.display()))?;
        Plan::from_text(
            &path.display().to_string(),
            path.parent().unwrap_or(Path::new("")),
            &text,
        )
    }

    /// Check and expand a sweep file's text; `dir` resolves `base`.
    pub fn from_text(name: &str, dir: &Path, text: &str) -> Result<Plan, String> {
        let file: SweepFile =
            toml::from_str(text).map_err(|e| crate::config::describe_toml_error(name, text, &e))?;
        let (base, base_text) = read_base(name, dir, &file)?;
        let base_table: toml::Table = base_text.parse().map_err(|e: toml::de::Error| {
            format!("{name}: base run file: {}", e.message().trim())
        })?;

        let mut fixed = Vec::new();
        flatten_sets("", &file.set, &mut fixed);
        for (k, v) in &fixed {
            check_key(&base_table, k, v, &format!("{name}: [set]"))?;
        }

        // Axes: check each and turn it into points.
        let mut axes: Vec<(Axis, Option<String>)> = Vec::new();
        for (i, a) in file.axes.iter().enumerate() {
            let what = format!("{name}: axis {}", i + 1);
            let axis = check_axis(a, &base_table, &what)?;
            check_axis_name(&axis, &axes, &what)?;
            axes.push((axis, a.zip.clone()));
        }
        if let Some(seeds) = &file.seeds {
            if seeds.is_empty() {
                return Err(format!("{name}: seeds = []: give at least one seed, or leave `seeds` out to use the base run file's seed"));
            }
        }
        let groups = zip_groups(name, &axes)?;
        let seeds: Vec<Option<u64>> = match &file.seeds {
            Some(s) => s.iter().map(|v| Some(v.0)).collect(),
            None => vec![None],
        };
        let runs = expand(name, &axes, &groups, &seeds, &fixed)?;

        let mut canon = format!("base:\n{base_text}\n");
        let base_dir = base
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new(""));
        canon.push_str(&inputs_digest(&base_table, &runs, base_dir));
        for r in &runs {
            canon.push_str(&r.id);
            for (k, v) in &r.sets {
                canon.push_str(&format!(" {k}={}", toml_text(v)));
            }
            canon.push('\n');
        }
        Ok(Plan {
            name: name.to_string(),
            base,
            base_text,
            axis_names: axes.iter().map(|(a, _)| a.name.clone()).collect(),
            runs,
            fingerprint: format!("{:016x}", fnv64(canon.as_bytes())),
        })
    }

    /// The runs of shard `i` of `n` (1-based): every n-th run, starting at the i-th.
    pub fn shard(&self, shard: Option<Shard>) -> Vec<&PlannedRun> {
        self.runs
            .iter()
            .filter(|r| shard.is_none_or(|s| r.index % s.count == s.index - 1))
            .collect()
    }
}

/// One line per file the runs read (the keys of [`crate::config::PATH_KEYS`]
/// and `plugins[].path`, in the base or set by any run): its path and a
/// hash of its contents, so an edited trace, model config, calibration
/// profile, llm-d config or plugin changes the sweep's fingerprint.
pub(crate) fn inputs_digest(base: &toml::Table, runs: &[PlannedRun], base_dir: &Path) -> String {
    use crate::config::{get_str, PATH_KEYS};
    let mut paths = std::collections::BTreeSet::new();
    for key in PATH_KEYS {
        if let Some(p) = get_str(base, key) {
            paths.insert(p);
        }
    }
    let plugin_paths = |v: &toml::Value, out: &mut std::collections::BTreeSet<String>| {
        for p in v.as_array().into_iter().flatten() {
            if let Some(path) = p.get("path").and_then(toml::Value::as_str) {
                out.insert(path.to_string());
            }
        }
    };
    if let Some(v) = base.get("plugins") {
        plugin_paths(v, &mut paths);
    }
    for r in runs {
        for (k, v) in &r.sets {
            if PATH_KEYS.contains(&k.as_str()) {
                if let Some(p) = v.as_str() {
                    paths.insert(p.to_string());
                }
            } else if k == "plugins" {
                plugin_paths(v, &mut paths);
            }
        }
    }
    let mut out = String::new();
    for p in paths {
        let full = crate::config::resolve(base_dir, Path::new(&p));
        let hash = match fnv64_file(&full) {
            Ok(h) => format!("{h:016x}"),
            Err(_) => "unreadable".to_string(),
        };
        out.push_str(&format!("input {p} {hash}\n"));
    }
    out
}

/// `--shard i/N`: the i-th (1-based) of N disjoint parts of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || {
            format!("--shard {s}: expected i/N with 1 <= i <= N (e.g. --shard 2/4 runs the second of four parts)")
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// The base run file's path (absolute) and text: `base` against the sweep
/// file's folder, or the built-in scenario.
fn read_base(
    name: &str,
    dir: &Path,
    file: &SweepFile,
) -> Result<(Option<PathBuf>, String), String> {
    match &file.base {
        Some(b) => {
            let p = if b.is_absolute() {
                b.clone()
            } else {
                dir.join(b)
            };
            let p = std::path::absolute(&p).unwrap_or(p);
            let t = crate::input::read_to_string(&p).map_err(|e| {
                format!(
                    "{name}: base = \"{}\": cannot read {}: {e}",
                    b.display(),
                    p.display()
                )
            })?;
            Ok((Some(p), t))
        }
        None => Ok((None, crate::config::DEFAULT_RUN_FILE.to_string())),
    }
}

/// One `[[axis]]`: `key` and `values`, or `name` and variants, each value
/// checked against the base run file.
pub(crate) fn check_axis(
    a: &AxisFile,
    base_table: &toml::Table,
    what: &str,
) -> Result<Axis, String> {
    match (&a.key, &a.values, &a.variants) {
        (Some(key), Some(values), None) => {
            if values.is_empty() {
                return Err(format!("{what} ('{key}'): the axis has no values; give at least one, e.g. values = [10.0, 20.0]"));
            }
            check_key(base_table, key, &values[0], what)?;
            Ok(Axis {
                name: a.name.clone().unwrap_or_else(|| key.clone()),
                points: values
                    .iter()
                    .map(|v| AxisPoint {
                        label: v.clone(),
                        sets: vec![(key.clone(), v.clone())],
                    })
                    .collect(),
            })
        }
        (None, None, Some(variants)) => {
            let Some(axis_name) = a.name.clone() else {
                return Err(format!("{what}: an axis of variants needs a name (the results column), e.g. name = \"routing\""));
            };
            if variants.is_empty() {
                return Err(format!("{what} ('{axis_name}'): the axis has no variants; give at least one [[axis.variants]] with a name and a set table"));
            }
            let mut points = Vec::new();
            for v in variants {
                if points.iter().any(|p: &AxisPoint| p.label.as_str() == Some(v.name.as_str())) {
                    return Err(format!("{what} ('{axis_name}'): two variants are named '{}'", v.name));
                }
                let mut sets = Vec::new();
                flatten_sets("", &v.set, &mut sets);
                for (k, val) in &sets {
                    check_key(base_table, k, val, &format!("{what} ('{axis_name}'), variant '{}'", v.name))?;
                }
                points.push(AxisPoint {
                    label: toml::Value::String(v.name.clone()),
                    sets,
                });
            }
            Ok(Axis {
                name: axis_name,
                points,
            })
        }
        _ => Err(format!(
            "{what}: an axis has either `key` and `values` (e.g. key = \"workload.aggregate_rate\", values = [10.0, 20.0]) or `name` and `[[axis.variants]]`"
        )),
    }
}

/// An axis's column name is new and not a report column, and it sets no
/// key an earlier axis sets (the later would silently win).
fn check_axis_name(axis: &Axis, axes: &[(Axis, Option<String>)], what: &str) -> Result<(), String> {
    if FIXED_COLUMNS.contains(&axis.name.as_str()) || axes.iter().any(|(x, _)| x.name == axis.name)
    {
        return Err(format!(
            "{what}: the column name '{}' is used twice (give the axis another `name`)",
            axis.name
        ));
    }
    if super::table::is_report_column(&axis.name) {
        return Err(format!(
            "{what}: the column name '{}' is a column of the report in results.csv; give the axis another `name` (e.g. name = \"{}_axis\")",
            axis.name, axis.name
        ));
    }
    let keys = |a: &Axis| -> Vec<String> {
        let mut k: Vec<String> = a
            .points
            .iter()
            .flat_map(|p| p.sets.iter().map(|(k, _)| k.clone()))
            .collect();
        k.sort();
        k.dedup();
        k
    };
    let mine = keys(axis);
    for (other, _) in axes {
        if let Some(k) = keys(other).iter().find(|k| {
            mine.iter().any(|m| {
                m == *k || m.starts_with(&format!("{k}.")) || k.starts_with(&format!("{m}."))
            })
        }) {
            return Err(format!(
                "{what} ('{}') and axis '{}' both set '{k}': one run would apply only the later value while the table shows both; vary the key in one axis (a variant axis can set several keys)",
                axis.name, other.name
            ));
        }
    }
    Ok(())
}

/// The axes' groups: a zip group sits where its first axis is, and its
/// axes have equal lengths; every other axis is a group of its own.
fn zip_groups(name: &str, axes: &[(Axis, Option<String>)]) -> Result<Vec<Vec<usize>>, String> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut zip_of: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (axis, zip)) in axes.iter().enumerate() {
        match zip {
            Some(z) => match zip_of.get(z) {
                Some(&g) => {
                    let first = &axes[groups[g][0]].0;
                    if first.points.len() != axis.points.len() {
                        return Err(format!(
                            "{name}: zip group '{z}': axis '{}' has {} values but '{}' has {}; zipped axes need equal lengths",
                            axis.name,
                            axis.points.len(),
                            first.name,
                            first.points.len()
                        ));
                    }
                    groups[g].push(i);
                }
                None => {
                    zip_of.insert(z.clone(), groups.len());
                    groups.push(vec![i]);
                }
            },
            None => groups.push(vec![i]),
        }
    }
    Ok(groups)
}

/// The grid: the Cartesian product over groups, first slowest; seeds
/// fastest. Counted before anything is built; ids unique.
fn expand(
    name: &str,
    axes: &[(Axis, Option<String>)],
    groups: &[Vec<usize>],
    seeds: &[Option<u64>],
    fixed: &[(String, toml::Value)],
) -> Result<Vec<PlannedRun>, String> {
    let lens: Vec<usize> = groups.iter().map(|g| axes[g[0]].0.points.len()).collect();
    let total = lens
        .iter()
        .fold(seeds.len() as u128, |n, &l| n.saturating_mul(l as u128));
    if total > MAX_RUNS {
        let dims: Vec<String> = groups
            .iter()
            .map(|g| format!("{} ({})", axes[g[0]].0.name, axes[g[0]].0.points.len()))
            .chain(std::iter::once(format!("seeds ({})", seeds.len())))
            .collect();
        return Err(format!(
            "{name}: the grid has {total} runs ({}), more than the {MAX_RUNS} a sweep may have; use fewer values, or zip axes that move together",
            dims.join(" × ")
        ));
    }
    let cells: usize = lens.iter().product();
    let mut runs = Vec::with_capacity(cells * seeds.len());
    let mut ids = BTreeMap::new();
    for cell in 0..cells {
        let mut pick = vec![0usize; groups.len()];
        let mut rem = cell;
        for g in (0..groups.len()).rev() {
            pick[g] = rem % lens[g];
            rem /= lens[g];
        }
        let mut chosen = vec![0usize; axes.len()];
        for (g, members) in groups.iter().enumerate() {
            for &m in members {
                chosen[m] = pick[g];
            }
        }
        for seed in seeds {
            let mut sets = fixed.to_vec();
            let mut axis_values = Vec::new();
            for (i, (axis, _)) in axes.iter().enumerate() {
                let p = &axis.points[chosen[i]];
                axis_values.push((axis.name.clone(), p.label.clone()));
                sets.extend(p.sets.iter().cloned());
            }
            if let Some(s) = seed {
                sets.push(("seed".to_string(), crate::config::seed::to_value(*s)));
            }
            let id = run_id(&axis_values, *seed);
            if let Some(prev) = ids.insert(id.clone(), runs.len()) {
                return Err(format!(
                    "{name}: runs {} and {} have the same axis values (an axis repeats a value, or seeds repeat); each run must differ",
                    prev + 1,
                    runs.len() + 1
                ));
            }
            runs.push(PlannedRun {
                index: runs.len(),
                id,
                axes: axis_values,
                seed: *seed,
                sets,
            });
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Result<Plan, String> {
        Plan::from_text("s.toml", Path::new("."), text)
    }

    #[test]
    fn grid_order_zip_and_ids() {
        let p = plan(
            r#"
seeds = [1, 2]
[set]
"workload.num_requests" = 50
[[axis]]
key = "instance.count"
values = [2, 4]
zip = "size"
[[axis]]
name = "routing"
[[axis.variants]]
name = "rr"
set = { routing = { policy = "round-robin" } }
[[axis.variants]]
name = "qd"
set = { "routing.policy" = "weighted", "routing.scorers" = [{ name = "queue-depth", weight = 1 }] }
[[axis]]
key = "workload.aggregate_rate"
name = "rate"
values = [10.0, 20.0]
zip = "size"
"#,
        )
        .unwrap();
        // zip(count, rate) × routing × seeds = 2 × 2 × 2.
        assert_eq!(p.runs.len(), 8);
        assert_eq!(p.axis_names, ["instance.count", "routing", "rate"]);
        let r = &p.runs[5];
        assert_eq!(r.seed, Some(2));
        assert_eq!(r.axes[0].1, toml::Value::Integer(4));
        assert_eq!(r.axes[1].1, toml::Value::String("rr".into()));
        assert_eq!(r.axes[2].1, toml::Value::Float(20.0));
        let keys: Vec<&str> = r.sets.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "workload.num_requests",
                "instance.count",
                "routing.policy",
                "workload.aggregate_rate",
                "seed"
            ]
        );
        // Ids depend on the values only: the same cell in another sweep has the same id.
        let q = plan("seeds = [2]\n[[axis]]\nkey = \"instance.count\"\nvalues = [4]\n[[axis]]\nname = \"routing\"\n[[axis.variants]]\nname = \"rr\"\nset = {}\n[[axis]]\nkey = \"workload.aggregate_rate\"\nname = \"rate\"\nvalues = [20.0]\n").unwrap();
        assert_eq!(q.runs[0].id, r.id);
        assert_ne!(q.fingerprint, p.fingerprint);
        let mut ids: Vec<&str> = p.runs.iter().map(|r| r.id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 8);
    }

    #[test]
    fn every_file_a_run_reads_is_in_the_fingerprint() {
        // Round 4, item 5: an edited calibration profile, llm-d config or
        // TraceV2 file must not resume onto the old results.
        let dir = std::env::temp_dir().join(format!("blis-digest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = [
            "cal.yaml", "epp.yaml", "t.yaml", "t.csv", "kv.csv", "hw.json",
        ];
        for f in files {
            std::fs::write(dir.join(f), "one").unwrap();
        }
        let base: toml::Table = "[model]\ncalibration = \"cal.yaml\"\nhardware_config = \"hw.json\"\n[routing]\nepp_config = \"epp.yaml\"\n[workload.trace_v2]\nheader = \"t.yaml\"\ndata = \"t.csv\"\n[instance.kv_offload]\ntrace = \"kv.csv\"\n".parse().unwrap();
        let before = inputs_digest(&base, &[], &dir);
        for f in files {
            std::fs::write(dir.join(f), "two").unwrap();
            let after = inputs_digest(&base, &[], &dir);
            assert_ne!(after, before, "{f} is not in the fingerprint");
            std::fs::write(dir.join(f), "one").unwrap();
        }
        assert_eq!(inputs_digest(&base, &[], &dir), before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_input() {
        let e = plan("[[axis]]\nkey = \"workload.aggregate_rat\"\nvalues = [1.0]\n").unwrap_err();
        assert!(e.contains("did you mean 'workload.aggregate_rate'"), "{e}");
        let e = plan("[[axis]]\nkey = \"instanse.count\"\nvalues = [1]\n").unwrap_err();
        assert!(e.contains("did you mean 'instance'"), "{e}");
        let e = plan("[[axis]]\nkey = \"instance.count\"\nvalues = []\n").unwrap_err();
        assert!(e.contains("has no values"), "{e}");
        let e = plan("[set]\n\"routing.polcy\" = \"x\"\n").unwrap_err();
        assert!(e.contains("did you mean 'routing.policy'"), "{e}");
        let e = plan("[[axis]]\nkey = \"instance.count\"\nvalues = [1, 1]\n").unwrap_err();
        assert!(e.contains("same axis values"), "{e}");
        let e = plan("[[axis]]\nkey = \"instance.count\"\nvalues = [1, 2]\nzip = \"z\"\n[[axis]]\nkey = \"seed\"\nname = \"s\"\nvalues = [1]\nzip = \"z\"\n").unwrap_err();
        assert!(e.contains("zipped axes need equal lengths"), "{e}");
        let e = plan("[[axis]]\n[[axis.variants]]\nname = \"a\"\n").unwrap_err();
        assert!(e.contains("needs a name"), "{e}");
        let e = plan("[[axes]]\nkey = \"seed\"\n").unwrap_err();
        assert!(e.contains("unknown field `axes`"), "{e}");
        assert!("5/4".parse::<Shard>().is_err());
        assert!("0/4".parse::<Shard>().is_err());
        assert_eq!(
            "4/4".parse::<Shard>().unwrap(),
            Shard { index: 4, count: 4 }
        );
    }

    #[test]
    fn shards_partition_the_grid() {
        let p = plan("seeds = [1, 2, 3, 4, 5, 6, 7]\n").unwrap();
        let mut all: Vec<usize> = (1..=3)
            .flat_map(|i| p.shard(Some(Shard { index: i, count: 3 })))
            .map(|r| r.index)
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
    }
}
