//! Policy parameters: the TOML table of a policy in the run file, handed to
//! the plugin as text and deserialised with serde on the plugin side (so the
//! host needs no knowledge of any policy's parameters).

use serde::de::DeserializeOwned;

/// The parameter table of one policy, as TOML text (empty when none was given).
#[derive(Clone, Copy, Debug)]
pub struct Params<'a> {
    toml: &'a str,
}

impl<'a> Params<'a> {
    /// Wrap TOML text.
    pub fn new(toml: &'a str) -> Self {
        Params { toml }
    }

    /// The raw TOML text.
    pub fn as_str(&self) -> &'a str {
        self.toml
    }

    /// True when no parameter was given.
    pub fn is_empty(&self) -> bool {
        self.toml.trim().is_empty()
    }

    /// Deserialise into `T` (use `#[serde(deny_unknown_fields)]` and
    /// `#[serde(default)]`). A mistake becomes one readable line naming the
    /// key, e.g. `params.capacity: invalid type: string "x", expected f64`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        toml::from_str::<T>(self.toml).map_err(|e| {
            let msg = e.message().trim().to_string();
            match e.span() {
                // A missing field is reported over the whole table: no key to blame.
                _ if msg.starts_with("missing field") => format!("params: {msg}"),
                Some(span) if !self.toml.is_empty() => {
                    let key = key_at(self.toml, span.start);
                    match key {
                        Some(k) => format!("params.{k}: {msg}"),
                        None => format!("params: {msg}"),
                    }
                }
                _ => format!("params: {msg}"),
            }
        })
    }

    /// Error unless the table is empty (for policies without parameters).
    pub fn expect_none(&self) -> Result<(), String> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "this policy takes no parameters, but got: {}",
                self.toml.trim().replace('\n', ", ")
            ))
        }
    }
}

/// The keys of parameter struct `T`, read from its serde `Deserialize`
/// implementation (the field names serde accepts, renames applied).
/// Empty for a type that is not a struct with named fields.
pub fn param_keys<T: DeserializeOwned>() -> Vec<&'static str> {
    let mut keys = Vec::new();
    let _ = T::deserialize(KeysProbe(&mut keys));
    keys
}

/// Check a policy's parameter documentation against its parameter struct:
/// every key of `T` must be documented, and every documented key must be a
/// key of `T`. A documented key is a line starting in the first column with
/// the key followed by spaces and `(` — the `key  (type, unit, default)  …`
/// form `blis plugins show` prints. Call it in a unit test:
/// `check_params_doc::<MyParams>(MyPolicy::PARAMS_DOC).unwrap()`.
pub fn check_params_doc<T: DeserializeOwned>(doc: &str) -> Result<(), String> {
    let keys = param_keys::<T>();
    let documented: Vec<&str> = doc
        .lines()
        .filter_map(|l| {
            let key_end = l.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
            let (key, rest) = l.split_at(key_end);
            (!key.is_empty() && rest.starts_with(' ') && rest.trim_start().starts_with('('))
                .then_some(key)
        })
        .collect();
    let mut problems = Vec::new();
    for k in &keys {
        if !documented.contains(k) {
            problems.push(format!("key '{k}' is not documented"));
        }
    }
    for d in &documented {
        if !keys.contains(d) {
            problems.push(format!(
                "'{d}' is documented but is not a parameter (keys: {})",
                keys.join(", ")
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("PARAMS_DOC: {}", problems.join("; ")))
    }
}

/// A deserializer that only records the field names of the struct asked for.
struct KeysProbe<'k>(&'k mut Vec<&'static str>);

#[derive(Debug)]
struct Probed;

impl std::fmt::Display for Probed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("probed")
    }
}

impl std::error::Error for Probed {}

impl serde::de::Error for Probed {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Probed
    }
}

impl<'de> serde::Deserializer<'de> for KeysProbe<'_> {
    type Error = Probed;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
        Err(Probed)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Probed> {
        self.0.extend_from_slice(fields);
        Err(Probed)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The key on the line holding byte `pos` of `toml` (`key = value` lines).
fn key_at(toml: &str, pos: usize) -> Option<String> {
    let start = toml[..pos.min(toml.len())].rfind('\n').map_or(0, |i| i + 1);
    let line = toml[start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty()).then(|| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct P {
        #[serde(default)]
        capacity: f64,
        #[serde(default)]
        refill_rate: f64,
    }

    #[test]
    fn parses_and_names_the_key_on_error() {
        let ok: P = Params::new("capacity = 5.0\nrefill_rate = 2.0\n")
            .parse()
            .unwrap();
        assert_eq!(
            ok,
            P {
                capacity: 5.0,
                refill_rate: 2.0
            }
        );
        let err = Params::new("capacity = 5.0\nrefill_rate = \"fast\"\n")
            .parse::<P>()
            .unwrap_err();
        assert!(err.starts_with("params.refill_rate:"), "{err}");
        let err = Params::new("capacty = 5.0\n").parse::<P>().unwrap_err();
        assert!(err.contains("capacty"), "{err}");
        assert!(Params::new("").parse::<P>().is_ok());
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct R {
            required: f64,
            other: bool,
        }
        let err = Params::new("other = true\n").parse::<R>().unwrap_err();
        assert_eq!(err, "params: missing field `required`");
        assert!(Params::new("x = 1").expect_none().is_err());
    }

    #[test]
    fn params_doc_is_checked_against_the_struct() {
        assert_eq!(param_keys::<P>(), vec!["capacity", "refill_rate"]);
        let good = "capacity     (float, default 0)  the size.\n\
                    Some prose (ignored).\n\
                    refill_rate  (float, default 0)\n";
        assert_eq!(check_params_doc::<P>(good), Ok(()));
        let err = check_params_doc::<P>("capacity (float)\nrefil_rate (float)\n").unwrap_err();
        assert_eq!(
            err,
            "PARAMS_DOC: key 'refill_rate' is not documented; \
             'refil_rate' is documented but is not a parameter (keys: capacity, refill_rate)"
        );
        assert!(param_keys::<f64>().is_empty());
    }
}
