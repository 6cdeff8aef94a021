//! Running commands with their output streamed and their failure named.
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs a command, streaming its output; fails naming the command.
pub fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("starting {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

/// Whether a command runs and exits 0 (its output discarded).
pub fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// `cargo` as invoked by `cargo xtask` (the same toolchain).
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Cargo's target directory (honours `CARGO_TARGET_DIR` and config), from `cargo metadata`.
pub fn target_dir(workspace: &std::path::Path) -> Result<std::path::PathBuf> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(workspace)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parsing cargo metadata's output")?;
    metadata["target_directory"]
        .as_str()
        .map(std::path::PathBuf::from)
        .context("cargo metadata has no target_directory")
}

/// Builds the agent and the test helpers (the hog), in release mode or not; returns the
/// directory holding the binaries.
pub fn build_bins(workspace: &std::path::Path, release: bool) -> Result<std::path::PathBuf> {
    let mut build = cargo();
    build.current_dir(workspace).arg("build");
    if release {
        build.arg("--release");
    }
    run(build.args(["-p", "monitor", "-p", "monitor-tests", "--bins"]))?;
    let profile = if release { "release" } else { "debug" };
    Ok(target_dir(workspace)?.join(profile))
}

/// [`build_bins`] in release mode (the demo and the benchmark).
pub fn build_release_bins(workspace: &std::path::Path) -> Result<std::path::PathBuf> {
    build_bins(workspace, true)
}
