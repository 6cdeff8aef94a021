//! `cargo xtask fuzz`: runs the coverage-guided fuzzers of `monitor/fuzz` (cargo-fuzz and
//! libFuzzer, on the nightly toolchain), one target after another, each for a number of
//! inputs (1,000,000 by default) or a time. Prints one line per target with the inputs
//! executed and the rate; a target that crashes, hangs or runs out of memory is named with
//! its cause and the input that did it (`monitor/fuzz/artifacts/<target>/`), and the
//! command fails once every target has run.
//!
//! The targets are built once (`cargo fuzz build`), then each binary is run directly, so a
//! source file edited during a long run does not rebuild anything halfway. New inputs
//! that reach new code go to `<target dir>/fuzz/corpus/<target>/` (cargo's target
//! directory, `target/` unless `CARGO_TARGET_DIR` or the cargo configuration says
//! otherwise), so the checked-in seeds (`monitor/fuzz/corpus/<target>/`) stay as they are
//! and a later run starts from the coverage an earlier one reached. The builds are there
//! too, and libFuzzer's own output in `<target dir>/fuzz/logs/<target>.log`.
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Result, anyhow, bail};

use crate::cmd::{target_dir, workspace_root};
use crate::setup;

/// Inputs per target when neither `--runs` nor `--time` is given.
pub const DEFAULT_RUNS: u64 = 1_000_000;
/// An input still running after this long is reported as a hang (libFuzzer `-timeout`).
const INPUT_TIMEOUT_SECS: u64 = 10;
/// Memory one input may use before it is reported (libFuzzer `-rss_limit_mb`).
const RSS_LIMIT_MB: u64 = 2048;

#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Inputs to run per target [default: 1000000].
    #[arg(long, value_name = "N", conflicts_with = "time")]
    pub runs: Option<u64>,
    /// Seconds to fuzz each target, instead of a number of inputs.
    #[arg(long, value_name = "SECS")]
    pub time: Option<u64>,
    /// Targets to run (default: all of them; `cargo fuzz list --fuzz-dir monitor/fuzz`).
    #[arg(value_name = "TARGET")]
    pub targets: Vec<String>,
}

/// How long each target runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Budget {
    Runs(u64),
    Seconds(u64),
}

impl Budget {
    fn libfuzzer_flag(self) -> String {
        match self {
            Budget::Runs(n) => format!("-runs={n}"),
            Budget::Seconds(s) => format!("-max_total_time={s}"),
        }
    }
}

pub fn run(args: FuzzArgs) -> Result<()> {
    let budget = match (args.runs, args.time) {
        (_, Some(seconds)) => Budget::Seconds(seconds),
        (runs, None) => Budget::Runs(runs.unwrap_or(DEFAULT_RUNS)),
    };
    let root = workspace_root();
    let fuzz_dir = root.join("monitor/fuzz");
    // The fuzz crate is a workspace of its own: its builds, grown corpus and logs go under
    // the main workspace's target directory, wherever that is.
    let work = target_dir(&root)?.join("fuzz");
    setup::ensure_cargo_fuzz()?;
    ensure_nightly()?;
    let all = list_targets(&fuzz_dir)?;
    let targets = select_targets(&all, &args.targets)?;
    let logs = work.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| anyhow!("creating {}: {e}", logs.display()))?;

    let bin_dir = build(&fuzz_dir, &work, &logs.join("build.log"))?;
    let mut failures = Vec::new();
    for target in &targets {
        let log = logs.join(format!("{target}.log"));
        let started = Instant::now();
        let success = run_target(&fuzz_dir, &work, &bin_dir, target, budget, &log)?;
        let seconds = started.elapsed().as_secs();
        let text =
            std::fs::read_to_string(&log).map_err(|e| anyhow!("reading {}: {e}", log.display()))?;
        let report = Report::parse(&text, &root);
        let counts = report.counts();
        if success {
            if report.executed.is_none() {
                bail!(
                    "{target}: libFuzzer printed no final stats (log: {})",
                    log.display()
                );
            }
            println!("fuzz: {target}: {counts}, {seconds} s");
        } else {
            let artifact = report
                .artifact
                .as_deref()
                .map(|a| relative_to(a, &root))
                .unwrap_or_else(|| "no input saved".to_string());
            let cause = report.cause.as_deref().unwrap_or("the fuzzer failed");
            println!(
                "fuzz: {target}: FAILED after {counts}: {cause}; input: {artifact} (log: {})",
                log.display()
            );
            failures.push(format!("{target} ({artifact})"));
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} of {} fuzz targets failed: {}",
            failures.len(),
            targets.len(),
            failures.join(", ")
        );
    }
    Ok(())
}

