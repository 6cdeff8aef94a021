//! `cargo xtask dist`: the agent packaged for a node. Builds the static release binary
//! (musl, the eBPF object embedded by monitor/build.rs) and a Debian package holding it
//! (see [`deb`]), in `<target dir>/dist/`. `--test-vm` then boots the VM and runs the
//! `package` test there: install, start, evict, stop, purge, nothing left behind.
use std::fs;

use anyhow::Result;

use crate::cmd::{target_dir, workspace_root};

pub mod deb;

#[derive(Debug, clap::Args)]
pub struct DistArgs {
    /// Then boot the VM and test the package there (install, start, evict, stop, purge).
    #[arg(long)]
    pub test_vm: bool,
    /// Kernels for `--test-vm`, as `cargo xtask vm --kernel` takes them.
    #[arg(long, value_delimiter = ',', requires = "test_vm")]
    pub kernel: Vec<String>,
}

/// Builds and packages the agent; the VM test of `--test-vm` is the caller's (it needs
/// the VM, which packages the agent in turn).
pub fn run() -> Result<()> {
    // The binary embeds the real eBPF object: its toolchain must be there.
    crate::setup::ensure()?;
    crate::setup::ensure_rust_target(crate::cmd::MUSL_TARGET)?;
    let workspace = workspace_root();
    let binary = crate::cmd::build_static(&workspace, "monitor", "monitor")?;
    let out = target_dir(&workspace)?.join("dist");
    let deb = deb::package(&workspace, &binary, &out)?;
    println!("dist: {}", out.join("monitor").display());
    println!("dist: {}", out.join("monitor.service").display());
    println!(
        "dist: {} ({} KiB)",
        deb.display(),
        fs::metadata(&deb).map(|m| m.len() / 1024).unwrap_or(0)
    );
    Ok(())
}
