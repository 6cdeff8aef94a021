//! `cargo xtask arch`: the import-circle check of `monitor-arch` over the workspace, and
//! that `monitor-policy` builds on no crate that does I/O (from `cargo tree`).
use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use monitor_arch::plural;

use crate::cmd::workspace_root;

/// Prints the findings and the summary; fails when a rule is broken.
pub fn run() -> Result<()> {
    let root = workspace_root();
    let report = monitor_arch::check(&root)?;
    for line in report.lines() {
        println!("{line}");
    }
    let io_crates = policy_io_dependencies(&root)?;
    println!(
        "arch: monitor-policy depends on {}",
        if io_crates.is_empty() {
            "no I/O crate".to_string()
        } else {
            io_crates.join(", ")
        }
    );
    if !report.ok() || !io_crates.is_empty() {
        bail!(
            "architecture check failed: {}, {}",
            plural(report.circles.len(), "import circle"),
            plural(io_crates.len(), "I/O crate"),
        );
    }
    Ok(())
}

/// Crates that do I/O (an async runtime, system calls), which the policy must not build on.
const IO_CRATES: &[&str] = &["tokio", "mio", "nix", "libc", "socket2", "rustix"];

/// The crates of [`IO_CRATES`] that `monitor-policy` depends on, directly or not (from
/// `cargo tree`, normal dependencies only: its tests may use anything).
pub fn policy_io_dependencies(workspace: &Path) -> Result<Vec<String>> {
    let out = crate::cmd::cargo()
        .current_dir(workspace)
        .args([
            "tree",
            "-p",
            "monitor-policy",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .context("running cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree -p monitor-policy failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let found: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| IO_CRATES.contains(name))
        .map(str::to_string)
        .collect();
    Ok(found.into_iter().collect())
}
