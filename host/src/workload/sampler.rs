//! Samplers: inter-arrival times and token lengths.
//!
//! Each sampler is built once from a validated spec and then draws from the
//! caller's generator (one ChaCha stream per client, see `generator`), so the
//! same spec and stream always give the same values. Formulas follow the
//! cluster spec §6.6, with two deliberate deviations from the reference:
//! inter-arrival times are kept as real numbers (the client's clock is a
//! float and only arrival *times* are rounded to ticks, so 10 req/s gives
//! arrivals exactly 100,000 µs apart instead of 99,999), and a gamma `cv`
//! above 10 is rejected instead of silently becoming Poisson.

use rand::{Rng, RngExt};
use rand_distr::{Distribution, Exp1, Gamma, StandardNormal};

use super::config::{ArrivalProcess, ArrivalSpec, LengthDist};

/// Largest token length a sampler returns (2^30). Heavy-tailed samples are
/// saturated here so that prompt + output always fit a `u32`.
pub const MAX_TOKENS: u32 = 1 << 30;

/// Inter-arrival time sampler, in µs (ticks) as a real number.
#[derive(Clone, Debug)]
pub(crate) enum ArrivalSampler {
    /// Evenly spaced arrivals; draws nothing.
    Constant { iat: f64 },
    /// Exponential inter-arrival times with the given mean.
    Poisson { mean: f64 },
    /// Gamma(shape = 1/cv², scale = mean·cv²).
    Gamma(Gamma<f64>),
    /// Weibull with shape `k` solved from `cv` and `scale = mean / Γ(1 + 1/k)`.
    Weibull { scale: f64, inv_k: f64 },
}

impl ArrivalSampler {
    /// Builds the sampler for a client whose rate is `rate_per_us` requests
    /// per µs. The spec must already be validated (`validate_arrival`).
    pub(crate) fn new(spec: &ArrivalSpec, rate_per_us: f64) -> Result<Self, String> {
        validate_arrival(spec)?;
        if !(rate_per_us.is_finite() && rate_per_us > 0.0) {
            return Err(format!(
                "rate must be finite and > 0, got {rate_per_us} req/µs"
            ));
        }
        let mean = 1.0 / rate_per_us;
        if !mean.is_finite() {
            return Err(format!("rate {rate_per_us} req/µs is too small"));
        }
        let cv = spec.cv.unwrap_or(1.0);
        Ok(match spec.process {
            ArrivalProcess::Constant => ArrivalSampler::Constant { iat: mean },
            ArrivalProcess::Poisson => ArrivalSampler::Poisson { mean },
            ArrivalProcess::Gamma => {
                let shape = 1.0 / (cv * cv);
                let scale = mean * cv * cv;
                ArrivalSampler::Gamma(
                    Gamma::new(shape, scale).map_err(|e| format!("gamma arrival: {e}"))?,
                )
            }
            ArrivalProcess::Weibull => {
                let k = weibull_shape_for_cv(cv);
                let scale = mean / ln_gamma(1.0 + 1.0 / k).exp();
                ArrivalSampler::Weibull {
                    scale,
                    inv_k: 1.0 / k,
                }
            }
        })
    }

    /// One inter-arrival time in µs (≥ 0).
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match self {
            ArrivalSampler::Constant { iat } => *iat,
            ArrivalSampler::Poisson { mean } => {
                let e: f64 = Exp1.sample(rng);
                e * mean
            }
            ArrivalSampler::Gamma(g) => g.sample(rng),
            ArrivalSampler::Weibull { scale, inv_k } => {
                // u in (0, 1]: −ln u is then finite.
                let u = 1.0 - rng.random::<f64>();
                scale * (-u.ln()).powf(*inv_k)
            }
        }
    }
}

/// Checks an arrival spec on its own (independent of the rate).
pub(crate) fn validate_arrival(spec: &ArrivalSpec) -> Result<(), String> {
    let Some(cv) = spec.cv else { return Ok(()) };
    match spec.process {
        ArrivalProcess::Constant | ArrivalProcess::Poisson => Err(format!(
            "cv applies only to the gamma and weibull processes (a {} process has a fixed cv); remove it",
            spec.process.name()
        )),
        _ if !(cv.is_finite() && cv > 0.0) => {
            Err(format!("cv must be a finite number > 0, got {cv}"))
        }
        ArrivalProcess::Gamma if cv > 10.0 => Err(format!(
            "gamma cv must be at most 10 (shape 1/cv² ≥ 0.01), got {cv}"
        )),
        ArrivalProcess::Weibull if !(0.01..=10.4).contains(&cv) => {
            Err(format!("weibull cv must lie in [0.01, 10.4], got {cv}"))
        }
        _ => Ok(()),
    }
}

