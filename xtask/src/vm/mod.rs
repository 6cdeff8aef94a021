//! `cargo xtask vm`: runs the privileged integration tests inside a throw-away QEMU VM
//! booted from a Debian kernel and a busybox initramfs, with cgroup v2 and the memory
//! controller, so cgroup v2, PSI and eBPF paths are tested on kernels other than the
//! host's (the build machines only have the cgroup v1 memory controller).
//!
//! Steps: install host tools ([`host`]), fetch and cache the kernels ([`kernel`]), build
//! static guest programs ([`payload`]), pack them ([`initramfs`]), boot each kernel
//! ([`qemu`]) and judge its console output ([`report`]). Then, when the `systemd_node`
//! test is built, one more boot: Debian 12 with systemd as PID 1 ([`node`]), which runs
//! that test alone.
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::cmd::{target_dir, workspace_root};

pub(crate) mod bench;
mod containers;
mod cpio;
pub(crate) mod host;
pub(crate) mod initramfs;
pub(crate) mod kernel;
mod node;
pub(crate) mod payload;
pub(crate) mod qemu;
mod report;

use report::Verdict;

#[derive(Debug, clap::Args)]
pub struct VmArgs {
    /// Kernels to boot: `6.12` (default), `6.1`, `all` (the matrix), or a Debian image
    /// package such as `linux-image-6.1.0-56-cloud-amd64`. Repeat or separate with commas.
    #[arg(long, value_delimiter = ',')]
    pub kernel: Vec<String>,
    /// Boot every kernel of the matrix (same as `--kernel all`).
    #[arg(long)]
    pub matrix: bool,
    /// Guest RAM, as qemu's -m takes it.
    #[arg(long, default_value = "1G")]
    pub mem: String,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    pub cpus: u32,
    /// Seconds one boot may take, tests included, before qemu is killed and the run fails
    /// (the whole suite with the container tests takes about 15 minutes under TCG).
    #[arg(long, default_value_t = 1800)]
    pub timeout: u64,
    /// How qemu executes the guest: KVM only where it really works, TCG otherwise.
    #[arg(long, value_enum, default_value = "auto")]
    pub accel: qemu::Accel,
    /// Build the guest programs in the dev profile instead of release (slower under TCG).
    #[arg(long)]
    pub debug: bool,
    /// Only this integration test target of monitor-tests (repeatable); all by default.
    #[arg(long = "test", value_name = "TARGET")]
    pub tests: Vec<String>,
    /// Do not install missing host packages or Rust targets; fail instead.
    #[arg(long)]
    pub no_install: bool,
    /// Run the container (CRI) tests in every kernel's boot (`cargo xtask test` does). By
    /// default they run in the first kernel's only (the newest of the matrix), which
    /// saves about 6 minutes a boot under emulation; the other boots then carry no
    /// containerd and say so in their skips.
    #[arg(long)]
    pub containers_everywhere: bool,
    /// Run every test binary in every kernel's boot. By default the binaries of
    /// [`FIRST_KERNEL_ONLY`], whose subject is the agent's own logic rather than the
    /// kernel's, run in the first kernel's boot only (about 11 minutes a boot under
    /// emulation).
    #[arg(long)]
    pub everything_everywhere: bool,
    /// Environment for the tests in the guest (repeatable), e.g. `MONITOR_CHAOS_CYCLES=50`.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Passed to every test binary after `--test-threads=1`, e.g. a test name filter.
    #[arg(last = true, value_name = "TEST FILTER")]
    pub test_args: Vec<String>,
}

/// Test binaries whose subject does not change with the kernel: the API and the command
/// line, the test harness's own containerd, the chaos runs (the agent killed and
/// restarted, hostile input, a wedged runtime, two agents on one containerd), adoption
/// after a restart and the kubelet's cgroup names. They run in the first kernel's boot;
/// later kernels run the binaries that meet the kernel (cgroups, the event sources and
/// eBPF, relief, pods on cgroup v2, every container test, the package).
pub(crate) const FIRST_KERNEL_ONLY: &[&str] = &[
    "adoption",
    "api",
    "beside_kubelet",
    "chaos",
    "chaos_cri",
    "cli",
    "containerd_fixture",
];

