//! The latency benchmark and the demo of the agent (`cargo xtask bench`, `cargo xtask
//! demo`), and the race harness they share.
//!
//! `cargo xtask bench`: the latency benchmark. The same pressure race (see [`race`]) runs
//! in every mode — the kubelet's polling (housekeeping every 10 s, its default, then 1 s
//! and 100 ms, all kernel sources off) and each kernel source alone, then all together —
//! at full allocation speed and at a slower rate; then the agent's costs (idle CPU and
//! RSS, eBPF per-event cost, synchronize duration against pod count). Prints a table, and
//! writes the JSON of every trial and the plots (see [`plot`]) under `<target>/bench/`;
//! `--replot` redraws them from that JSON, `--docs` writes docs/benchmark.md whole (the
//! run's date and build, the table, the plots) and copies the plots to docs/bench/.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

mod adversarial;
pub mod bpf;
mod costs;
pub mod demo;
pub mod detector_cost;
mod guest;
mod harness;
mod kernel_rows;
pub mod laid;
mod logparse;
mod memory;
mod modes;
mod peer;
mod plot;
mod probe;
mod race;
mod relief;
mod report;
mod reserve;
mod scaling;
mod shadow;
mod stalls;
mod stats;
mod trial;
pub mod util;

pub use guest::GuestPart;

use modes::{MODES, RATES, pick};
use report::{Results, full_table};
use trial::Trial;

/// What the benchmark needs from the developer commands around it.
pub trait Host {
    /// The workspace root and cargo's target directory.
    fn workspace(&self) -> Result<(PathBuf, PathBuf)>;
    /// Installs what the build needs and builds the agent and its helpers in release mode;
    /// returns the directory of the binaries.
    fn build(&self, root: &Path) -> Result<PathBuf>;
    /// Boots the benchmark VM, whose guest runs `plan` (see [`GuestPlan::command`]), and
    /// returns what it printed.
    fn vm(&self, root: &Path, target: &Path, plan: &GuestPlan) -> Result<VmRun>;
}

/// What the benchmark VM printed, and how it ran.
pub struct VmRun {
    pub console: Vec<String>,
    pub kernel: String,
    pub accel: String,
}

/// What the benchmark VM's guest runs.
pub struct GuestPlan<'a> {
    /// The races of these modes (all when empty).
    pub modes: &'a [String],
    /// Trials per mode.
    pub trials: u32,
    /// The hard threshold's headrooms (MiB): every mode at the first, the agent's tight
    /// modes and earlyoom at the others (see [`guest::run`]).
    pub headrooms: &'a [u64],
    /// What the guest runs.
    pub part: GuestPart,
}

