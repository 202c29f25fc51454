//! Charts as inline SVG, drawn with plotters' SVG backend: line charts
//! (with an optional min–max band per point), step CDFs and histograms.
//!
//! Each chart is wrapped in a `<figure class="plot" data-plot=ID
//! data-series="a|b|…">` so a test (or a script) can find every plot and
//! its series without a browser; the SVG needs no JavaScript and no fonts
//! from the network.

use plotters::prelude::*;

use super::page::escape;

/// One named series of (x, y) points, optionally with a (low, high) spread per point.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub spread: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            spread: Vec::new(),
        }
    }
}

/// How a chart draws its series.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Lines through the points, with markers; the legend above them.
    Lines,
    /// Lines without markers (many points: time series); the legend above them.
    Plain,
    /// A CDF: lines without markers, the legend at the lower right (empty there).
    Cdf,
    /// Markers only (a scatter); the legend above them.
    Points,
}

const WIDTH: u32 = 560;
const HEIGHT: u32 = 340;

/// The colour of series `i` (a qualitative palette that prints well).
fn colour(i: usize) -> RGBColor {
    const P: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = P[i % P.len()];
    RGBColor(r, g, b)
}

/// A range covering `vals`, padded, never empty.
fn range(vals: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero && lo > 0.0 {
        lo = 0.0;
    }
    if hi - lo < 1e-12 {
        hi = lo + lo.abs().max(1.0) * 0.1;
    }
    let pad = (hi - lo) * 0.04;
    (if from_zero && lo >= 0.0 { lo } else { lo - pad }, hi + pad)
}

fn figure(id: &str, title: &str, names: &[&str], svg: &str, note: &str) -> String {
    let note = if note.is_empty() {
        String::new()
    } else {
        format!("<figcaption>{}</figcaption>", escape(note))
    };
    format!(
        "<figure class=\"plot\" data-plot=\"{}\" data-series=\"{}\" title=\"{}\">{svg}{note}</figure>\n",
        escape(id),
        escape(&names.join("|")),
        escape(title)
    )
}

/// A placeholder where a plot has no data (says why).
pub fn missing(id: &str, title: &str, why: &str) -> String {
    format!(
        "<figure class=\"plot missing\" data-plot=\"{}\" data-series=\"\"><div class=\"missing\"><b>{}</b><br>{}</div></figure>\n",
        escape(id),
        escape(title),
        escape(why)
    )
}

/// A chart of lines.
pub fn lines(
    id: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    style: Style,
    note: &str,
) -> String {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| p.1)
            .chain(s.spread.iter().flat_map(|&(a, b)| [a, b]))
    });
    let (x0, x1) = range(xs, false);
    let (y0, mut y1) = range(ys, true);
    let legend = if style == Style::Cdf {
        SeriesLabelPosition::LowerRight
    } else {
        // Head room for the legend above the lines.
        y1 = y0 + (y1 - y0) * (1.0 + 0.08 * (series.len() as f64 + 1.0));
        SeriesLabelPosition::UpperLeft
    };
    let mut svg = String::new();
    let frame = Frame {
        title,
        x_label,
        y_label,
        x: (x0, x1),
        y: (y0, y1),
        legend,
    };
    let drawn = draw(&mut svg, &frame, |chart| {
        for (i, s) in series.iter().enumerate() {
            let c = colour(i);
            let pts = s.points.clone();
            if style == Style::Points {
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
            } else {
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(2)))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                    });
            }
            if style == Style::Lines {
                chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
            }
            if !s.spread.is_empty() {
                chart.draw_series(s.points.iter().zip(&s.spread).map(|(&(x, _), &(lo, hi))| {
                    PathElement::new(vec![(x, lo), (x, hi)], c.stroke_width(1))
                }))?;
            }
        }
        Ok(())
    });
    if let Err(e) = drawn {
        return missing(id, title, &format!("could not draw: {e}"));
    }
    let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    figure(id, title, &names, &svg, note)
}

/// Empirical CDFs of samples (one series per population).
pub fn cdf(
    id: &str,
    title: &str,
    x_label: &str,
    pops: &[(String, Vec<f64>)],
    note: &str,
) -> String {
    let series: Vec<Series> = pops
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(name, v)| {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            let n = v.len() as f64;
            // At most ~400 steps per curve keeps the SVG small.
            let stride = (v.len() / 400).max(1);
            let mut pts = vec![(v[0], 0.0)];
            for (i, x) in v.iter().enumerate().step_by(stride) {
                pts.push((*x, (i + 1) as f64 / n));
            }
            pts.push((v[v.len() - 1], 1.0));
            Series::new(format!("{name} (n={})", v.len()), pts)
        })
        .collect();
    if series.is_empty() {
        return missing(id, title, "no samples");
    }
    lines(
        id,
        title,
        x_label,
        "fraction ≤ x",
        &series,
        Style::Cdf,
        note,
    )
}

/// A histogram of `values` in `bins` equal bins.
pub fn histogram(
    id: &str,
    title: &str,
    x_label: &str,
    values: &[f64],
    bins: usize,
    note: &str,
) -> String {
    if values.is_empty() {
        return missing(id, title, "no samples");
    }
    let (lo, hi) = range(values.iter().copied(), true);
    let w = (hi - lo) / bins as f64;
    let mut counts = vec![0u64; bins];
    for v in values {
        let b = (((v - lo) / w) as usize).min(bins - 1);
        counts[b] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(1) as f64;
    let mut svg = String::new();
    let frame = Frame {
        title,
        x_label,
        y_label: "decisions",
        x: (lo, hi),
        y: (0.0, top * 1.2),
        legend: SeriesLabelPosition::UpperRight,
    };
    let drawn = draw(&mut svg, &frame, |chart| {
        let c = colour(0);
        chart
            .draw_series(
                counts
                    .iter()
                    .enumerate()
                    .filter(|(_, &n)| n > 0)
                    .map(|(i, &n)| {
                        let x = lo + i as f64 * w;
                        Rectangle::new([(x, 0.0), (x + w * 0.95, n as f64)], c.mix(0.7).filled())
                    }),
            )?
            .label(format!("{} decisions", values.len()))
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 12, y + 4)], c.filled()));
        Ok(())
    });
    if let Err(e) = drawn {
        return missing(id, title, &format!("could not draw: {e}"));
    }
    figure(id, title, &["regret"], &svg, note)
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;
type DrawResult = Result<(), Box<dyn std::error::Error + 'static>>;

/// A chart's frame: titles, ranges, where the legend goes.
struct Frame<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    x: (f64, f64),
    y: (f64, f64),
    legend: SeriesLabelPosition,
}

/// Set up axes, call `body` to draw, add the legend.
fn draw(
    svg: &mut String,
    f: &Frame,
    body: impl FnOnce(&mut Chart<'_, '_>) -> Result<(), DrawingAreaErrorKind<std::io::Error>>,
) -> DrawResult {
    {
        let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(f.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(f.x.0..f.x.1, f.y.0..f.y.1)?;
        chart
            .configure_mesh()
            .x_desc(f.x_label)
            .y_desc(f.y_label)
            .light_line_style(WHITE.mix(0.0))
            .label_style(("sans-serif", 11))
            .draw()?;
        body(&mut chart)?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font(("sans-serif", 11))
            .position(f.legend.clone())
            .draw()?;
        root.present()?;
    }
    Ok(())
}