/// Tests whose subject is the agent's logic or the runtime's own state rather than the
/// kernel's, in binaries that also hold tests meeting the kernel: skipped in later
/// kernels' boots as [`FIRST_KERNEL_ONLY`]'s binaries are.
/// - Containers: images collected by age and by space, pull policies against a registry,
///   an unreachable or stopped runtime, two agents' ownership. The container tests that
///   meet the kernel (QoS cgroups, eviction before the OOM killer, the writable layer's
///   overlay, the grace period's signals) run in every boot.
/// - Pods (`runtime`): manifests and their directory, records and adoption after a
///   restart, restart policies, admission and preemption, soft thresholds' grace, disk
///   pressure. The pod tests that meet the kernel (QoS cgroups and memory.high/min/low,
///   leftover processes killed with the cgroup, eviction before the OOM killer, the node
///   threshold on the pods cgroup, the detector's head start) run in every boot.
pub(crate) const FIRST_KERNEL_ONLY_TESTS: &[&str] = &[
    "image_gc_frees_the_least_recently_used_unused_images_down_to_the_low_threshold",
    "imagefs_pressure_removes_dead_containers_and_unused_images_before_evicting",
    "image_pull_policies_are_honoured_against_a_registry",
    "an_unreachable_runtime_stops_the_agent_with_the_endpoint_named",
    "a_stopped_containerd_holds_up_no_eviction_and_its_silence_is_reported",
    "two_agents_on_one_containerd_never_collect_each_others_containers_sandboxes_or_logs",
    "a_critical_pod_left_pending_by_a_crash_is_admitted_again",
    "a_malformed_manifest_is_reported_and_skipped",
    "a_recreated_manifest_directory_is_watched_again",
    "admission_rejects_best_effort_under_memory_pressure_and_critical_pods_preempt",
    "pods_without_a_readable_record_are_left_running_and_never_run_twice",
    "pods_whose_cgroups_are_gone_start_afresh",
    "pods_survive_an_agent_restart_and_pressure_still_evicts",
    "restart_policies_are_honoured",
    "soft_threshold_evicts_after_its_grace_period_with_sigterm",
    "disk_pressure_collects_dead_containers_logs_before_evicting",
    "disk_pressure_evicts_the_pod_using_the_most_disk_when_gc_is_not_enough",
];

/// The `package` test in the VM (`cargo xtask dist --test-vm`): install, start, evict,
/// stop, purge; on `kernels` as `--kernel` takes them.
pub fn test_package(kernels: &[String]) -> Result<()> {
    let mut vm_args = vec!["vm".to_string(), "--test".into(), "package".into()];
    if !kernels.is_empty() {
        vm_args.push(format!("--kernel={}", kernels.join(",")));
    }
    let parsed =
        <VmCommand as clap::Parser>::try_parse_from(vm_args).context("the VM run's arguments")?;
    run(parsed.vm)
}

/// `cargo xtask vm`'s options, parsed from a list.
#[derive(Debug, clap::Parser)]
struct VmCommand {
    #[command(flatten)]
    vm: VmArgs,
}