impl GuestPlan<'_> {
    /// The guest's command line.
    pub fn command(&self) -> String {
        let mut command = format!("/bin/xtask bench --guest --trials {}", self.trials);
        if !self.modes.is_empty() {
            command.push_str(&format!(" --modes {}", self.modes.join(",")));
        }
        if !self.headrooms.is_empty() {
            let headrooms: Vec<String> = self.headrooms.iter().map(u64::to_string).collect();
            command.push_str(&format!(" --vm-headrooms {}", headrooms.join(",")));
        }
        match self.part {
            GuestPart::Races => {}
            GuestPart::Relief => command.push_str(" --relief-only"),
            GuestPart::DetectorCost => command.push_str(" --detector-cost-only"),
        }
        command
    }

    /// Whether the guest's clock counts instructions.
    pub fn instruction_clock(&self) -> bool {
        self.part == GuestPart::DetectorCost
    }

    /// Sets of `trials` races the guest runs, for the VM's time limit: the pods race's
    /// modes and relief off, three on the node and earlyoom, and the relief races (their
    /// longer trials as long as about three sets); at each further headroom two pods
    /// races, two node races and earlyoom.
    pub fn race_sets(&self) -> u64 {
        match self.part {
            GuestPart::Races => {}
            GuestPart::Relief => return 5,
            // Every attach point's rounds, hog by hog on one host thread.
            GuestPart::DetectorCost => return 30,
        }
        let modes = if self.modes.is_empty() {
            MODES.len()
        } else {
            self.modes.len()
        };
        let further = self.headrooms.len().saturating_sub(1) as u64;
        modes as u64 + 8 + 5 * further
    }
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Trials per mode and rate.
    #[arg(long, default_value_t = 20)]
    pub trials: u32,
    /// Modes to run (default: all): poll-10s, poll-1s, poll-100ms, memcg, ebpf, psi, all.
    #[arg(long, value_delimiter = ',')]
    pub modes: Vec<String>,
    /// Allocation rates (default: both): full, slow.
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<String>,
    /// Seconds the idle agent is watched for its CPU and RSS (0 skips it).
    #[arg(long, default_value_t = 60)]
    pub idle_seconds: u64,
    /// Pod counts for the synchronize duration (`--sync-pods` alone skips it).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = [10usize, 110, 1000])]
    pub sync_pods: Vec<usize>,
    /// Idle pod counts for the pressure race beside many pods, all sources on
    /// (`--race-pods` alone skips it).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_values_t = [10usize, 110, 1000])]
    pub race_pods: Vec<usize>,
    /// The agent's sources in the races beside many pods: all (every kernel notifier) and
    /// ebpf (the crossing detector alone, as on a cgroup v2 node).
    #[arg(long, value_delimiter = ',', default_values_t = ["all".to_string(), "ebpf".to_string()])]
    pub race_modes: Vec<String>,
    /// The hard threshold's headroom (MiB) in the races beside many pods.
    #[arg(long, value_delimiter = ',', default_values_t = [200u64, 50])]
    pub race_headrooms: Vec<u64>,
    /// Trials per pod count and headroom in the races beside many pods.
    #[arg(long, default_value_t = 20)]
    pub race_trials: u32,
    /// Seconds the synchronize measurement waits for its pods to start; it then measures
    /// with those running (reported).
    #[arg(long, default_value_t = 180)]
    pub pod_start_seconds: u64,
    /// Seconds of each "agent under adversarial load" row (0 skips them).
    #[arg(long, default_value_t = 10)]
    pub adversarial_seconds: u64,
    /// Seconds of each row measuring the machine's own stalls beside the races beside many
    /// pods: a thread reading the clock in user space on one CPU, then on every CPU (0
    /// skips them).
    #[arg(long, default_value_t = 5)]
    pub stall_seconds: u64,
    /// Run only the "agent under adversarial load" rows, print their table, and stop.
    #[arg(long)]
    pub adversarial_only: bool,
    /// Measure the crossing detector's cost to an allocating hog (attached and detached
    /// alternating, per attach point), on the host and in the VM.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub detector_cost: bool,
    /// Trials per mode (act, shadow) of the shadow race beside a kubelet's pods (0 skips
    /// it).
    #[arg(long, default_value_t = 10)]
    pub shadow_trials: u32,
    /// Run only the shadow race, print its lines, and stop.
    #[arg(long)]
    pub shadow_only: bool,
    /// Skip the criterion benchmark of the policy.
    #[arg(long)]
    pub no_criterion: bool,
    /// Skip the VM part (cgroup v2 races and the earlyoom peer).
    #[arg(long)]
    pub no_vm: bool,
    /// Trials per mode inside the VM (8 modes with earlyoom, and 5 more races at each further
    /// headroom); 20 per mode by default, enough for stable percentiles. Without hardware
    /// virtualisation qemu emulates (TCG): ~15 minutes per headroom.
    #[arg(long, default_value_t = 20)]
    pub vm_trials: u32,
    /// The hard threshold's headrooms (MiB) of the VM's races: every mode at the first;
    /// at the others, the agent with every source and with the crossing detector alone,
    /// on the pods and on the node, and earlyoom on the node beside them.
    #[arg(long, value_delimiter = ',', default_values_t = modes::VM_HEADROOMS.to_vec())]
    pub vm_headrooms: Vec<u64>,
    /// Run only the VM's memory relief races (page cache and a growing pod, relief on and
    /// off; the full-speed race with relief on and off; a pure I/O stall), print their
    /// lines, and stop.
    #[arg(long)]
    pub relief_only: bool,
    /// Run inside the benchmark VM (set by its /tests/bench script).
    #[arg(long, hide = true)]
    pub guest: bool,
    /// Run only the crossing detector's cost, on this host and (unless `--no-vm`) in the
    /// VM, print its lines, and stop.
    #[arg(long)]
    pub detector_cost_only: bool,
    /// Keep each run's directory (config, manifests, agent log).
    #[arg(long)]
    pub keep: bool,
    /// Also write docs/benchmark.md whole and its plots in docs/bench/ (only from a run on
    /// a quiet machine: they are the published figures).
    #[arg(long, alias = "readme")]
    pub docs: bool,
    /// Redraw the plots (and with `--docs` docs/benchmark.md) from the JSON of the last
    /// run, `<target>/bench/bench.json`, without running anything.
    #[arg(long)]
    pub replot: bool,
}

