//! What a fit may change: the latency model's coefficients (`alpha[i]`,
//! `beta[i]`), their starting values, bounds, and the map from the
//! optimiser's unconstrained vector to coefficient values.
//!
//! Each fitted coefficient is moved multiplicatively: the optimiser's
//! coordinate `x` gives `start · eˣ`, kept inside the coefficient's bounds
//! (default `[start/20, start·20]`). A coefficient that is 0 at the start
//! cannot be moved that way and is not fitted by default; naming it in
//! `--fit` with its range (`--bounds NAME=LO:HI`) starts it at the range's
//! geometric mean (how a run file that leaves out a server's per-request
//! overhead gets one fitted), and naming it without a range is an error
//! that says so.

use std::collections::BTreeMap;

/// A coefficient family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    Alpha,
    Beta,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Alpha => "alpha",
            Family::Beta => "beta",
        }
    }
}

/// A coordinate of the coarse first stage: each alpha alone — the
/// overhead before the first token (α₀), after the last (α₁), per token
/// (α₂) do different things — and every beta as one factor (the step
/// time's scale); the fit reaches them from the families' factors (every
/// alpha, every beta). Measured on the 13 real vLLM experiments (leave one
/// out, median held-out TTFT): one factor for every alpha 18.6 %, each
/// alone 15.4 % (15.8 % started from the start itself); α₂ moved with the
/// betas 21.0 %; the betas split into the step's fixed cost and its cost
/// per unit of work 17.6 %.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    Alpha(usize),
    Beta,
}

/// One fitted coefficient.
#[derive(Clone, Debug, PartialEq)]
pub struct Fitted {
    pub family: Family,
    pub index: usize,
    pub start: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Fitted {
    /// `alpha[0]`, `beta[3]`.
    pub fn name(&self) -> String {
        format!("{}[{}]", self.family.name(), self.index)
    }

    /// The value at coordinate `x` (clamped to the bounds) and how far
    /// outside the bounds `x` lies, in log units.
    fn value(&self, x: f64) -> (f64, f64) {
        let v = self.start * x.exp();
        if v < self.lo {
            (self.lo, (self.lo / v).ln())
        } else if v > self.hi {
            (self.hi, (v / self.hi).ln())
        } else {
            (v, 0.0)
        }
    }

    /// The coordinate of `value`.
    pub fn coordinate(&self, value: f64) -> f64 {
        (value / self.start).ln()
    }
}

/// The full coefficient vectors of a latency model.
#[derive(Clone, Debug, PartialEq)]
pub struct Coefficients {
    pub alpha: [f64; 3],
    /// `None` for models without betas (the rooflines).
    pub beta: Option<Vec<f64>>,
}

impl Coefficients {
    fn get(&self, family: Family, index: usize) -> Option<f64> {
        match family {
            Family::Alpha => self.alpha.get(index).copied(),
            Family::Beta => self.beta.as_ref()?.get(index).copied(),
        }
    }

    fn set(&mut self, family: Family, index: usize, v: f64) {
        match family {
            Family::Alpha => self.alpha[index] = v,
            Family::Beta => {
                if let Some(b) = self.beta.as_mut() {
                    b[index] = v;
                }
            }
        }
    }
}

/// The space a fit searches: the starting coefficients and which of them move.
#[derive(Clone, Debug)]
pub struct Space {
    pub start: Coefficients,
    pub fitted: Vec<Fitted>,
}

/// Parse `alpha`, `beta`, `alpha[1]`, `beta[3]` into (family, index or all).
fn parse_name(s: &str) -> Result<(Family, Option<usize>), String> {
    let s = s.trim();
    let (fam, rest) = if let Some(r) = s.strip_prefix("alpha") {
        (Family::Alpha, r)
    } else if let Some(r) = s.strip_prefix("beta") {
        (Family::Beta, r)
    } else {
        return Err(format!(
            "--fit: unknown coefficient '{s}'; give alpha, beta, alpha[i] or beta[i] (comma separated)"
        ));
    };
    if rest.is_empty() {
        return Ok((fam, None));
    }
    let idx = rest
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.parse::<usize>().ok())
        .ok_or_else(|| format!("--fit: '{s}' is not written alpha[i] or beta[i]"))?;
    Ok((fam, Some(idx)))
}