pub fn run(args: VmArgs) -> Result<()> {
    if let Some(bad) = args.test_args.iter().find(|a| a.contains('\n')) {
        bail!("test argument {bad:?}: newlines cannot be passed to the guest");
    }
    for variable in &args.env {
        initramfs::check_env(variable)?;
    }
    let mut kernel_values = args.kernel.clone();
    if args.matrix {
        kernel_values.push("all".to_string());
    }
    let wanted = kernel::parse_selection(&kernel_values)?;
    // The guest agent embeds the real eBPF object: its toolchain must be there.
    crate::setup::ensure()?;

    let workspace = workspace_root();
    let vm_dir = target_dir(&workspace)?.join("vm");
    let kernels_dir = vm_dir.join("kernels");
    std::fs::create_dir_all(&kernels_dir)
        .with_context(|| format!("creating {}", kernels_dir.display()))?;

    if args.no_install {
        let node_tools = host::NODE_TOOLS.map(|(tool, _)| tool);
        for tool in ["qemu-system-x86_64", host::BUSYBOX]
            .iter()
            .chain(&node_tools)
        {
            if host::system_tool(tool).is_none() && !Path::new(tool).exists() {
                bail!("{tool} is missing (run without --no-install to install it)");
            }
        }
        if !host::containers_installed() {
            bail!("containerd or runc is missing (run without --no-install to install them)");
        }
    } else {
        host::ensure(&vm_dir)?;
    }

    let step = Instant::now();
    let kernels = wanted
        .iter()
        .map(|w| kernel::fetch(w, &kernels_dir))
        .collect::<Result<Vec<_>>>()?;
    println!("vm: kernels ready in {:.0?}", step.elapsed());

    let options = payload::BuildOptions {
        release: !args.debug,
        test_targets: args.tests.clone(),
    };
    let step = Instant::now();
    let mut payload = payload::build(&workspace, &options)?;
    println!("vm: guest programs built in {:.0?}", step.elapsed());
    // The systemd node's test runs on that node alone.
    let (node_tests, tests): (Vec<_>, Vec<_>) = payload
        .tests
        .into_iter()
        .partition(|t| t.name == node::TEST);
    payload.tests = tests;
    let node_payload = payload::Payload {
        tests: node_tests,
        bins: payload
            .bins
            .iter()
            .filter(|b| b.name != "monitor")
            .cloned()
            .collect(),
        files: payload.files.clone(),
    };
    payload
        .files
        .extend(containers::modules(&kernels, &vm_dir.join("modules"))?);
    // Containers in the guest, as on the host: the CRI tests run on cgroup v2 too.
    let container_programs = containers::programs()?;
    // One archive per run, so runs sharing a target directory do not overwrite each
    // other's; removed when the run ends.
    let initramfs = RemoveOnDrop(vm_dir.join(format!("initramfs-{}.cpio", std::process::id())));

    let accel = qemu::choose_accel(args.accel, qemu::KvmProbe::of_this_host());
    let mut summaries = Vec::new();
    let busybox_kernels = if payload.tests.is_empty() {
        &[][..]
    } else {
        &kernels[..]
    };
    for (index, kernel) in busybox_kernels.iter().enumerate() {
        let mut guest = payload.clone();
        let mut test_args = args.test_args.clone();
        if index > 0 && !args.everything_everywhere {
            guest
                .tests
                .retain(|t| !FIRST_KERNEL_ONLY.contains(&t.name.as_str()));
            for name in FIRST_KERNEL_ONLY_TESTS {
                test_args.extend(["--skip".to_string(), (*name).to_string()]);
            }
        }
        let expected: Vec<String> = guest.tests.iter().map(|t| t.name.clone()).collect();
        let mut env = args.env.clone();
        if index == 0 || args.containers_everywhere {
            guest.files.extend(container_programs.iter().cloned());
        } else {
            env.push(format!(
                "MONITOR_TEST_NO_CONTAINERD=this boot carries no containerd: the container \
                 tests run in the first kernel's ({}; --containers-everywhere for all)",
                kernels[0].release
            ));
        }
        initramfs::write(&initramfs.0, &guest, &test_args, &env)?;
        println!(
            "vm: ===== kernel {} ({}), accel {accel:?}, {} RAM, {} CPUs, tests: {} =====",
            kernel.release,
            kernel.package,
            args.mem,
            args.cpus,
            expected.join(" ")
        );
        let left: Vec<&str> = payload
            .tests
            .iter()
            .map(|t| t.name.as_str())
            .filter(|name| !expected.iter().any(|e| e == name))
            .collect();
        if !left.is_empty() {
            println!(
                "vm: run in the first kernel's boot only (their subject is the agent's or the runtime's, not the kernel's; --everything-everywhere runs them here too): {} and the tests {}",
                left.join(" "),
                FIRST_KERNEL_ONLY_TESTS.join(" ")
            );
        }
        let boot = qemu::Boot {
            kernel,
            initramfs: &initramfs.0,
            accel,
            mem: &args.mem,
            cpus: args.cpus,
            timeout: Duration::from_secs(args.timeout),
            append: "",
            instruction_clock: false,
        };
        let mut outcome = qemu::boot(&boot)?;
        // A kernel that dies under a test binary is booted once more for the binaries it
        // left unfinished: under emulation the kernel's live patching of its own code (a
        // tracepoint's static key turned on as the agent attaches its programs) can trap
        // on the other vCPU, a fault of the emulator and not of a test. Said in the
        // summary; a second panic fails the kernel.
        let mut resumed = None;
        if let Some(panic) = outcome.report.panic.clone() {
            let unfinished: Vec<String> = outcome
                .report
                .unfinished(&expected)
                .into_iter()
                .cloned()
                .collect();
            println!(
                "vm: kernel {} panicked ({panic}); booting it again for the {} test binaries it left unfinished: {}",
                kernel.release,
                unfinished.len(),
                unfinished.join(" ")
            );
            guest.tests.retain(|t| unfinished.contains(&t.name));
            initramfs::write(&initramfs.0, &guest, &test_args, &env)?;
            let again = qemu::boot(&boot)?;
            outcome = qemu::BootOutcome {
                report: outcome.report.then(again.report),
                elapsed: outcome.elapsed + again.elapsed,
                timed_out: again.timed_out,
                console: [outcome.console, again.console].concat(),
            };
            resumed = Some(panic);
        }
        let mut verdict = outcome.report.verdict(&expected);
        if let Some(seen) = &outcome.report.kernel_release
            && seen != &kernel.release
        {
            let problem = format!("booted {} but the guest runs {seen}", kernel.release);
            verdict = match verdict {
                Verdict::Passed => Verdict::Failed(vec![problem]),
                Verdict::Failed(mut problems) => {
                    problems.push(problem);
                    Verdict::Failed(problems)
                }
            };
        }
        if outcome.timed_out
            && let Verdict::Failed(problems) = &mut verdict
        {
            problems.push(format!("timed out after {} s", args.timeout));
        }
        let mut lines = summary_lines(kernel, &outcome, &verdict);
        if let Some(panic) = resumed {
            lines.insert(
                1,
                format!("vm:   booted twice: the first boot's kernel panicked ({panic})"),
            );
        }
        for line in &lines {
            println!("{line}");
        }
        summaries.push((verdict == Verdict::Passed, lines));
    }

    if !node_payload.tests.is_empty() {
        summaries.push(systemd_node(
            &args,
            &kernels,
            &kernels_dir,
            &vm_dir,
            &node_payload,
            accel,
        )?);
    }

    println!("vm: ===== summary =====");
    for (_, lines) in &summaries {
        println!("{}", lines.first().map(String::as_str).unwrap_or_default());
    }
    let failed = summaries.iter().filter(|(passed, _)| !passed).count();
    if failed > 0 {
        bail!("{failed} of {} kernel(s) failed", summaries.len());
    }
    Ok(())
}

