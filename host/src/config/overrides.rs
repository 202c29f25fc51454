//! Command-line overrides of a run file, applied as edits of its TOML table
//! (so a flag and the file key it overrides go through the same validation).
//!
//! [`apply`] is the one way edits reach a [`RunFile`]: `blis run`'s flags and
//! anything else that runs a run file with changes (a sweep's axes) go
//! through it, so the same edits give the same run.

use super::{RunFile, Source};

/// One edit of a run file's table.
#[derive(Clone, Debug, PartialEq)]
pub enum Edit {
    /// Set a dotted key (`instance.count`) to a value.
    Set(String, toml::Value),
    /// Append a table to a top-level array (`[[plugins]]`).
    Push(String, toml::Table),
}

/// Apply `edits` to the table of `source` (parsed as `table`) and
/// deserialise the result. A mistake names the offending key.
pub fn apply(source: &Source, mut table: toml::Table, edits: &[Edit]) -> Result<RunFile, String> {
    for e in edits {
        match e {
            Edit::Set(path, v) => set(&mut table, path, v.clone())?,
            Edit::Push(key, t) => push(&mut table, key, t.clone())?,
        }
    }
    // Re-parse the merged table as text so a mistake points at its key.
    let merged = toml::to_string(&table).map_err(|e| format!("{}: {e}", source.name))?;
    toml::from_str::<RunFile>(&merged).map_err(|e| {
        format!(
            "{}: after applying command-line overrides: {}{}",
            source.name,
            e.message().trim(),
            e.span()
                .map(|sp| offending_key(&merged, sp.start))
                .unwrap_or_default()
        )
    })
}

/// ` (at section.key = value)` for the line of `text` holding byte `pos`.
fn offending_key(text: &str, pos: usize) -> String {
    let pos = pos.min(text.len());
    let line_start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    let section = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').to_string());
    match section {
        Some(sec) if !line.starts_with('[') => format!(" (at [{sec}] {line})"),
        _ => format!(" (at {line})"),
    }
}

/// Remove `keys` from table `section`; true if something was removed.
pub fn drop_keys(table: &mut toml::Table, section: &str, keys: &[&str]) -> bool {
    let Some(toml::Value::Table(t)) = table.get_mut(section) else {
        return false;
    };
    let mut removed = false;
    for k in keys {
        removed |= t.remove(*k).is_some();
    }
    removed
}

