//! `cargo xtask bench`: the latency benchmark of `monitor_bench`, given the workspace, the
//! release build and the VM of the developer commands.
use std::path::{Path, PathBuf};

use anyhow::Result;
use monitor_bench::{BenchArgs, GuestPlan, Host, VmRun};

use crate::cmd::{target_dir, workspace_root};

struct Workspace;

impl Host for Workspace {
    fn workspace(&self) -> Result<(PathBuf, PathBuf)> {
        let root = workspace_root();
        let target = target_dir(&root)?;
        Ok((root, target))
    }

    fn build(&self, root: &Path) -> Result<PathBuf> {
        crate::setup::ensure()?;
        crate::cmd::build_release_bins(root)
    }

    fn vm(&self, root: &Path, target: &Path, plan: &GuestPlan) -> Result<VmRun> {
        crate::vm::bench::run(root, target, plan)
    }
}

pub fn run(args: BenchArgs) -> Result<()> {
    monitor_bench::run(args, &Workspace)
}