/// `cargo` on the nightly toolchain (cargo-fuzz needs `-Z` flags), for the fuzz crate.
/// `RUSTUP_TOOLCHAIN` carries the choice to the cargo and rustc that cargo-fuzz starts.
/// The parsers need no eBPF object, so its build is skipped (`AYA_BUILD_SKIP`).
fn nightly_cargo(fuzz_dir: &Path) -> Command {
    let mut command = Command::new("cargo");
    command
        .env("RUSTUP_TOOLCHAIN", "nightly")
        .env("AYA_BUILD_SKIP", "1")
        .current_dir(fuzz_dir);
    command
}

fn ensure_nightly() -> Result<()> {
    let out = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output()
        .map_err(|e| anyhow!("running rustup: {e}"))?;
    if !out.status.success() {
        bail!(
            "the nightly toolchain is missing (rustup toolchain install nightly); cargo-fuzz needs it"
        );
    }
    Ok(())
}

fn list_targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let out = nightly_cargo(fuzz_dir)
        .args(["fuzz", "list", "--fuzz-dir"])
        .arg(fuzz_dir)
        .output()
        .map_err(|e| anyhow!("running cargo fuzz list: {e}"))?;
    if !out.status.success() {
        bail!(
            "cargo fuzz list failed: {}",
            first_error_line(&String::from_utf8_lossy(&out.stderr))
        );
    }
    let targets: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if targets.is_empty() {
        bail!("{} has no fuzz targets", fuzz_dir.display());
    }
    Ok(targets)
}

/// The targets asked for, in the order asked (all of them when none is named).
fn select_targets(all: &[String], asked: &[String]) -> Result<Vec<String>> {
    if asked.is_empty() {
        return Ok(all.to_vec());
    }
    for name in asked {
        if !all.contains(name) {
            bail!("no fuzz target {name:?} (targets: {})", all.join(", "));
        }
    }
    Ok(asked.to_vec())
}

/// Builds every target once (release, debug assertions and overflow checks on, address
/// sanitizer) under `work`, its output in `log`; returns the directory of the binaries.
fn build(fuzz_dir: &Path, work: &Path, log: &Path) -> Result<PathBuf> {
    println!(
        "fuzz: building the targets with nightly (log: {})",
        log.display()
    );
    let triple = host_triple()?;
    let target_dir = work.join("build");
    let (stdout, stderr) = log_files(log)?;
    let status = nightly_cargo(fuzz_dir)
        .args([
            "fuzz",
            "build",
            "--release",
            "--debug-assertions",
            "--target",
        ])
        .arg(&triple)
        .arg("--target-dir")
        .arg(&target_dir)
        .arg("--fuzz-dir")
        .arg(fuzz_dir)
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .map_err(|e| anyhow!("running cargo fuzz build: {e}"))?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        bail!(
            "building the fuzz targets failed: {} (log: {})",
            first_error_line(&text),
            log.display()
        );
    }
    Ok(target_dir.join(triple).join("release"))
}

