//! `cargo xtask test`: every test. The architecture check and clippy, unit tests of the pure
//! parts, then the privileged integration tests (root, real cgroups and kernel events, one
//! at a time), then the cgroup v2 suite in a VM. Prints one closing line with the totals,
//! skips included.
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::cmd::{cargo, workspace_root};

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// Do not run the cgroup v2 VM suite (`cargo xtask vm`).
    #[arg(long)]
    pub no_vm: bool,
    /// Only the unit tests (no root needed).
    #[arg(long)]
    pub unit_only: bool,
}

/// Totals over every test binary run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl Totals {
    /// Adds one line of test output: cargo's "test result:" lines and our "SKIP:" lines.
    pub fn add_line(&mut self, line: &str) {
        // Lines may carry a prefix (libtest's "test x ... ", the VM's elapsed time).
        if line.contains("SKIP: ") {
            self.skipped += 1;
        } else if let Some((_, rest)) = line.split_once("test result: ") {
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    _ => {}
                }
            }
        }
    }

    pub fn merge(&mut self, other: Totals) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
}

/// Runs a test command, streaming its stdout while counting results.
pub fn run_counted(command: &mut Command) -> Result<(bool, Totals)> {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    let mut totals = Totals::default();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        totals.add_line(&line);
    }
    let status = child.wait()?;
    Ok((status.success(), totals))
}

/// Kernel features this machine offers, in the names the integration tests use
/// (`MONITOR_TEST_REQUIRE`): a test that skips one of these fails instead.
pub fn machine_features() -> Vec<&'static str> {
    let mut features = Vec::new();
    if nix_is_root() {
        features.push("root");
    }
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let v1_memory = mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory")
    });
    if v1_memory {
        features.push("cgroup-v1-memory");
    } else if let Some(mp) = mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "cgroup2").then(|| f[1].to_string())
    }) {
        let controllers =
            std::fs::read_to_string(format!("{mp}/cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "memory") {
            features.push("cgroup-v2-memory");
        }
    }
    if std::fs::read_to_string("/proc/pressure/memory").is_ok() {
        features.push("psi");
    }
    if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        features.push("ebpf");
    }
    // The tests' private containerd (tests/src/containerd/), installed by `cargo xtask
    // setup`.
    let runs =
        |program: &str| crate::cmd::succeeds(std::process::Command::new(program).arg("--version"));
    if nix_is_root()
        && runs("containerd")
        && runs("runc")
        && runs("ctr")
        && std::path::Path::new("/bin/busybox").exists()
    {
        features.push("containerd");
    }
    // The real scrape of /metrics (Debian's prometheus package, as promtool).
    if runs("prometheus") {
        features.push("prometheus");
    }
    features
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Counts a check that is not a test binary (the architecture rules, clippy) as one test:
/// passed, or failed and named among the run's failures.
fn count_check(
    totals: &mut Totals,
    failures: &mut Vec<&'static str>,
    name: &'static str,
    ok: bool,
) {
    if ok {
        totals.passed += 1;
    } else {
        totals.failed += 1;
        failures.push(name);
    }
}

