//! `cargo xtask run`: set up, build, and run the agent on this host with the embedded
//! default configuration (or the arguments given after `--`).
use anyhow::Result;

use crate::cmd::{cargo, run as run_command, target_dir, workspace_root};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Build in release mode.
    #[arg(long)]
    pub release: bool,
    /// Arguments for `monitor run` (e.g. `-- --config node.yaml`).
    #[arg(last = true)]
    pub args: Vec<String>,
}

pub fn run(args: RunArgs) -> Result<()> {
    crate::setup::ensure()?;
    let root = workspace_root();
    let mut build = cargo();
    build.current_dir(&root).args(["build", "-p", "monitor"]);
    if args.release {
        build.arg("--release");
    }
    run_command(&mut build)?;
    // Where cargo put it: CARGO_TARGET_DIR or the configured target dir, if set.
    let binary = target_dir(&root)?
        .join(if args.release { "release" } else { "debug" })
        .join("monitor");
    run_command(
        std::process::Command::new(binary)
            .arg("run")
            .args(&args.args),
    )
}
