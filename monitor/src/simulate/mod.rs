//! `monitor simulate`: the eviction policy run offline on real Kubernetes data.
//!
//! Input is either a snapshot (`--config`, `--pods`, `--summary`, optional `--node` and
//! `--admit`) or a time series (`--scenario FILE`); output is one JSON object per step on
//! stdout. The formats, and the semantics chosen where the kubelet leaves room, are in
//! docs/simulate.md.
//!
//! Layers: [`scenario`] reads and validates the inputs (every error names file and field),
//! [`observe`] and [`stats`] turn Summary API documents into the policy's observations and
//! pod stats, [`engine`] runs the steps through the pure policy, [`output`] is the JSON.
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

pub(crate) mod admit;
pub mod config;
pub mod engine;
pub mod error;
pub(crate) mod images;
pub(crate) mod node;
pub mod observe;
pub(crate) mod output;
pub(crate) mod reclaim;
pub mod scenario;
pub mod stats;
pub mod summary;
pub(crate) mod timestamp;

use error::SimulateError;
use output::StepOutput;
use scenario::{SnapshotFiles, load_scenario, load_snapshot};

/// Command-line arguments of `monitor simulate`.
#[derive(Debug, Default, clap::Args)]
pub struct SimulateArgs {
    /// A scenario: a YAML file with `config:` and `steps:` (see docs/simulate.md).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["config", "pods", "summary", "node", "admit"])]
    pub(crate) scenario: Option<PathBuf>,
    /// Snapshot: the KubeletConfiguration (YAML or JSON).
    #[arg(long, value_name = "KUBELET_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Snapshot: the running pods, as `kubectl get pods -o json` prints them (JSON or YAML).
    #[arg(long, value_name = "PODS")]
    pub(crate) pods: Option<PathBuf>,
    /// Snapshot: the kubelet Summary API document (`/stats/summary`).
    #[arg(long, value_name = "SUMMARY")]
    pub(crate) summary: Option<PathBuf>,
    /// Snapshot: the Node object (`kubectl get node NAME -o json`), for capacity and allocatable.
    #[arg(long, value_name = "NODE")]
    pub(crate) node: Option<PathBuf>,
    /// Snapshot: pods asking for admission after the eviction pass (a pod list).
    #[arg(long, value_name = "PODS")]
    pub(crate) admit: Option<PathBuf>,
}

/// Runs the simulation; returns the process exit code.
pub fn run(args: &SimulateArgs) -> ExitCode {
    let mut warnings = Vec::new();
    let result = simulate(args, &mut warnings);
    for warning in &warnings {
        eprintln!("monitor simulate: warning: {warning}");
    }
    match result {
        Ok(outputs) => {
            let mut stdout = std::io::stdout().lock();
            for step in &outputs {
                let line = match serde_json::to_string(step) {
                    Ok(line) => line,
                    Err(e) => {
                        eprintln!("monitor simulate: cannot print a step: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                if writeln!(stdout, "{line}").is_err() {
                    // stdout closed (e.g. piped into `head`): nothing more to say.
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("monitor simulate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the inputs the arguments name and runs every step.
pub(crate) fn simulate(
    args: &SimulateArgs,
    warnings: &mut Vec<String>,
) -> Result<Vec<StepOutput>, SimulateError> {
    let scenario = match (&args.scenario, &args.config, &args.pods, &args.summary) {
        (Some(path), _, _, _) => load_scenario(path)?,
        (None, Some(config), Some(pods), Some(summary)) => load_snapshot(&SnapshotFiles {
            config,
            pods,
            summary,
            node: args.node.as_deref(),
            admit: args.admit.as_deref(),
        })?,
        _ => {
            return Err(SimulateError::Usage(
                "give --scenario FILE, or --config KUBELET_CONFIG --pods PODS --summary SUMMARY [--node NODE] [--admit PODS]"
                    .to_string(),
            ));
        }
    };
    let config = config::load_config(&scenario.config, warnings)?;
    Ok(engine::Simulation::run(config, &scenario))
}
