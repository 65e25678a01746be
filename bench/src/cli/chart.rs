//! SVG charts of the report, drawn with plotters.
//!
//! Owns: [`LinePanel`] and [`BarPanel`] (what one panel shows) and drawing them side by side
//! into one SVG file ([`lines`], [`bars`]). Every point and bar is a median; a vertical
//! stroke through it spans the runs' min–max.
//!
//! Why log scales are drawn by hand: values are plotted as `log10(v)` on a linear axis with
//! tick labels formatted back (`10K`, `1M`), which keeps one coordinate type for every panel
//! instead of a generic chart per combination of scales.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::cli::stats::Summary;

/// A peer's colour, the same in every chart.
pub fn colour(peer: &str) -> RGBColor {
    match peer {
        "weft" => RGBColor(214, 72, 28),
        "go" => RGBColor(0, 139, 196),
        "go, stack applied" => RGBColor(110, 190, 225),
        "tokio" => RGBColor(126, 87, 170),
        "uring" => RGBColor(46, 139, 87),
        _ => RGBColor(110, 110, 110),
    }
}

/// A compact number for an axis: 1.5K, 10K, 1M, 0.25.
pub fn short(v: f64) -> String {
    let a = v.abs();
    let (x, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "K")
    } else {
        (v, "")
    };
    let text = if x.fract().abs() < 1e-9 || x.abs() >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    };
    format!("{text}{unit}")
}

/// One line of a panel: its points as (x, summary of y).
pub struct Series {
    pub name: String,
    pub colour: RGBColor,
    pub points: Vec<(f64, Summary)>,
}

/// A panel of lines.
pub struct LinePanel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// x values are plotted as log10.
    pub x_log: bool,
    /// Tick labels for x (categories): (x, label); `None` formats the values.
    pub x_ticks: Option<Vec<(f64, String)>>,
    pub series: Vec<Series>,
    /// Where the legend goes (out of the way of the lines).
    pub legend: SeriesLabelPosition,
}

/// A panel of bars, one per peer.
pub struct BarPanel {
    pub title: String,
    pub y_label: String,
    pub y_log: bool,
    pub bars: Vec<(String, RGBColor, Option<Summary>)>,
}

type Res = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("chart: {e}")
}