/// Coefficient of variation of a Weibull distribution of shape `k`:
/// `sqrt(Γ(1+2/k) / Γ(1+1/k)² − 1)`.
pub(crate) fn weibull_cv(k: f64) -> f64 {
    (ln_gamma(1.0 + 2.0 / k) - 2.0 * ln_gamma(1.0 + 1.0 / k))
        .exp_m1()
        .sqrt()
}

/// Weibull shape `k` whose CV is `cv`, by bisection (CV decreases in `k`).
///
/// The spec bisects on `[0.1, 100]` to a tolerance of 0.001 on the CV; blis
/// bisects on `ln k` over `[0.05, 2000]` to full precision, so the sampled CV
/// matches the configured one and the cv range `[0.01, 10.4]` is covered.
pub(crate) fn weibull_shape_for_cv(cv: f64) -> f64 {
    let (mut lo, mut hi) = (0.05_f64.ln(), 2000_f64.ln());
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if weibull_cv(mid.exp()) > cv {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-13 {
            break;
        }
    }
    (0.5 * (lo + hi)).exp()
}

/// Natural log of the gamma function for `x > 0` (Lanczos approximation,
/// g = 7, nine terms; relative error around 1e-15).
pub(crate) fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)·Γ(1−x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Token-length sampler. Every sample is in `[1, MAX_TOKENS]`.
#[derive(Clone, Debug)]
pub(crate) enum LengthSampler {
    Gaussian {
        mean: f64,
        std_dev: f64,
        min: u32,
        max: u32,
    },
    Exponential {
        mean: f64,
    },
    ParetoLognormal {
        alpha: f64,
        xm: f64,
        mu: f64,
        sigma: f64,
        mix_weight: f64,
    },
    Constant(u32),
    /// Bin values ascending with their cumulative probabilities (last = 1).
    Empirical {
        values: Vec<u32>,
        cumulative: Vec<f64>,
    },
}

fn finite(name: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{name} must be a finite number, got {v}"))
    }
}

/// Rounds half away from zero and saturates into `[1, MAX_TOKENS]`.
fn to_tokens(v: f64) -> u32 {
    if v.is_nan() {
        return 1;
    }
    v.round().clamp(1.0, f64::from(MAX_TOKENS)) as u32
}

