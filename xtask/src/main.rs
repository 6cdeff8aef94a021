//! Developer commands for the monitor workspace: `cargo xtask <command>`.
use anyhow::Result;
use clap::{Parser, Subcommand};

mod arch;
mod bench;
mod chaos;
mod cmd;
mod demo;
mod dist;
mod fuzz;
mod run;
mod setup;
mod test;
mod vm;

#[derive(Debug, Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install what the build needs (nightly rust-src, LLVM 22, bpf-linker); idempotent.
    Setup,
    /// Build and run the agent on this host (root) with the embedded default config.
    Run(run::RunArgs),
    /// Check the monitor crate's architecture from its source: no import circle between
    /// modules, no I/O or clock read in the policy.
    Arch,
    /// Run every check and test: architecture, clippy, unit, privileged integration (root),
    /// and the cgroup v2 VM suite.
    Test(test::TestArgs),
    /// The agent beats the OOM killer on a 1 GiB bounded node (`--runs 10` to repeat).
    Demo(demo::DemoArgs),
    /// The latency benchmark: event-driven modes against polling, and the agent's costs.
    Bench(monitor_bench::BenchArgs),
    /// Run the coverage-guided fuzzers of every parser of outside input (cargo-fuzz,
    /// nightly): 1,000,000 inputs per target unless `--runs N` or `--time SECS`.
    Fuzz(fuzz::FuzzArgs),
    /// Boot a throw-away VM (Debian kernel, busybox initramfs, cgroup v2) and run the
    /// privileged integration tests inside it.
    Vm(vm::VmArgs),
    /// Kill the agent at random moments under memory pressure (50 cycles), switch each
    /// event source off in turn, replay hostile input; on this host and in the VM. Fails on
    /// any pod lost, double eviction, orphan cgroup, stale memory.high, OOM kill or panic.
    Chaos(chaos::ChaosArgs),
    /// Package the agent for a node: static release binary, Debian package, systemd unit,
    /// in <target dir>/dist/ (`--test-vm` then installs and tests the package in the VM).
    Dist(dist::DistArgs),
}

fn main() -> std::process::ExitCode {
    cmd::exit(dispatch(Cli::parse().command))
}

fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Setup => setup::ensure(),
        Command::Arch => arch::run(),
        Command::Run(args) => run::run(args),
        Command::Test(args) => test::run(args),
        Command::Vm(args) => vm::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Fuzz(args) => fuzz::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Dist(args) => {
            dist::run()?;
            if args.test_vm {
                // The VM run packages the same release binary into the same place (the
                // build is reproducible), so the file it installs is the one just listed.
                vm::test_package(&args.kernel)?;
            }
            Ok(())
        }
    }
}