fn range(values: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> (f64, f64) {
    let v: Vec<f64> = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .map(|v| if log { v.log10() } else { v })
        .collect();
    let (mut lo, mut hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    if v.is_empty() {
        (lo, hi) = (0.0, 1.0);
    }
    if from_zero && !log {
        lo = lo.min(0.0);
    }
    if (hi - lo).abs() < 1e-9 {
        hi = lo + 1.0;
    }
    let pad = (hi - lo) * 0.08;
    (if from_zero && !log { lo } else { lo - pad }, hi + pad)
}

/// A tick label: on a log axis only the ticks at 1, 2 and 5 × 10^k are labelled.
fn axis_value(v: f64, log: bool) -> String {
    if !log {
        return short(v);
    }
    let x = 10f64.powf(v);
    let decade = 10f64.powf(v.floor());
    let nice = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .any(|m| (x / (m * decade) - 1.0).abs() < 0.03);
    if nice {
        short((x / decade).round() * decade)
    } else {
        String::new()
    }
}

/// Draws line panels side by side into `path`.
pub fn lines(path: &std::path::Path, title: &str, panels: &[LinePanel]) -> Res {
    let width = 460 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, p) in areas.iter().zip(panels) {
        let tx = |x: f64| if p.x_log { x.log10() } else { x };
        let xs = p
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|(x, _)| *x));
        let (x0, x1) = range(xs, p.x_log, false);
        let ys = p
            .series
            .iter()
            .flat_map(|s| s.points.iter().flat_map(|(_, y)| [y.min, y.max]));
        let (y0, y1) = range(ys, false, true);
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(58)
            .set_label_area_size(LabelAreaPosition::Bottom, 36)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        let ticks = p.x_ticks.clone();
        let x_fmt = move |v: &f64| match &ticks {
            Some(t) => t
                .iter()
                .find(|(x, _)| (x - v).abs() < 0.02)
                .map_or(String::new(), |(_, l)| l.clone()),
            None => axis_value(*v, p.x_log),
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&p.x_label)
            .y_desc(&p.y_label)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&|v| short(*v))
            .light_line_style(WHITE.mix(0.0));
        if let Some(t) = &p.x_ticks {
            mesh.x_labels(t.len() * 20 + 1)
                .disable_x_mesh()
                .set_tick_mark_size(LabelAreaPosition::Bottom, 0);
        } else if p.x_log {
            mesh.x_labels(40)
                .disable_x_mesh()
                .set_tick_mark_size(LabelAreaPosition::Bottom, 0);
        }
        mesh.draw().map_err(err)?;
        for s in &p.series {
            let c = s.colour;
            let pts: Vec<(f64, f64)> = s.points.iter().map(|(x, y)| (tx(*x), y.median)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(&s.name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, c.filled())))
                .map_err(err)?;
            chart
                .draw_series(s.points.iter().map(|(x, y)| {
                    PathElement::new(vec![(tx(*x), y.min), (tx(*x), y.max)], c.stroke_width(1))
                }))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(p.legend.clone())
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// Draws bar panels side by side into `path`.
pub fn bars(path: &std::path::Path, title: &str, panels: &[BarPanel]) -> Res {
    let width = (330 * panels.len() as u32).max(520);
    let root = SVGBackend::new(path, (width, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, p) in areas.iter().zip(panels) {
        let ty = |v: f64| if p.y_log { v.max(1e-9).log10() } else { v };
        let ys = p
            .bars
            .iter()
            .filter_map(|(_, _, s)| *s)
            .flat_map(|s| [s.min, s.max]);
        let (mut y0, mut y1) = range(ys, p.y_log, true);
        // Room for the value labels above the bars.
        y1 += (y1 - y0) * 0.06;
        if p.y_log {
            y0 = y0.floor();
        }
        let n = p.bars.len().max(1);
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(58)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), y0..y1)
            .map_err(err)?;
        let names: Vec<String> = p.bars.iter().map(|(name, _, _)| name.clone()).collect();
        let x_fmt = |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 0.02 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let mut mesh = chart.configure_mesh();
        if p.y_log {
            // Labels only at 1, 2, 5 × 10^k: the other ticks get neither a line nor a mark.
            mesh.disable_y_mesh()
                .set_tick_mark_size(LabelAreaPosition::Left, 0);
        }
        mesh.disable_x_mesh()
            .set_tick_mark_size(LabelAreaPosition::Bottom, 0)
            .x_labels(n * 20 + 1)
            .x_label_formatter(&x_fmt)
            // Log axis: ticks 0.05 of a decade apart, so that 1, 2 and 5 × 10^k each fall
            // within `axis_value`'s 3 % of one tick, whatever the span (a fixed count put
            // several ticks within 3 % of one value on a narrow span, each labelled).
            .y_labels(if p.y_log {
                ((y1 - y0) / 0.05).ceil() as usize + 1
            } else {
                10
            })
            .y_desc(&p.y_label)
            .y_label_formatter(&|v| axis_value(*v, p.y_log))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        for (i, (_, c, s)) in p.bars.iter().enumerate() {
            let x = i as f64;
            let Some(s) = s else {
                chart
                    .draw_series(std::iter::once(Text::new(
                        "n/a",
                        (x - 0.15, y0 + (y1 - y0) * 0.05),
                        ("sans-serif", 13),
                    )))
                    .map_err(err)?;
                continue;
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x - 0.35, y0), (x + 0.35, ty(s.median))],
                    c.filled(),
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, ty(s.min)), (x, ty(s.max))],
                    BLACK.stroke_width(1),
                )))
                .map_err(err)?;
            let above = TextStyle::from(("sans-serif", 12).into_font())
                .pos(Pos::new(HPos::Center, VPos::Bottom));
            chart
                .draw_series(std::iter::once(Text::new(
                    short(s.median),
                    (x, ty(s.max) + (y1 - y0) * 0.01),
                    above,
                )))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_log_axis_labels_each_value_once() {
        let bar = |name: &str, v: f64| {
            let s = Summary::of(&[v]);
            (name.to_string(), colour(name), s)
        };
        let path = std::env::temp_dir().join(format!("weft-chart-{}.svg", std::process::id()));
        let panel = BarPanel {
            title: "narrow".into(),
            y_label: "µs".into(),
            y_log: true,
            bars: vec![bar("weft", 2200.0), bar("go", 3100.0), bar("tokio", 2900.0)],
        };
        bars(&path, "t", &[panel]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        // plotters writes each text's content on a line of its own.
        let labels: Vec<&str> = svg.lines().map(str::trim).collect();
        for label in ["1K", "2K"] {
            let n = labels.iter().filter(|l| **l == label).count();
            assert_eq!(n, 1, "{label} is labelled {n} times");
        }
    }
}
