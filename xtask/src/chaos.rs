//! `cargo xtask chaos`: the chaos run of the real agent, on this host and in the cgroup v2
//! VM (root). The agent is killed with SIGKILL at random moments under memory pressure
//! and restarted (50 cycles by default), each event source is switched off in turn during
//! a full-speed pressure race, and hostile input is replayed at it; each place prints a
//! table of losses (pods lost, double evictions, orphan cgroups, stale memory.high, OOM
//! kills, panics) and the command fails on any. The logic is the `chaos` test target of
//! monitor-tests (`tests/src/chaos/`), which `cargo xtask test` runs in a short version.
//!
//! `--soak 1h` runs the soak instead, on this host: a pressure race every half minute,
//! with the agent's RSS and open descriptors printed every minute.
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cmd::{cargo, workspace_root};
use crate::test::machine_features;

#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// Agent SIGKILL cycles under memory pressure.
    #[arg(long, default_value_t = 50)]
    pub cycles: u32,
    /// Seed of the kill moments (each run prints its own, to replay a failing one).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Do not run it in the cgroup v2 VM.
    #[arg(long)]
    pub no_vm: bool,
    /// Kernels for the VM run, as `cargo xtask vm --kernel` takes them.
    #[arg(long, value_delimiter = ',')]
    pub kernel: Vec<String>,
    /// Run the soak for this long instead (e.g. `1h`, `20m`), on this host.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub soak: Option<Duration>,
}

/// Test arguments of a chaos run: the ignored scenarios too, all but the soak.
const REPEATED: [&str; 3] = ["--include-ignored", "--skip", "soak"];

pub fn run(args: ChaosArgs) -> Result<()> {
    crate::setup::ensure()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("chaos runs the agent on real cgroups and eBPF: run it as root");
    }
    let root = workspace_root();
    crate::cmd::build_bins(&root, false)?;

    let mut env: Vec<(String, String)> =
        vec![("MONITOR_CHAOS_CYCLES".to_string(), args.cycles.to_string())];
    if let Some(seed) = args.seed {
        env.push(("MONITOR_CHAOS_SEED".to_string(), seed.to_string()));
    }

    if let Some(soak) = args.soak {
        println!(
            "== chaos soak on this host for {}",
            humantime::format_duration(soak)
        );
        let status = cargo()
            .current_dir(&root)
            .args(["test", "-p", "monitor-tests", "--test", "chaos", "--"])
            .args(["--test-threads=1", "--nocapture", "--ignored", "soak"])
            .env("MONITOR_CHAOS_SOAK_SECONDS", soak.as_secs().to_string())
            .status()
            .context("starting the soak")?;
        if !status.success() {
            bail!("the soak failed (see its table above)");
        }
        return Ok(());
    }

    let mut failed = Vec::new();
    println!("== chaos on this host ({} cycles)", args.cycles);
    // The scenarios the normal suite runs once (a wedged runtime, two agents on one
    // containerd) are ignored there; here they run their cycles. The soak stays out.
    let status = cargo()
        .current_dir(&root)
        .args([
            "test",
            "-p",
            "monitor-tests",
            "--test",
            "chaos",
            "--test",
            "chaos_cri",
        ])
        .args(["--", "--test-threads=1", "--nocapture"])
        .args(REPEATED)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("MONITOR_TEST_REQUIRE", machine_features().join(","))
        .status()
        .context("starting the chaos tests")?;
    if !status.success() {
        failed.push("host");
    }

    if !args.no_vm {
        println!("== chaos in the cgroup v2 VM ({} cycles)", args.cycles);
        let mut vm = cargo();
        vm.current_dir(&root)
            .args([
                "run",
                "--quiet",
                "-p",
                "xtask",
                "--",
                "vm",
                "--test",
                "chaos",
                "--test",
                "chaos_cri",
            ])
            // Under emulation a cycle takes several times as long as on the host.
            .args([
                "--timeout",
                &(900 + 60 * u64::from(args.cycles)).to_string(),
            ]);
        for kernel in &args.kernel {
            vm.args(["--kernel", kernel]);
        }
        for (name, value) in &env {
            vm.args(["--env", &format!("{name}={value}")]);
        }
        vm.arg("--").args(REPEATED);
        if !vm.status().context("starting cargo xtask vm")?.success() {
            failed.push("VM");
        }
    }
    if !failed.is_empty() {
        bail!(
            "chaos found losses on: {} (tables above)",
            failed.join(", ")
        );
    }
    println!("chaos: no losses");
    Ok(())
}