/// Boots the systemd node on Debian 12's kernel (fetched if the selection lacks it) and
/// runs `payload`'s tests there; its summary lines, and whether it passed.
fn systemd_node(
    args: &VmArgs,
    kernels: &[kernel::Kernel],
    kernels_dir: &Path,
    vm_dir: &Path,
    payload: &payload::Payload,
    accel: qemu::Accel,
) -> Result<(bool, Vec<String>)> {
    let kernel = match kernels
        .iter()
        .find(|k| k.release.starts_with(&format!("{}.", node::KERNEL_SERIES)))
    {
        Some(kernel) => kernel.clone(),
        None => {
            let wanted = kernel::parse_selection(&[node::KERNEL_SERIES.to_string()])?;
            kernel::fetch(&wanted[0], kernels_dir)?
        }
    };
    let step = Instant::now();
    let rootfs = node::rootfs(vm_dir)?;
    println!(
        "vm: the node's root filesystem ready in {:.0?}",
        step.elapsed()
    );
    let image = RemoveOnDrop(vm_dir.join(format!("node-initramfs-{}.cpio", std::process::id())));
    node::initramfs(&image.0, &rootfs, payload, &args.test_args, &args.env)?;
    let expected: Vec<String> = payload.tests.iter().map(|t| t.name.clone()).collect();
    println!(
        "vm: ===== systemd node: Debian 12, kernel {} ({}), accel {accel:?}, {} RAM, {} CPUs, tests: {} =====",
        kernel.release,
        kernel.package,
        node::MEM,
        args.cpus,
        expected.join(" ")
    );
    let outcome = qemu::boot(&qemu::Boot {
        kernel: &kernel,
        initramfs: &image.0,
        accel,
        mem: node::MEM,
        cpus: args.cpus,
        timeout: Duration::from_secs(args.timeout),
        append: node::KERNEL_ARGS,
        instruction_clock: false,
    })?;
    let mut verdict = outcome.report.verdict(&expected);
    if outcome.timed_out
        && let Verdict::Failed(problems) = &mut verdict
    {
        problems.push(format!("timed out after {} s", args.timeout));
    }
    let mut lines = summary_lines(&kernel, &outcome, &verdict);
    if let Some(headline) = lines.first_mut() {
        *headline = headline.replacen("vm: kernel", "vm: systemd node (Debian 12), kernel", 1);
    }
    for line in &lines {
        println!("{line}");
    }
    Ok((verdict == Verdict::Passed, lines))
}

