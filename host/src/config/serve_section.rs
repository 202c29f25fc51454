//! `[serve]`: what `blis serve` alone reads of a run file — the tokenizer
//! counting its prompts (`tokenizer`) and faults to inject into its
//! simulated servers (`[[serve.faults]]`). Every other command checks the
//! faults and injects nothing (with a note), so one run file serves both.

use serde::{Deserialize, Serialize};

/// `[serve]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// A Hugging Face `tokenizer.json` counting the prompts' tokens
    /// (relative to the run file's folder; default: one token per word).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<std::path::PathBuf>,
    /// `[[serve.faults]]`: failures of single instances, for testing a
    /// router's failover.
    #[serde(default)]
    pub faults: Vec<FaultSection>,
}

/// One injected fault: instance `instance` is `kind` from `at_s` to
/// `until_s` (simulated seconds since the start; `until_s` absent: to the
/// end of the run).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultSection {
    /// The instance (0-based).
    pub instance: u32,
    /// `down` (its server is gone: connections refused, its streams cut,
    /// its requests lost), `errors` (a fraction `rate` of its requests
    /// answered 503) or `slow` (its steps take `factor` × as long).
    pub kind: FaultKind,
    /// When it starts, simulated s (default 0).
    #[serde(default)]
    pub at_s: f64,
    /// When it ends, simulated s (default: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_s: Option<f64>,
    /// `errors` only: the fraction of requests answered 503, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// `slow` only: the step-time factor, in (0, 1000] (2 = half speed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<f64>,
}

/// What a fault does.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    Down,
    Errors,
    Slow,
}

impl FaultSection {
    /// Whether the fault is on at simulated second `t`.
    pub fn active(&self, t: f64) -> bool {
        t >= self.at_s && self.until_s.is_none_or(|u| t < u)
    }
}

impl ServeSection {
    /// Check the faults against a fleet of `instances`: one message per
    /// problem, naming the fault's key.
    pub fn validate(&self, instances: u32) -> Vec<String> {
        let mut errors = Vec::new();
        for (k, f) in self.faults.iter().enumerate() {
            let key = format!("serve.faults[{k}]");
            if f.instance >= instances {
                errors.push(format!(
                    "{key}.instance = {}: the run has {instances} instance(s), numbered from 0",
                    f.instance
                ));
            }
            if !(f.at_s.is_finite() && f.at_s >= 0.0) {
                errors.push(format!(
                    "{key}.at_s = {}: give the simulated second the fault starts, >= 0",
                    f.at_s
                ));
            }
            if let Some(u) = f.until_s {
                if !(u.is_finite() && u > f.at_s) {
                    errors.push(format!(
                        "{key}.until_s = {u}: give a simulated second after at_s ({}), or leave it out for a fault to the end",
                        f.at_s
                    ));
                }
            }
            match (f.kind, f.rate, f.factor) {
                (FaultKind::Errors, Some(r), None) if r > 0.0 && r <= 1.0 => {}
                (FaultKind::Errors, Some(r), None) => errors.push(format!(
                    "{key}.rate = {r}: give the fraction of requests answered 503, in (0, 1]"
                )),
                (FaultKind::Errors, None, _) => errors.push(format!(
                    "{key}: kind = \"errors\" needs rate (the fraction of requests answered 503, e.g. 0.2)"
                )),
                (FaultKind::Slow, None, Some(x)) if x > 0.0 && x <= 1000.0 => {}
                (FaultKind::Slow, None, Some(x)) => errors.push(format!(
                    "{key}.factor = {x}: give the step-time factor, in (0, 1000] (2 = half speed)"
                )),
                (FaultKind::Slow, _, None) => errors.push(format!(
                    "{key}: kind = \"slow\" needs factor (the step-time factor, e.g. 3)"
                )),
                (FaultKind::Down, None, None) => {}
                (kind, _, _) => errors.push(format!(
                    "{key}: kind = \"{}\" takes {} (rate is for \"errors\", factor for \"slow\")",
                    kind.name(),
                    match kind {
                        FaultKind::Down => "neither rate nor factor",
                        FaultKind::Errors => "rate, not factor",
                        FaultKind::Slow => "factor, not rate",
                    }
                )),
            }
        }
        errors
    }
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Down => "down",
            FaultKind::Errors => "errors",
            FaultKind::Slow => "slow",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<ServeSection, String> {
        toml::from_str(toml_text).map_err(|e| e.to_string())
    }

    #[test]
    fn faults_are_checked_key_by_key() {
        let s = parse(
            r#"
[[faults]]
instance = 1
kind = "down"
at_s = 10
until_s = 20
[[faults]]
instance = 0
kind = "errors"
rate = 0.25
[[faults]]
instance = 0
kind = "slow"
factor = 3
"#,
        )
        .unwrap();
        assert!(s.validate(2).is_empty(), "{:?}", s.validate(2));
        assert!(s.faults[0].active(10.0) && !s.faults[0].active(20.0));
        assert!(!s.faults[0].active(9.999));
        assert!(s.faults[1].active(1e9));
        let e = s.validate(1);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("serve.faults[0].instance = 1"), "{e:?}");
        let bad = parse(
            r#"
[[faults]]
instance = 0
kind = "errors"
[[faults]]
instance = 0
kind = "slow"
factor = 0
[[faults]]
instance = 0
kind = "down"
rate = 0.5
[[faults]]
instance = 0
kind = "down"
at_s = 5
until_s = 5
"#,
        )
        .unwrap();
        let e = bad.validate(1);
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e[0].contains("needs rate"), "{e:?}");
        assert!(e[1].contains("factor = 0"), "{e:?}");
        assert!(e[2].contains("neither rate nor factor"), "{e:?}");
        assert!(e[3].contains("until_s = 5"), "{e:?}");
        assert!(parse("[[faults]]\ninstance = 0\nkind = \"melt\"\n").is_err());
    }
}
