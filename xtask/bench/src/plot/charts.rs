//! The three kinds of chart, each drawn into an SVG string.
use anyhow::Result;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::data::*;
use super::style::*;
use crate::harness::HEADROOM_MIB;
use crate::scaling::ScaleRun;
use crate::trial::Trial;

/// Whether a rate's race is node-level (the VM's memory.available race).
pub(super) fn node_level(rate: &str) -> bool {
    crate::modes::is_vm_node(rate)
}

/// Every trial of one mode at one rate, aligned on the threshold crossing.
pub(super) fn trials_svg(rate: &str, mode: &str, trials: &[&Trial]) -> Result<String> {
    let series: Vec<Aligned> = trials.iter().filter_map(|t| aligned(t)).collect();
    let node_mib = trials.iter().map(|t| t.node_mib).max().unwrap_or(1) as f64;
    let headroom_mib = trials
        .iter()
        .map(|t| t.headroom_mib)
        .max()
        .unwrap_or(HEADROOM_MIB) as f64;
    let threshold = node_mib - headroom_mib;
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

/// The CDF of one latency for every mode of one rate, on a log time axis.
pub(super) fn cdf_svg(rate: &str, latency: Latency, trials: &[Trial]) -> Result<String> {
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

/// The races beside many pods: one bar per (pods, headroom), its stages' medians stacked.
pub(super) fn stages_svg(runs: &[ScaleRun]) -> Result<String> {
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
