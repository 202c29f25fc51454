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
}