/// The nightly compiler's host triple (`rustc -vV`), where cargo-fuzz puts the binaries.
fn host_triple() -> Result<String> {
    let out = Command::new("rustup")
        .args(["run", "nightly", "rustc", "-vV"])
        .output()
        .map_err(|e| anyhow!("running rustc -vV: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|host| host.trim().to_string())
        .ok_or_else(|| anyhow!("rustc -vV printed no host triple"))
}

/// Runs one target's binary as `cargo fuzz run` would, with the seeds and the grown
/// corpus (under `work`); its output (stdout and stderr) goes to `log`. Returns whether it
/// finished without finding anything.
fn run_target(
    fuzz_dir: &Path,
    work: &Path,
    bin_dir: &Path,
    target: &str,
    budget: Budget,
    log: &Path,
) -> Result<bool> {
    let grown = work.join("corpus").join(target);
    let seeds = fuzz_dir.join("corpus").join(target);
    let artifacts = fuzz_dir.join("artifacts").join(target);
    for dir in [&grown, &artifacts] {
        std::fs::create_dir_all(dir).map_err(|e| anyhow!("creating {}: {e}", dir.display()))?;
    }
    let binary = bin_dir.join(target);
    let (stdout, stderr) = log_files(log)?;
    let status = Command::new(&binary)
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg(budget.libfuzzer_flag())
        .arg(format!("-timeout={INPUT_TIMEOUT_SECS}"))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg("-print_final_stats=1")
        // libFuzzer adds new inputs to the first directory only.
        .arg(&grown)
        .arg(&seeds)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .map_err(|e| anyhow!("running {}: {e}", binary.display()))?;
    Ok(status.success())
}

/// A fresh log file, as (stdout, stderr) handles sharing one offset.
fn log_files(path: &Path) -> Result<(File, File)> {
    let file = File::create(path).map_err(|e| anyhow!("creating {}: {e}", path.display()))?;
    let copy = file
        .try_clone()
        .map_err(|e| anyhow!("opening {}: {e}", path.display()))?;
    Ok((file, copy))
}

/// `path` relative to the workspace when it lies inside it.
fn relative_to(path: &str, root: &Path) -> String {
    Path::new(path)
        .strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.to_string())
}

/// The first line of compiler or cargo output that says what went wrong.
fn first_error_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("error"))
        .or_else(|| text.lines().map(str::trim).rfind(|l| !l.is_empty()))
        .unwrap_or("no output")
        .to_string()
}

/// What a libFuzzer run printed: its final statistics and, when it found something, the
/// cause and where it saved the input.
#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    executed: Option<u64>,
    exec_per_sec: Option<u64>,
    cause: Option<String>,
    artifact: Option<String>,
}

impl Report {
    /// Reads a run's output; `root` is the workspace, for the first frame of its own code
    /// in a stack trace.
    fn parse(text: &str, root: &Path) -> Report {
        let mut report = Report::default();
        let mut panic: Option<(String, String)> = None;
        let mut own_frame: Option<String> = None;
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let line = line.trim_end();
            if let Some(n) = stat(line, "stat::number_of_executed_units:") {
                report.executed = Some(n);
            } else if let Some(n) = stat(line, "stat::average_exec_per_sec:") {
                report.exec_per_sec = Some(n);
            } else if let Some((runs, rate)) = done_line(line) {
                // "#1000000\tDONE ... exec/s: 52345 ...": the stats lines, when present, win.
                report.executed = report.executed.or(Some(runs));
                report.exec_per_sec = report.exec_per_sec.or(rate);
            } else if let Some((_, path)) = line.split_once("Test unit written to ") {
                report
                    .artifact
                    .get_or_insert_with(|| path.trim().to_string());
            } else if let Some(frame) = workspace_frame(line, root) {
                own_frame.get_or_insert(frame);
            } else if let Some((_, place)) = line.split_once("panicked at ") {
                // Since Rust 1.73 the message follows on the next line.
                let message = match lines.peek() {
                    Some(next) if !next.trim().is_empty() && !next.starts_with("note:") => {
                        next.trim().to_string()
                    }
                    _ => String::new(),
                };
                panic.get_or_insert((place.trim_end_matches(':').to_string(), message));
            } else if report.cause.is_none() {
                if let Some((_, what)) = line.split_once("ERROR: AddressSanitizer: ") {
                    report.cause = Some(format!("AddressSanitizer: {what}"));
                } else if let Some((_, what)) = line.split_once("ERROR: libFuzzer: ") {
                    report.cause = Some(match what {
                        w if w.starts_with("timeout") => {
                            format!("hang: {w} (an input ran longer than {INPUT_TIMEOUT_SECS} s)")
                        }
                        w if w.starts_with("out-of-memory") => {
                            format!("{w} (limit {RSS_LIMIT_MB} MB)")
                        }
                        w => w.to_string(),
                    });
                }
            }
        }
        // A Rust panic aborts, which libFuzzer reports as a deadly signal: the panic is
        // the cause. One inside the standard library (an overflowing `sum`, a slice
        // index) is named with the workspace code that called it.
        if let Some((place, message)) = panic {
            let place = relative_to(&place, root);
            let called_from = match own_frame {
                Some(frame) if !place.starts_with("monitor/") => format!(" (from {frame})"),
                _ => String::new(),
            };
            report.cause = Some(format!("panicked at {place}: {message}{called_from}"));
        }
        report
    }

    /// "1000000 inputs, 52345 exec/s", with "?" for what the run did not print.
    fn counts(&self) -> String {
        let show = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
        format!(
            "{} inputs, {} exec/s",
            show(self.executed),
            show(self.exec_per_sec)
        )
    }
}