impl LengthSampler {
    /// Validates `dist` and builds its sampler. Errors say which parameter is wrong.
    pub(crate) fn new(dist: &LengthDist) -> Result<Self, String> {
        Ok(match dist {
            LengthDist::Gaussian {
                mean,
                std_dev,
                min,
                max,
            } => {
                let mean = finite("gaussian mean", *mean)?;
                let std_dev = finite("gaussian std_dev", *std_dev)?;
                if std_dev < 0.0 {
                    return Err(format!("gaussian std_dev must be ≥ 0, got {std_dev}"));
                }
                if min > max {
                    return Err(format!("gaussian min {min} is greater than max {max}"));
                }
                if *max > MAX_TOKENS {
                    return Err(format!("gaussian max {max} exceeds {MAX_TOKENS} tokens"));
                }
                if mean < f64::from(*min) || mean > f64::from(*max) {
                    return Err(format!(
                        "gaussian mean {mean} lies outside [min {min}, max {max}]"
                    ));
                }
                LengthSampler::Gaussian {
                    mean,
                    std_dev,
                    min: *min,
                    max: *max,
                }
            }
            LengthDist::Exponential { mean } => {
                let mean = finite("exponential mean", *mean)?;
                if mean <= 0.0 {
                    return Err(format!("exponential mean must be > 0, got {mean}"));
                }
                LengthSampler::Exponential { mean }
            }
            LengthDist::ParetoLognormal {
                alpha,
                xm,
                mu,
                sigma,
                mix_weight,
            } => {
                let alpha = finite("pareto_lognormal alpha", *alpha)?;
                let xm = finite("pareto_lognormal xm", *xm)?;
                let mu = finite("pareto_lognormal mu", *mu)?;
                let sigma = finite("pareto_lognormal sigma", *sigma)?;
                let mix_weight = finite("pareto_lognormal mix_weight", *mix_weight)?;
                if alpha <= 0.0 || xm <= 0.0 {
                    return Err(format!(
                        "pareto_lognormal alpha and xm must be > 0, got alpha {alpha}, xm {xm}"
                    ));
                }
                if sigma < 0.0 {
                    return Err(format!("pareto_lognormal sigma must be ≥ 0, got {sigma}"));
                }
                if !(0.0..=1.0).contains(&mix_weight) {
                    return Err(format!(
                        "pareto_lognormal mix_weight must lie in [0, 1], got {mix_weight}"
                    ));
                }
                LengthSampler::ParetoLognormal {
                    alpha,
                    xm,
                    mu,
                    sigma,
                    mix_weight,
                }
            }
            LengthDist::Constant { value } => {
                if *value < 1 || *value > MAX_TOKENS {
                    return Err(format!(
                        "constant value must lie in [1, {MAX_TOKENS}], got {value}"
                    ));
                }
                LengthSampler::Constant(*value)
            }
            LengthDist::Empirical { bins } => {
                if bins.is_empty() {
                    return Err("empirical bins are empty".into());
                }
                let mut parsed = Vec::with_capacity(bins.len());
                for (k, p) in bins {
                    let v: u32 = k
                        .trim()
                        .parse()
                        .ok()
                        .filter(|v| (1..=MAX_TOKENS).contains(v))
                        .ok_or_else(|| {
                            format!(
                                "empirical bin \"{k}\" is not a token count in [1, {MAX_TOKENS}]"
                            )
                        })?;
                    if !(p.is_finite() && *p >= 0.0) {
                        return Err(format!(
                            "empirical bin \"{k}\": probability must be finite and ≥ 0, got {p}"
                        ));
                    }
                    parsed.push((v, *p));
                }
                parsed.sort_by_key(|&(v, _)| v);
                if parsed.windows(2).any(|w| w[0].0 == w[1].0) {
                    return Err("empirical bins repeat a token count".into());
                }
                let total: f64 = parsed.iter().map(|&(_, p)| p).sum();
                if total <= 0.0 {
                    return Err("empirical bin probabilities must have a positive sum".into());
                }
                let mut values = Vec::new();
                let mut cumulative = Vec::new();
                let mut acc = 0.0;
                for (v, p) in parsed {
                    if p > 0.0 {
                        acc += p / total;
                        values.push(v);
                        cumulative.push(acc);
                    }
                }
                *cumulative.last_mut().expect("positive sum has a bin") = 1.0;
                LengthSampler::Empirical { values, cumulative }
            }
        })
    }

