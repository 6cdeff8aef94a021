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

use anyhow::{Context, Result};

use crate::scaling::ScaleRun;
use crate::trial::Trial;

mod charts;
mod data;
mod style;
#[cfg(test)]
mod tests;

use charts::{cdf_svg, stages_svg, trials_svg};
pub(crate) use data::thin;
use data::{Latency, groups};

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