/// The per-kernel result: a headline, then one line per problem.
fn summary_lines(
    kernel: &kernel::Kernel,
    outcome: &qemu::BootOutcome,
    verdict: &Verdict,
) -> Vec<String> {
    let report = &outcome.report;
    let passed = report.tests.iter().filter(|(_, s)| *s == Some(0)).count();
    let state = match verdict {
        Verdict::Passed => "PASSED",
        Verdict::Failed(_) => "FAILED",
    };
    let mut lines = vec![format!(
        "vm: kernel {} {state} in {:.1} s: {passed}/{} test binaries passed, {} skip(s)",
        report.kernel_release.as_deref().unwrap_or(&kernel.release),
        outcome.elapsed.as_secs_f64(),
        report.tests.len(),
        report.skips.len(),
    )];
    lines.extend(report.skips.iter().map(|s| format!("vm:   skipped: {s}")));
    if let Verdict::Failed(problems) = verdict {
        lines.extend(problems.iter().map(|p| format!("vm:   {p}")));
    }
    lines
}

/// A file deleted when the run ends, whichever way it ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        // Already gone (or never written) is fine.
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names left to the first kernel's boot are real binaries and tests: a rename
    /// would otherwise run them everywhere, or skip nothing, without a word.
    #[test]
    fn the_first_kernel_only_names_exist() {
        let dir = workspace_root().join("tests/tests");
        for binary in FIRST_KERNEL_ONLY {
            assert!(
                dir.join(format!("{binary}.rs")).exists(),
                "no test binary {binary}"
            );
        }
        let sources: String = std::fs::read_dir(&dir)
            .expect("tests/tests")
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .collect();
        for test in FIRST_KERNEL_ONLY_TESTS {
            assert!(sources.contains(&format!("fn {test}(")), "no test {test}");
        }
    }
}