impl Space {
    /// The fitted set from `--fit` (default: every nonzero coefficient) and
    /// `--bounds NAME=LO:HI`. `model` names the latency model for messages.
    pub fn new(
        start: Coefficients,
        fit: Option<&str>,
        bounds: &[String],
        model: &str,
    ) -> Result<Space, String> {
        let len = |f: Family| match f {
            Family::Alpha => 3,
            Family::Beta => start.beta.as_ref().map_or(0, Vec::len),
        };
        let mut chosen: Vec<(Family, usize, bool)> = Vec::new();
        let default = if start.beta.is_some() {
            "alpha,beta"
        } else {
            "alpha"
        };
        let spec = fit.unwrap_or(default);
        for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (fam, idx) = parse_name(part)?;
            if len(fam) == 0 {
                return Err(format!(
                    "--fit {}: the {model} latency model has no beta coefficients; fit alpha",
                    part.trim()
                ));
            }
            match idx {
                Some(i) if i >= len(fam) => {
                    return Err(format!(
                        "--fit {}: the {model} model has {} {} coefficients ({}[0] to {}[{}])",
                        part.trim(),
                        len(fam),
                        fam.name(),
                        fam.name(),
                        fam.name(),
                        len(fam) - 1
                    ))
                }
                Some(i) => chosen.push((fam, i, true)),
                None => chosen.extend((0..len(fam)).map(|i| (fam, i, false))),
            }
        }
        let mut bound_map: BTreeMap<(Family, usize), (f64, f64)> = BTreeMap::new();
        for b in bounds {
            let (name, range) = b
                .split_once('=')
                .ok_or_else(|| format!("--bounds {b}: write NAME=LO:HI, e.g. beta[2]=0.5:3"))?;
            let (fam, idx) = parse_name(name)?;
            let idx = idx.ok_or_else(|| {
                format!("--bounds {b}: name one coefficient, e.g. {}[0]", fam.name())
            })?;
            let (lo, hi) = range
                .split_once(':')
                .and_then(|(l, h)| {
                    Some((l.trim().parse::<f64>().ok()?, h.trim().parse::<f64>().ok()?))
                })
                .ok_or_else(|| format!("--bounds {b}: write NAME=LO:HI with two numbers"))?;
            if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && lo < hi) {
                return Err(format!(
                    "--bounds {b}: need 0 < LO < HI (coefficients move multiplicatively)"
                ));
            }
            bound_map.insert((fam, idx), (lo, hi));
        }
        let mut fitted: Vec<Fitted> = Vec::new();
        for (fam, index, explicit) in chosen {
            if fitted.iter().any(|f| f.family == fam && f.index == index) {
                continue;
            }
            let mut start_v = start.get(fam, index).unwrap_or(0.0);
            let given = bound_map.get(&(fam, index)).copied();
            if start_v <= 0.0 {
                match (explicit, given) {
                    // A term the run file leaves out (a server overhead at
                    // 0) starts inside the range the user gives it.
                    (true, Some((lo, hi))) => start_v = (lo * hi).sqrt(),
                    (true, None) => {
                        return Err(format!(
                            "--fit {}[{index}]: it is 0 at the start and a fit moves coefficients by factors; \
                             give its range (--bounds {}[{index}]=LO:HI: it starts at their geometric mean), \
                             start from a nonzero value (e.g. --set in the run files) or leave it out",
                            fam.name(),
                            fam.name()
                        ));
                    }
                    (false, _) => continue,
                }
            }
            let (lo, hi) = given.unwrap_or((start_v / 20.0, start_v * 20.0));
            if !(lo..=hi).contains(&start_v) {
                return Err(format!(
                    "--bounds {}[{index}]={lo}:{hi} excludes the starting value {start_v}",
                    fam.name()
                ));
            }
            fitted.push(Fitted {
                family: fam,
                index,
                start: start_v,
                lo,
                hi,
            });
        }
        for (fam, idx) in bound_map.keys() {
            if !fitted.iter().any(|f| f.family == *fam && f.index == *idx) {
                return Err(format!(
                    "--bounds {}[{idx}]: that coefficient is not fitted (see --fit)",
                    fam.name()
                ));
            }
        }
        if fitted.is_empty() {
            return Err(format!(
                "nothing to fit: every coefficient chosen by --fit {spec} is 0 in the {model} model \
                 (a fit moves coefficients by factors); choose nonzero ones"
            ));
        }
        Ok(Space { start, fitted })
    }

    /// The coefficients at coordinates `x` and a penalty for coordinates
    /// outside the bounds (0 inside).
    pub fn at(&self, x: &[f64]) -> (Coefficients, f64) {
        let mut c = self.start.clone();
        let mut outside = 0.0;
        for (f, &xi) in self.fitted.iter().zip(x) {
            let (v, out) = f.value(xi);
            outside += out * out;
            c.set(f.family, f.index, v);
        }
        (c, outside)
    }

    /// The number of coefficient families fitted (alpha, beta) and, for
    /// each fitted coefficient, the index of its family among them (the
    /// coarsest stage moves a family as one factor).
    pub fn families(&self) -> (usize, Vec<usize>) {
        let has_alpha = self.fitted.iter().any(|f| f.family == Family::Alpha);
        let member = self
            .fitted
            .iter()
            .map(|f| usize::from(has_alpha && f.family == Family::Beta))
            .collect();
        let count = usize::from(has_alpha)
            + usize::from(self.fitted.iter().any(|f| f.family == Family::Beta));
        (count, member)
    }

    /// The [`Group`]s with at least one fitted coefficient, and for each
    /// fitted coefficient the index of its group in that list (the first
    /// stage moves a group as one factor).
    pub fn groups(&self) -> (Vec<Group>, Vec<usize>) {
        let group = |f: &Fitted| match f.family {
            Family::Alpha => Group::Alpha(f.index),
            Family::Beta => Group::Beta,
        };
        let mut groups: Vec<Group> = self.fitted.iter().map(group).collect();
        groups.sort();
        groups.dedup();
        let member = self
            .fitted
            .iter()
            .map(|f| groups.iter().position(|g| *g == group(f)).unwrap_or(0))
            .collect();
        (groups, member)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Coefficients {
        Coefficients {
            alpha: [100.0, 0.0, 5.0],
            beta: Some(vec![2.0, 0.0, 3.0]),
        }
    }

    #[test]
    fn default_fits_the_nonzero_coefficients() {
        let s = Space::new(start(), None, &[], "linear").unwrap();
        let names: Vec<String> = s.fitted.iter().map(Fitted::name).collect();
        assert_eq!(names, ["alpha[0]", "alpha[2]", "beta[0]", "beta[2]"]);
        let (c, pen) = s.at(&[0.0, 2f64.ln(), 0.0, 0.5f64.ln()]);
        assert_eq!(c.alpha, [100.0, 0.0, 10.0]);
        assert!((c.beta.unwrap()[2] - 1.5).abs() < 1e-12);
        assert_eq!(pen, 0.0);
        let (c, pen) = s.at(&[10.0, 0.0, 0.0, 0.0]);
        assert_eq!(c.alpha[0], 2000.0);
        assert!((pen - (10.0 - 20f64.ln()).powi(2)).abs() < 1e-9);
        let (groups, member) = s.groups();
        assert_eq!(groups, [Group::Alpha(0), Group::Alpha(2), Group::Beta]);
        assert_eq!(member, [0, 1, 2, 2]);
    }

    #[test]
    fn choices_and_bounds_are_checked() {
        let s = Space::new(start(), Some("beta[2]"), &["beta[2]=1:4".into()], "linear").unwrap();
        assert_eq!(s.fitted.len(), 1);
        assert_eq!((s.fitted[0].lo, s.fitted[0].hi), (1.0, 4.0));
        for (fit, bounds, want) in [
            ("beta[1]", vec![], "it is 0 at the start"),
            ("beta[3]", vec![], "has 3 beta coefficients"),
            ("gamma", vec![], "unknown coefficient"),
            (
                "beta",
                vec!["beta[2]=4:8".to_string()],
                "excludes the starting value",
            ),
            ("beta", vec!["alpha[0]=1:1000".to_string()], "not fitted"),
            ("beta", vec!["beta[0]=2".to_string()], "NAME=LO:HI"),
            (
                "alpha[1]",
                vec![],
                "give its range (--bounds alpha[1]=LO:HI",
            ),
        ] {
            let e = Space::new(start(), Some(fit), &bounds, "linear").unwrap_err();
            assert!(e.contains(want), "{fit} {bounds:?}: {e}");
        }
        // A zero start with its range starts at the range's geometric mean.
        let s = Space::new(
            start(),
            Some("alpha[1],beta[0]"),
            &["alpha[1]=10:1000".into()],
            "linear",
        )
        .unwrap();
        assert_eq!(s.fitted[0].name(), "alpha[1]");
        assert!((s.fitted[0].start - 100.0).abs() < 1e-9);
        assert_eq!((s.fitted[0].lo, s.fitted[0].hi), (10.0, 1000.0));
        assert_eq!(s.at(&[0.0, 0.0]).0.alpha, [100.0, 100.0, 5.0]);
        let roof = Coefficients {
            alpha: [0.0; 3],
            beta: None,
        };
        assert!(Space::new(roof.clone(), Some("beta"), &[], "roofline")
            .unwrap_err()
            .contains("no beta"));
        assert!(Space::new(roof, None, &[], "roofline")
            .unwrap_err()
            .contains("nothing to fit"));
    }
}