/// The (rate label, mode) of every race the guest runs for `raced` at `headrooms`, in
/// its order (see [`guest::races`]).
fn vm_groups(raced: &[harness::Mode], headrooms: &[u64]) -> Vec<(String, &'static str)> {
    guest::races(raced, headrooms, false)
        .into_iter()
        .map(|race| (race.label(), race.mode))
        .collect()
}

/// The crossing detector's cost in the VM, in a boot of its own whose clock counts
/// instructions: under emulation a guest's CPU time otherwise counts whatever delays
/// qemu's threads on the host, which has moved the figure by more than the cost between
/// runs. The rows and how the VM ran.
fn detector_cost_in_vm(
    host: &dyn Host,
    root: &Path,
    target: &Path,
) -> (Vec<detector_cost::DetectorCost>, Option<String>) {
    println!("bench: the crossing detector's cost in the VM, instructions counted");
    let plan = GuestPlan {
        modes: &[],
        trials: 1,
        headrooms: &[],
        part: GuestPart::DetectorCost,
    };
    match host.vm(root, target, &plan) {
        Ok(run) => {
            let rows = guest::detector_cost(&run.console);
            for line in detector_cost::lines(&rows, &detector_cost::vm_place(&run.accel)) {
                println!("bench: {line}");
            }
            (rows, Some(run.accel))
        }
        Err(err) => {
            println!("bench: the detector's cost in the VM FAILED: {err:#}");
            (Vec::new(), None)
        }
    }
}

/// Pods beside the idle agent: the kubelet's default maxPods.
const IDLE_PODS: usize = 110;

