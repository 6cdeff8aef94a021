//! The shadow race: the agent beside a kubelet's pods (`runPods: false`, `monitor.podList`),
//! raced to a hard threshold in act mode and in shadow mode, trial by trial alternating,
//! on the same node. What it shows:
//! - the decision is as fast in shadow mode as in act mode: the hot path's crossing →
//!   decision (the kernel-stamped crossing of the agent's detector to the pick made, the
//!   write left out in both modes), compared p99 to p99;
//! - a shadow agent touches nothing: the kernel's `signal:signal_generate` records of the
//!   agent's SIGKILLs (its own eBPF stamp) are counted, and the cgroup settings of the
//!   whole tree are compared before and after each trial.
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::harness::{HEADROOM_MIB, MIB, NODE_MIB};
use crate::laid::KubeletTree;
use crate::stats::{Spread, percentile};
use crate::util::{self, field, monotonic_ns};

/// What the ballast (a Guaranteed pod) holds before the race.
const BALLAST_MIB: u64 = 600;

/// One trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ShadowTrial {
    pub(crate) shadow: bool,
    pub(crate) n: u32,
    /// Crossing (the agent's detector record) → the hot path's pick, ms.
    pub(crate) decision_ms: Option<f64>,
    /// The agent's SIGKILLs, as the kernel recorded them.
    pub(crate) signals: usize,
    /// Cgroup settings that differ after the trial.
    pub(crate) settings_changed: usize,
    /// The hog's end: by the agent's kill (act) or by the kernel's OOM killer (shadow).
    pub(crate) hog_signal: Option<i32>,
}

/// Runs `trials` of each mode, alternating.
pub(crate) fn run(bin: &Path, trials: u32, keep: bool) -> Vec<ShadowTrial> {
    let mut done = Vec::new();
    for n in 1..=trials {
        for shadow in [false, true] {
            match trial(bin, shadow, n, keep) {
                Ok(t) => {
                    println!(
                        "bench: shadow race {} trial {n}: decision {} ms, {} SIGKILL(s) by the agent, {} setting(s) changed, hog ended by signal {:?}",
                        mode_name(shadow),
                        crate::stats::ms(t.decision_ms),
                        t.signals,
                        t.settings_changed,
                        t.hog_signal
                    );
                    done.push(t);
                }
                Err(err) => println!(
                    "bench: shadow race {} trial {n}: FAILED: {err:#}",
                    mode_name(shadow)
                ),
            }
        }
    }
    done
}

fn mode_name(shadow: bool) -> &'static str {
    if shadow { "shadow" } else { "act" }
}

/// Kills and reaps on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn trial(bin: &Path, shadow: bool, n: u32, keep: bool) -> Result<ShadowTrial> {
    let name = format!(
        "monitor-bench-{}-shadow-{}-{n}",
        std::process::id(),
        mode_name(shadow)
    );
    let dir = std::env::temp_dir().join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tree = KubeletTree::new(&format!("{name}/kubelet"), NODE_MIB)?;
    let ballast = tree.pod("ballast", "Guaranteed", true, true)?;
    let hog = tree.pod("hog", "BestEffort", true, true)?;
    let go = dir.join("go");
    let spawn = |index: usize, args: &[String], start: Option<&Path>| -> Result<Reaped> {
        let mut command = Command::new(bin.join("hog"));
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(start) = start {
            command.env("HOG_START_FILE", start);
        }
        tree.join(index, &mut command);
        Ok(Reaped(command.spawn().context("starting a hog")?))
    };
    let _ballast = spawn(
        ballast,
        &["anon", &BALLAST_MIB.to_string(), "32", "0", "3600"].map(String::from),
        None,
    )?;
    let mut hog_child = spawn(
        hog,
        &["anon", &(NODE_MIB * 2).to_string(), "8", "0", "3600"].map(String::from),
        Some(&go),
    )?;
    std::fs::write(dir.join("pods.json"), tree.pod_list(BALLAST_MIB + 40))?;
    let config = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         cgroupDriver: cgroupfs\ncgroupRoot: /{root}\n\
         evictionHard: {{allocatableMemory.available: {HEADROOM_MIB}Mi}}\nhousekeepingInterval: 1s\n\
         monitor:\n  runPods: false\n  podList: {{file: {list}}}\n  stateDir: {state}\n  \
         socket: {sock}\n  shadow: {shadow}\n",
        root = tree.root,
        list = dir.join("pods.json").display(),
        state = dir.join("state").display(),
        sock = dir.join("monitor.sock").display(),
    );
    std::fs::write(dir.join("config.yaml"), config)?;
    let log_path = dir.join("agent.log");
    let log = std::fs::File::create(&log_path)?;
    let agent = Reaped(
        util::monitor_run(&bin.join("monitor"), &dir.join("config.yaml"), &log)?
            .env("RUST_LOG", "info")
            .spawn()
            .context("starting the agent")?,
    );
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    util::wait(
        "the agent reads the pod list",
        Duration::from_secs(20),
        || read_log().contains("pod list read"),
    )?;
    let pods = tree.memory_dir(&tree.kubepods());
    util::wait("the ballast in place", Duration::from_secs(30), || {
        crate::memory::working_set(&pods, tree.v1) >= (BALLAST_MIB - 8) * MIB
    })?;
    // Two synchronizes at 1 s: the hot path is armed with the hog.
    std::thread::sleep(Duration::from_millis(2500));
    let before = tree.settings();
    let started_ns = monotonic_ns();
    std::fs::write(&go, "")?;
    let mut status = None;
    util::wait("the hog's end", Duration::from_secs(30), || {
        status = hog_child.0.try_wait().ok().flatten();
        status.is_some()
    })?;
    // The agent books what it did (or would have done) at its next synchronize.
    std::thread::sleep(Duration::from_millis(1500));
    let after = tree.settings();
    drop(agent);
    let text = read_log();
    if keep {
        println!("bench: shadow race log kept in {}", log_path.display());
    }
    let signals = text
        .lines()
        .filter(|l| l.contains("kernel: SIGKILL generated by the agent"))
        .filter(|l| field(l, "at_ns").and_then(|v| v.parse::<u64>().ok()) >= Some(started_ns))
        .count();
    let decided = decision_ns(&text, shadow, started_ns);
    let crossed = text
        .lines()
        .filter(|l| field(l, "kind") == Some("crossing"))
        .filter_map(|l| field(l, "crossed_ns")?.parse::<u64>().ok())
        .filter(|ns| *ns >= started_ns)
        .min();
    let decision_ms = match (crossed, decided) {
        (Some(c), Some(d)) if d >= c => Some((d - c) as f64 / 1e6),
        _ => None,
    };
    if decided.is_none() {
        bail!(
            "the agent decided no kill at the crossing ({} log lines)",
            text.lines().count()
        );
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(ShadowTrial {
        shadow,
        n,
        decision_ms,
        signals,
        settings_changed: before
            .iter()
            .zip(after.iter())
            .filter(|(b, a)| b != a)
            .count()
            + before.len().abs_diff(after.len()),
        hog_signal: status.and_then(|s| s.signal()),
    })
}

