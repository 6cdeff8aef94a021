//! The charts' look: font, colours (a mode keeps its colour on every chart), round ticks
//! and their labels, and the legend column beside the plotting area.
use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::element::DashedPathElement;
use plotters::prelude::*;

pub(super) const FONT: &str = "sans-serif";
/// Width of the legend column to the right of every chart.
pub(super) const LEGEND_W: u32 = 250;
pub(super) const GREY: RGBColor = RGBColor(60, 60, 60);
pub(super) const THRESHOLD: RGBColor = RGBColor(255, 127, 14);
pub(super) const KILL: RGBColor = RGBColor(44, 160, 44);
pub(super) const WAKE: RGBColor = RGBColor(31, 119, 180);
pub(super) const OOM: RGBColor = RGBColor(214, 39, 40);

/// A mode keeps its colour on every chart: polling warm, kernel sources cool.
pub(super) fn mode_colour(mode: &str) -> RGBColor {
    match mode {
        "poll-10s" => RGBColor(140, 86, 75),
        "poll-1s" => RGBColor(214, 39, 40),
        "poll-100ms" => RGBColor(255, 127, 14),
        "memcg" => RGBColor(31, 119, 180),
        "ebpf" => RGBColor(44, 160, 44),
        "psi" => RGBColor(148, 103, 189),
        "all" => RGBColor(23, 190, 207),
        "earlyoom" => RGBColor(227, 119, 194),
        _ => RGBColor(127, 127, 127),
    }
}

/// Round ticks covering `[lo, hi]`: a step of 1, 2 or 5 × 10^k, the smallest giving at
/// most `max` ticks; the first tick is at or below `lo`, the last at or above `hi`, so
/// they also give the axis its range.
pub(super) fn linear_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    if !lo.is_finite() || !hi.is_finite() {
        return vec![0.0, 1.0];
    }
    let span = hi - lo;
    if span <= 0.0 {
        // One value: a unit step around it, so the axis has a length.
        let v = lo.floor();
        return vec![v, v + 1.0];
    }
    let max = max.max(2);
    let mut exp = (span / (max - 1) as f64).log10().floor() as i32;
    loop {
        for m in [1.0, 2.0, 5.0] {
            let step = m * 10f64.powi(exp);
            let first = (lo / step).floor() as i64;
            let last = (hi / step).ceil() as i64;
            if ((last - first) as usize) < max {
                // i × step, so no error accumulates along the axis.
                return (first..=last).map(|i| i as f64 * step).collect();
            }
        }
        exp += 1;
    }
}

/// Decades covering `[lo, hi]` (both > 0) for a log axis: 10^⌊log lo⌋ … 10^⌈log hi⌉.
pub(super) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let lo = lo.max(f64::MIN_POSITIVE);
    let hi = hi.max(lo);
    let a = lo.log10().floor() as i32;
    let mut b = hi.log10().ceil() as i32;
    if b <= a {
        b = a + 1;
    }
    (a..=b).map(|e| 10f64.powi(e)).collect()
}

/// A number with at most three decimals and no trailing zeros.
pub(super) fn number(v: f64) -> String {
    let s = format!("{:.3}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// A value rounded to three significant digits, for the labels of measured values.
pub(super) fn significant(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(2 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// A duration given in ms, in the unit that reads best: µs below 1 ms, s from 1 s.
pub(super) fn duration_label(ms: f64) -> String {
    let a = ms.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 1.0 {
        format!("{} µs", number(ms * 1000.0))
    } else if a < 1000.0 {
        format!("{} ms", number(ms))
    } else {
        format!("{} s", number(ms / 1000.0))
    }
}

/// An axis with the ticks chosen here (round values) instead of plotters' own.
pub(super) struct Ticked<R> {
    inner: R,
    ticks: Vec<f64>,
}

pub(super) fn ticked<R: Ranged<ValueType = f64>>(
    inner: impl Into<R>,
    ticks: Vec<f64>,
) -> Ticked<R> {
    Ticked {
        inner: inner.into(),
        ticks,
    }
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type ValueType = f64;
    type FormatOption = NoDefaultFormatting;

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Grid lines at the ticks only, none between them.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> std::ops::Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

impl<R> ValueFormatter<f64> for Ticked<R> {
    fn format(value: &f64) -> String {
        number(*value)
    }
}

/// What one legend line shows beside its text.
pub(super) enum Key {
    Line(RGBColor, bool),
    Dashed(RGBColor),
    Dot(RGBColor),
    Triangle(RGBColor),
    Cross(RGBColor),
    Box(RGBColor),
}

/// The legend column: a title, then a sample and a text per line, then notes.
pub(super) fn legend(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    keys: &[(Key, String)],
    notes: &[&str],
) -> Result<()> {
    let text = (FONT, 13).into_font();
    area.draw(&Text::new(
        title.to_string(),
        (8, 4),
        (FONT, 13).into_font().style(FontStyle::Bold),
    ))
    .map_err(|e| anyhow!("{e}"))?;
    for (i, (key, label)) in keys.iter().enumerate() {
        let y = 30 + 22 * i as i32;
        let mid = y + 7;
        let sample: Result<(), _> = match key {
            Key::Line(c, thick) => area.draw(&PathElement::new(
                vec![(8, mid), (36, mid)],
                c.stroke_width(if *thick { 3 } else { 1 }),
            )),
            Key::Dashed(c) => area.draw(&DashedPathElement::new(
                vec![(8, mid), (36, mid)],
                6,
                4,
                c.stroke_width(2),
            )),
            Key::Dot(c) => area.draw(&Circle::new((22, mid), 4, c.filled())),
            Key::Triangle(c) => area.draw(&TriangleMarker::new((22, mid), 5, c.filled())),
            Key::Cross(c) => area.draw(&Cross::new((22, mid), 5, c.stroke_width(2))),
            Key::Box(c) => area.draw(&Rectangle::new([(10, y), (34, y + 14)], c.filled())),
        };
        sample.map_err(|e| anyhow!("{e}"))?;
        area.draw(&Text::new(label.clone(), (44, y), text.clone()))
            .map_err(|e| anyhow!("{e}"))?;
    }
    let mut y = 30 + 22 * keys.len() as i32 + 8;
    for line in notes {
        area.draw(&Text::new(line.to_string(), (8, y), (FONT, 12).into_font()))
            .map_err(|e| anyhow!("{e}"))?;
        y += 16;
    }
    Ok(())
}
