//! The benchmark's pictures, drawn with plotters as SVG:
//! - per rate and mode, every trial's working set around its threshold crossing, with the
//!   agent's wake and kill and the kernel's OOM kill marked;
//! - per rate, the distribution (CDF) of crossing→kill and crossing→wake of every mode on
//!   one log-scale chart;
//! - the races beside many pods as stacked bars of their kernel-stamped stages.
//!
//! Text is laid out with plotters' built-in size estimate, so no system font (fontconfig)
//! is needed; the viewer renders the SVG's text with its own sans-serif font. Legends sit
//! beside the plotting area, never over the data.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::harness::HEADROOM_MIB;
use crate::scaling::ScaleRun;
use crate::trial::Trial;

const FONT: &str = "sans-serif";
/// Width of the legend column to the right of every chart.
const LEGEND_W: u32 = 250;
const GREY: RGBColor = RGBColor(60, 60, 60);
const THRESHOLD: RGBColor = RGBColor(255, 127, 14);
const KILL: RGBColor = RGBColor(44, 160, 44);
const WAKE: RGBColor = RGBColor(31, 119, 180);
const OOM: RGBColor = RGBColor(214, 39, 40);

/// A mode keeps its colour on every chart: polling warm, kernel sources cool.
fn mode_colour(mode: &str) -> RGBColor {
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
pub(crate) fn linear_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
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
pub(crate) fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
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
fn number(v: f64) -> String {
    let s = format!("{:.3}", v);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// A value rounded to three significant digits, for the labels of measured values.
fn significant(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(2 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// A duration given in ms, in the unit that reads best: µs below 1 ms, s from 1 s.
pub(crate) fn duration_label(ms: f64) -> String {
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

/// The empirical CDF of `values` as a step line over `total` trials: (latency, fraction
/// of the trials at or below it). Trials without a value (no kill before the kernel's
/// OOM kill, say) count in `total`, so the line stops below 1 when some never got there.
pub(crate) fn cdf_steps(values: &[f64], total: usize) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let total = total.max(sorted.len()).max(1) as f64;
    let mut out = Vec::with_capacity(sorted.len() * 2);
    for (i, v) in sorted.iter().enumerate() {
        out.push((*v, i as f64 / total));
        out.push((*v, (i + 1) as f64 / total));
    }
    out
}

/// Fewer points for a working-set curve without changing its picture: a sample is kept
/// when it moved by at least `min_mib` or `max_gap_ms` passed since the last one kept
/// (the flat stretches of a 1 ms sampler), and the last sample always.
pub(crate) fn thin(curve: &[(f64, f64)], min_mib: f64, max_gap_ms: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (i, &(t, m)) in curve.iter().enumerate() {
        let keep = match out.last() {
            None => true,
            Some(&(lt, lm)) => {
                (m - lm).abs() >= min_mib || t - lt >= max_gap_ms || i + 1 == curve.len()
            }
        };
        if keep {
            out.push((t, m));
        }
    }
    out
}

/// The trials of each (rate, mode), in the order they ran.
pub(crate) fn groups(trials: &[Trial]) -> Vec<(&str, &str, Vec<&Trial>)> {
    let mut out: Vec<(&str, &str, Vec<&Trial>)> = Vec::new();
    for t in trials {
        match out
            .iter_mut()
            .find(|(r, m, _)| *r == t.rate && *m == t.mode)
        {
            Some((_, _, ts)) => ts.push(t),
            None => out.push((&t.rate, &t.mode, vec![t])),
        }
    }
    out
}

/// One trial, shifted so that its threshold crossing is at 0 ms; the marks are placed on
/// the curve at their times.
#[derive(Debug, PartialEq)]
pub(crate) struct Aligned {
    pub(crate) curve: Vec<(f64, f64)>,
    pub(crate) wake: Option<(f64, f64)>,
    pub(crate) kill: Option<(f64, f64)>,
    pub(crate) oom: Option<(f64, f64)>,
    /// No crossing was sampled (the agent killed within the sampler's 1 ms): aligned on
    /// the kill instead.
    pub(crate) on_kill: bool,
}

/// The working set at `t` on a time-sorted curve (the last sample at or before it).
fn at(curve: &[(f64, f64)], t: f64) -> Option<f64> {
    let i = curve.partition_point(|p| p.0 <= t);
    curve.get(i.checked_sub(1)?).or(curve.first()).map(|p| p.1)
}

/// A trial aligned on its crossing, or on the agent's kill when the sampler saw no
/// crossing; none without either, or without a curve.
pub(crate) fn aligned(trial: &Trial) -> Option<Aligned> {
    let c = trial.crossing_ms.or(trial.kill_ms)?;
    if trial.curve.is_empty() {
        return None;
    }
    let curve: Vec<(f64, f64)> = trial.curve.iter().map(|(t, m)| (t - c, *m)).collect();
    let mark = |t: Option<f64>| t.and_then(|t| Some((t - c, at(&curve, t - c)?)));
    Some(Aligned {
        wake: mark(trial.wake_ms),
        kill: mark(trial.kill_ms),
        oom: mark(trial.oom_ms),
        on_kill: trial.crossing_ms.is_none(),
        curve,
    })
}

/// The median of each stage of one race beside many pods, µs: crossing→told,
/// told→SIGKILL, SIGKILL→freed.
#[derive(Debug, PartialEq)]
pub(crate) struct StageBar {
    pub(crate) label: String,
    pub(crate) stages_us: [Option<f64>; 3],
}

pub(crate) const STAGES: [&str; 3] = [
    "crossing → hot path told",
    "told → SIGKILL",
    "SIGKILL → memory freed",
];

pub(crate) fn stage_bars(runs: &[ScaleRun]) -> Vec<StageBar> {
    runs.iter()
        .map(|r| StageBar {
            label: format!("{} pods, {} MiB", r.pods, r.headroom_mib),
            stages_us: [
                r.stage_p50_us[0],
                r.stage_p50_us[1],
                r.signal_to_freed_ms.p50_ms.map(|ms| ms * 1000.0),
            ],
        })
        .collect()
}

/// An axis with the ticks chosen here (round values) instead of plotters' own.
struct Ticked<R> {
    inner: R,
    ticks: Vec<f64>,
}

fn ticked<R: Ranged<ValueType = f64>>(inner: impl Into<R>, ticks: Vec<f64>) -> Ticked<R> {
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
enum Key {
    Line(RGBColor, bool),
    Dashed(RGBColor),
    Dot(RGBColor),
    Triangle(RGBColor),
    Cross(RGBColor),
    Box(RGBColor),
}

/// The legend column: a title, then a sample and a text per line, then notes.
fn legend(
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

/// Whether a rate's race is node-level (the VM's memory.available race).
fn node_level(rate: &str) -> bool {
    rate == crate::modes::VM_NODE_RATE
}

/// Every trial of one mode at one rate, aligned on the threshold crossing.
pub(crate) fn trials_svg(rate: &str, mode: &str, trials: &[&Trial]) -> Result<String> {
    let series: Vec<Aligned> = trials.iter().filter_map(|t| aligned(t)).collect();
    let node_mib = trials.iter().map(|t| t.node_mib).max().unwrap_or(1) as f64;
    let threshold = node_mib - HEADROOM_MIB as f64;
    // From the earliest start of a climb to a little after the last mark (kill, wake, OOM
    // kill, freed), where the curves still have samples.
    let start = series
        .iter()
        .filter_map(|s| s.curve.first().map(|p| p.0))
        .fold(0.0f64, f64::min);
    let last_mark = trials
        .iter()
        .filter_map(|t| {
            let c = t.crossing_ms?;
            [t.wake_ms, t.kill_ms, t.oom_ms, t.freed_ms]
                .into_iter()
                .flatten()
                .map(|m| m - c)
                .reduce(f64::max)
        })
        .fold(0.0f64, f64::max);
    let last_sample = series
        .iter()
        .filter_map(|s| s.curve.last().map(|p| p.0))
        .fold(0.0f64, f64::max);
    let end = (last_mark + (last_mark - start) * 0.1)
        .min(last_sample)
        .max(10.0);
    let xt = linear_ticks(start, end, 9);
    // x = 0 is the crossing (or the kill, see Aligned).
    let (x0, x1) = (xt[0], xt[xt.len() - 1]);
    let in_window = series
        .iter()
        .flat_map(|s| s.curve.iter())
        .filter(|p| p.0 >= x0 && p.0 <= x1)
        .map(|p| p.1);
    let low = in_window.fold(threshold, f64::min);
    let yt = linear_ticks(low, node_mib * 1.02, 8);
    let (y0, y1) = (yt[0], yt[yt.len() - 1]);
    let what = if node_level(rate) {
        "node memory in use (MemTotal - MemAvailable)"
    } else {
        "pods working set"
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900 + LEGEND_W, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            &format!(
                "{rate} · {mode}: {what} around the threshold crossing, {}",
                if series.len() == trials.len() {
                    format!("{} trials", trials.len())
                } else {
                    format!(
                        "{} of {} trials (the others: no crossing, no kill)",
                        series.len(),
                        trials.len()
                    )
                }
            ),
            (FONT, 17),
        )?;
        let (left, right) = root.split_horizontally(900);
        let mut chart = ChartBuilder::on(&left)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(
                ticked::<RangedCoordf64>(x0..x1, xt.clone()),
                ticked::<RangedCoordf64>(y0..y1, yt.clone()),
            )?;
        chart
            .configure_mesh()
            .x_desc("time from the crossing of the threshold")
            .y_desc(format!("{what} (MiB)"))
            .x_label_formatter(&|v| duration_label(*v))
            .y_label_formatter(&|v| number(*v))
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .light_line_style(WHITE)
            .bold_line_style(BLACK.mix(0.12))
            .draw()?;
        for (mib, colour) in [(threshold, THRESHOLD), (node_mib, BLACK)] {
            chart.draw_series(DashedLineSeries::new(
                [(x0, mib), (x1, mib)],
                6,
                4,
                colour.stroke_width(2),
            ))?;
        }
        for s in &series {
            chart.draw_series(LineSeries::new(
                s.curve.iter().copied().filter(|p| p.0 >= x0 && p.0 <= x1),
                GREY.mix(0.45).stroke_width(1),
            ))?;
        }
        let marks = |f: fn(&Aligned) -> Option<(f64, f64)>| -> Vec<(f64, f64)> {
            series
                .iter()
                .filter_map(f)
                .filter(|p| p.0 >= x0 && p.0 <= x1)
                .collect()
        };
        chart.draw_series(
            marks(|s| s.wake)
                .into_iter()
                .map(|p| TriangleMarker::new(p, 5, WAKE.filled())),
        )?;
        chart.draw_series(
            marks(|s| s.kill)
                .into_iter()
                .map(|p| Circle::new(p, 4, KILL.filled())),
        )?;
        chart.draw_series(
            marks(|s| s.oom)
                .into_iter()
                .map(|p| Cross::new(p, 5, OOM.stroke_width(2))),
        )?;
        let count = |f: fn(&Aligned) -> Option<(f64, f64)>| {
            series.iter().filter(|s| f(s).is_some()).count()
        };
        let n = series.len();
        let on_kill = series.iter().filter(|s| s.on_kill).count();
        let on_kill_text = [
            format!("{on_kill} of {n} aligned on the kill:"),
            "the agent killed before the 1 ms".to_string(),
            "sampler saw the crossing.".to_string(),
        ];
        let on_kill_note: Vec<&str> = if on_kill > 0 {
            on_kill_text.iter().map(String::as_str).collect()
        } else {
            Vec::new()
        };
        legend(
            &right,
            "Legend",
            &[
                (Key::Line(GREY, false), format!("one trial ({n} in all)")),
                (
                    Key::Dashed(THRESHOLD),
                    format!("threshold {} MiB", number(threshold)),
                ),
                (
                    Key::Dashed(BLACK),
                    format!("limit {} MiB", number(node_mib)),
                ),
                (
                    Key::Triangle(WAKE),
                    format!("agent wake ({} of {n})", count(|s| s.wake)),
                ),
                (
                    Key::Dot(KILL),
                    format!("agent kill ({} of {n})", count(|s| s.kill)),
                ),
                (
                    Key::Cross(OOM),
                    format!("kernel OOM kill ({} of {n})", count(|s| s.oom)),
                ),
            ],
            &on_kill_note,
        )?;
        root.present()?;
    }
    Ok(svg)
}

/// Which latency a CDF chart shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Latency {
    Kill,
    Wake,
}

/// The CDF of one latency for every mode of one rate, on a log time axis.
pub(crate) fn cdf_svg(rate: &str, latency: Latency, trials: &[Trial]) -> Result<String> {
    let modes: Vec<(&str, Measured)> = groups(trials)
        .into_iter()
        .filter(|(r, _, _)| *r == rate)
        .map(|(_, m, ts)| (m, measured(&ts, latency)))
        .collect();
    // A log axis needs positive values: a latency under 10 µs (within the sampler's
    // error, the interpolated crossing can even come after the kill) is drawn at 10 µs.
    let floor = 0.01;
    let all: Vec<f64> = modes
        .iter()
        .flat_map(|m| m.1.values.iter().map(|v| v.max(floor)))
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(0.0f64, f64::max);
    let xt = if all.is_empty() {
        log_ticks(1.0, 1000.0)
    } else {
        log_ticks(lo, hi)
    };
    let (x0, x1) = (xt[0], xt[xt.len() - 1]);
    let yt: Vec<f64> = (0..=4).map(|i| f64::from(i) * 0.25).collect();
    let (what, desc) = match latency {
        Latency::Kill => (
            "crossing → kill",
            "time from the threshold crossing to the agent's kill (log)",
        ),
        Latency::Wake => (
            "crossing → wake",
            "time from the threshold crossing to the agent's wake (log)",
        ),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760 + LEGEND_W, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            &format!("{rate}: {what} of every mode, share of trials within a time"),
            (FONT, 17),
        )?;
        let (left, right) = root.split_horizontally(760);
        let mut chart = ChartBuilder::on(&left)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(
                ticked::<LogCoord<f64>>((x0..x1).log_scale(), xt.clone()),
                ticked::<RangedCoordf64>(0.0..1.0, yt),
            )?;
        chart
            .configure_mesh()
            .x_desc(desc)
            .y_desc("share of the trials")
            .x_label_formatter(&|v| duration_label(*v))
            .y_label_formatter(&|v| format!("{:.0} %", v * 100.0))
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .light_line_style(WHITE)
            .bold_line_style(BLACK.mix(0.12))
            .draw()?;
        let mut keys = Vec::new();
        for (mode, m) in &modes {
            let colour = mode_colour(mode);
            let mut steps: Vec<(f64, f64)> = cdf_steps(&m.values, m.total)
                .into_iter()
                .map(|(x, y)| (x.max(floor).clamp(x0, x1), y))
                .collect();
            // On to the right edge: the share reached stays so (none at all: a line at 0).
            let reached = steps.last().map_or(0.0, |p| p.1);
            if steps.is_empty() {
                steps.push((x0, 0.0));
            }
            steps.push((x1, reached));
            let polling = mode.starts_with("poll-");
            if polling {
                chart.draw_series(DashedLineSeries::new(steps, 8, 4, colour.stroke_width(3)))?;
            } else {
                chart.draw_series(LineSeries::new(steps, colour.stroke_width(3)))?;
            }
            let mut label = format!("{mode}: {} of {}", m.values.len(), m.total);
            if m.unmeasured > 0 {
                label.push_str(&format!(" (+{} unseen)", m.unmeasured));
            }
            keys.push((
                if polling {
                    Key::Dashed(colour)
                } else {
                    Key::Line(colour, true)
                },
                label,
            ));
        }
        let title = match latency {
            Latency::Kill => "mode: trials killed",
            Latency::Wake => "mode: trials woken",
        };
        let notes: &[&str] = match latency {
            Latency::Kill => &[
                "Kernel-stamped (detector record to",
                "SIGKILL) where the eBPF detector ran,",
                "else from the 1 ms sampler's crossing.",
                "unseen: killed before the sampler saw",
                "the crossing, not counted.",
                "Under 10 µs: drawn at 10 µs.",
            ],
            Latency::Wake => &[
                "From the 1 ms sampler's crossing.",
                "unseen: woken before the sampler saw",
                "the crossing, not counted.",
                "Under 10 µs: drawn at 10 µs.",
            ],
        };
        legend(&right, title, &keys, notes)?;
        root.present()?;
    }
    Ok(svg)
}

/// One mode's latencies for a CDF.
#[derive(Debug, PartialEq)]
pub(crate) struct Measured {
    /// ms, one per trial that has the latency.
    pub(crate) values: Vec<f64>,
    /// Trials the CDF is a share of: those with the latency and those where the agent
    /// never got there (the kernel's OOM kill came first, say).
    pub(crate) total: usize,
    /// Trials where the agent got there but the latency is unknown: the sampler never saw
    /// the working set over the threshold before the kill, and no kernel stamp.
    pub(crate) unmeasured: usize,
}

/// A mode's latencies: crossing→kill kernel-stamped where the detector ran (µs-exact,
/// where the sampler is only good to its 1 ms), else both latencies from the sampler.
pub(crate) fn measured(trials: &[&Trial], latency: Latency) -> Measured {
    let mut out = Measured {
        values: Vec::new(),
        total: 0,
        unmeasured: 0,
    };
    for t in trials {
        let (value, reached) = match latency {
            Latency::Kill => (
                t.kernel_crossing_to_kill_us
                    .map(|us| us / 1000.0)
                    .or(t.crossing_to_kill_ms),
                t.kill_ms.is_some(),
            ),
            Latency::Wake => (t.crossing_to_wake_ms, t.wake_ms.is_some()),
        };
        match value {
            Some(v) => {
                out.values.push(v);
                out.total += 1;
            }
            None if reached => out.unmeasured += 1,
            None => out.total += 1,
        }
    }
    out
}

/// The races beside many pods: one bar per (pods, headroom), its stages' medians stacked.
pub(crate) fn stages_svg(runs: &[ScaleRun]) -> Result<String> {
    let bars = stage_bars(runs);
    let total = |b: &StageBar| b.stages_us.iter().flatten().sum::<f64>();
    let max = bars.iter().map(total).fold(0.0f64, f64::max);
    // The axis in ms, so that the tick labels read as durations.
    let xt = linear_ticks(0.0, (max / 1000.0).max(0.01), 8);
    let x1 = xt[xt.len() - 1];
    let n = bars.len().max(1);
    let colours = [WAKE, THRESHOLD, KILL];
    let height = 140 + 64 * n as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (820 + LEGEND_W, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(
            "Pressure race beside idle pods: median of each kernel-stamped stage",
            (FONT, 17),
        )?;
        let (left, right) = root.split_horizontally(820);
        let rows: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
        let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
        let mut chart = ChartBuilder::on(&left)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(130)
            .build_cartesian_2d(
                ticked::<RangedCoordf64>(0.0..x1, xt.clone()),
                ticked::<RangedCoordf64>(0.0..n as f64, rows),
            )?;
        chart
            .configure_mesh()
            .x_desc("time from the crossing (median of each stage, stacked)")
            .x_label_formatter(&|v| duration_label(*v))
            .y_label_formatter(&|v| {
                // Rows from the top, in the order they ran.
                let i = n.saturating_sub(1).saturating_sub(v.floor() as usize);
                labels.get(i).cloned().unwrap_or_default()
            })
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .light_line_style(WHITE)
            .bold_line_style(BLACK.mix(0.08))
            .draw()?;
        for (i, bar) in bars.iter().enumerate() {
            let row = (n - 1 - i) as f64;
            let mut x = 0.0;
            for (stage, colour) in bar.stages_us.iter().zip(colours) {
                let Some(us) = stage else { continue };
                let w = us / 1000.0;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x, row + 0.12), (x + w, row + 0.58)],
                    colour.filled(),
                )))?;
                x += w;
            }
            let value = |v: Option<f64>| {
                v.map_or("none".to_string(), |us| {
                    duration_label(significant(us) / 1000.0)
                })
            };
            let text = format!(
                "{} + {} + {}",
                value(bar.stages_us[0]),
                value(bar.stages_us[1]),
                value(bar.stages_us[2])
            );
            chart.draw_series(std::iter::once(Text::new(
                text,
                (0.0, row + 0.92),
                (FONT, 13).into_font(),
            )))?;
        }
        let keys: Vec<(Key, String)> = STAGES
            .iter()
            .zip(colours)
            .map(|(s, c)| (Key::Box(c), s.to_string()))
            .collect();
        legend(&right, "stage (in this order)", &keys, &[])?;
        root.present()?;
    }
    Ok(svg)
}

