//! The `monitor` binary: the agent (`monitor run`) and its offline and client commands.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "monitor", version, about = "Node pressure agent: kubelet eviction semantics, woken by the kernel")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the policy offline on a snapshot or a scenario and print its decisions as JSON.
    Simulate(monitor::simulate::SimulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Simulate(args) => monitor::simulate::run(&args),
    }
}
