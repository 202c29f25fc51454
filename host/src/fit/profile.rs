//! The calibration profile `blis calibrate fit` writes and
//! `[model] calibration = "PROFILE.toml"` applies: the fitted coefficients
//! (and which were fitted, with their uncertainty), the train and held-out
//! error per metric, the deployments it was fitted on, and the SHA-256 of
//! every input.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::instance::latency::StepVariant;

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
    /// `model.moe_expert_load` of the fitted runs, when not the default
    /// `all` (a run applying the profile must use the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_expert_load: Option<String>,
    /// `model.geometry` of the fitted runs, when not the default
    /// `reference` (a run applying the profile must use the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geometry: Option<String>,
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
    /// `--holdout-by`: the held-out error when whole experiments, models or
    /// GPU types are left out (each predicted by a fit that saw none of
    /// it), keyed `experiment`, `model`, `gpu`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub heldout_by: BTreeMap<String, HeldOutBy>,
}

/// The held-out error of one way of leaving deployments out: every
/// experiment, model or GPU type in turn predicted by a fit on the rest.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HeldOutBy {
    /// How many were left out in turn (experiments, models, GPU types).
    pub folds: u32,
    /// Weighted MAPE (%) of every row, each predicted held out.
    pub mape: f64,
    /// Per metric (unweighted MAPE, %).
    pub per_metric: BTreeMap<String, f64>,
    /// Per experiment, model or GPU type left out: its rows' weighted MAPE (%).
    pub per_unit: BTreeMap<String, f64>,
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
    /// `--holdout-by`: the ways deployments were left out (see `error.heldout_by`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holdout_by: Vec<String>,
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

/// Where a run's deployment lies against a profile's: what the profile was
/// not fitted on.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unseen {
    pub model: bool,
    pub gpu: bool,
    pub tp: bool,
}

impl Unseen {
    /// Which held-out error applies (`error.heldout_by`'s key): a model
    /// not seen is the larger step (`model`), then a GPU (`gpu`), else the
    /// profile's own deployments (`experiment`).
    pub fn heldout_by(&self) -> &'static str {
        if self.model {
            "model"
        } else if self.gpu {
            "gpu"
        } else {
            "experiment"
        }
    }
}

impl std::fmt::Display for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on {} (TP {})", self.model, self.hardware, self.tp)
    }
}

