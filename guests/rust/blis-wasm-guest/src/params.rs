//! A policy's parameters: the `[…params]` table of the run file, handed to
//! `create` as TOML text. Flat tables of numbers, booleans and strings are
//! read here (the host writes one `key = value` line per key); a policy
//! with nested parameters can parse `Params::text` itself.

/// One parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

/// The parameters of one policy.
#[derive(Clone, Debug, Default)]
pub struct Params {
    text: String,
    entries: Vec<(String, Value)>,
}

impl Params {
    /// Parse the TOML text `create` receives.
    pub fn parse(text: &str) -> Result<Params, String> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = match line.split_once('=') {
                Some(kv) => kv,
                None => {
                    return Err(format!(
                        "params line {}: '{line}' is not `key = value` (nested tables are not read by Params; parse Params::text yourself)",
                        n + 1
                    ))
                }
            };
            let key = k.trim().trim_matches('"').to_string();
            let v = v.trim();
            let value = if v == "true" {
                Value::Bool(true)
            } else if v == "false" {
                Value::Bool(false)
            } else if v.len() >= 2 && v.starts_with('"') && v.ends_with('"') {
                Value::Str(unescape(&v[1..v.len() - 1]))
            } else if let Ok(i) = v.replace('_', "").parse::<i64>() {
                Value::Int(i)
            } else if let Ok(f) = v.replace('_', "").parse::<f64>() {
                Value::Float(f)
            } else {
                return Err(format!(
                    "params.{key} = {v}: only numbers, booleans and strings are read by Params"
                ));
            };
            entries.push((key, value));
        }
        Ok(Params {
            text: text.to_string(),
            entries,
        })
    }

    /// The TOML text as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// An error unless every key given is in `known`.
    pub fn only(&self, known: &[&str]) -> Result<(), String> {
        for (k, _) in &self.entries {
            if !known.contains(&k.as_str()) {
                return Err(if known.is_empty() {
                    format!("unknown parameter '{k}': this policy takes no parameters")
                } else {
                    format!(
                        "unknown parameter '{k}' (expected one of: {})",
                        known.join(", ")
                    )
                });
            }
        }
        Ok(())
    }

    /// An error if any parameter was given.
    pub fn expect_none(&self) -> Result<(), String> {
        self.only(&[])
    }

    /// A number (integer or float), or `default`.
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Float(f)) => Ok(*f),
            Some(Value::Int(i)) => Ok(*i as f64),
            Some(v) => Err(format!("params.{key} = {v:?}: expected a number")),
        }
    }

    /// An integer, or `default`.
    pub fn i64_or(&self, key: &str, default: i64) -> Result<i64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Int(i)) => Ok(*i),
            Some(v) => Err(format!("params.{key} = {v:?}: expected an integer")),
        }
    }

    /// An integer in `0..=u32::MAX`, or `default`.
    pub fn u32_or(&self, key: &str, default: u32) -> Result<u32, String> {
        let v = self.i64_or(key, i64::from(default))?;
        u32::try_from(v).map_err(|_| format!("params.{key} = {v}: expected an integer ≥ 0"))
    }

    /// A boolean, or `default`.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(format!("params.{key} = {v:?}: expected true or false")),
        }
    }

    /// A string, or `default`.
    pub fn str_or(&self, key: &str, default: &str) -> Result<String, String> {
        match self.get(key) {
            None => Ok(default.to_string()),
            Some(Value::Str(s)) => Ok(s.clone()),
            Some(v) => Err(format!("params.{key} = {v:?}: expected a string")),
        }
    }
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}
