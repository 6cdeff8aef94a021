//! The `monitor` binary: the agent (`monitor run`) and its offline and client commands.
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "monitor",
    version,
    about = "Node pressure agent: kubelet eviction semantics, woken by the kernel"
)]
struct Cli {
    /// Format of the log: `auto` (journald when stderr is the journal, as under systemd,
    /// else text), `text`, `json` (one JSON object per line on stderr) or `journald`.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Auto)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// `journald` when stderr is connected to the journal (systemd says so in
    /// JOURNAL_STREAM), else `text`.
    Auto,
    /// Human-readable lines, coloured only when stderr is a terminal.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`).
    Json,
    /// Straight to the systemd journal over its native socket: each line at its own
    /// priority (`journalctl -p warning` shows warnings and errors), and every field a
    /// journal field of its own (`POD=`, `SOURCE=`, `REASON=`, ...; the spans' fields
    /// prefixed `S0_`, `S1_`, ...).
    Journald,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent on this host (root): event sources, synchronize loop, policy.
    Run(RunArgs),
    /// Run the policy offline on a snapshot or a scenario and print its decisions as JSON.
    Simulate(monitor::simulate::SimulateArgs),
    /// Show the running agent's event sources, signals against thresholds, node conditions
    /// and last synchronize.
    Status(monitor::api::StatusArgs),
    /// List the pods the running agent manages.
    Pods(monitor::api::ClientArgs),
    /// List the running agent's recent events (with --follow, then the new ones as they
    /// come).
    Events(monitor::api::EventsArgs),
    /// Print the running agent's Prometheus metrics.
    Metrics(monitor::api::ClientArgs),
    /// Explain why a pod would or would not be evicted: for every signal with a threshold,
    /// whether it is met, the pod's usage and request, its rank (1 = evicted first) and
    /// the rule that orders it against its neighbours, on the last synchronize's stats.
    Explain(monitor::api::ExplainArgs),
    /// List what the agent decided (evictions, hot kills, node-level reclaim, preemptions,
    /// admission rejections; in shadow mode what it would have done), each with the
    /// observation it was decided on, from its decision record (the last 1000, kept
    /// across restarts in its state directory).
    Decisions(monitor::api::DecisionsArgs),
    /// Remove what the stopped agent of a configuration left on the host: the pods its
    /// records name (processes killed, cgroups, records and logs removed), then its cgroup
    /// tree, state and log directories and socket where nothing else is in them.
    /// Refuses while an agent answers on the configuration's socket.
    Cleanup(CleanupArgs),
    /// Load the configuration exactly as `run` does (the same file, defaults and flags) and
    /// print the effective configuration as a KubeletConfiguration, every default filled
    /// in; warnings go to stderr. Exits 1 when the configuration would not start the agent.
    CheckConfig(CheckConfigArgs),
    /// Print a shell completion script to stdout.
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout, e.g. into /usr/share/man/man8/monitor.8.
    Man,
    /// Keep the systemd scope of the pods' cgroup tree alive (`monitor.systemdScope`):
    /// started by the agent through systemd-run, not by hand.
    #[command(hide = true)]
    HoldScope,
}

#[derive(Debug, clap::Args)]
struct CheckConfigArgs {
    /// Configuration file; without it /etc/monitor/config.yaml when it exists, else the
    /// embedded default (as `run`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A drop-in directory, as the kubelet's: its `*.conf` files (KubeletConfigurations),
    /// in name order, merged over the configuration (maps key by key, lists replaced);
    /// flags apply after them.
    #[arg(long, value_name = "DIR")]
    config_dir: Option<PathBuf>,
    /// Print the effective configuration as YAML or JSON.
    #[arg(long, value_enum, default_value_t = ConfigFormat::Yaml)]
    output: ConfigFormat,
    /// Kubelet flags applied over the file, as `run` takes them.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "KUBELET_FLAGS"
    )]
    kubelet_flags: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct CleanupArgs {
    /// The configuration the agent ran with (as `run` reads it: without it
    /// /etc/monitor/config.yaml when it exists, else the embedded default).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The drop-in directory the agent ran with, if any.
    #[arg(long, value_name = "DIR")]
    config_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ConfigFormat {
    Yaml,
    Json,
}

#[derive(Debug, clap::Args)]
struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Configuration file (a KubeletConfiguration with an optional `monitor:` block).
    /// Without it, /etc/monitor/config.yaml when it exists, else the embedded default.
    #[arg(long)]
    config: Option<PathBuf>,
    /// A drop-in directory, as the kubelet's: its `*.conf` files (KubeletConfigurations),
    /// in name order, merged over the configuration (maps key by key, lists replaced);
    /// flags apply after them.
    #[arg(long, value_name = "DIR")]
    config_dir: Option<PathBuf>,
    /// Log filter (tracing EnvFilter syntax), overridden by RUST_LOG.
    #[arg(long, default_value = "info")]
    log: String,
    /// Decide as usual and act never: each eviction, hot kill or reclaim is reported
    /// (WouldEvict, WouldKill, WouldReclaim) instead (as `monitor.shadow: true`; needs
    /// `runPods: false`).
    #[arg(long)]
    shadow: bool,
    /// Kubelet flags applied over the file, e.g. `--eviction-hard=memory.available<500Mi`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "KUBELET_FLAGS"
    )]
    kubelet_flags: Vec<String>,
}