fn stat(line: &str, name: &str) -> Option<u64> {
    line.strip_prefix(name)?.trim().parse().ok()
}

/// libFuzzer's last status line: "#1000000\tDONE   cov: 512 ft: 1024 corp: 80/2Kb
/// lim: 4096 exec/s: 52345 rss: 64Mb".
fn done_line(line: &str) -> Option<(u64, Option<u64>)> {
    let rest = line.strip_prefix('#')?;
    let mut words = rest.split_whitespace();
    let runs = words.next()?.parse().ok()?;
    if words.next()? != "DONE" {
        return None;
    }
    let mut rate = None;
    while let Some(word) = words.next() {
        if word == "exec/s:" {
            rate = words.next().and_then(|w| w.parse().ok());
        }
    }
    Some((runs, rate))
}

/// The location of a stack frame ("    #26 0x55 in {closure#1} /work/main/monitor/src/x.rs:205:26")
/// in the workspace's own code outside the fuzz targets, relative to the workspace.
fn workspace_frame(line: &str, root: &Path) -> Option<String> {
    let frame = line.trim_start();
    if !frame.starts_with('#') || !frame.contains(" in ") {
        return None;
    }
    let location = frame.rsplit(' ').next()?;
    let relative = Path::new(location).strip_prefix(root).ok()?;
    let relative = relative.display().to_string();
    (!relative.starts_with("monitor/fuzz/")).then_some(relative)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/work/main";

    #[test]
    fn a_clean_run_gives_its_final_stats() {
        let log = "INFO: Seed: 1\n\
            #2\tINITED cov: 10 ft: 10 corp: 1/1b exec/s: 0 rss: 30Mb\n\
            #1000000\tDONE   cov: 512 ft: 1024 corp: 80/2Kb lim: 4096 exec/s: 52345 rss: 64Mb\n\
            Done 1000000 runs in 19 second(s)\n\
            stat::number_of_executed_units: 1000002\n\
            stat::average_exec_per_sec:     52631\n\
            stat::new_units_added:          79\n";
        let report = Report::parse(log, Path::new(ROOT));
        assert_eq!(report.executed, Some(1_000_002));
        assert_eq!(report.exec_per_sec, Some(52_631));
        assert_eq!(report.cause, None);
        assert_eq!(report.counts(), "1000002 inputs, 52631 exec/s");
    }

    #[test]
    fn without_stats_the_done_line_counts() {
        let report = Report::parse(
            "#4096\tDONE   cov: 5 ft: 6 corp: 1/1b exec/s: 2048 rss: 30Mb\n",
            Path::new(ROOT),
        );
        assert_eq!(
            (report.executed, report.exec_per_sec),
            (Some(4096), Some(2048))
        );
    }

    #[test]
    fn a_panic_is_named_with_its_place_and_message_and_input() {
        let log = "#1024\tpulse  cov: 10 ft: 10 corp: 1/1b exec/s: 512 rss: 30Mb\n\
            \n\
            thread '<unnamed>' panicked at /work/main/monitor/src/policy/quantity.rs:210:31:\n\
            attempt to multiply with overflow\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n\
            ==4242== ERROR: libFuzzer: deadly signal\n\
            MS: 1 ChangeByte-; base unit: 0000\n\
            artifact_prefix='/work/main/monitor/fuzz/artifacts/quantity/'; Test unit written to /work/main/monitor/fuzz/artifacts/quantity/crash-d00d\n\
            stat::number_of_executed_units: 1500\n\
            stat::average_exec_per_sec:     750\n";
        let report = Report::parse(log, Path::new(ROOT));
        assert_eq!(
            report.cause.as_deref(),
            Some(
                "panicked at monitor/src/policy/quantity.rs:210:31: attempt to multiply with overflow"
            )
        );
        assert_eq!(
            report.artifact.as_deref(),
            Some("/work/main/monitor/fuzz/artifacts/quantity/crash-d00d")
        );
        assert_eq!(report.executed, Some(1500));
    }

    #[test]
    fn a_panic_in_the_standard_library_names_the_caller() {
        let log = "thread '<unnamed>' (24699) panicked at /root/.rustup/toolchains/nightly/lib/rustlib/src/rust/library/core/src/iter/traits/accum.rs:206:1:\n\
            attempt to add with overflow\n\
            ==1== ERROR: libFuzzer: deadly signal\n\
            \x20   #18 0x559d in {closure#0}<core::X> /root/.rustup/toolchains/nightly/lib/rustlib/src/rust/library/core/src/iter/traits/accum.rs:55:28\n\
            \x20   #26 0x559d in {closure#1} /work/main/monitor/src/simulate/engine.rs:205:26\n\
            \x20   #40 0x559d in {closure#0} /work/main/monitor/fuzz/fuzz_targets/scenario.rs:50:1\n";
        assert_eq!(
            Report::parse(log, Path::new(ROOT)).cause.as_deref(),
            Some(
                "panicked at /root/.rustup/toolchains/nightly/lib/rustlib/src/rust/library/core/src/iter/traits/accum.rs:206:1: attempt to add with overflow (from monitor/src/simulate/engine.rs:205:26)"
            )
        );
    }

    #[test]
    fn a_hang_says_so() {
        let log = "ALARM: working on the last Unit for 11 seconds\n\
            ==7== ERROR: libFuzzer: timeout after 11 seconds\n\
            artifact_prefix='a/'; Test unit written to a/timeout-beef\n";
        let report = Report::parse(log, Path::new(ROOT));
        let cause = report.cause.unwrap_or_default();
        assert!(
            cause.starts_with("hang: timeout after 11 seconds"),
            "{cause}"
        );
        assert_eq!(report.artifact.as_deref(), Some("a/timeout-beef"));
    }

    #[test]
    fn sanitizer_reports_are_a_cause() {
        let log = "==9==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\n";
        assert_eq!(
            Report::parse(log, Path::new(ROOT)).cause.as_deref(),
            Some("AddressSanitizer: heap-buffer-overflow on address 0x1")
        );
    }

    #[test]
    fn targets_are_checked_by_name() {
        let all = vec!["quantity".to_string(), "pod".to_string()];
        assert_eq!(select_targets(&all, &[]).unwrap_or_default(), all);
        assert_eq!(
            select_targets(&all, &["pod".to_string()]).unwrap_or_default(),
            vec!["pod".to_string()]
        );
        let err = select_targets(&all, &["pods".to_string()])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("\"pods\"") && err.contains("quantity, pod"),
            "{err}"
        );
    }

    #[test]
    fn budgets_become_libfuzzer_flags() {
        assert_eq!(Budget::Runs(DEFAULT_RUNS).libfuzzer_flag(), "-runs=1000000");
        assert_eq!(Budget::Seconds(60).libfuzzer_flag(), "-max_total_time=60");
    }
}
