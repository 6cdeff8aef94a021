//! `monitor simulate`: the policy run offline on a snapshot or a time series (in progress).

pub mod error;
pub mod node;
pub mod observe;
pub mod output;
pub mod scenario;
pub mod summary;
pub mod timestamp;

/// Command-line arguments of `monitor simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {}

/// Runs the simulation; returns the process exit code.
pub fn run(_args: &SimulateArgs) -> std::process::ExitCode {
    eprintln!("monitor simulate: not implemented yet");
    std::process::ExitCode::FAILURE
}