/// How long each part of the run took, said at its end: the run must stay well inside
/// CI's time, and this says where it goes.
#[derive(Default)]
struct Stages {
    done: Vec<(&'static str, std::time::Duration)>,
    current: Option<(&'static str, std::time::Instant)>,
}

impl Stages {
    /// Ends the part under way and starts `name`, heading it in the output.
    fn start(&mut self, name: &'static str) {
        self.end();
        println!("== {name}");
        self.current = Some((name, std::time::Instant::now()));
    }

    fn end(&mut self) {
        if let Some((name, at)) = self.current.take() {
            self.done.push((name, at.elapsed()));
        }
    }

    fn report(mut self) {
        self.end();
        println!("== time per part");
        for (name, took) in &self.done {
            println!("{:>6} s  {name}", took.as_secs());
        }
    }
}

pub fn run(args: TestArgs) -> Result<()> {
    let mut stages = Stages::default();
    stages.start("setup (cargo xtask setup): toolchains and packages");
    crate::setup::ensure()?;
    let root = workspace_root();
    let mut totals = Totals::default();
    let mut failures = Vec::new();

    // Checks that need no build come first, so that their findings head the output.
    stages.start("architecture (cargo xtask arch): import circles, I/O crates under the policy");
    let arch = monitor_arch::check(&root)?;
    for line in arch.lines() {
        println!("{line}");
    }
    count_check(
        &mut totals,
        &mut failures,
        "architecture: import circles",
        arch.circles.is_empty(),
    );
    let io_crates = crate::arch::policy_io_dependencies(&root)?;
    for name in &io_crates {
        println!("arch: monitor-policy depends on {name}, which does I/O");
    }
    count_check(
        &mut totals,
        &mut failures,
        "architecture: monitor-policy depends on no I/O crate",
        io_crates.is_empty(),
    );

    // The same environment as the unit tests below (AYA_BUILD_SKIP as the caller set it):
    // monitor's build.rs sees the same inputs, so the eBPF object is not rebuilt for
    // clippy's sake.
    stages.start("clippy (every target, warnings denied)");
    let clippy = cargo()
        .current_dir(&root)
        .args([
            "clippy",
            "-p",
            "monitor",
            "-p",
            "monitor-policy",
            "-p",
            "monitor-common",
            "-p",
            "xtask",
            "-p",
            "monitor-bench",
            "-p",
            "monitor-arch",
            "-p",
            "monitor-tests",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
        .status()
        .context("starting cargo clippy")?;
    count_check(&mut totals, &mut failures, "clippy", clippy.success());

    // The fuzz targets are a workspace of their own (cargo-fuzz builds them with nightly
    // and sanitizers, `cargo xtask fuzz`); checking that they still compile here keeps
    // them in step with what `monitor` makes public. Their own target directory: another
    // lock file, other features.
    stages.start("fuzz targets compile (cargo check of monitor/fuzz)");
    let fuzz = cargo()
        .current_dir(&root)
        .env("AYA_BUILD_SKIP", "1")
        .args(["check", "--quiet", "--bins", "--manifest-path"])
        .arg(root.join("monitor/fuzz/Cargo.toml"))
        .arg("--target-dir")
        .arg(crate::cmd::target_dir(&root)?.join("fuzz-check"))
        .status()
        .context("starting cargo check of the fuzz targets")?;
    count_check(
        &mut totals,
        &mut failures,
        "fuzz targets compile",
        fuzz.success(),
    );

    // The shipped alert rules: valid, and each fires when and only when its test says.
    stages.start("alert rules (promtool check rules, promtool test rules)");
    let rules_dir = root.join("packaging/prometheus");
    let rules_ok = std::process::Command::new("promtool")
        .current_dir(&rules_dir)
        .args(["check", "rules", "monitor.rules.yaml"])
        .status()
        .context("starting promtool (cargo xtask setup installs it)")?
        .success()
        && std::process::Command::new("promtool")
            .current_dir(&rules_dir)
            .args(["test", "rules", "monitor.rules.test.yaml"])
            .status()
            .context("starting promtool")?
            .success();
    count_check(
        &mut totals,
        &mut failures,
        "alert rules (promtool)",
        rules_ok,
    );

    // The shipped dashboard's queries: each one valid PromQL, checked by promtool as a
    // recording rule with Grafana's variables given values.
    stages.start("dashboard queries (promtool check rules)");
    let dashboard_ok =
        check_dashboard_queries(&root.join("packaging/grafana/monitor.dashboard.json"))?;
    count_check(
        &mut totals,
        &mut failures,
        "dashboard queries (promtool)",
        dashboard_ok,
    );

    stages.start("unit tests (pure policy, parsers, readers)");
    let (ok, t) = run_counted(cargo().current_dir(&root).args([
        "test",
        "--workspace",
        "--exclude",
        "monitor-ebpf",
        "--exclude",
        "monitor-tests",
    ]))?;
    totals.merge(t);
    if !ok {
        failures.push("unit tests");
    }

    if !args.unit_only {
        if !nix_is_root() {
            bail!(
                "the integration tests need root (real cgroups and eBPF); run as root or pass --unit-only"
            );
        }
        let features = machine_features();
        stages.start("privileged integration tests on this host");
        println!("features: {}", features.join(", "));
        // The agent binary and the hog are run by the tests: build them first.
        crate::cmd::build_bins(&root, false)?;
        let (ok, t) = run_counted(
            cargo()
                .current_dir(&root)
                // Every test binary runs even after one fails: the totals count them all.
                .args(["test", "-p", "monitor-tests", "--no-fail-fast", "--"])
                .arg("--test-threads=1")
                .env("MONITOR_TEST_REQUIRE", features.join(",")),
        )?;
        totals.merge(t);
        if !ok {
            failures.push("integration tests");
        }
        if !args.no_vm {
            stages.start("cgroup v2 suite in a VM (cargo xtask vm)");
            let (ok, t) = run_counted(
                cargo()
                    .current_dir(&root)
                    .args(["run", "--quiet", "-p", "xtask", "--", "vm", "--matrix"])
                    // The first boot runs every test binary, the chaos run's short
                    // version and the package's install among them: under emulation
                    // that takes about 28 minutes, near `vm`'s default for a boot.
                    .args(["--timeout", "2400"])
                    // Containers on cgroup v2 in every kernel's boot, so that no CRI test
                    // is skipped in the VM (about 6 minutes more a boot); then the
                    // systemd node's boot.
                    .arg("--containers-everywhere"),
            )?;
            totals.merge(t);
            if !ok {
                failures.push("VM suite");
            }
        }
    }

    stages.report();
    println!(
        "{} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.skipped
    );
    if !failures.is_empty() {
        bail!("failed: {}", failures.join(", "));
    }
    Ok(())
}

/// Writes every query of the Grafana dashboard at `path` into a rule file as a recording
/// rule and lets `promtool check rules` parse them: a query Prometheus would refuse fails
/// here, not on an operator's screen. Grafana's variables become values Prometheus takes
/// (`$__rate_interval` a duration, `$instance` and `$job` a regular expression).
fn check_dashboard_queries(path: &Path) -> Result<bool> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let dashboard: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            let expr = expr
                .replace("$__rate_interval", "1m")
                .replace("$__range", "1h")
                .replace("$instance", ".*")
                .replace("$job", ".*");
            queries += 1;
            rules.push_str(&format!(
                "      - record: dashboard:query{queries}\n        expr: {}\n",
                serde_json::to_string(&expr)?
            ));
        }
    }
    if queries == 0 {
        println!("{}: no queries", path.display());
        return Ok(false);
    }
    let file = std::env::temp_dir().join(format!(
        "monitor-dashboard-{}.rules.yaml",
        std::process::id()
    ));
    std::fs::write(&file, rules).with_context(|| format!("writing {}", file.display()))?;
    let checked = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .status();
    let _ = std::fs::remove_file(&file);
    let ok = checked.context("starting promtool")?.success();
    println!(
        "{queries} dashboard queries parsed: {}",
        if ok { "ok" } else { "FAILED" }
    );
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_results_and_skips() {
        let mut t = Totals::default();
        t.add_line("test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s");
        t.add_line(
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        t.add_line("SKIP: memory_events: no v2 here");
        t.add_line("test vm_smoke ... SKIP: vm_smoke: not in a VM");
        t.add_line("[  4.210] test result: ok. 1 passed; 0 failed; 0 ignored");
        t.add_line("running 3 tests");
        assert_eq!(
            t,
            Totals {
                passed: 16,
                failed: 2,
                skipped: 2
            }
        );
    }

    #[test]
    fn a_check_counts_as_one_test_and_names_its_failure() {
        let mut totals = Totals::default();
        let mut failures = Vec::new();
        count_check(&mut totals, &mut failures, "clippy", true);
        count_check(
            &mut totals,
            &mut failures,
            "architecture: import circles",
            false,
        );
        assert_eq!(
            totals,
            Totals {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
        assert_eq!(failures, ["architecture: import circles"]);
    }
}
