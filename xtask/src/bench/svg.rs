//! A plot per mode, as a plain SVG file (no plotting crate needed): the pods cgroup's
//! working set against time, the threshold line, and marks for the crossing, the wake,
//! the kill and the kernel OOM kill.
use std::fmt::Write;

use super::race::{HEADROOM_MIB, Trial};

const W: f64 = 720.0;
const H: f64 = 360.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// The SVG of one trial's curve; the time axis ends a little after the last mark.
pub(crate) fn plot(trial: &Trial) -> String {
    let marks: Vec<(&str, Option<f64>, &str)> = vec![
        ("crossing", trial.crossing_ms, "#888"),
        ("wake", trial.wake_ms, "#1f77b4"),
        ("kill", trial.kill_ms, "#2ca02c"),
        ("OOM kill", trial.oom_ms, "#d62728"),
    ];
    let last_mark = marks.iter().filter_map(|m| m.1).fold(0.0f64, f64::max);
    let last_sample = trial.curve.last().map(|p| p.0).unwrap_or(0.0);
    let t_max = (last_mark * 1.15).max(50.0).min(last_sample.max(50.0));
    let t_min = (-20.0f64).max(trial.curve.first().map(|p| p.0).unwrap_or(0.0));
    let node = trial.node_mib.max(1) as f64;
    let y_max = node * 1.05;
    let x = |t: f64| LEFT + (t - t_min) / (t_max - t_min) * (W - LEFT - RIGHT);
    let y = |mib: f64| H - BOTTOM - mib / y_max * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(
        s,
        "<text x=\"{LEFT}\" y=\"18\" font-size=\"13\">{} · {} · trial {}: pods working set (MiB) vs ms after the hog started</text>",
        trial.mode, trial.rate, trial.trial
    );
    // Axes and ticks.
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{b}\" stroke=\"black\"/>",
        b = H - BOTTOM,
        r = W - RIGHT
    );
    for i in 0..=5 {
        let t = t_min + (t_max - t_min) * i as f64 / 5.0;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t:.0}</text>",
            x(t),
            H - BOTTOM + 15.0
        );
    }
    for mib in (0..=4).map(|i| (trial.node_mib / 4 / 64 * 64 * i).min(trial.node_mib)) {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{mib}</text>",
            LEFT - 5.0,
            y(mib as f64) + 4.0
        );
    }
    // Threshold and limit.
    for (mib, label, color) in [
        (node - HEADROOM_MIB as f64, "threshold", "#ff7f0e"),
        (node, "limit", "black"),
    ] {
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{r}\" y2=\"{yy:.1}\" stroke=\"{color}\" stroke-dasharray=\"6,4\"/><text x=\"{r}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{color}\">{label} {mib:.0} MiB</text>",
            y(mib) - 4.0,
            yy = y(mib),
            r = W - RIGHT
        );
    }
    // The curve.
    let points: Vec<String> = trial
        .curve
        .iter()
        .filter(|(t, _)| *t >= t_min && *t <= t_max)
        .map(|(t, m)| format!("{:.1},{:.1}", x(*t), y(*m)))
        .collect();
    let _ = writeln!(
        s,
        "<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\" points=\"{}\"/>",
        points.join(" ")
    );
    // Marks, labels staggered so that close marks stay readable.
    for (i, (label, at, color)) in marks.iter().enumerate() {
        let Some(at) = at else { continue };
        if *at < t_min || *at > t_max {
            continue;
        }
        let _ = writeln!(
            s,
            "<line x1=\"{xx:.1}\" y1=\"{TOP}\" x2=\"{xx:.1}\" y2=\"{b}\" stroke=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{label} {at:.1} ms</text>",
            x(*at) + 3.0,
            TOP + 12.0 + 13.0 * i as f64,
            xx = x(*at),
            b = H - BOTTOM
        );
    }
    let none: Vec<&str> = marks
        .iter()
        .filter(|m| m.1.is_none() && m.0 != "OOM kill")
        .map(|m| m.0)
        .collect();
    if !none.is_empty() {
        let _ = writeln!(
            s,
            "<text x=\"{LEFT}\" y=\"{:.1}\">none in this trial: {}</text>",
            H - 12.0,
            none.join(", ")
        );
    }
    s.push_str("</svg>\n");
    s
}
