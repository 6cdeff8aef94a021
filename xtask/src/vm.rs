//! `cargo xtask vm` (in progress).
use anyhow::Result;

#[derive(Debug, clap::Args)]
pub struct VmArgs {}

pub fn run(_args: VmArgs) -> Result<()> {
    anyhow::bail!("cargo xtask vm: not implemented yet")
}