fn main() -> ExitCode {
    // The limits this process was started with, before anything raises one: the pods'.
    monitor::runtime::inherited::OriginalLimits::record();
    let cli = Cli::parse();
    match cli.command {
        Command::Simulate(args) => monitor::simulate::run(&args),
        Command::Status(args) => monitor::api::run_status(&args),
        Command::Pods(args) => monitor::api::run_client(monitor::api::ClientCommand::Pods, &args),
        Command::Events(args) => monitor::api::run_events(&args),
        Command::Metrics(args) => {
            monitor::api::run_client(monitor::api::ClientCommand::Metrics, &args)
        }
        Command::Explain(args) => monitor::api::run_explain(&args),
        Command::Decisions(args) => monitor::api::run_decisions(&args),
        Command::CheckConfig(args) => check_config(&args),
        Command::Cleanup(args) => cleanup(&args),
        Command::Completions(args) => completions(args.shell),
        Command::Man => man(),
        Command::HoldScope => match monitor::runtime::scope::hold() {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("monitor hold-scope: {err:#}");
                ExitCode::FAILURE
            }
        },
        Command::Run(args) => match run(args, cli.log_format) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                // In JSON every line on stderr stays one JSON object, the last one
                // included; in the journal the last line keeps its priority (an error).
                if !matches!(cli.log_format.resolved(), LogFormat::Text)
                    && tracing::dispatcher::has_been_set()
                {
                    tracing::error!("{err:#}");
                } else {
                    eprintln!("monitor: {err:#}");
                }
                ExitCode::FAILURE
            }
        },
    }
}

