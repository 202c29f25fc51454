//! `blis calibrate fit --html fit.html`: one self-contained page (the
//! charts of [`crate::html_report`]) — for each metric, the prediction's
//! error against the measurement per experiment, at the start and after the
//! fit, with held-out predictions as their own series; the profile's
//! coefficients and errors; a table of every row.

use super::eval::Experiment;
use super::profile::Profile;
use super::table::Row;
use super::RowResult;
use crate::html_report::charts::{self, Series, Style};
use crate::html_report::page::{document, escape};

fn pct(pred: f64, meas: f64) -> f64 {
    100.0 * (pred - meas) / meas
}

/// The page.
pub fn page(
    rows: &[Row],
    experiments: &[Experiment],
    row_exp: &[usize],
    results: &[RowResult],
    profile: &Profile,
    profile_path: &str,
) -> String {
    let mut body = String::new();
    body.push_str(&format!(
        "<p class=\"meta\">Profile {} — {} latency model, {} measurements of {} run files; weighted MAPE {:.3} % at the start, {:.3} % after the fit{}. Written {} by blis {}.</p>\n",
        escape(profile_path),
        escape(&profile.latency_model),
        rows.len(),
        experiments.len(),
        profile.error.start_mape,
        profile.error.train_mape,
        profile
            .error
            .heldout_mape
            .map_or(String::new(), |h| format!(", {h:.3} % on held-out experiments")),
        escape(&profile.created),
        escape(&profile.blis_version)
    ));
    body.push_str("<p class=\"meta\">Experiments (x axis): ");
    body.push_str(
        &experiments
            .iter()
            .enumerate()
            .map(|(i, e)| format!("{i} = {}", escape(&e.name)))
            .collect::<Vec<_>>()
            .join(", "),
    );
    body.push_str("</p>\n<h2>Prediction error per experiment</h2>\n<div class=\"plots\">\n");
    let mut metrics: Vec<String> = rows.iter().map(|r| r.metric.name()).collect();
    metrics.sort();
    metrics.dedup();
    for m in &metrics {
        let of = |f: &dyn Fn(&RowResult) -> Option<f64>| -> Vec<(f64, f64)> {
            rows.iter()
                .enumerate()
                .filter(|(_, r)| r.metric.name() == *m)
                .filter_map(|(i, r)| f(&results[i]).map(|p| (row_exp[i] as f64, pct(p, r.value))))
                .collect()
        };
        let mut series = vec![
            Series::new("start", of(&|r| Some(r.start))),
            Series::new("fitted", of(&|r| Some(r.fitted))),
        ];
        let held = of(&|r| r.heldout);
        if !held.is_empty() {
            series.push(Series::new("held out", held));
        }
        body.push_str(&charts::lines(
            &format!("error-{m}"),
            m,
            "experiment",
            "predicted − measured (%)",
            &series,
            Style::Points,
            "held out: predicted by a fit that did not see the experiment",
        ));
    }
    body.push_str("</div>\n<h2>Coefficients</h2>\n<table><tr><th class=\"l\">coefficient</th><th>start</th><th>fitted</th><th>std</th><th>95 % interval</th><th class=\"l\">note</th></tr>\n");
    for f in &profile.fitted {
        let note = if f.identifiable {
            f.note.clone()
        } else {
            format!("not identifiable: {}", f.note)
        };
        body.push_str(&format!(
            "<tr><td class=\"l\">{}</td><td>{:.6}</td><td>{:.6}</td><td>{:.4}</td><td>{:.6} – {:.6}</td><td class=\"l\">{}</td></tr>\n",
            escape(&f.name),
            f.start,
            f.value,
            f.std,
            f.interval_95[0],
            f.interval_95[1],
            escape(&note)
        ));
    }
    body.push_str("</table>\n<h2>Measurements</h2>\n<table><tr><th class=\"l\">run file</th><th class=\"l\">metric</th><th>measured</th><th>start</th><th>fitted</th><th>held out</th><th>fold</th></tr>\n");
    for (i, r) in rows.iter().enumerate().filter(|(_, r)| r.request.is_none()) {
        let res = &results[i];
        body.push_str(&format!(
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{:.4}</td><td>{:.4} ({:+.2} %)</td><td>{:.4} ({:+.2} %)</td><td>{}</td><td>{}</td></tr>\n",
            escape(&r.run_file),
            escape(&r.metric.name()),
            r.value,
            res.start,
            pct(res.start, r.value),
            res.fitted,
            pct(res.fitted, r.value),
            res.heldout
                .map_or("–".into(), |h| format!("{h:.4} ({:+.2} %)", pct(h, r.value))),
            res.fold.map_or("–".into(), |f| (f + 1).to_string())
        ));
    }
    body.push_str("</table>\n");
    let per_request = rows.iter().filter(|r| r.request.is_some()).count();
    if per_request > 0 {
        body.push_str(&format!(
            "<p class=\"meta\">{per_request} per-request measurements of the traces (--trace) are in the charts only; their errors per metric are the profile's error.per_metric.</p>\n"
        ));
    }
    document("blis calibrate fit", &body)
}