/// `cargo xtask bench`.
pub fn run(args: BenchArgs, host: &dyn Host) -> Result<()> {
    if args.replot {
        let (root, target) = host.workspace()?;
        return replot(&root, &target.join("bench"), args.docs);
    }
    let modes = pick(MODES, &args.modes, |m| m.name, "mode")?;
    let rates = pick(RATES, &args.rates, |r| r.name, "rate")?;
    if args.trials == 0 {
        bail!("--trials 0: at least one trial per mode is needed");
    }
    if let Some(h) = args
        .vm_headrooms
        .iter()
        .find(|&&h| h == 0 || h >= harness::NODE_MIB / 2)
    {
        bail!(
            "--vm-headrooms {h}: a headroom is at least 1 MiB and below {} MiB (half the race's node)",
            harness::NODE_MIB / 2
        );
    }
    if args.guest {
        let part = if args.detector_cost_only {
            GuestPart::DetectorCost
        } else if args.relief_only {
            GuestPart::Relief
        } else {
            GuestPart::Races
        };
        return guest::run(&modes, &RATES[0], args.trials, &args.vm_headrooms, part);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("cargo xtask bench creates cgroups and loads eBPF programs: run it as root");
    }
    let (root, target) = host.workspace()?;
    // Taken before the build: the tree may change during a run of hours.
    let build = build_id(&root);
    let bin = host.build(&root)?;
    let out = target.join("bench");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    if args.adversarial_only {
        let rows = adversarial::run(&bin, args.adversarial_seconds.max(1), args.keep);
        println!(
            "\nAgent under adversarial load:\n\n{}",
            adversarial::table(&rows)
        );
        return Ok(());
    }
    if args.detector_cost_only {
        let rows = detector_cost::run(&bin, detector_cost::HOST)?;
        println!("\nThe crossing detector's cost as the pods see it:\n");
        for line in detector_cost::lines(&rows, "on this host") {
            println!("{line}");
        }
        if !args.no_vm {
            // It prints its own lines.
            detector_cost_in_vm(host, &root, &target);
        }
        return Ok(());
    }
    if args.relief_only {
        let plan = GuestPlan {
            modes: &[],
            trials: args.vm_trials,
            headrooms: &args.vm_headrooms[..args.vm_headrooms.len().min(1)],
            part: GuestPart::Relief,
        };
        let run = host.vm(&root, &target, &plan)?;
        let trials = guest::collect(&run.console);
        for t in &trials {
            println!("{}", report::trial_line(t));
        }
        println!(
            "\nMemory relief in the VM (kernel {}, {}):\n",
            run.kernel, run.accel
        );
        for line in relief::lines(&relief::collect(&run.console), &trials) {
            println!("{line}");
        }
        return Ok(());
    }
    if args.shadow_only {
        let trials = shadow::run(&bin, args.shadow_trials.max(1), args.keep);
        println!("\nShadow mode beside a kubelet's pods:\n");
        for line in shadow::lines(&trials) {
            println!("{line}");
        }
        return Ok(());
    }
    let _stats = bpf::StatsSetting::enable()?;
    let (_, _, v1) = util::cgroup_mounts();
    let setup = race::Setup {
        bin: &bin,
        keep: args.keep,
        level: harness::Level::Pods,
        headroom_mib: harness::HEADROOM_MIB,
    };

    let mut trials: Vec<Trial> = Vec::new();
    for rate in &rates {
        for mode in &modes {
            for n in 1..=args.trials {
                match race::trial(&setup, mode, rate, n) {
                    Ok(t) => {
                        println!("{}", report::trial_line(&t));
                        trials.push(t);
                    }
                    // A failed trial is reported and counted, never silently dropped.
                    Err(err) => println!(
                        "bench: {} {} trial {n}: FAILED: {err:#}",
                        rate.name, mode.name
                    ),
                }
            }
        }
    }

    let idle = if args.idle_seconds > 0 {
        println!(
            "bench: idle agent (all sources, {IDLE_PODS} pods) for {} s",
            args.idle_seconds
        );
        match costs::idle(&bin, args.idle_seconds, IDLE_PODS, args.keep) {
            Ok(idle) => Some(idle),
            Err(err) => {
                println!("bench: idle measurement FAILED: {err:#}");
                None
            }
        }
    } else {
        None
    };
    let mut sync_scaling = Vec::new();
    for pods in &args.sync_pods {
        println!("bench: synchronize duration with {pods} pods");
        let limit = Duration::from_secs(args.pod_start_seconds);
        match costs::sync_scaling(&bin, *pods, Duration::from_secs(10), limit, args.keep) {
            Ok(s) => sync_scaling.push(s),
            Err(err) => println!("bench: synchronize with {pods} pods FAILED: {err:#}"),
        }
    }

    let detector_cost = if args.detector_cost {
        println!(
            "bench: the crossing detector's cost to an allocating hog, attached and detached alternating"
        );
        detector_cost::run(&bin, detector_cost::HOST).unwrap_or_else(|err| {
            println!("bench: the detector's cost FAILED: {err:#}");
            Vec::new()
        })
    } else {
        Vec::new()
    };
    for line in detector_cost::lines(&detector_cost, "on this host") {
        println!("bench: {line}");
    }

    let shadow_race = if args.shadow_trials > 0 {
        println!(
            "bench: the shadow race beside a kubelet's pods, act and shadow alternating, {} trials each",
            args.shadow_trials
        );
        shadow::run(&bin, args.shadow_trials, args.keep)
    } else {
        Vec::new()
    };
    for line in shadow::lines(&shadow_race) {
        println!("bench: {line}");
    }

    let adversarial = if args.adversarial_seconds > 0 {
        adversarial::run(&bin, args.adversarial_seconds, args.keep)
    } else {
        Vec::new()
    };

    let stalls = if args.stall_seconds > 0 && !args.race_pods.is_empty() {
        println!("bench: the machine's own stalls, a clock-reading thread per busy CPU");
        stalls::measure(args.stall_seconds)
    } else {
        Vec::new()
    };
    for line in stalls::lines(&stalls) {
        println!("bench: {line}");
    }

    let mut races_at_scale = Vec::new();
    let race_modes = pick(
        scaling::SCALE_MODES,
        &args.race_modes,
        |m| m.name,
        "race mode",
    )?;
    for mode in &race_modes {
        for pods in &args.race_pods {
            for headroom in &args.race_headrooms {
                let sources = mode.name;
                println!(
                    "bench: pressure race beside {pods} idle pods, {headroom} MiB headroom, sources: {sources}"
                );
                let limit = Duration::from_secs(args.pod_start_seconds);
                let trials = args.race_trials;
                match scaling::run(&bin, mode, *pods, *headroom, trials, limit, args.keep) {
                    Ok(run) => races_at_scale.push(run),
                    Err(err) => println!(
                        "bench: race beside {pods} pods, {headroom} MiB, {sources} FAILED: {err:#}"
                    ),
                }
            }
        }
    }

    let vm_run = if args.no_vm {
        None
    } else {
        let trials = args.vm_trials;
        println!("bench: the VM (cgroup v2) races and the earlyoom peer, {trials} trials each");
        let plan = GuestPlan {
            modes: &args.modes,
            trials,
            headrooms: &args.vm_headrooms,
            part: GuestPart::Races,
        };
        match host.vm(&root, &target, &plan) {
            Ok(run) => {
                let trials = guest::collect(&run.console);
                for t in &trials {
                    println!("{}", report::trial_line(t));
                }
                for line in relief::lines(&relief::collect(&run.console), &trials) {
                    println!("bench: {line}");
                }
                Some((run, trials))
            }
            Err(err) => {
                println!("bench: the VM part FAILED: {err:#}");
                None
            }
        }
    };
    if let Some((_, vm_trials)) = &vm_run {
        trials.extend(vm_trials.iter().cloned());
    }
    let (detector_cost_vm, detector_cost_vm_accel) = if args.no_vm || !args.detector_cost {
        (Vec::new(), None)
    } else {
        detector_cost_in_vm(host, &root, &target)
    };

    let policy = if args.no_criterion {
        Vec::new()
    } else {
        println!(
            "bench: criterion benchmark of the policy (cargo bench -p monitor --bench policy)"
        );
        costs::policy_bench(&root).unwrap_or_else(|err| {
            println!("bench: criterion benchmark FAILED: {err:#}");
            Vec::new()
        })
    };

    let mut groups: Vec<report::Group> = Vec::new();
    for rate in &rates {
        for mode in &modes {
            groups.push(report::Group {
                rate: rate.name.to_string(),
                mode: mode.name.to_string(),
                polling: mode.polling(),
                planned: args.trials,
            });
        }
    }
    if vm_run.is_some() {
        let planned = args.vm_trials;
        for (rate, mode) in vm_groups(&modes, &args.vm_headrooms) {
            groups.push(report::Group {
                polling: MODES.iter().any(|m| m.name == mode && m.polling()),
                rate,
                mode: mode.to_string(),
                planned,
            });
        }
    }
    let summaries = report::summaries(&trials, &groups);
    let ratios = report::ratios(&summaries);
    // The host's kernel and the VM's are reported apart.
    let in_vm = |t: &Trial| modes::is_vm(&t.rate);
    let host_bpf: Vec<bpf::ProgStat> = trials
        .iter()
        .filter(|t| !in_vm(t))
        .flat_map(|t| t.bpf.iter().cloned())
        .collect();
    let vm_bpf: Vec<bpf::ProgStat> = trials
        .iter()
        .filter(|t| in_vm(t))
        .flat_map(|t| t.bpf.iter().cloned())
        .collect();
    let results = Results {
        date: Some(humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()),
        build,
        kernel: kernel_release(),
        cgroup: if v1 { "v1" } else { "v2" }.to_string(),
        vm_kernel: vm_run.as_ref().map(|(r, _)| r.kernel.clone()),
        vm_accel: vm_run.as_ref().map(|(r, _)| r.accel.clone()),
        node_mib: harness::NODE_MIB,
        headroom_mib: harness::HEADROOM_MIB,
        trials_per_mode: args.trials,
        summaries,
        ratios,
        bpf: bpf::costs(&host_bpf),
        bpf_vm: bpf::costs(&vm_bpf),
        idle,
        sync_scaling,
        races_at_scale,
        stalls,
        policy_bench: policy,
        adversarial,
        detector_cost,
        shadow_race,
        detector_cost_vm,
        detector_cost_vm_accel,
        relief: vm_run
            .as_ref()
            .map(|(run, _)| relief::collect(&run.console))
            .unwrap_or_default(),
        trials,
    };
    let mut results = results;
    // Every trial's curve is kept, for the plots and a later --replot; its flat stretches
    // (1 ms samples of an unchanged working set) are left out.
    for t in &mut results.trials {
        t.curve = plot::thin(&t.curve, 1.0, 20.0);
    }
    let json_path = out.join("bench.json");
    let json = serde_json::to_string_pretty(&results).context("serialising the results")?;
    std::fs::write(&json_path, json).with_context(|| format!("writing {}", json_path.display()))?;
    println!("\n{}", full_table(&results));
    println!("bench: JSON {}", json_path.display());
    publish(&root, &out, &results, args.docs)
}