/// When the hot path's pick was made: the kill line's time less its write (act), or the
/// would-be kill's time (shadow, nothing written).
fn decision_ns(log: &str, shadow: bool, after_ns: u64) -> Option<u64> {
    let marker = if shadow {
        "hot path (shadow): would kill"
    } else {
        "hot path: cgroup.kill written"
    };
    log.lines()
        .filter(|l| l.contains(marker))
        .filter_map(|l| {
            let at: u64 = field(l, "at_ns")?.parse().ok()?;
            let write_us: u64 = if shadow {
                0
            } else {
                field(l, "write_us")?.parse().ok()?
            };
            Some(at.saturating_sub(write_us * 1000))
        })
        .filter(|ns| *ns >= after_ns)
        .min()
}

/// The report's lines: per mode the decision time's spread, the signals and the settings
/// changed, and the ratio of the p99s.
pub(crate) fn lines(trials: &[ShadowTrial]) -> Vec<String> {
    if trials.is_empty() {
        return Vec::new();
    }
    let of = |shadow: bool| -> Vec<&ShadowTrial> {
        trials.iter().filter(|t| t.shadow == shadow).collect()
    };
    let spread = |ts: &[&ShadowTrial]| {
        Spread::of(&ts.iter().filter_map(|t| t.decision_ms).collect::<Vec<_>>())
    };
    let mut out = Vec::new();
    for shadow in [false, true] {
        let ts = of(shadow);
        let s = spread(&ts);
        out.push(format!(
            "- beside a kubelet's pods, {}: crossing → decision p50 / p99 {} / {} ms over {} trials; {} SIGKILL(s) by the agent in all; {} cgroup setting(s) changed; the hog ended by the agent's kill in {} and by the kernel's OOM killer or otherwise in {}",
            mode_name(shadow),
            crate::stats::ms(s.p50_ms),
            crate::stats::ms(s.p99_ms),
            ts.len(),
            ts.iter().map(|t| t.signals).sum::<usize>(),
            ts.iter().map(|t| t.settings_changed).sum::<usize>(),
            ts.iter().filter(|t| t.signals > 0).count(),
            ts.iter().filter(|t| t.signals == 0).count(),
        ));
    }
    let p99 = |shadow: bool| {
        percentile(
            &of(shadow)
                .iter()
                .filter_map(|t| t.decision_ms)
                .collect::<Vec<_>>(),
            99.0,
        )
    };
    if let (Some(act), Some(shadow)) = (p99(false), p99(true))
        && act > 0.0
    {
        out.push(format!(
            "- shadow / act decision p99: {:.2}x (target: at most 1.2x)",
            shadow / act
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_is_the_pick_in_both_modes() {
        let act = "x INFO monitor::sync::hot::kill: hot path: cgroup.kill written pod=shop/hog at_ns=5000000 write_us=100 lock_us=1\n";
        assert_eq!(decision_ns(act, false, 0), Some(4_900_000));
        let shadow = "x INFO monitor::sync::hot::kill: hot path (shadow): would kill; nothing written pod=shop/hog at_ns=5000000 decision_us=20\n";
        assert_eq!(decision_ns(shadow, true, 0), Some(5_000_000));
        assert_eq!(
            decision_ns(shadow, true, 6_000_000),
            None,
            "before the race"
        );
        assert_eq!(
            decision_ns(act, true, 0),
            None,
            "act lines are not shadow ones"
        );
    }

    #[test]
    fn the_report_compares_the_p99s() {
        let t = |shadow, ms, signals| ShadowTrial {
            shadow,
            n: 1,
            decision_ms: Some(ms),
            signals,
            settings_changed: 0,
            hog_signal: Some(9),
        };
        let lines = lines(&[t(false, 0.2, 1), t(true, 0.22, 0)]);
        assert!(
            lines[0].contains("act") && lines[0].contains("1 SIGKILL"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("shadow") && lines[1].contains("0 SIGKILL"),
            "{lines:?}"
        );
        assert!(lines[2].contains("1.10x"), "{lines:?}");
    }
}