/// Parse a TOML value as written on a command line: a TOML literal if it is
/// one (`400`, `1.5`, `true`, `"x"`, `[1, 2]`), else a bare string.
pub fn parse_value(raw: &str) -> toml::Value {
    let wrapped = format!("v = {raw}");
    match toml::from_str::<toml::Table>(&wrapped) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

/// Parse `section.key=value` (the `--set` flag).
pub fn parse_set(arg: &str) -> Result<(String, toml::Value), String> {
    let (path, raw) = arg.split_once('=').ok_or_else(|| {
        format!("--set {arg}: expected section.key=value (e.g. --set instance.total_kv_blocks=400)")
    })?;
    let path = path.trim();
    if path.is_empty() || path.split('.').any(str::is_empty) {
        return Err(format!("--set {arg}: '{path}' is not a dotted key path"));
    }
    Ok((path.to_string(), parse_value(raw.trim())))
}

/// The value at `path` (dotted; a numeric part indexes an array), if any.
pub fn get(table: &toml::Table, path: &str) -> Option<toml::Value> {
    let mut parts = path.split('.');
    let mut cur = table.get(parts.next()?)?;
    for p in parts {
        cur = match cur {
            toml::Value::Table(t) => t.get(p)?,
            toml::Value::Array(a) => a.get(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur.clone())
}

/// Set `path` (dotted) to `value` in `table`, creating tables on the way.
/// A numeric part indexes an existing array of tables, so
/// `routing.scorers.0.params.x` reaches the first `[[routing.scorers]]`.
pub fn set(table: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().expect("non-empty path");
    let mut cur = table;
    let mut walked = String::new();
    let mut i = 0;
    while i < parts.len() {
        let p = parts[i];
        if !walked.is_empty() {
            walked.push('.');
        }
        walked.push_str(p);
        let entry = cur
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = match entry {
            toml::Value::Table(t) => t,
            toml::Value::Array(a) => {
                let Some(idx) = parts.get(i + 1).and_then(|x| x.parse::<usize>().ok()) else {
                    return Err(format!(
                        "cannot set '{path}': '{walked}' is an array; index it, e.g. '{walked}.0.…'"
                    ));
                };
                let len = a.len();
                walked.push_str(&format!(".{idx}"));
                i += 1;
                match a.get_mut(idx) {
                    Some(toml::Value::Table(t)) => t,
                    Some(_) => return Err(format!("cannot set '{path}': '{walked}' is not a table")),
                    None => {
                        return Err(format!(
                            "cannot set '{path}': '{}' has {len} entr{} (valid indices 0..{}); \
                             list them in the run file or with a flag first (e.g. --routing-scorers)",
                            &walked[..walked.rfind('.').unwrap_or(0)],
                            if len == 1 { "y" } else { "ies" },
                            len.saturating_sub(1)
                        ))
                    }
                }
            }
            _ => return Err(format!("cannot set '{path}': '{walked}' is not a table")),
        };
        i += 1;
    }
    cur.insert(last.to_string(), value);
    Ok(())
}

/// Append a table to the array at `path` (e.g. `plugins`).
pub fn push(table: &mut toml::Table, key: &str, value: toml::Table) -> Result<(), String> {
    let entry = table
        .entry(key.to_string())
        .or_insert_with(|| toml::Value::Array(Vec::new()));
    match entry {
        toml::Value::Array(a) => {
            a.push(toml::Value::Table(value));
            Ok(())
        }
        _ => Err(format!("cannot add to '{key}': it is not an array")),
    }
}

/// `name:weight,name:weight` → an array of `{name, weight}` tables.
pub fn parse_scorers(arg: &str) -> Result<toml::Value, String> {
    let mut out = Vec::new();
    for part in arg.split(',') {
        let part = part.trim();
        // The weight follows the last ':' (a name may be `library::name`).
        let (name, w) = part.rsplit_once(':').filter(|(n, _)| !n.ends_with(':')).ok_or_else(|| {
            format!("--routing-scorers: '{part}' is not name:weight (e.g. \"prefix-affinity:3,queue-depth:2\")")
        })?;
        let weight: f64 = w.trim().parse().map_err(|_| {
            format!(
                "--routing-scorers: weight '{}' of '{}' is not a number",
                w.trim(),
                name.trim()
            )
        })?;
        let mut t = toml::Table::new();
        t.insert("name".into(), toml::Value::String(name.trim().to_string()));
        t.insert("weight".into(), toml::Value::Float(weight));
        out.push(toml::Value::Table(t));
    }
    Ok(toml::Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_paths() {
        assert_eq!(parse_value("400"), toml::Value::Integer(400));
        assert_eq!(parse_value("1.5"), toml::Value::Float(1.5));
        assert_eq!(
            parse_value("weighted"),
            toml::Value::String("weighted".into())
        );
        assert_eq!(parse_value("\"x\""), toml::Value::String("x".into()));
        let mut t = toml::Table::new();
        let (p, v) = parse_set("admission.params.capacity=1000").unwrap();
        set(&mut t, &p, v).unwrap();
        assert_eq!(
            t["admission"]["params"]["capacity"],
            toml::Value::Integer(1000)
        );
        assert!(parse_set("nokey").is_err());
        assert!(parse_set("a..b=1").is_err());
        let s = parse_scorers("a:3, b:2").unwrap();
        assert_eq!(s.as_array().unwrap().len(), 2);
        assert!(parse_scorers("a3").is_err());
        assert!(parse_scorers("a:x").is_err());
        assert!(parse_scorers("lib::a").is_err());
    }

    /// The form the ambiguity error recommends, `library::name:weight`.
    #[test]
    fn qualified_scorer_names_keep_their_library() {
        let s = parse_scorers("fixture-alpha::prefer-first:1, queue-depth:2.5").unwrap();
        let a = s.as_array().unwrap();
        assert_eq!(a[0]["name"].as_str(), Some("fixture-alpha::prefer-first"));
        assert_eq!(a[0]["weight"].as_float(), Some(1.0));
        assert_eq!(a[1]["name"].as_str(), Some("queue-depth"));
        assert_eq!(a[1]["weight"].as_float(), Some(2.5));
    }

    /// `--set routing.scorers.0.params.x=…` reaches the scorer's params.
    #[test]
    fn set_indexes_arrays_of_tables() {
        let mut t: toml::Table =
            "[[routing.scorers]]\nname = \"a\"\n[[routing.scorers]]\nname = \"b\"\n"
                .parse()
                .unwrap();
        let (p, v) = parse_set("routing.scorers.1.params.capacity=5").unwrap();
        set(&mut t, &p, v).unwrap();
        assert_eq!(
            t["routing"]["scorers"][1]["params"]["capacity"],
            toml::Value::Integer(5)
        );
        let err = set(
            &mut t,
            "routing.scorers.2.params.x",
            toml::Value::Integer(1),
        )
        .unwrap_err();
        assert!(err.contains("has 2 entries (valid indices 0..1)"), "{err}");
        let err = set(&mut t, "routing.scorers.params.x", toml::Value::Integer(1)).unwrap_err();
        assert!(err.contains("is an array; index it"), "{err}");
    }
}