/// Makes every thread allocate from the one main heap. glibc gives each new thread a heap
/// of its own (up to eight per CPU), and since the agent locks every page it touches
/// (mlockall), each heap's high-water mark stays resident: about 450 KiB for each of the
/// runtime's and blocking threads, 1.8 MiB of a 17 MiB agent with 110 pods. The
/// agent allocates little and briefly, so one heap's lock costs nothing measurable.
/// Must run before any thread starts. (musl has a single heap already.)
fn one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt takes two integers; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// `monitor check-config`: loads as `run` does, says every warning, prints the effective
/// configuration.
fn check_config(args: &CheckConfigArgs) -> ExitCode {
    let path = monitor::config::config_path(args.config.as_deref());
    let loaded = match monitor::config::read_agent_config(
        path.as_deref(),
        args.config_dir.as_deref(),
        &args.kubelet_flags,
    ) {
        Ok(loaded) => loaded,
        Err(err) => {
            eprintln!("monitor check-config: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    for warning in &loaded.warnings {
        eprintln!("warning: {warning}");
    }
    let effective = monitor::config::effective_config(&loaded);
    let printed = match args.output {
        ConfigFormat::Yaml => serde_yaml_ng::to_string(&effective).map_err(|e| e.to_string()),
        ConfigFormat::Json => serde_json::to_string_pretty(&effective)
            .map(|json| json + "\n")
            .map_err(|e| e.to_string()),
    };
    match printed {
        Ok(text) => print_stdout(text.as_bytes(), "check-config"),
        Err(err) => {
            eprintln!("monitor check-config: rendering the configuration: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Prints the completion script for `shell`, generated from the same definitions as the
/// parser: it always offers exactly the subcommands and flags this binary accepts.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    let mut command = Cli::command();
    let name = command.get_name().to_string();
    // Into a buffer first: the generator panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, name, &mut script);
    print_stdout(&script, "completions")
}

/// Prints the man page: section 8, system administration commands (the agent runs as root).
fn cleanup(args: &CleanupArgs) -> ExitCode {
    let path = monitor::config::config_path(args.config.as_deref());
    let done = monitor::config::read_agent_config(path.as_deref(), args.config_dir.as_deref(), &[])
        .and_then(|loaded| monitor::runtime::cleanup::cleanup(&loaded));
    match done {
        Ok(report) => {
            for line in &report.removed {
                println!("removed: {line}");
            }
            for line in &report.left {
                println!("left: {line}");
            }
            if report.removed.is_empty() && report.left.is_empty() {
                println!("nothing to remove");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("monitor cleanup: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn man() -> ExitCode {
    match man_page() {
        Ok(page) => print_stdout(page.as_bytes(), "man"),
        Err(err) => {
            eprintln!("monitor man: rendering the man page: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A section of a page, as clap_mangen renders it.
type Section = fn(&clap_mangen::Man, &mut dyn Write) -> std::io::Result<()>;

/// One page for the whole command line: the global options, then under COMMANDS every
/// command with its synopsis, description and own options (clap_mangen alone would point
/// at a separate page per command).
fn man_page() -> std::io::Result<String> {
    use clap_mangen::Man;
    const HEAD: [Section; 4] = [
        Man::render_name_section,
        Man::render_synopsis_section,
        Man::render_description_section,
        Man::render_options_section,
    ];
    const COMMAND: [Section; 3] = [
        Man::render_synopsis_section,
        Man::render_description_section,
        Man::render_options_section,
    ];
    let mut command = Cli::command();
    command.build();
    let man = Man::new(command.clone()).section("8");
    // The title's rendering keeps the string definitions every rendering starts with.
    let mut title = Vec::new();
    man.render_title(&mut title)?;
    let mut page = String::from_utf8_lossy(&title).into_owned();
    for section in HEAD {
        page += &roff(&man, section, Headings::Keep)?;
    }
    page += ".SH COMMANDS\n";
    for sub in command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
    {
        // The global flags and --help are on every command: shown once, at the top.
        let sub = sub.clone().mut_args(|arg| {
            let shared = arg.is_global_set()
                || matches!(
                    arg.get_action(),
                    clap::ArgAction::Help | clap::ArgAction::HelpShort | clap::ArgAction::HelpLong
                );
            if shared { arg.hide(true) } else { arg }
        });
        page += &format!(
            ".SS \"{}\"\n",
            sub.get_bin_name().unwrap_or_else(|| sub.get_name())
        );
        let sub_man = Man::new(sub).section("8");
        for section in COMMAND {
            page += &roff(&sub_man, section, Headings::Drop)?;
        }
    }
    // What clap knows nothing of: the environment, the files, the signals, the exit
    // codes and examples.
    page += include_str!("man.roff");
    page += &roff(&man, Man::render_version_section, Headings::Keep)?;
    Ok(page)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Headings {
    Keep,
    /// A command's part of the page: its sections become paragraphs under its own heading.
    Drop,
}

/// The roff text of one section, without the string definitions (`.ds Aq`) every
/// rendering starts with: the page has them once, before its title.
fn roff(man: &clap_mangen::Man, section: Section, headings: Headings) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    section(man, &mut bytes)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with(".ie \\n(.g .ds Aq") || line.starts_with(".el .ds Aq") {
            continue;
        }
        if line.starts_with(".SH") && headings == Headings::Drop {
            out.push_str(".PP\n");
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

fn print_stdout(bytes: &[u8], command: &str) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // stdout closed (e.g. piped into `head`): nothing more to say.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("monitor {command}: writing to stdout: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Installs the log subscriber on stderr. The filter is RUST_LOG when it parses, else
/// `--log`. A `--log` that does not parse is returned as an error after a subscriber
/// (errors only) is installed, so that it is reported in the chosen format.
///
/// `auto` chooses the journal when stderr is its stream; when the journal's socket then
/// cannot be reached (a unit with a private /run, a container that forwards only the
/// stream) the lines go to stderr as text, which the journal still records, with one
/// warning. An explicit `journald` fails instead.
fn init_logging(log: &str, requested: LogFormat) -> anyhow::Result<()> {
    let format = requested.resolved();
    let (filter, bad_filter) = match tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(log))
    {
        Ok(filter) => (filter, None),
        Err(err) => (
            tracing_subscriber::EnvFilter::new("error"),
            Some(anyhow::Error::new(err).context(format!("--log {log:?}"))),
        ),
    };
    let builder = || {
        tracing_subscriber::fmt()
            .with_env_filter(filter.clone())
            .with_writer(std::io::stderr)
    };
    let installed = match format {
        // Colour only on a terminal: never in a file, a pipe or the journal.
        // `Auto` comes resolved; text if not.
        LogFormat::Auto | LogFormat::Text => builder().with_ansi(colour_stderr()).try_init(),
        LogFormat::Json => builder().json().with_ansi(false).try_init(),
        LogFormat::Journald => match tracing_journald::layer() {
            Ok(journal) => {
                use tracing_subscriber::layer::SubscriberExt;
                use tracing_subscriber::util::SubscriberInitExt;
                // Our fields as they are named (POD=, not F_POD=): none of them is one of
                // the journal's own.
                let journal = journal
                    .with_field_prefix(None)
                    .with_syslog_identifier("monitor".to_string());
                tracing_subscriber::registry()
                    .with(filter)
                    .with(journal)
                    .try_init()
                    .map_err(|err| anyhow::anyhow!("{err}"))
                    .map_err(Into::into)
            }
            Err(err) if matches!(requested, LogFormat::Auto) => {
                let installed = builder().with_ansi(false).try_init();
                if installed.is_ok() {
                    tracing::warn!(
                        "--log-format auto: stderr is the journal's stream but its socket \
                         ({JOURNAL_SOCKET}) cannot be reached ({err}); logging text on stderr"
                    );
                }
                installed
            }
            Err(err) => {
                return Err(anyhow::Error::new(err).context(format!(
                    "--log-format journald: connecting to the journal's socket ({JOURNAL_SOCKET})"
                )));
            }
        },
    };
    installed.map_err(|err| anyhow::anyhow!("installing the log subscriber: {err}"))?;
    match bad_filter {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// Whether text log lines are coloured: stderr is a terminal and NO_COLOR is unset or
/// empty (https://no-color.org).
fn colour_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

impl LogFormat {
    /// `Auto` made concrete for this process.
    fn resolved(self) -> LogFormat {
        match self {
            LogFormat::Auto if stderr_is_the_journal() => LogFormat::Journald,
            LogFormat::Auto => LogFormat::Text,
            other => other,
        }
    }
}

/// Where journald takes native log records.
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Whether stderr is the journal's stream: systemd sets JOURNAL_STREAM to the
/// "device:inode" of the stream it connects stdout and stderr to (a redirection in the
/// unit, or a shell's, changes stderr and not the variable).
fn stderr_is_the_journal() -> bool {
    let Some((dev, ino)) = std::env::var("JOURNAL_STREAM").ok().and_then(|v| {
        let (dev, ino) = v.split_once(':')?;
        Some((dev.parse::<u64>().ok()?, ino.parse::<u64>().ok()?))
    }) else {
        return false;
    };
    std::fs::metadata("/proc/self/fd/2").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.dev() == dev && m.ino() == ino
    })
}

fn run(args: RunArgs, log_format: LogFormat) -> anyhow::Result<()> {
    one_malloc_arena();
    init_logging(&args.log, log_format)?;
    let path = monitor::config::config_path(args.config.as_deref());
    match &path {
        Some(path) => tracing::info!("configuration: {}", path.display()),
        None => tracing::info!("configuration: the embedded default"),
    }
    let mut config = monitor::config::load_agent_config(
        path.as_deref(),
        args.config_dir.as_deref(),
        &args.kubelet_flags,
    )?;
    if args.shadow {
        anyhow::ensure!(
            !config.agent.settings.run_pods,
            "--shadow needs runPods: false in the monitor: block (a shadow agent runs no pods of its own; monitor.podList lists a kubelet's)"
        );
        config.agent.settings.shadow = true;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let mut node = monitor::node::start(config, monitor::state::SharedState::default()).await?;
        let mut fatal = node
            .agent
            .take_fatal()
            .context("the agent's task watch was taken twice")?;
        // Ready once the first synchronize is done; then the watchdog, if the unit has one.
        let service = monitor::service::spawn(node.state.clone());
        let agent = &node.agent;
        tracing::info!(
            "agent running: memory controller on cgroup {:?} at {}",
            agent.layout.version,
            agent.layout.memory_root.display()
        );
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        // A hangup stops the agent as SIGTERM does (its pods keep running and are adopted
        // at the next start): there is nothing to reload in place, and dying of it
        // without the shutdown would leave the socket and the kernel watches behind.
        let mut hangup = signal(SignalKind::hangup())?;
        let failure = tokio::select! {
            _ = tokio::signal::ctrl_c() => { tracing::info!("interrupted, stopping"); None }
            _ = term.recv() => { tracing::info!("terminated, stopping"); None }
            _ = hangup.recv() => {
                tracing::info!("hangup, stopping (the pods keep running; a restart adopts them)");
                None
            }
            Some(why) = fatal.recv() => Some(why),
        };
        service.abort();
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        node.shutdown().await;
        match failure {
            // Non-zero: the service manager restarts the agent, which adopts the pods.
            Some(why) => anyhow::bail!("{why}; stopped"),
            None => Ok(()),
        }
    })
}
