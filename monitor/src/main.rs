//! The `monitor` binary: the agent (`monitor run`) and its offline and client commands.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "monitor",
    version,
    about = "Node pressure agent: kubelet eviction semantics, woken by the kernel"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent on this host (root): event sources, synchronize loop, policy.
    Run(RunArgs),
    /// Run the policy offline on a snapshot or a scenario and print its decisions as JSON.
    Simulate(monitor::simulate::SimulateArgs),
    /// Show the running agent's event sources, signals against thresholds, node conditions
    /// and last synchronize.
    Status(monitor::api::ClientArgs),
    /// List the pods the running agent manages.
    Pods(monitor::api::ClientArgs),
    /// List the running agent's recent events.
    Events(monitor::api::ClientArgs),
    /// Print the running agent's Prometheus metrics.
    Metrics(monitor::api::ClientArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Configuration file (a KubeletConfiguration with an optional `monitor:` block).
    /// Without it the embedded default is used.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Log filter (tracing EnvFilter syntax), overridden by RUST_LOG.
    #[arg(long, default_value = "info")]
    log: String,
    /// Kubelet flags applied over the file, e.g. `--eviction-hard=memory.available<500Mi`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "KUBELET_FLAGS"
    )]
    kubelet_flags: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Simulate(args) => monitor::simulate::run(&args),
        Command::Status(args) => {
            monitor::api::run_client(monitor::api::ClientCommand::Status, &args)
        }
        Command::Pods(args) => monitor::api::run_client(monitor::api::ClientCommand::Pods, &args),
        Command::Events(args) => {
            monitor::api::run_client(monitor::api::ClientCommand::Events, &args)
        }
        Command::Metrics(args) => {
            monitor::api::run_client(monitor::api::ClientCommand::Metrics, &args)
        }
        Command::Run(args) => match run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("monitor: {err:#}");
                ExitCode::FAILURE
            }
        },
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&args.log))
        .context("--log")?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let config = monitor::config::load_agent_config(args.config.as_deref(), &args.kubelet_flags)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let node = monitor::node::start(config, monitor::state::SharedState::default()).await?;
        let agent = &node.agent;
        tracing::info!(
            "agent running: memory controller on cgroup {:?} at {}",
            agent.layout.version,
            agent.layout.memory_root.display()
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted, stopping"),
            _ = term.recv() => tracing::info!("terminated, stopping"),
        }
        node.shutdown().await;
        Ok(())
    })
}