/// Draws the plots into `out`; with `docs`, also writes docs/benchmark.md and
/// docs/bench/.
fn publish(root: &Path, out: &Path, results: &Results, docs: bool) -> Result<()> {
    let plots = plot::write_all(out, &results.trials, &results.races_at_scale)?;
    println!("bench: plots {}", out.join("*.svg").display());
    if docs {
        let run = report::RunInfo {
            date: results.date.as_deref(),
            build: results.build.as_deref(),
            kernel: &results.kernel,
            cgroup: &results.cgroup,
            vm: results.vm_kernel.is_some(),
        };
        report::write_docs(root, &run, &full_table(results), &plots)?;
        println!("bench: {} and docs/bench/ written", report::PAGE);
    }
    Ok(())
}

/// `--replot`: the plots again from the last run's JSON.
fn replot(root: &Path, out: &Path, docs: bool) -> Result<()> {
    let path = out.join("bench.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} (run cargo xtask bench first)", path.display()))?;
    let results: Results =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    publish(root, out, &results, docs)
}

/// `git describe --always --dirty` of the workspace: the build a run measured.
fn build_id(root: &Path) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()?;
    let id = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !id.is_empty()).then_some(id)
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::{MODES, VM_HEADROOMS, VM_NODE_RATE, VM_RATE, is_vm, is_vm_node, vm_label};

    #[test]
    fn a_race_at_the_harness_headroom_keeps_its_old_label_and_others_name_theirs() {
        assert_eq!(vm_label(VM_RATE, crate::harness::HEADROOM_MIB), "vm-v2");
        assert_eq!(vm_label(VM_NODE_RATE, 50), "vm-v2-node-50Mi");
        assert!(is_vm("vm-v2-50Mi") && !is_vm_node("vm-v2-50Mi"));
        assert!(is_vm_node("vm-v2-node-50Mi") && is_vm("vm-v2-node"));
        assert!(!is_vm("full") && !is_vm("slow"));
    }

    #[test]
    fn a_further_headroom_races_the_agents_tight_modes_and_earlyoom_only() {
        let groups = vm_groups(MODES, VM_HEADROOMS);
        let at = |rate: &str| -> Vec<&str> {
            groups
                .iter()
                .filter(|(r, _)| r == rate)
                .map(|(_, m)| *m)
                .collect()
        };
        assert_eq!(at("vm-v2").len(), MODES.len() + 1, "{groups:?}");
        assert_eq!(at("vm-v2-node"), ["poll-100ms", "ebpf", "all", "earlyoom"]);
        assert_eq!(at("vm-v2-50Mi"), ["ebpf", "all"]);
        assert_eq!(at("vm-v2-node-50Mi"), ["ebpf", "all", "earlyoom"]);
        // The guest's time limit counts the same races, and about three sets of relief.
        let plan = GuestPlan {
            modes: &[],
            trials: 10,
            headrooms: VM_HEADROOMS,
            part: GuestPart::Races,
        };
        assert_eq!(plan.race_sets(), groups.len() as u64 + 3);
        assert!(
            plan.command().ends_with(" --vm-headrooms 200,50"),
            "{}",
            plan.command()
        );
        assert!(!plan.instruction_clock());
    }

    /// Each boot's guest is told its part, and only the detector's cost counts
    /// instructions.
    #[test]
    fn each_guest_part_has_its_flag_and_clock() {
        let plan = |part| GuestPlan {
            modes: &[],
            trials: 1,
            headrooms: &[],
            part,
        };
        let relief = plan(GuestPart::Relief);
        assert!(relief.command().ends_with(" --relief-only"));
        assert!(!relief.instruction_clock());
        let cost = plan(GuestPart::DetectorCost);
        assert!(cost.command().ends_with(" --detector-cost-only"));
        assert!(cost.instruction_clock());
        let races = plan(GuestPart::Races).command();
        assert!(!races.contains("-only"), "{races}");
    }

    #[test]
    fn modes_without_a_tight_one_race_earlyoom_alone_at_a_further_headroom() {
        let poll: Vec<harness::Mode> = MODES
            .iter()
            .copied()
            .filter(|m| m.name == "poll-100ms")
            .collect();
        let groups = vm_groups(&poll, &[200, 50]);
        assert_eq!(
            groups,
            [
                ("vm-v2".to_string(), "poll-100ms"),
                ("vm-v2-node".to_string(), "poll-100ms"),
                ("vm-v2-node".to_string(), "earlyoom"),
                ("vm-v2-node-50Mi".to_string(), "earlyoom"),
            ]
        );
    }
}
