//! Developer commands for the monitor workspace: `cargo xtask <command>`.
use anyhow::Result;
use clap::{Parser, Subcommand};

mod vm;

#[derive(Debug, Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Boot a throw-away VM (Debian kernel, busybox initramfs, cgroup v2) and run the
    /// privileged integration tests inside it.
    Vm(vm::VmArgs),
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Vm(args) => vm::run(args),
    }
}