    /// One token length in `[1, MAX_TOKENS]`.
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        match self {
            LengthSampler::Gaussian {
                mean,
                std_dev,
                min,
                max,
            } => {
                if min == max {
                    return (*min).max(1);
                }
                let z: f64 = StandardNormal.sample(rng);
                let v = (z * std_dev + mean).clamp(f64::from(*min), f64::from(*max));
                to_tokens(v)
            }
            LengthSampler::Exponential { mean } => {
                let e: f64 = Exp1.sample(rng);
                to_tokens(e * mean)
            }
            LengthSampler::ParetoLognormal {
                alpha,
                xm,
                mu,
                sigma,
                mix_weight,
            } => {
                let v = if rng.random::<f64>() < *mix_weight {
                    let u = 1.0 - rng.random::<f64>();
                    xm / u.powf(1.0 / alpha)
                } else {
                    let z: f64 = StandardNormal.sample(rng);
                    (mu + sigma * z).exp()
                };
                to_tokens(v)
            }
            LengthSampler::Constant(v) => *v,
            LengthSampler::Empirical { values, cumulative } => {
                if values.len() == 1 {
                    return values[0];
                }
                let u: f64 = rng.random();
                let i = cumulative.partition_point(|&c| c < u);
                values[i.min(values.len() - 1)]
            }
        }
    }

    /// Expected value of a sample before rounding and clamping where those are
    /// negligible (used by tests and docs); `None` when infinite.
    #[cfg(test)]
    pub(crate) fn nominal_mean(&self) -> Option<f64> {
        match self {
            LengthSampler::Gaussian { mean, .. } => Some(*mean),
            LengthSampler::Exponential { mean } => Some(*mean),
            LengthSampler::ParetoLognormal {
                alpha,
                xm,
                mu,
                sigma,
                mix_weight,
            } => {
                if *alpha <= 1.0 && *mix_weight > 0.0 {
                    return None;
                }
                let pareto = if *mix_weight > 0.0 {
                    alpha * xm / (alpha - 1.0)
                } else {
                    0.0
                };
                let lognormal = (mu + 0.5 * sigma * sigma).exp();
                Some(mix_weight * pareto + (1.0 - mix_weight) * lognormal)
            }
            LengthSampler::Constant(v) => Some(f64::from(*v)),
            LengthSampler::Empirical { values, cumulative } => {
                let mut prev = 0.0;
                let mut m = 0.0;
                for (v, c) in values.iter().zip(cumulative) {
                    m += f64::from(*v) * (c - prev);
                    prev = *c;
                }
                Some(m)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use std::collections::BTreeMap;

    const N: usize = 100_000;

    fn stats(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt() / mean)
    }

    fn close(what: &str, got: f64, want: f64) {
        assert!(
            ((got - want) / want).abs() < 0.02,
            "{what}: got {got}, want {want} (±2%)"
        );
    }

    fn arrival(process: ArrivalProcess, cv: Option<f64>) -> ArrivalSpec {
        ArrivalSpec { process, cv }
    }

    fn iats(spec: &ArrivalSpec, rate_per_us: f64, seed: u64) -> Vec<f64> {
        let s = ArrivalSampler::new(spec, rate_per_us).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..N).map(|_| s.sample(&mut rng)).collect()
    }

    #[test]
    fn ln_gamma_matches_known_values() {
        // Γ(1) = Γ(2) = 1, Γ(5) = 24, Γ(0.5) = √π, Γ(1.5) = √π / 2.
        let pi = std::f64::consts::PI;
        for (x, g) in [
            (1.0, 1.0),
            (2.0, 1.0),
            (5.0, 24.0),
            (0.5, pi.sqrt()),
            (1.5, pi.sqrt() / 2.0),
            (11.0, 3_628_800.0),
        ] {
            let got = ln_gamma(x).exp();
            assert!(((got - g) / g).abs() < 1e-12, "Γ({x}) = {got}, want {g}");
        }
    }

    #[test]
    fn weibull_shape_solves_cv() {
        // k = 1 is the exponential distribution (cv 1).
        assert!((weibull_shape_for_cv(1.0) - 1.0).abs() < 1e-9);
        for cv in [0.01, 0.1, 0.5, 2.0, 5.0, 10.4] {
            let k = weibull_shape_for_cv(cv);
            assert!(
                ((weibull_cv(k) - cv) / cv).abs() < 1e-6,
                "cv {cv}: k {k} gives {}",
                weibull_cv(k)
            );
        }
    }

    #[test]
    fn arrival_processes_have_configured_mean_and_cv() {
        let rate = 50.0 / 1e6; // 50 req/s in req/µs: mean IAT 20,000 µs
        let mean = 1.0 / rate;
        let cases = [
            (arrival(ArrivalProcess::Poisson, None), 1.0),
            (arrival(ArrivalProcess::Gamma, Some(2.0)), 2.0),
            (arrival(ArrivalProcess::Gamma, Some(0.5)), 0.5),
            (arrival(ArrivalProcess::Gamma, None), 1.0),
            (arrival(ArrivalProcess::Weibull, Some(0.5)), 0.5),
            (arrival(ArrivalProcess::Weibull, Some(1.5)), 1.5),
        ];
        for (spec, cv) in cases {
            let xs = iats(&spec, rate, 7);
            let (m, c) = stats(&xs);
            close(&format!("{spec:?} mean"), m, mean);
            close(&format!("{spec:?} cv"), c, cv);
            assert!(xs.iter().all(|x| *x >= 0.0 && x.is_finite()));
        }
        // Constant: every interval is exactly 1/rate, cv 0.
        let xs = iats(&arrival(ArrivalProcess::Constant, None), rate, 7);
        assert!(xs.iter().all(|x| *x == mean));
    }

    #[test]
    fn arrival_validation_is_clear() {
        let bad = |p, cv| ArrivalSampler::new(&arrival(p, cv), 1e-5).unwrap_err();
        assert!(bad(ArrivalProcess::Gamma, Some(-1.0)).contains("cv must be"));
        assert!(bad(ArrivalProcess::Gamma, Some(f64::NAN)).contains("finite"));
        assert!(bad(ArrivalProcess::Gamma, Some(11.0)).contains("at most 10"));
        assert!(bad(ArrivalProcess::Weibull, Some(20.0)).contains("[0.01, 10.4]"));
        assert!(bad(ArrivalProcess::Poisson, Some(2.0)).contains("applies only"));
        let spec = arrival(ArrivalProcess::Poisson, None);
        assert!(ArrivalSampler::new(&spec, -1.0).is_err());
        assert!(ArrivalSampler::new(&spec, f64::INFINITY).is_err());
    }

    fn lengths(d: &LengthDist, seed: u64) -> (LengthSampler, Vec<u32>) {
        let s = LengthSampler::new(d).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let xs = (0..N).map(|_| s.sample(&mut rng)).collect();
        (s, xs)
    }

    fn as_f64(xs: &[u32]) -> Vec<f64> {
        xs.iter().map(|&x| f64::from(x)).collect()
    }

    #[test]
    fn length_distributions_have_configured_mean() {
        let bins: BTreeMap<String, f64> =
            [("128", 0.25), ("512", 0.5), ("2048", 0.25), ("64", 0.0)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
        let cases = [
            LengthDist::Gaussian {
                mean: 512.0,
                std_dev: 100.0,
                min: 1,
                max: 2000,
            },
            LengthDist::Exponential { mean: 300.0 },
            LengthDist::ParetoLognormal {
                alpha: 3.0,
                xm: 100.0,
                mu: 5.0,
                sigma: 0.5,
                mix_weight: 0.3,
            },
            LengthDist::Constant { value: 77 },
            LengthDist::Empirical { bins },
        ];
        for d in &cases {
            let (s, xs) = lengths(d, 11);
            let want = s.nominal_mean().unwrap();
            let (m, _) = stats(&as_f64(&xs));
            close(&format!("{d:?} mean"), m, want);
            assert!(xs.iter().all(|&x| (1..=MAX_TOKENS).contains(&x)));
        }
        // Gaussian CV = std_dev / mean when clamping is negligible; exponential CV = 1.
        let (_, xs) = lengths(&cases[0], 3);
        close("gaussian cv", stats(&as_f64(&xs)).1, 100.0 / 512.0);
        let (_, xs) = lengths(&cases[1], 3);
        close("exponential cv", stats(&as_f64(&xs)).1, 1.0);
        // Empirical: only configured bins with positive probability appear.
        let (_, xs) = lengths(&cases[4], 3);
        assert!(xs.iter().all(|x| [128, 512, 2048].contains(x)));
        let share = xs.iter().filter(|&&x| x == 512).count() as f64 / N as f64;
        close("empirical share of 512", share, 0.5);
    }

    #[test]
    fn gaussian_clamps_to_min_max() {
        let d = LengthDist::Gaussian {
            mean: 512.0,
            std_dev: 256.0,
            min: 300,
            max: 600,
        };
        let (_, xs) = lengths(&d, 5);
        assert!(xs.iter().all(|&x| (300..=600).contains(&x)));
        assert!(
            xs.contains(&300) && xs.contains(&600),
            "both bounds reached"
        );
        // min == max draws nothing and returns the bound.
        let d = LengthDist::Gaussian {
            mean: 40.0,
            std_dev: 9.0,
            min: 40,
            max: 40,
        };
        let (_, xs) = lengths(&d, 5);
        assert!(xs.iter().all(|&x| x == 40));
    }

    #[test]
    fn same_seed_same_stream() {
        let d = LengthDist::Exponential { mean: 50.0 };
        assert_eq!(lengths(&d, 9).1, lengths(&d, 9).1);
        assert_ne!(lengths(&d, 9).1, lengths(&d, 10).1);
        let a = arrival(ArrivalProcess::Weibull, Some(2.0));
        assert_eq!(iats(&a, 1e-4, 9), iats(&a, 1e-4, 9));
    }

    #[test]
    fn length_validation_is_clear() {
        let err = |d: LengthDist| LengthSampler::new(&d).unwrap_err();
        assert!(err(LengthDist::Gaussian {
            mean: 9000.0,
            std_dev: 1.0,
            min: 2,
            max: 7000
        })
        .contains("mean 9000 lies outside [min 2, max 7000]"));
        assert!(err(LengthDist::Gaussian {
            mean: 5.0,
            std_dev: 1.0,
            min: 10,
            max: 2
        })
        .contains("greater than max"));
        assert!(err(LengthDist::Exponential { mean: -3.0 }).contains("> 0"));
        assert!(err(LengthDist::Constant { value: 0 }).contains("constant value"));
        let bins = |pairs: &[(&str, f64)]| LengthDist::Empirical {
            bins: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        };
        assert!(err(bins(&[("abc", 1.0)])).contains("\"abc\""));
        assert!(err(bins(&[("10", -1.0)])).contains("≥ 0"));
        assert!(err(bins(&[("10", 0.0)])).contains("positive sum"));
        assert!(err(bins(&[])).contains("empty"));
    }
}
