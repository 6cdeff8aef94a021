//! `cargo xtask demo`: the agent beats the kernel OOM killer on a bounded node, with host
//! processes as pods (the race is `monitor_bench::demo`) or in a private containerd (the
//! `cri-demo` helper, tests/src/bin/cri-demo.rs).
use std::path::Path;
use std::process::Command;

use anyhow::{Result, bail};

use crate::cmd::workspace_root;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// How many times to run the race; every run must pass.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Keep the run's directory (config, manifests, agent log) for a look afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Where the pods run: `process` (host processes, the default) or `cri` (a private
    /// containerd: a disk race relieved by container and image GC, then a memory race).
    #[arg(long, value_enum, default_value_t = Runtime::Process)]
    pub runtime: Runtime,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Runtime {
    Process,
    Cri,
}

pub fn run(args: DemoArgs) -> Result<()> {
    crate::setup::ensure()?;
    let bin = crate::cmd::build_release_bins(&workspace_root())?;
    let cri = args.runtime == Runtime::Cri;
    let mut failures = 0;
    for run in 1..=args.runs {
        let outcome = if cri {
            println!("\n=== demo run {run}/{} (runtime cri) ===", args.runs);
            cri_race(&bin, args.keep)
        } else {
            println!("\n=== demo run {run}/{} ===", args.runs);
            monitor_bench::demo::race(&bin, run, args.keep).map(|()| println!("run {run}: PASS"))
        };
        if let Err(err) = outcome {
            failures += 1;
            println!("run {run}: FAIL: {err:#}");
        }
    }
    println!(
        "\ndemo: {} of {} runs passed",
        args.runs - failures,
        args.runs
    );
    if failures > 0 {
        bail!("{failures} demo run(s) failed");
    }
    Ok(())
}

/// One run of the containerd races: `cri-demo` brings up a private containerd per race and
/// runs the agent against it.
fn cri_race(bin: &Path, keep: bool) -> Result<()> {
    let mut command = Command::new(bin.join("cri-demo"));
    command.arg(bin.join("monitor"));
    if keep {
        command.arg("--keep");
    }
    crate::cmd::run(&mut command)
}
