//! The calibration profile `blis calibrate fit` writes and
//! `[model] calibration = "PROFILE.toml"` applies: the fitted coefficients
//! (and which were fitted, with their uncertainty), the train and held-out
//! error per metric, the deployments it was fitted on, and the SHA-256 of
//! every input.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The profile format's version.
pub const FORMAT: u32 = 1;

/// A calibration profile.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Always [`FORMAT`].
    pub blis_calibration_profile: u32,
    /// The blis version that wrote it.
    pub blis_version: String,
    /// When it was written (UTC, RFC 3339).
    pub created: String,
    /// The latency model the coefficients belong to.
    pub latency_model: String,
    /// The coefficients to run with (fitted and fixed alike).
    pub coefficients: Coefficients,
    /// Every deployment (model, GPU, TP) measured.
    pub deployments: Vec<Deployment>,
    /// The fitted coefficients, in fit order.
    pub fitted: Vec<FittedCoefficient>,
    pub error: Errors,
    pub fit: Settings,
    /// SHA-256 of every input, by role.
    pub inputs: Vec<Input>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Coefficients {
    pub alpha: [f64; 3],
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<Vec<f64>>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    pub model: String,
    pub hardware: String,
    pub tp: u32,
}

/// A fitted coefficient: start, fitted value and its uncertainty from a
/// bootstrap over the experiments (the fit linearised at its optimum).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FittedCoefficient {
    pub name: String,
    pub start: f64,
    pub value: f64,
    /// Bounds the fit kept it in.
    pub bounds: [f64; 2],
    /// Bootstrap standard deviation of the value (same unit).
    pub std: f64,
    /// Bootstrap 95 % interval.
    pub interval_95: [f64; 2],
    /// Whether the measured metrics determine it (see `note`).
    pub identifiable: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Weighted MAPE (%) at the start, after the fit on all measurements
/// (train) and on held-out experiments (each predicted by a fit that did
/// not see it); per metric too.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Errors {
    pub start_mape: f64,
    pub train_mape: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heldout_mape: Option<f64>,
    pub per_metric: BTreeMap<String, MetricError>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricError {
    pub rows: u64,
    pub start_mape: f64,
    pub train_mape: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heldout_mape: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub objective: String,
    pub method: String,
    pub seed: u64,
    /// Workload seeds each deployment was simulated at (`--sim-seeds`; 1,
    /// not written, for the run file's seed only).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub sim_seeds: u32,
    pub holdout_folds: u32,
    pub evaluations: u64,
    pub weights: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// `measurements`, `run_file`, `model_config`, `plugin`, …
    pub role: String,
    pub path: String,
    pub sha256: String,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// SHA-256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, String> {
    let bytes =
        crate::input::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(sha256_hex(&bytes))
}

/// SHA-256 of bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A profile read for a run: the profile and its file's SHA-256.
pub struct Loaded {
    pub profile: Profile,
    pub sha256: String,
}

/// Read a profile (errors name the file and say what to do).
pub fn load(path: &Path) -> Result<Loaded, String> {
    let bytes = crate::input::read(path).map_err(|e| {
        format!(
            "cannot read calibration profile {}: {e}; give a file written by `blis calibrate fit`",
            path.display()
        )
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let profile: Profile = toml::from_str(&text).map_err(|e| {
        format!(
            "calibration profile {} is not a blis calibration profile: {e}",
            path.display()
        )
    })?;
    if profile.blis_calibration_profile != FORMAT {
        return Err(format!(
            "calibration profile {} has format {}; this blis reads format {FORMAT}",
            path.display(),
            profile.blis_calibration_profile
        ));
    }
    Ok(Loaded {
        profile,
        sha256: sha256_hex(&bytes),
    })
}

impl Profile {
    /// Check that this profile belongs to a run's latency model, model and
    /// GPU; the error names the mismatch.
    pub fn check_applies(
        &self,
        path: &Path,
        latency_model: &str,
        model: &str,
        hardware: &str,
    ) -> Result<(), String> {
        if !self.latency_model.eq_ignore_ascii_case(latency_model) {
            return Err(format!(
                "calibration profile {} was fitted for the {} latency model, but the run uses {latency_model}; \
                 set model.latency_model = \"{}\" or fit a profile for {latency_model}",
                path.display(),
                self.latency_model,
                self.latency_model
            ));
        }
        let list = || {
            self.deployments
                .iter()
                .map(|d| format!("{} on {} (TP {})", d.model, d.hardware, d.tp))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self
            .deployments
            .iter()
            .any(|d| d.model.eq_ignore_ascii_case(model))
        {
            return Err(format!(
                "calibration profile {} was fitted for {}, not model {model}; fit a profile with measurements of {model}",
                path.display(),
                list()
            ));
        }
        if !self.deployments.iter().any(|d| {
            d.model.eq_ignore_ascii_case(model) && d.hardware.eq_ignore_ascii_case(hardware)
        }) {
            return Err(format!(
                "calibration profile {} was fitted for {}, not {model} on GPU {hardware}; fit a profile with measurements on {hardware}",
                path.display(),
                list()
            ));
        }
        Ok(())
    }
}

/// The current UTC time as RFC 3339 (`2026-12-01T22:40:05Z`).
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the epoch as RFC 3339 UTC (civil-from-days, proleptic
/// Gregorian).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // 2000-02-29 12:34:56 UTC.
        assert_eq!(rfc3339(951_827_696), "2000-02-29T12:34:56Z");
        // 2026-12-01 00:00:00 UTC.
        assert_eq!(rfc3339(1_796_083_200), "2026-12-01T00:00:00Z");
    }

    fn profile() -> Profile {
        Profile {
            blis_calibration_profile: FORMAT,
            blis_version: "0".into(),
            created: rfc3339(0),
            latency_model: "trained-physics".into(),
            coefficients: Coefficients {
                alpha: [1.0, 2.0, 3.0],
                beta: Some(vec![1.0; 7]),
            },
            deployments: vec![Deployment {
                model: "qwen2.5-7b-instruct".into(),
                hardware: "H100".into(),
                tp: 1,
            }],
            fitted: vec![],
            error: Errors {
                start_mape: 10.0,
                train_mape: 1.0,
                heldout_mape: None,
                per_metric: BTreeMap::new(),
            },
            fit: Settings {
                objective: "weighted MAPE".into(),
                method: "nm".into(),
                seed: 1,
                sim_seeds: 1,
                holdout_folds: 0,
                evaluations: 3,
                weights: BTreeMap::new(),
            },
            inputs: vec![],
        }
    }

    #[test]
    fn round_trip_and_mismatches() {
        let p = profile();
        let text = toml::to_string(&p).unwrap();
        assert_eq!(toml::from_str::<Profile>(&text).unwrap(), p);
        let f = Path::new("p.toml");
        p.check_applies(f, "trained-physics", "Qwen2.5-7B-Instruct", "h100")
            .unwrap();
        let e = p
            .check_applies(f, "roofline", "qwen2.5-7b-instruct", "H100")
            .unwrap_err();
        assert!(
            e.contains("fitted for the trained-physics latency model"),
            "{e}"
        );
        let e = p
            .check_applies(f, "trained-physics", "qwen3-14b", "H100")
            .unwrap_err();
        assert!(e.contains("not model qwen3-14b"), "{e}");
        let e = p
            .check_applies(f, "trained-physics", "qwen2.5-7b-instruct", "A100-80")
            .unwrap_err();
        assert!(e.contains("on GPU A100-80"), "{e}");
    }
}