/// Draws every picture of a run into `dir`; returns the files written.
pub(crate) fn write_all(dir: &Path, trials: &[Trial], runs: &[ScaleRun]) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut write = |name: String, svg: Result<String>| -> Result<()> {
        let path = dir.join(name);
        let svg = svg.with_context(|| format!("drawing {}", path.display()))?;
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    let groups = groups(trials);
    let mut rates: Vec<&str> = Vec::new();
    for (rate, _, _) in &groups {
        if !rates.contains(rate) {
            rates.push(rate);
        }
    }
    for rate in rates {
        write(
            format!("cdf-kill-{rate}.svg"),
            cdf_svg(rate, Latency::Kill, trials),
        )?;
        write(
            format!("cdf-wake-{rate}.svg"),
            cdf_svg(rate, Latency::Wake, trials),
        )?;
    }
    if !runs.is_empty() {
        write("stages.svg".into(), stages_svg(runs))?;
    }
    for (rate, mode, ts) in &groups {
        write(format!("{rate}-{mode}.svg"), trials_svg(rate, mode, ts))?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= 1e-9 * y.abs().max(1.0))
    }

    #[rstest]
    #[case::unit_steps(0.0, 10.0, 6, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0])]
    #[case::rounded_out(-95.0, 480.0, 9, vec![-100.0, 0.0, 100.0, 200.0, 300.0, 400.0, 500.0])]
    #[case::working_set(600.0, 1044.48, 8, vec![600.0, 700.0, 800.0, 900.0, 1000.0, 1100.0])]
    #[case::fives(0.0, 23.0, 6, vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0])]
    #[case::fractions(0.0, 0.9, 10, vec![0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])]
    #[case::reversed(10.0, 0.0, 6, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0])]
    #[case::one_value(5.0, 5.0, 6, vec![5.0, 6.0])]
    fn linear_ticks_are_round_and_cover_the_range(
        #[case] lo: f64,
        #[case] hi: f64,
        #[case] max: usize,
        #[case] expected: Vec<f64>,
    ) {
        let ticks = linear_ticks(lo, hi, max);
        assert!(close(&ticks, &expected), "{ticks:?}");
        assert!(ticks.len() <= max.max(2));
    }

    #[rstest]
    #[case::decades(0.05, 12_000.0, vec![0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10_000.0, 100_000.0])]
    #[case::exact_decades(1.0, 100.0, vec![1.0, 10.0, 100.0])]
    #[case::within_one_decade(0.2, 0.9, vec![0.1, 1.0])]
    #[case::one_value(1.0, 1.0, vec![1.0, 10.0])]
    fn log_ticks_are_decades(#[case] lo: f64, #[case] hi: f64, #[case] expected: Vec<f64>) {
        let ticks = log_ticks(lo, hi);
        assert!(close(&ticks, &expected), "{ticks:?}");
    }

    #[rstest]
    #[case::zero(0.0, "0")]
    #[case::microseconds(0.1, "100 µs")]
    #[case::fraction_of_a_millisecond(0.0125, "12.5 µs")]
    #[case::milliseconds(1.0, "1 ms")]
    #[case::decimal_ms(2.5, "2.5 ms")]
    #[case::negative(-100.0, "-100 ms")]
    #[case::seconds(1000.0, "1 s")]
    #[case::decimal_seconds(15_500.0, "15.5 s")]
    fn durations_read_in_their_unit(#[case] ms: f64, #[case] expected: &str) {
        assert_eq!(duration_label(ms), expected);
    }

    #[rstest]
    #[case::three_digits(116.454, 116.0)]
    #[case::small(0.097553, 0.0976)]
    #[case::large(24503.2, 24500.0)]
    #[case::zero(0.0, 0.0)]
    fn measured_values_keep_three_digits(#[case] v: f64, #[case] expected: f64) {
        assert!(
            (significant(v) - expected).abs() < 1e-9,
            "{}",
            significant(v)
        );
    }

    #[rstest]
    #[case::sorted_steps(
        vec![3.0, 1.0, 2.0],
        4,
        vec![(1.0, 0.0), (1.0, 0.25), (2.0, 0.25), (2.0, 0.5), (3.0, 0.5), (3.0, 0.75)]
    )]
    #[case::all_trials(vec![5.0], 1, vec![(5.0, 0.0), (5.0, 1.0)])]
    #[case::none(vec![], 2, vec![])]
    #[case::not_finite_left_out(vec![f64::NAN, 2.0], 2, vec![(2.0, 0.0), (2.0, 0.5)])]
    fn cdf_counts_every_trial(
        #[case] values: Vec<f64>,
        #[case] total: usize,
        #[case] expected: Vec<(f64, f64)>,
    ) {
        assert_eq!(cdf_steps(&values, total), expected);
    }

    #[rstest]
    #[case::flat_runs_dropped(
        vec![(0.0, 600.0), (1.0, 600.2), (2.0, 600.4), (3.0, 602.0), (30.0, 602.0), (31.0, 602.0)],
        vec![(0.0, 600.0), (3.0, 602.0), (30.0, 602.0), (31.0, 602.0)]
    )]
    #[case::climb_kept(
        vec![(0.0, 600.0), (1.0, 602.0), (2.0, 604.0)],
        vec![(0.0, 600.0), (1.0, 602.0), (2.0, 604.0)]
    )]
    #[case::empty(vec![], vec![])]
    fn thinning_keeps_the_shape(#[case] curve: Vec<(f64, f64)>, #[case] expected: Vec<(f64, f64)>) {
        assert_eq!(thin(&curve, 1.0, 20.0), expected);
    }

    fn trial(mode: &str, n: u32, extra: &str) -> Trial {
        serde_json::from_str(&format!(
            r#"{{"mode":"{mode}","rate":"full","trial":{n},"node_mib":1024,"phase_delay_ms":0,
               "peak_mib":0,"oom_kills":0,"oom_first":false,"sync_durations_ms":[]{extra}}}"#
        ))
        .expect("trial JSON")
    }

    /// A trial the agent won: crossing at 100 ms, wake at 102, kill at 105.
    const RACE: &str = r#","crossing_ms":100.0,"kill_ms":105.0,"crossing_to_kill_ms":5.0,
        "wake_ms":102.0,"crossing_to_wake_ms":2.0,
        "curve":[[0.0,600.0],[90.0,800.0],[100.0,824.0],[110.0,900.0],[130.0,620.0]]"#;

    #[rstest]
    #[case::crossed(
        RACE,
        Some(Aligned {
            curve: vec![(-100.0, 600.0), (-10.0, 800.0), (0.0, 824.0), (10.0, 900.0), (30.0, 620.0)],
            wake: Some((2.0, 824.0)),
            kill: Some((5.0, 824.0)),
            oom: None,
            on_kill: false,
        })
    )]
    #[case::killed_unseen(
        r#","kill_ms":50.0,"curve":[[0.0,600.0],[50.0,820.0]]"#,
        Some(Aligned {
            curve: vec![(-50.0, 600.0), (0.0, 820.0)],
            wake: None,
            kill: Some((0.0, 820.0)),
            oom: None,
            on_kill: true,
        })
    )]
    #[case::neither_crossing_nor_kill(r#","curve":[[0.0,600.0]]"#, None)]
    #[case::no_curve(r#","crossing_ms":100.0"#, None)]
    fn trials_are_aligned_on_their_crossing(
        #[case] extra: &str,
        #[case] expected: Option<Aligned>,
    ) {
        assert_eq!(aligned(&trial("memcg", 1, extra)), expected);
    }

    #[rstest]
    #[case::kernel_stamp_first(
        Latency::Kill,
        vec![
            r#","kill_ms":5.0,"crossing_to_kill_ms":3.0,"kernel_crossing_to_kill_us":150.0"#,
            r#","kill_ms":5.0,"crossing_to_kill_ms":4.0"#,
            r#","oom_ms":9.0"#,
            r#","kill_ms":5.0"#,
        ],
        Measured { values: vec![0.15, 4.0], total: 3, unmeasured: 1 }
    )]
    #[case::wake_from_the_sampler(
        Latency::Wake,
        vec![
            r#","wake_ms":5.0,"crossing_to_wake_ms":2.0,"kernel_crossing_to_kill_us":150.0"#,
            r#","wake_ms":5.0"#,
            "",
        ],
        Measured { values: vec![2.0], total: 2, unmeasured: 1 }
    )]
    fn latencies_count_unseen_crossings_apart(
        #[case] latency: Latency,
        #[case] extras: Vec<&str>,
        #[case] expected: Measured,
    ) {
        let trials: Vec<Trial> = extras.iter().map(|e| trial("ebpf", 1, e)).collect();
        let refs: Vec<&Trial> = trials.iter().collect();
        assert_eq!(measured(&refs, latency), expected);
    }

    #[test]
    fn groups_keep_the_order_of_the_run() {
        let trials = vec![
            trial("poll-1s", 1, ""),
            trial("memcg", 1, ""),
            trial("poll-1s", 2, ""),
        ];
        let got: Vec<(&str, Vec<u32>)> = groups(&trials)
            .into_iter()
            .map(|(_, m, ts)| (m, ts.iter().map(|t| t.trial).collect()))
            .collect();
        assert_eq!(got, vec![("poll-1s", vec![1, 2]), ("memcg", vec![1])]);
    }

    fn run(pods: usize, stages: [Option<f64>; 2], freed_ms: Option<f64>) -> ScaleRun {
        let spread = |v: Option<f64>| crate::stats::Spread::of(&v.into_iter().collect::<Vec<_>>());
        ScaleRun {
            pods,
            running: pods + 1,
            headroom_mib: 50,
            planned: 1,
            trials: Vec::new(),
            avoided: 1,
            crossing_to_signal_us: spread(None),
            stage_p50_us: stages,
            stage_p99_us: stages,
            signal_to_freed_ms: spread(freed_ms),
            signal_to_uncharged_ms: spread(None),
            synchronize_ms: spread(None),
        }
    }

    #[rstest]
    #[case::all_stages(
        run(110, [Some(80.0), Some(90.0)], Some(2.5)),
        [Some(80.0), Some(90.0), Some(2500.0)]
    )]
    #[case::no_kernel_stamp(run(10, [None, None], None), [None, None, None])]
    fn stage_bars_are_the_medians_in_us(#[case] run: ScaleRun, #[case] expected: [Option<f64>; 3]) {
        let bars = stage_bars(&[run]);
        assert_eq!(bars[0].stages_us, expected);
        assert!(bars[0].label.ends_with("pods, 50 MiB"), "{}", bars[0].label);
    }

    #[test]
    fn every_picture_is_written_with_its_series_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let trials = vec![
            trial(
                "poll-1s",
                1,
                r#","crossing_ms":100.0,"oom_ms":180.0,"curve":[[0.0,600.0],[100.0,824.0],[180.0,1024.0]]"#,
            ),
            trial("poll-1s", 2, RACE),
            trial("ebpf", 1, RACE),
            trial("ebpf", 2, RACE),
        ];
        let runs = vec![run(110, [Some(80.0), Some(90.0)], Some(2.5))];
        let written = write_all(dir.path(), &trials, &runs).expect("plots");
        let names: Vec<String> = written
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "cdf-kill-full.svg",
                "cdf-wake-full.svg",
                "stages.svg",
                "full-poll-1s.svg",
                "full-ebpf.svg"
            ]
        );
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect(name);
        let cdf = read("cdf-kill-full.svg");
        for label in ["poll-1s: 1 of 2", "ebpf: 2 of 2", "1 ms", "100 %"] {
            assert!(cdf.contains(label), "{label} missing from the CDF");
        }
        let stages = read("stages.svg");
        for label in [
            "110 pods, 50 MiB",
            "80 µs + 90 µs + 2.5 ms",
            "crossing → hot path told",
            "told → SIGKILL",
            "SIGKILL → memory freed",
        ] {
            assert!(stages.contains(label), "{label} missing from the stages");
        }
        let poll = read("full-poll-1s.svg");
        for label in [
            "2 trials",
            "one trial (2 in all)",
            "agent kill (1 of 2)",
            "kernel OOM kill (1 of 2)",
            "threshold 824 MiB",
        ] {
            assert!(poll.contains(label), "{label} missing from the trials");
        }
    }
}