impl Profile {
    /// Check that this profile belongs to a run's latency model, model and
    /// GPU (with `extrapolate`, a model or GPU it was not fitted on is
    /// accepted); the error names the mismatch. Returns, when the run's
    /// deployment adds anything to the profile's ([`Profile::unseen`]), a
    /// note naming it with the profile's measured held-out error for it.
    pub fn check_applies(
        &self,
        path: &Path,
        latency_model: &str,
        variant: StepVariant,
        run: &Deployment,
        extrapolate: bool,
    ) -> Result<Option<String>, String> {
        let (model, hardware) = (run.model.as_str(), run.hardware.as_str());
        if !self.latency_model.eq_ignore_ascii_case(latency_model) {
            return Err(format!(
                "calibration profile {} was fitted for the {} latency model, but the run uses {latency_model}; \
                 set model.latency_model = \"{}\" or fit a profile for {latency_model}",
                path.display(),
                self.latency_model,
                self.latency_model
            ));
        }
        let fitted = StepVariant::parse(self.moe_expert_load.as_deref(), self.geometry.as_deref())
            .map_err(|e| format!("calibration profile {}: {e}", path.display()))?;
        if let Some((key, fitted, used)) = fitted.difference(&variant) {
            return Err(format!(
                "calibration profile {} was fitted with model.{key} = \"{fitted}\", but the run uses \
                 \"{used}\": its coefficients belong to that step-time model; set model.{key} = \
                 \"{fitted}\" or fit a profile with \"{used}\"",
                path.display()
            ));
        }
        let list = || {
            self.deployments
                .iter()
                .map(Deployment::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let unseen = self.unseen(run);
        if unseen.model && !extrapolate {
            return Err(format!(
                "calibration profile {} was fitted for {}, not model {model}; fit a profile with measurements of {model}, \
                 or set model.calibration_extrapolate = true to apply it to a model it has not seen{}",
                path.display(),
                list(),
                self.heldout_clause("model")
            ));
        }
        if !unseen.model && unseen.gpu && !extrapolate {
            return Err(format!(
                "calibration profile {} was fitted for {}, not {model} on GPU {hardware}; fit a profile with measurements on {hardware}, \
                 or set model.calibration_extrapolate = true to apply it to a GPU it has not seen{}",
                path.display(),
                list(),
                self.heldout_clause("gpu")
            ));
        }
        if unseen == Unseen::default() {
            return Ok(None);
        }
        let mut what = Vec::new();
        if unseen.model {
            what.push(format!("model {model}"));
        }
        if unseen.gpu {
            what.push(format!("GPU {hardware}"));
        }
        if unseen.tp {
            what.push(format!("TP {}", run.tp));
        }
        let by = unseen.heldout_by();
        let note = format!(
            "model.calibration: profile {} was fitted on {}; this run extrapolates it to {} ({}){}",
            path.display(),
            list(),
            what.join(", "),
            if unseen.model || unseen.gpu {
                "model.calibration_extrapolate"
            } else {
                "trained-physics and the rooflines scale their terms with TP; the coefficients are the profile's"
            },
            self.heldout_clause(by)
        );
        Ok(Some(note))
    }

    /// What `run` adds to the profile's deployments: a model, a GPU type (for
    /// a model it has, that model on another GPU), a TP it was not fitted at.
    pub fn unseen(&self, run: &Deployment) -> Unseen {
        let same_model = |d: &&Deployment| d.model.eq_ignore_ascii_case(&run.model);
        let model = !self.deployments.iter().any(|d| same_model(&d));
        let gpu = if model {
            !self
                .deployments
                .iter()
                .any(|d| d.hardware.eq_ignore_ascii_case(&run.hardware))
        } else {
            !self
                .deployments
                .iter()
                .filter(same_model)
                .any(|d| d.hardware.eq_ignore_ascii_case(&run.hardware))
        };
        let tp = !self
            .deployments
            .iter()
            .filter(|d| model || same_model(d))
            .any(|d| d.tp == run.tp);
        Unseen { model, gpu, tp }
    }

    /// The held-out error recorded for leaving out by `by` (`experiment`,
    /// `model`, `gpu`): `--holdout-by`'s, or for `experiment` without it the
    /// `--holdout K` folds' (then `per_unit` is empty).
    pub fn heldout_for(&self, by: &str) -> Option<HeldOutBy> {
        if let Some(h) = self.error.heldout_by.get(by) {
            return Some(h.clone());
        }
        if by != "experiment" {
            return None;
        }
        Some(HeldOutBy {
            folds: self.fit.holdout_folds,
            mape: self.error.heldout_mape?,
            per_metric: self
                .error
                .per_metric
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.heldout_mape?)))
                .collect(),
            per_unit: BTreeMap::new(),
        })
    }

    /// "; its leave-one-model-out error: …" from the profile's held-out
    /// errors by `by` ([`Profile::heldout_for`]), or what to do to measure it.
    pub fn heldout_clause(&self, by: &str) -> String {
        let what = match by {
            "model" => "leave-one-model-out",
            "gpu" => "leave-one-GPU-out",
            _ => "leave-one-experiment-out",
        };
        match self.heldout_for(by) {
            Some(h) => {
                // `--holdout K` folds stand in for leaving each experiment out.
                let what = if self.error.heldout_by.contains_key(by) {
                    what
                } else {
                    "held-out"
                };
                let means: Vec<String> = ["e2e_mean_ms", "ttft_mean_ms", "itl_mean_ms"]
                    .iter()
                    .filter_map(|m| h.per_metric.get(*m).map(|v| format!("{m} {v:.1} %")))
                    .collect();
                format!(
                    "; its measured {what} error: weighted MAPE {:.1} % over {} folds{}",
                    h.mape,
                    h.folds,
                    if means.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", means.join(", "))
                    }
                )
            }
            None => format!(
                "; the profile has no {what} error (fit it with --holdout-by {by} to measure how far it carries)"
            ),
        }
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
            moe_expert_load: None,
            geometry: None,
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
                heldout_by: BTreeMap::new(),
            },
            fit: Settings {
                objective: "weighted MAPE".into(),
                method: "nm".into(),
                seed: 1,
                sim_seeds: 1,
                holdout_folds: 0,
                holdout_by: vec![],
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
        let at = |model: &str, hardware: &str, tp: u32| Deployment {
            model: model.into(),
            hardware: hardware.into(),
            tp,
        };
        let (all, touched_v, full) = (
            StepVariant::default(),
            StepVariant::parse(Some("touched"), None).unwrap(),
            StepVariant::parse(None, Some("full")).unwrap(),
        );
        let run = at("Qwen2.5-7B-Instruct", "h100", 1);
        let note = p
            .check_applies(f, "trained-physics", all, &run, false)
            .unwrap();
        assert_eq!((p.unseen(&run), note), (Unseen::default(), None));
        let e = p
            .check_applies(
                f,
                "roofline",
                all,
                &at("qwen2.5-7b-instruct", "H100", 1),
                false,
            )
            .unwrap_err();
        assert!(
            e.contains("fitted for the trained-physics latency model"),
            "{e}"
        );
        let e = p
            .check_applies(
                f,
                "trained-physics",
                all,
                &at("qwen3-14b", "H100", 1),
                false,
            )
            .unwrap_err();
        assert!(e.contains("not model qwen3-14b"), "{e}");
        assert!(e.contains("model.calibration_extrapolate = true"), "{e}");
        assert!(e.contains("no leave-one-model-out error"), "{e}");
        let e = p
            .check_applies(
                f,
                "trained-physics",
                all,
                &at("qwen2.5-7b-instruct", "A100-80", 1),
                false,
            )
            .unwrap_err();
        assert!(e.contains("on GPU A100-80"), "{e}");
        // The step-time model must be the one fitted: each setting of the
        // variant, recorded when not the default.
        let run = at("qwen2.5-7b-instruct", "H100", 1);
        assert!(p
            .check_applies(f, "trained-physics", all, &run, false)
            .is_ok());
        let cases = [
            ("moe_expert_load", "all", "touched", touched_v),
            ("geometry", "reference", "full", full),
        ];
        for (key, default, value, variant) in cases {
            let e = p
                .check_applies(f, "trained-physics", variant, &run, false)
                .unwrap_err();
            assert!(
                e.contains(&format!(
                    "fitted with model.{key} = \"{default}\", but the run uses \"{value}\""
                )),
                "{e}"
            );
            let mut fitted = p.clone();
            match key {
                "geometry" => fitted.geometry = Some(value.into()),
                _ => fitted.moe_expert_load = Some(value.into()),
            }
            let text = toml::to_string(&fitted).unwrap();
            assert!(text.contains(&format!("{key} = \"{value}\"")), "{text}");
            assert_eq!(toml::from_str::<Profile>(&text).unwrap(), fitted);
            assert!(fitted
                .check_applies(f, "trained-physics", variant, &run, false)
                .is_ok());
            let e = fitted
                .check_applies(f, "trained-physics", all, &run, false)
                .unwrap_err();
            assert!(e.contains(&format!("set model.{key} = \"{value}\"")), "{e}");
        }
        let mut unknown = p.clone();
        unknown.geometry = Some("round".into());
        let e = unknown
            .check_applies(f, "trained-physics", full, &run, false)
            .unwrap_err();
        assert!(e.contains("p.toml: unknown geometry 'round'"), "{e}");
        // A TP the profile has not seen runs, with a note.
        let run = at("qwen2.5-7b-instruct", "H100", 2);
        let note = p
            .check_applies(f, "trained-physics", all, &run, false)
            .unwrap();
        assert_eq!(
            p.unseen(&run),
            Unseen {
                model: false,
                gpu: false,
                tp: true
            }
        );
        assert!(note.unwrap().contains("extrapolates it to TP 2"));
        // With the key: the model and GPU it has not seen, named, with the
        // measured held-out error that applies.
        let mut p = p;
        p.error.heldout_by.insert(
            "model".into(),
            HeldOutBy {
                folds: 4,
                mape: 9.3,
                per_metric: BTreeMap::from([("e2e_mean_ms".to_string(), 7.5)]),
                per_unit: BTreeMap::new(),
            },
        );
        let run = at("qwen3-14b", "L40S", 1);
        let note = p
            .check_applies(f, "trained-physics", all, &run, true)
            .unwrap();
        assert_eq!(
            p.unseen(&run),
            Unseen {
                model: true,
                gpu: true,
                tp: false
            }
        );
        let note = note.unwrap();
        assert!(
            note.contains("extrapolates it to model qwen3-14b, GPU L40S"),
            "{note}"
        );
        assert!(
            note.contains(
                "leave-one-model-out error: weighted MAPE 9.3 % over 4 folds (e2e_mean_ms 7.5 %)"
            ),
            "{note}"
        );
        let text = toml::to_string(&p).unwrap();
        assert_eq!(toml::from_str::<Profile>(&text).unwrap(), p);
    }
}
